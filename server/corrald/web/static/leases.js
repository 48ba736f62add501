// Path leases on the board: the resources tasks in progress hold, from the stats (the
// snapshot's, then one a second), by teammate and by task for the teammate and task views;
// and a task's own resources and what holds it back, for the drawer. Resource names come
// from whoever created the task: they reach the DOM as text only.

function span(text, cls) {
  const node = document.createElement("span");
  node.textContent = String(text);
  node.className = cls;
  return node;
}

export class Leases {
  constructor() {
    this.seen = "";
    this.byTask = new Map();
    this.byMate = new Map();
    this.total = 0;
  }

  // Takes the stats' held resources; answers the tasks and teammates whose leases changed
  // (before or after), or null when the list is the one already applied.
  apply(stats) {
    const held = stats?.held_resources || [];
    const seen = JSON.stringify(held);
    if (seen === this.seen) return null;
    this.seen = seen;
    const touched = { tasks: new Set(this.byTask.keys()), teammates: new Set(this.byMate.keys()) };
    this.byTask.clear();
    this.byMate.clear();
    for (const h of held) {
      if (!this.byTask.has(h.task_id)) this.byTask.set(h.task_id, []);
      if (!this.byMate.has(h.teammate)) this.byMate.set(h.teammate, []);
      this.byTask.get(h.task_id).push(h);
      this.byMate.get(h.teammate).push(h);
      touched.tasks.add(h.task_id);
      touched.teammates.add(h.teammate);
    }
    this.total = stats?.held_resources_total || 0;
    return touched;
  }

  // The resources a task holds, or a teammate's claims hold, as one wrapping line; null for none.
  line(held) {
    if (!held || !held.length) return null;
    const box = span("", "leases");
    for (const h of held) {
      const mode = h.exclusive ? "exclusive" : "shared";
      const item = span(h.resource, "lease");
      item.dataset.mode = mode;
      item.title = `${mode} · ${h.task_id} · ${h.teammate}`;
      box.append(item);
    }
    return box;
  }
}

// A task's resources as created: `repo:web/src (exclusive), db:staging (shared)`.
export function resourcesText(task) {
  const listed = [
    ...(task.resources || []).map((r) => `${r} (exclusive)`),
    ...(task.shared_resources || []).map((r) => `${r} (shared)`),
  ];
  return listed.join(", ") || "—";
}

// What holds a PENDING task back (its detail's waiting_for): dependencies, its time gate,
// its key, the holders of its resources, and whether a teammate is there to take it.
export function waitingText(waiting, clock) {
  if (!waiting) return "—";
  const parts = [];
  if (waiting.dependencies.length) parts.push(`dependencies ${waiting.dependencies.join(", ")}`);
  if (waiting.ready_ms) parts.push(`its time (${clock(waiting.ready_ms)})`);
  if (waiting.concurrency_key) parts.push(`a free slot of ${waiting.concurrency_key}`);
  for (const w of waiting.resources) {
    const held = w.held_resource === w.resource ? "it" : w.held_resource;
    parts.push(`${w.resource}: task ${w.held_by_task_id} holds ${held} ${w.held_exclusive ? "exclusively" : "shared"}`);
  }
  if (waiting.teammates === "NONE_REGISTERED") parts.push("a teammate (none may take it)");
  if (waiting.teammates === "NONE_ONLINE") parts.push("a teammate online");
  return parts.join("; ") || "—";
}
