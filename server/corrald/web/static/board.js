// The corral web board: a snapshot, then the live event stream, drawn once per frame.
// Every string that came from a client reaches the DOM through textContent only.

import { ArtifactsView } from "./artifacts.js";
import { Leases, resourcesText, waitingText } from "./leases.js";
import { OutputView } from "./output.js";

const $ = (id) => document.getElementById(id);
const STATES = ["PROPOSED", "PENDING", "IN_PROGRESS", "NEEDS_INPUT", "IN_REVIEW", "COMPLETED", "FAILED", "CANCELED"];
const FINAL = new Set(["COMPLETED", "FAILED", "CANCELED"]);
const EVENTS_KEPT = 2000;
const HISTORY_PAGE = 100;
const CLAIMS_KEPT = 5000;
const TABLE_PAGE = 100;

// The board as the page knows it; window.corral lets tests read what it applied.
const board = {
  tasks: new Map(), offGraph: new Map(), dependents: new Map(), teammates: new Map(), claims: [], plans: new Map(), problems: new Map(),
  seq: 0, seqs: [], trace: [], frontier: false, taskCount: 0, session: null, stats: null, skew: 0,
};
window.corral = board;
board.graphLabel = (id) => graph.cy?.getElementById(id).data("label") ?? null;
board.graphColor = (id) => graph.cy?.getElementById(id).data("color") ?? null;
board.graphBorder = (id) => graph.cy?.getElementById(id).style("border-style") ?? null;
board.graphEdges = () => graph.cy?.edges().map((e) => e.id()).sort() ?? [];

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function nowMs() { return Date.now() + board.skew; }

function ago(ms) {
  if (ms === null || ms === undefined) return "—";
  const s = Math.max(0, Math.round((nowMs() - ms) / 1000));
  return s < 90 ? `${s}s` : s < 5400 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`;
}

function clock(ms) { return new Date(ms).toLocaleTimeString(); }

// A PENDING task is ready when every dependency the page knows is COMPLETED.
// Held by a claim: a task IN_PROGRESS, or IN_REVIEW while a reviewer holds its review's claim.
function isHeld(task) {
  return !!task && (task.state === "IN_PROGRESS" || (task.state === "IN_REVIEW" && !!task.owner));
}

function shownState(task) {
  if (task.state !== "PENDING") return task.state.toLowerCase();
  const waiting = task.depends_on.some((dep) => (board.tasks.get(dep)?.state ?? "COMPLETED") !== "COMPLETED");
  const gated = task.ready_ms && task.ready_ms > nowMs();
  return waiting || gated ? "blocked" : "ready";
}

const leases = new Leases();
board.leases = leases;

// ---------------------------------------------------------------- login

async function login(body) {
  const response = await fetch("/login", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    credentials: "same-origin",
  });
  if (response.ok) { location.replace("/"); return; }
  const answer = await response.json().catch(() => ({}));
  $("login-error").textContent = answer.error || `login refused (${response.status})`;
}

function showLogin() {
  $("login").hidden = false;
  // A link's fragment carries the token or a one-time ticket; it never reached the
  // server, and it leaves the address bar before anything else happens.
  const fragment = new URLSearchParams(location.hash.slice(1));
  history.replaceState(null, "", "/login");
  const token = fragment.get("token"), ticket = fragment.get("ticket");
  if (token) login({ token });
  else if (ticket) login({ ticket });
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    login({ token: $("login-token").value });
    $("login-token").value = "";
  });
}

// ---------------------------------------------------------------- frame batching

const dirty = { tasks: new Set(), teammates: new Set(), layout: false, header: false, events: [], timeline: false };
let frameAsked = false;

// One flush per animation frame; a hidden page gets no frames, so a timer stands in.
let frameTimer = null;
function schedule() {
  if (frameAsked) return;
  frameAsked = true;
  requestAnimationFrame(flush);
  frameTimer = setTimeout(flush, 100);
}

// Layout runs only when tasks were added, and at most once a second while they keep coming.
const LAYOUT_SPACING_MS = 1000;
let lastLayout = -Infinity, layoutTimer = null;

function flush() {
  if (!frameAsked) return;
  frameAsked = false;
  clearTimeout(frameTimer);
  if (dirty.layout) {
    const wait = lastLayout + LAYOUT_SPACING_MS - performance.now();
    if (wait <= 0) { graph.rebuild(); lastLayout = performance.now(); dirty.layout = false; }
    else if (!layoutTimer) layoutTimer = setTimeout(() => { layoutTimer = null; dirty.layout = true; schedule(); }, wait);
  }
  for (const id of dirty.tasks) { graph.restyle(id); tables.task(id); tables.failure(id); }
  for (const name of dirty.teammates) tables.teammate(name);
  if (dirty.events.length) eventsView.add(dirty.events);
  if (dirty.header || dirty.tasks.size) header.draw();
  if (dirty.timeline) timeline.draw();
  dirty.tasks.clear(); dirty.teammates.clear(); dirty.events = [];
  dirty.header = dirty.timeline = false;
  board.applied = board.seq;
}

// ---------------------------------------------------------------- applying

function putTask(task) {
  const known = board.tasks.get(task.id);
  const before = known?.state;
  if (!known) {
    if (board.frontier || board.tasks.size >= board.graphMax) {
      if (!board.frontier) enterFrontier();
      // Past the graph's bound the page follows the frontier it drew, and the table's page.
      if (!board.offGraph.has(task.id)) board.taskCount += 1;
      board.offGraph.set(task.id, task);
      dirty.tasks.add(task.id);
      trackProblem(task);
      return undefined;
    }
    dirty.layout = true;
    addDependents(task, task.depends_on);
  } else {
    // A task on the board may gain dependencies (a split, AddDependencies) or lose one (a
    // rejected proposal it was split on): new edges, so a new layout.
    const had = new Set(known.depends_on);
    const added = task.depends_on.filter((dep) => !had.has(dep));
    if (added.length || known.depends_on.length !== task.depends_on.length) dirty.layout = true;
    addDependents(task, added);
  }
  board.tasks.set(task.id, task);
  dirty.tasks.add(task.id);
  // Dependents may have turned ready.
  if (before !== task.state && task.state === "COMPLETED") {
    for (const id of board.dependents.get(task.id) || []) dirty.tasks.add(id);
  }
  trackProblem(task);
  return known;
}

function addDependents(task, deps) {
  for (const dep of deps) {
    if (!board.dependents.has(dep)) board.dependents.set(dep, new Set());
    board.dependents.get(dep).add(task.id);
  }
}

function trackProblem(task) {
  if (task.state === "FAILED" || task.state === "CANCELED") board.problems.set(task.id, task);
  else board.problems.delete(task.id);
}

function enterFrontier() {
  board.frontier = true;
  $("graph-note").hidden = false;
  $("graph-note").textContent = `more than ${board.graphMax.toLocaleString()} tasks: reload for the frontier of the board`;
}

// How a claim ended, as the timeline colours it (the claims table's outcome, lower case);
// a review's claim ends approved or rejected.
const OUTCOME_KINDS = { completed: "completed", failed: "failed", timed_out: "failed", expired: "expired",
  revoked: "released", released: "released", canceled: "canceled", asked: "asked", approved: "approved", rejected: "rejected",
  split: "split" };
function outcomeKind(claim) {
  if (claim.end_ms === null || claim.end_ms === undefined) return "running";
  return OUTCOME_KINDS[(claim.outcome || "").toLowerCase()] ?? "ended";
}

function trackClaim(task, previous, atMs) {
  const heldBefore = isHeld(previous), heldNow = isHeld(task);
  const reclaimed = heldBefore && heldNow && (previous.state !== task.state || previous.attempt !== task.attempt || previous.owner !== task.owner);
  if (heldBefore && (!heldNow || reclaimed)) {
    const open = [...board.claims].reverse().find((c) => c.task === task.id && c.end_ms === null);
    if (open) {
      open.end_ms = atMs;
      // A task's new state tells a completion (its result now COMPLETED or IN_REVIEW), a cancel
      // or a question to the lead; any other end (failed, expired, revoked, released) is read
      // from the task's claim history, and so is a review's (approved, rejected, or taken away
      // by the lead's own decision).
      const told = previous.state === "IN_REVIEW"
        ? { CANCELED: "canceled" }
        : { COMPLETED: "completed", IN_REVIEW: "completed", CANCELED: "canceled", NEEDS_INPUT: "asked" };
      open.outcome = reclaimed ? "" : told[task.state] ?? "";
      if (!open.outcome) outcomes.ask(open);
    }
  }
  if (heldNow && (!heldBefore || reclaimed)) {
    board.claims.push({ task: task.id, teammate: task.owner, attempt: task.attempt, claim_ms: atMs, end_ms: null, outcome: "" });
    if (board.claims.length > CLAIMS_KEPT) board.claims.splice(0, board.claims.length - CLAIMS_KEPT);
  }
  dirty.timeline = true;
}

// Ended claims whose outcome the page asks the task's detail for, one request at a time.
const outcomes = {
  waiting: [],
  busy: false,
  ask(claim) { this.waiting.push(claim); if (!this.busy) this.next(); },
  async next() {
    const claim = this.waiting.shift();
    if (!claim) { this.busy = false; return; }
    this.busy = true;
    try {
      const response = await fetch(`/api/tasks/${encodeURIComponent(claim.task)}`, { credentials: "same-origin" });
      if (response.ok) {
        const task = await response.json();
        const ended = task.attempts.filter((a) => a.attempt === claim.attempt && a.owner === claim.teammate && a.outcome);
        if (ended.length) { claim.outcome = ended[ended.length - 1].outcome.toLowerCase(); dirty.timeline = true; schedule(); }
      }
    } finally {
      this.next();
    }
  },
};

function applyEvent(event) {
  board.seq = event.seq;
  board.seqs.push(event.seq);
  board.trace.push([event.seq, event.kind, event.task?.id ?? null, event.task?.state ?? null]);
  if (event.kind === "task") {
    const previous = putTask(event.task);
    trackClaim(event.task, previous, event.time_ms);
    if (isHeld(previous)) hold(previous.owner, previous.id, false, event.time_ms);
    if (isHeld(event.task)) hold(event.task.owner, event.task.id, true, event.time_ms);
    if (isHeld(event.task) && drawer.current === event.task.id) output.claimed(event.task);
  } else if (event.kind === "artifact_added") {
    artifacts.added(event.task_id, event.artifact);
  } else if (event.kind === "teammate") {
    const known = board.teammates.get(event.name) || { name: event.name, roles: event.roles, held: [], usage: {}, budget: {} };
    known.status = event.status;
    known.last_activity_ms = event.time_ms;
    board.teammates.set(event.name, known);
    dirty.teammates.add(event.name);
  } else if (event.kind === "plan") {
    board.plans.set(event.author, { plan_id: event.plan_id, author: event.author, plan: event.plan, submit_ms: event.time_ms });
    tables.plans();
  } else if (event.kind === "plan_decided") {
    // Decided on this page or by any other client: it waits no more (a newer plan of the author stays).
    if (board.plans.get(event.author)?.plan_id === event.plan_id) board.plans.delete(event.author);
    tables.plans();
  }
  dirty.events.push(event);
  dirty.header = true;
  schedule();
}

function hold(name, taskId, holds, atMs) {
  const mate = board.teammates.get(name);
  if (!mate) return;
  mate.last_activity_ms = atMs;
  const held = new Set(mate.held || []);
  if (holds) held.add(taskId); else held.delete(taskId);
  mate.held = [...held];
  dirty.teammates.add(name);
}

function applySnapshot(snap) {
  board.seq = snap.seq;
  board.snapshotSeq = snap.seq;
  board.frontier = snap.frontier;
  board.taskCount = snap.task_count;
  board.graphMax = snap.graph_nodes_max;
  board.frontier = false;  // putTask adds every task of the snapshot
  board.session = snap.session;
  board.stats = snap.stats;
  board.skew = snap.now_ms - Date.now();
  board.tasks.clear(); board.offGraph.clear(); board.dependents.clear(); board.problems.clear(); board.teammates.clear(); board.plans.clear();
  for (const task of snap.tasks) putTask(task);
  board.frontier = snap.frontier;
  board.taskCount = snap.task_count;
  for (const task of snap.problems) board.problems.set(task.id, task);
  for (const mate of snap.teammates) board.teammates.set(mate.name, mate);
  for (const plan of snap.plans) board.plans.set(plan.author, plan);
  board.claims = snap.claims;
  leases.seen = "";
  leases.apply(snap.stats);
  $("who").textContent = `${snap.session.name}${snap.session.actions ? " · actions on" : " · read-only"}`;
  $("graph-note").hidden = !snap.frontier;
  $("graph-note").textContent = snap.frontier
    ? `${snap.task_count.toLocaleString()} tasks: the graph shows the frontier (${snap.tasks.length.toLocaleString()} unfinished tasks and their dependencies)`
    : "";
  dirty.layout = true;
  tables.rebuild();
  tables.plans();
  dirty.header = dirty.timeline = true;
  schedule();
}

// ---------------------------------------------------------------- header

const header = {
  draw() {
    const counts = Object.fromEntries(STATES.map((s) => [s, 0]));
    let ready = 0, blocked = 0;
    const source = board.frontier && board.stats ? null : board.tasks;
    if (source) {
      for (const task of source.values()) {
        counts[task.state] += 1;
        if (task.state === "PENDING") shownState(task) === "ready" ? ready++ : blocked++;
      }
    } else {
      Object.assign(counts, board.stats.tasks_by_state);
    }
    const shown = [["blocked", blocked], ["ready", ready], ["proposed", counts.PROPOSED || 0], ["in_progress", counts.IN_PROGRESS],
      ["needs_input", counts.NEEDS_INPUT || 0], ["in_review", counts.IN_REVIEW || 0], ["completed", counts.COMPLETED],
      ["failed", counts.FAILED], ["canceled", counts.CANCELED]];
    if (!source) shown.splice(0, 2, ["pending", counts.PENDING]);
    const box = $("counts");
    box.replaceChildren(...shown.map(([name, n]) => el("span", `${n} ${name.replace("_", " ")}`, `count ${name}`)));
    const total = STATES.reduce((sum, s) => sum + (counts[s] || 0), 0);
    const done = (counts.COMPLETED || 0) + (counts.FAILED || 0) + (counts.CANCELED || 0);
    $("progress").value = total ? done / total : 0;
    $("progress-text").textContent = total ? `${done}/${total}` : "no tasks";
  },
  health(stats) {
    board.stats = stats;
    const touched = leases.apply(stats);  // what the teammate and task views show held
    if (touched) {
      for (const id of touched.tasks) if (board.tasks.has(id) || board.offGraph.has(id)) dirty.tasks.add(id);
      for (const name of touched.teammates) if (board.teammates.has(name)) dirty.teammates.add(name);
      schedule();
    }
    const rows = [
      ["queue", `${stats.queue_depth} (p99 ${Number(stats.queue_depth_p99).toFixed(0)})`, stats.queue_depth > 50],
      ["commits/s", rate(stats.commits).toFixed(0), false],
      ["batch", Number(stats.mean_batch_size).toFixed(1), false],
      ["busy", stats.busy_retries, stats.busy_retries > 0],
      ["streams", stats.open_streams, false],
    ];
    $("health").replaceChildren(...rows.map(([name, value, warn]) => {
      const item = el("div", null, warn ? "warn" : "");
      item.append(el("dt", name), el("dd", value));
      return item;
    }));
    if (board.frontier) header.draw();
  },
};

let lastCommits = null;
function rate(commits) {
  const now = performance.now();
  const value = lastCommits ? ((commits - lastCommits.n) * 1000) / Math.max(1, now - lastCommits.at) : 0;
  lastCommits = { n: commits, at: now };
  return value;
}

// ---------------------------------------------------------------- graph

// Each node is a box of fixed size with its label inside, so dagre lays out exactly what is
// drawn and no two labels can meet. A title longer than two lines is cut with "…"; the full
// title shows on hover.
const NODE_W = 150, NODE_H = 46, TEXT_W = NODE_W - 14, FONT_PX = 11;
const FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const FIT_PADDING = 28, FIT_ZOOM_MAX = 1.4;

const measurer = document.createElement("canvas").getContext("2d");
measurer.font = `normal normal ${FONT_PX}px ${FONT_FAMILY}`;
function textWidth(text) { return measurer.measureText(text).width; }

function ellipsize(text, width) {
  if (textWidth(text) <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (textWidth(`${text.slice(0, mid)}…`) <= width) lo = mid; else hi = mid - 1; }
  return `${text.slice(0, lo).trimEnd()}…`;
}

// At most `most` lines of at most `width` pixels: greedy by words, the rest cut on the last line.
function fitLines(text, width, most) {
  const words = text.split(/\s+/).filter(Boolean);
  const lines = [];
  while (words.length && lines.length < most - 1 && textWidth(words[0]) <= width) {
    let line = words.shift();
    while (words.length && textWidth(`${line} ${words[0]}`) <= width) line += ` ${words.shift()}`;
    lines.push(line);
  }
  if (words.length) lines.push(ellipsize(words.join(" "), width));
  return lines;
}

const graph = {
  cy: null,
  titleLines: new Map(),  // title -> its lines, measured once
  build() {
    if (!window.cytoscape) return;
    this.cy = window.cytoscape({
      container: $("graph"),
      minZoom: 0.05,
      maxZoom: 4,
      style: [
        { selector: "node", style: {
          shape: "round-rectangle", width: NODE_W, height: NODE_H,
          "background-color": "data(color)", "background-opacity": 0.22, "border-width": 2, "border-color": "data(color)",
          label: "data(label)", color: "#dfe6ee", "font-size": FONT_PX, "font-family": FONT_FAMILY, "line-height": 1.2,
          "text-valign": "center", "text-halign": "center", "text-wrap": "wrap", "text-max-width": TEXT_W + 4 } },
        { selector: "node.in_progress", style: { "background-opacity": 0.4, "border-width": 3 } },
        // A proposal is not yet work: dashed until the lead approves it.
        { selector: "node.proposed", style: { "border-style": "dashed", "background-opacity": 0.1 } },
        { selector: "node:selected", style: { "border-width": 3, "border-color": "#38bdf8" } },
        { selector: "edge", style: { width: 1.2, "line-color": "#3a4658", "target-arrow-color": "#3a4658",
          "target-arrow-shape": "triangle", "arrow-scale": 0.7, "curve-style": "bezier" } },
      ],
    });
    this.cy.on("tap", "node", (event) => { this.tip(null); drawer.open(event.target.id()); });
    this.cy.on("mouseover", "node", (event) => this.tip(event.target));
    this.cy.on("mouseout", "node", () => this.tip(null));
    this.cy.on("viewport", () => this.tip(null));
    // The pointer may leave the panel straight from a node, with no mouseout on the node.
    $("graph").addEventListener("mouseleave", () => this.tip(null));
    // A panel resized (the window, or the header wrapping to another line) refits the drawing,
    // unless the person moved it themselves since it was laid out.
    this.cy.on("dragpan scrollzoom pinchzoom", () => { this.moved = true; });
    let resizing = null;
    new ResizeObserver(() => {
      clearTimeout(resizing);
      resizing = setTimeout(() => { this.cy.resize(); if (!this.moved) this.fit(); this.noteView(); }, 150);
    }).observe($("graph"));
  },
  moved: false,
  // The full title (and id) of the node under the pointer, as text.
  tip(node) {
    const tip = $("graph-tip");
    if (!node) { tip.hidden = true; return; }
    const task = board.tasks.get(node.id());
    if (!task) return;
    const named = task.title && task.title !== task.id ? `${task.title} (${task.id})` : task.id;
    tip.textContent = named;
    // A proposal's tip says who proposed it and from which task (read from its detail, once).
    if (task.state === "PROPOSED") {
      proposals.about(task.id).then((about) => {
        if (!about || tip.hidden || tip.dataset.taskId !== task.id) return;
        tip.textContent = `${named} · ${proposals.describe(about)}`;
      });
    }
    const box = node.renderedBoundingBox();
    tip.style.left = `${Math.max(0, box.x1)}px`;
    tip.style.top = `${box.y2 + 4}px`;
    tip.dataset.taskId = node.id();
    tip.hidden = false;
  },
  noteView() {  // what tests read: the drawing's size and whether every node is in sight
    const box = this.cy.elements().renderedBoundingBox();
    const width = this.cy.width(), height = this.cy.height();
    board.graphView = {
      width, height, inside: box.x1 >= -1 && box.y1 >= -1 && box.x2 <= width + 1 && box.y2 <= height + 1,
      fill: Math.max(box.w / width, box.h / height), zoom: this.cy.zoom(),
    };
  },
  colors: { blocked: "#5b6676", ready: "#3b82f6", in_progress: "#f59e0b", needs_input: "#14b8a6", in_review: "#818cf8",
    completed: "#22c55e", failed: "#ef4444", canceled: "#a855f7", proposed: "#f472b6" },
  lines(title) {
    let lines = this.titleLines.get(title);
    if (!lines) {
      if (this.titleLines.size > 4 * (board.graphMax || 2000)) this.titleLines.clear();
      lines = fitLines(title, TEXT_W, 2);
      this.titleLines.set(title, lines);
    }
    return lines;
  },
  data(task) {
    const shown = shownState(task);
    const lines = [...this.lines(task.title || task.id)];
    if (isHeld(task)) {
      const left = task.lease_expire_ms ? Math.max(0, Math.round((task.lease_expire_ms - nowMs()) / 1000)) : "?";
      const pct = task.progress_fraction !== null && task.progress_fraction !== undefined ? ` ${Math.round(task.progress_fraction * 100)}%` : "";
      lines.push(ellipsize(`${task.owner} · ${left}s${pct}`, TEXT_W));
    }
    return { id: task.id, label: lines.join("\n"), color: this.colors[shown], shown };
  },
  // Lays the graph out left to right or top to bottom, whichever fills the panel more.
  rebuild() {
    if (!this.cy) return;
    const began = performance.now();
    const tasks = [...board.tasks.values()].slice(0, board.graphMax);
    const ids = new Set(tasks.map((t) => t.id));
    const elements = tasks.map((t) => ({ group: "nodes", data: this.data(t), classes: shownState(t) }));
    for (const t of tasks) for (const dep of t.depends_on) {
      if (ids.has(dep)) elements.push({ group: "edges", data: { id: `${dep}->${t.id}`, source: dep, target: t.id } });
    }
    this.cy.batch(() => { this.cy.elements().remove(); this.cy.add(elements); });
    // dagre's default ranker (network simplex) grows fast with the graph; longest-path
    // ranks a big graph in a fraction of the time, with a layering as readable here.
    const big = tasks.length > 300;
    const ranker = big ? "longest-path" : "network-simplex";
    const run = (rankDir) => {
      this.cy.layout({ name: window.cytoscapeDagre ? "dagre" : "breadthfirst", rankDir, nodeSep: 18, rankSep: rankDir === "LR" ? 48 : 34, edgeSep: 8,
        ranker, animate: false, fit: false }).run();
      const box = this.cy.nodes().boundingBox();
      return Math.min((this.cy.width() - 2 * FIT_PADDING) / Math.max(1, box.w), (this.cy.height() - 2 * FIT_PADDING) / Math.max(1, box.h));
    };
    const across = run("LR");
    if (!big && tasks.length > 1) {
      const saved = new Map(this.cy.nodes().map((n) => [n.id(), { ...n.position() }]));
      if (run("TB") < across) this.cy.nodes().positions((n) => saved.get(n.id()));
    }
    this.fit();
    this.moved = false;
    this.noteView();
    board.timing = { ...(board.timing || {}), layout_ms: Math.round(performance.now() - began) };
  },
  fit() {
    this.cy.fit(undefined, FIT_PADDING);
    if (this.cy.zoom() > FIT_ZOOM_MAX) { this.cy.zoom(FIT_ZOOM_MAX); this.cy.center(); }
  },
  // What tests read: each node's label box on the screen, with its full title.
  labelBoxes() {
    if (!this.cy) return [];
    return this.cy.nodes().map((n) => {
      const b = n.renderedBoundingBox({ includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false });
      const at = n.renderedPosition();
      return { id: n.id(), label: n.data("label"), x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2, x: at.x, y: at.y };
    });
  },
  restyle(id) {
    if (!this.cy) return;
    const node = this.cy.getElementById(id);
    const task = board.tasks.get(id);
    if (!node.nonempty() || !task) return;
    const data = this.data(task);
    node.data(data);
    node.classes(data.shown);
  },
  tickLeases() {
    if (!this.cy) return;
    this.cy.batch(() => { for (const t of board.tasks.values()) if (isHeld(t)) this.restyle(t.id); });
  },
};
board.labelBoxes = () => graph.labelBoxes();

// ---------------------------------------------------------------- tables

const tables = {
  page: { after: [0], rows: [] },
  rowFor(tbody, attr, key) { return tbody.querySelector(`tr[${attr}="${CSS.escape(key)}"]`); },
  fillTask(row, task) {
    const shown = shownState(task);
    row.dataset.taskId = task.id;
    row.dataset.state = task.state;
    row.dataset.shown = shown;
    const state = el("span", shown.replace("_", " "), `state ${shown}`);
    const progress = el("td");
    if (task.state === "IN_PROGRESS" && task.progress_fraction !== null && task.progress_fraction !== undefined) {
      const meter = el("meter"); meter.value = task.progress_fraction; progress.append(meter, " ");
    }
    progress.append(task.state === "IN_PROGRESS" ? task.progress || "" : "");
    const stateCell = el("td"); stateCell.append(state);
    const title = el("td", task.title);
    const leaseLine = leases.line(leases.byTask.get(task.id));
    if (leaseLine) title.append(leaseLine);
    row.replaceChildren(el("td", task.id), title, stateCell, el("td", task.owner), el("td", task.attempt), progress);
  },
  rebuild() {
    const tbody = $("tasks").tBodies[0];
    if (board.frontier) { this.loadPage(0); return; }
    tbody.replaceChildren(...[...board.tasks.values()].map((task) => { const row = el("tr"); this.fillTask(row, task); return row; }));
    $("page-text").textContent = `${board.tasks.size} tasks`;
    $("page-prev").hidden = $("page-next").hidden = true;
    this.failures();
  },
  async loadPage(index) {
    const after = this.page.after[index] ?? 0;
    const response = await fetch(`/api/tasks?after=${after}&limit=${TABLE_PAGE}`, { credentials: "same-origin" });
    if (!response.ok) return;
    const page = await response.json();
    this.page.index = index;
    if (page.next_after !== null) this.page.after[index + 1] = page.next_after;
    const tbody = $("tasks").tBodies[0];
    tbody.replaceChildren(...page.tasks.map((task) => {
      const live = board.tasks.get(task.id) || board.offGraph.get(task.id) || task;
      const row = el("tr"); this.fillTask(row, live); return row;
    }));
    $("page-text").textContent = `page ${index + 1} of ${Math.ceil(board.taskCount / TABLE_PAGE)} · ${board.taskCount.toLocaleString()} tasks`;
    $("page-prev").hidden = $("page-next").hidden = false;
    $("page-prev").disabled = index === 0;
    $("page-next").disabled = page.next_after === null;
    $("tasks").dataset.page = String(index + 1);
    this.failures();
  },
  task(id) {
    const task = board.tasks.get(id) || board.offGraph.get(id);
    const tbody = $("tasks").tBodies[0];
    let row = this.rowFor(tbody, "data-task-id", id);
    if (!row && !board.frontier) {
      row = el("tr"); tbody.append(row);
      $("page-text").textContent = `${board.tasks.size} tasks`;
    }
    if (row && task) this.fillTask(row, task);
  },
  failure(id) {
    const tbody = $("failures").tBodies[0];
    const row = this.rowFor(tbody, "data-task-id", id);
    const task = board.problems.get(id);
    if (!task) { row?.remove(); } else {
      const fresh = row || el("tr");
      fresh.dataset.taskId = task.id; fresh.dataset.state = task.state;
      const cell = el("td"); cell.append(el("span", task.state.toLowerCase(), `state ${task.state.toLowerCase()}`));
      fresh.replaceChildren(el("td", task.id), el("td", task.title), cell, el("td", task.error, "err"));
      if (!row) tbody.prepend(fresh);
    }
    $("failure-count").textContent = board.problems.size ? String(board.problems.size) : "";
  },
  failures() {
    $("failures").tBodies[0].replaceChildren();
    for (const id of board.problems.keys()) this.failure(id);
  },
  teammate(name) {
    const mate = board.teammates.get(name);
    const tbody = $("teammates").tBodies[0];
    const row = this.rowFor(tbody, "data-teammate", name) || tbody.appendChild(el("tr"));
    row.dataset.teammate = name;
    row.dataset.status = mate.status;
    const usage = mate.usage || {}, budget = mate.budget || {};
    const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    const budgetLeft = budget.max_tokens ? `${Math.max(0, budget.max_tokens - tokens)} tok left`
      : budget.max_cost_micros ? `$${(Math.max(0, budget.max_cost_micros - (usage.cost_micros || 0)) / 1e6).toFixed(2)} left` : "—";
    const online = !["OFFLINE", "REMOVED"].includes(mate.status);
    const nameCell = el("td", mate.name);
    if ((mate.roles || []).length) nameCell.append(el("span", ` ${mate.roles.join(", ")}`, "muted"));
    const budgetCell = el("td", budgetLeft);
    if (board.session?.actions) {
      const raise = budgetButton(mate.name, budget);
      const kept = row.querySelector("button[data-action='set-budget']");
      budgetCell.append(" ", kept && kept.dataset.done ? kept : raise);
    }
    const holds = el("td", (mate.held || []).join(", ") || "—");
    const leaseLine = leases.line(leases.byMate.get(mate.name));
    if (leaseLine) holds.append(leaseLine);
    row.replaceChildren(
      nameCell, el("td", mate.status.toLowerCase().replace("_", " "), `status-${mate.status.toLowerCase()}`),
      holds, el("td", ago(mate.last_activity_ms)),
      el("td", online ? "open" : "—"), el("td", tokens ? `${tokens} tok` : usage.cost_micros ? `$${(usage.cost_micros / 1e6).toFixed(2)}` : "—"),
      budgetCell,
    );
  },
  teammates() {
    $("teammates").tBodies[0].replaceChildren();
    for (const name of board.teammates.keys()) this.teammate(name);
  },
  plans() {
    const list = $("plans");
    const open = [...board.plans.values()];
    list.replaceChildren(...(open.length ? open.map((plan) => {
      const item = el("li");
      item.dataset.planId = plan.plan_id;
      item.dataset.author = plan.author;
      item.append(el("strong", plan.author), el("span", ` · plan ${plan.plan_id} · ${clock(plan.submit_ms)}`, "muted"), el("pre", plan.plan));
      if (board.session?.actions) {
        item.append(actionButton("approve", "decide-plan", { plan_id: plan.plan_id, approve: true, feedback: "" }),
          actionButton("reject", "decide-plan", { plan_id: plan.plan_id, approve: false, feedback: "rejected from the board" }));
      }
      return item;
    }) : [el("li", "none", "muted")]));
  },
};

// ---------------------------------------------------------------- actions

// `body` is the action's JSON, or a function giving it when the button is clicked (a typed answer).
function actionButton(label, name, body) {
  const button = el("button", label);
  button.type = "button";
  button.dataset.action = name;
  button.addEventListener("click", async () => {
    button.disabled = true;
    const sent = typeof body === "function" ? body() : body;
    const response = await fetch(`/api/actions/${name}`, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Corral-CSRF": board.session.csrf }, body: JSON.stringify(sent),
    });
    const answer = await response.json().catch(() => ({}));
    button.textContent = response.ok ? `${label} ✓` : `${label}: ${answer.error || response.status}`;
    button.dataset.done = response.ok ? "ok" : "refused";
    // A decided plan leaves the list with its plan_decided event, as one decided elsewhere does.
  });
  return button;
}

// A token budget, asked for in a dialog (its answer is a number, never markup).
function budgetButton(name, budget) {
  const button = el("button", "raise");
  button.type = "button";
  button.dataset.action = "set-budget";
  button.addEventListener("click", async () => {
    const answer = window.prompt(`New token budget for ${name} (0: no limit)`, String((budget.max_tokens || 50000) * 2));
    if (answer === null || !/^\d+$/.test(answer.trim())) return;
    const response = await fetch("/api/actions/set-budget", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Corral-CSRF": board.session.csrf },
      body: JSON.stringify({ teammate: name, max_tokens: Number(answer.trim()), max_cost_micros: budget.max_cost_micros || 0 }),
    });
    button.dataset.done = response.ok ? "ok" : "refused";
    button.textContent = response.ok ? "raised ✓" : "refused";
    const mate = board.teammates.get(name);
    if (response.ok && mate) { mate.budget = { ...(mate.budget || {}), max_tokens: Number(answer.trim()) }; }
  });
  return button;
}

// ---------------------------------------------------------------- proposals

// Who proposed a task and from which task: the board's rows do not carry them, so the page
// reads them from the task's detail when it needs them, and keeps them (they never change).
const proposals = {
  known: new Map(),
  async about(id) {
    if (this.known.has(id)) return this.known.get(id);
    const response = await fetch(`/api/tasks/${encodeURIComponent(id)}`, { credentials: "same-origin" }).catch(() => null);
    if (!response || !response.ok) return null;
    const task = await response.json();
    return this.learn(task);
  },
  learn(task) {
    if (!task.proposed_by) return null;
    const about = { proposed_by: task.proposed_by, discovered_from: task.discovered_from };
    if (this.known.size > 4 * (board.graphMax || 2000)) this.known.clear();
    this.known.set(task.id, about);
    return about;
  },
  describe(about) {
    return `proposed by ${about.proposed_by}${about.discovered_from ? ` from ${about.discovered_from}` : ""}`;
  },
};

// ---------------------------------------------------------------- drawer

const output = new OutputView($("d-output"), $("d-output-note"), $("d-output-state"));
board.output = output;
const artifacts = new ArtifactsView($("d-artifacts"), $("d-artifacts-table"), $("d-artifacts-none"));

const drawer = {
  current: null,
  async open(id) {
    this.current = id;
    // Until the detail is drawn the drawer names no task, so a test waiting for it (a task
    // opened again, say) never reads the form of the last drawing.
    delete $("drawer").dataset.taskId;
    artifacts.reset(id);  // from here the feed's artifacts of this task are kept for the drawing
    const response = await fetch(`/api/tasks/${encodeURIComponent(id)}`, { credentials: "same-origin" });
    if (!response.ok || this.current !== id) return;
    const task = await response.json();
    $("drawer").hidden = false;
    $("drawer").dataset.taskId = id;
    $("d-title").textContent = task.title;
    $("d-id").textContent = task.id;
    $("d-state").textContent = shownState(task).replace("_", " ");
    const fields = [["attempt", `${task.attempt} of ${task.max_attempts}`], ["owner", task.owner || "—"],
      ["lease ends", task.lease_expire_ms ? `${clock(task.lease_expire_ms)} (${Math.round((task.lease_expire_ms - nowMs()) / 1000)}s)` : "—"],
      ["fence", task.fence ?? "—"], ["priority", task.priority], ["depends on", task.depends_on.join(", ") || "—"],
      ["progress", task.progress || "—"], ["resources", resourcesText(task)], ["waiting for", waitingText(task.waiting_for, clock)],
      ["error", task.error || "—"]];
    $("d-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    for (const part of ["description", "payload", "result"]) {
      const p = task[part];
      $(`d-${part}`).textContent = p.bytes ? p.text + (p.truncated ? `\n… (truncated, ${p.bytes} bytes in all)` : "") : "—";
    }
    $("d-attempts").replaceChildren(...task.attempts.map((a) => {
      const row = el("tr");
      const held = a.end_ms ? `${((a.end_ms - a.claim_ms) / 1000).toFixed(1)}s` : "live";
      // A review's claim (or the lead's decision) says so, with its round; a rejection its feedback.
      const reviewed = a.review_round !== null && a.review_round !== undefined;
      const outcome = (a.outcome || "live").toLowerCase();
      row.dataset.review = reviewed ? "yes" : "no";
      row.append(el("td", a.attempt), el("td", a.owner), el("td", a.fence), el("td", held),
        el("td", reviewed ? `review ${a.review_round}: ${outcome}` : outcome), el("td", a.feedback || a.error));
      return row;
    }));
    artifacts.shown(id, task.artifacts);
    if (task.attempts.length || isHeld(board.tasks.get(id))) output.follow(id);
    else output.none(id);
    this.proposal(task);
    // A reviewed task: its policy, the rounds so far, and the result under review (IN_REVIEW).
    $("d-review-box").hidden = !task.review;
    if (task.review) {
      const reviewer = task.review.reviewer_role ? `a teammate holding ${task.review.reviewer_role}` : "the lead";
      const author = [...task.attempts].reverse().find((a) => (a.review_round === null || a.review_round === undefined) && a.outcome === "COMPLETED");
      const review = [["reviewer", reviewer], ["rounds", `${task.review_rounds} rejected of ${task.review.max_rounds}`],
        ["author", task.state === "IN_REVIEW" && author ? author.owner : "—"]];
      $("d-review").replaceChildren(...review.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    }
    $("d-result-title").textContent = task.state === "IN_REVIEW" ? "Result under review" : "Result";
    const verdict = $("d-verdict");
    verdict.replaceChildren();
    if (board.session?.actions && task.state === "IN_REVIEW") {
      const text = el("textarea");
      text.id = "d-feedback-text";
      text.setAttribute("aria-label", "feedback");
      text.placeholder = "feedback (required to reject)";
      text.maxLength = 65536;
      const approve = actionButton("approve", "review-task", () => ({ task_id: id, approve: true, feedback: text.value }));
      const reject = actionButton("reject", "review-task", () => ({ task_id: id, approve: false, feedback: text.value }));
      approve.dataset.verdict = "approve";
      reject.dataset.verdict = "reject";
      const buttons = el("div", null, "actions");
      buttons.append(approve, reject);
      verdict.append(text, buttons);
    }
    // A NEEDS_INPUT task's question; a lead session with actions answers it here.
    $("d-question-box").hidden = !task.question.bytes;
    $("d-question").textContent = task.question.text + (task.question.truncated ? `\n… (truncated, ${task.question.bytes} bytes in all)` : "");
    const answer = $("d-answer");
    answer.replaceChildren();
    if (board.session?.actions && task.state === "NEEDS_INPUT") {
      const text = el("textarea");
      text.id = "d-answer-text";
      text.setAttribute("aria-label", "answer");
      text.maxLength = 65536;
      answer.append(text, actionButton("answer", "answer-question", () => ({ task_id: id, answer: text.value })));
    }
    const actions = $("d-actions");
    actions.replaceChildren();
    if (board.session?.actions) {
      if (!FINAL.has(task.state)) actions.append(actionButton("cancel task", "cancel-task", { task_id: id }));
      if (task.state === "IN_PROGRESS") {
        actions.append(actionButton("revoke claim", "revoke-claim", { task_id: id, reason: "revoked from the board" }));
        actions.append(actionButton(`shut down ${task.owner}`, "request-shutdown", { teammate: task.owner, reason: "asked from the board" }));
      }
    }
  },
  // A task a teammate proposed: who and from which task (a link to it); a lead session with
  // actions approves or rejects it while it waits (PROPOSED).
  proposal(task) {
    proposals.learn(task);
    $("d-proposal-box").hidden = !task.proposed_by;
    const source = task.discovered_from ? el("button", task.discovered_from, "link") : el("span", "— (none named)");
    if (task.discovered_from) {
      source.type = "button";
      source.dataset.openTask = task.discovered_from;
      source.addEventListener("click", () => this.open(task.discovered_from));
    }
    const decided = task.state === "PROPOSED" ? "waiting for the lead"
      : task.state !== "CANCELED" ? "approved" : task.error.startsWith("proposal rejected") ? "rejected" : "canceled";
    const rows = [["proposed by", el("span", task.proposed_by)], ["discovered from", source], ["decision", el("span", decided)]];
    $("d-proposal").replaceChildren(...rows.flatMap(([k, v]) => { const dd = el("dd"); dd.append(v); return [el("dt", k), dd]; }));
    const decision = $("d-decision");
    decision.replaceChildren();
    if (!board.session?.actions || task.state !== "PROPOSED") return;
    const text = el("textarea");
    text.id = "d-proposal-feedback";
    text.setAttribute("aria-label", "feedback to the proposer");
    text.placeholder = "feedback to the proposer (optional)";
    text.maxLength = 65536;
    const decide = (approve) => () => ({ task_ids: [task.id], approve, feedback: text.value });
    const approve = actionButton("approve", "decide-proposals", decide(true));
    const reject = actionButton("reject", "decide-proposals", decide(false));
    approve.dataset.decision = "approve";
    reject.dataset.decision = "reject";
    const buttons = el("div", null, "actions");
    buttons.append(approve, reject);
    decision.append(text, buttons);
  },
  close() { this.current = null; output.stop(); artifacts.reset(null); $("drawer").hidden = true; },
};

// ---------------------------------------------------------------- events list

// Newest first: the live events on top, the history of a page opened after them below,
// paged back with "older" (a page of HISTORY_PAGE seqs at a time).
const eventsView = {
  kept: [],  // the events the list holds, newest last, whatever the filter shows
  older: null,  // the `before` that asks for the page older than the list's last; null at the log's start
  describe(e) {
    if (e.kind === "task") return `${e.task.id} → ${e.task.state.toLowerCase()}${e.task.owner ? ` (${e.task.owner})` : ""}${e.task.error ? `: ${e.task.error}` : ""}`;
    if (e.kind === "teammate") return `${e.name} ${e.status.toLowerCase()} (${e.reason})`;
    if (e.kind === "message") return `${e.sender}: ${e.body}`;
    if (e.kind === "plan") return `${e.author} submitted plan ${e.plan_id}`;
    if (e.kind === "question") return `${e.asked_by} asked about ${e.task_id}: ${e.question}`;
    if (e.kind === "question_answered") return `${e.task_id} answered: ${e.answer}`;
    if (e.kind === "review_decided") return `${e.task_id} ${e.approve ? "approved" : "rejected"} by ${e.reviewer} (round ${e.round})${e.feedback ? `: ${e.feedback}` : ""}`;
    if (e.kind === "tasks_proposed") return `${e.teammate} proposed ${this.ids(e)}${e.discovered_from ? ` from ${e.discovered_from}` : ""}`
      + `${e.split ? ", splitting it" : ""}${e.needs_decision ? ": waiting for the lead" : ": added pending"}`;
    if (e.kind === "proposals_decided") return `${this.ids(e)} ${e.approve ? "approved" : "rejected"}${e.feedback ? `: ${e.feedback}` : ""}`;
    if (e.kind === "artifact_added") return `${e.teammate} attached ${e.artifact.name} (${e.artifact.media_type}) to ${e.task_id}`;
    if (e.kind === "plan_decided") return `plan ${e.plan_id} of ${e.author} ${e.approve ? "approved" : "rejected"}${e.feedback ? `: ${e.feedback}` : ""}`;
    return JSON.stringify(e.detail || {});
  },
  ids(e) {  // an event's task ids, at most the first 100 of them
    const more = e.task_count > e.task_ids.length ? ` and ${e.task_count - e.task_ids.length} more` : "";
    return `${e.task_ids.join(", ")}${more}`;
  },
  item(e) {
    const item = el("li");
    item.dataset.seq = String(e.seq);
    item.dataset.kind = e.kind;
    item.append(el("span", e.seq, "seq"), el("span", e.kind, "kind"), el("span", this.describe(e), "text"));
    return item;
  },
  add(events) {
    this.kept.push(...events);
    this.trim();
    if ($("event-pause").checked) return;
    const kind = $("event-kind").value;
    const list = $("events");
    list.prepend(...events.filter((e) => this.shown(e, kind)).reverse().map((e) => this.item(e)));
    while (list.childElementCount > EVENTS_KEPT) list.lastElementChild.remove();
  },
  // Past its bound the list drops its oldest; "older" then pages back from there.
  trim() {
    if (this.kept.length <= EVENTS_KEPT) return;
    this.kept.splice(0, this.kept.length - EVENTS_KEPT);
    this.older = this.kept[0].seq;
    this.showOlder();
  },
  startHistory(seq) {
    this.older = seq > 0 ? seq + 1 : null;
    this.showOlder();
    if (this.older !== null) this.loadOlder();
  },
  async loadOlder() {
    const before = this.older;
    if (before === null || this.loading) return;
    this.loading = true;
    $("events-older").disabled = true;
    try {
      const response = await fetch(`/api/history?before=${before}&limit=${HISTORY_PAGE}`, { credentials: "same-origin" });
      if (!response.ok || this.older !== before) return;
      const page = await response.json();
      const first = this.kept.length ? this.kept[0].seq : Infinity;
      const older = page.events.filter((e) => e.seq < first);  // newest first
      this.kept.unshift(...[...older].reverse());
      this.older = page.older;
      if (!$("event-pause").checked) {
        const kind = $("event-kind").value;
        $("events").append(...older.filter((e) => this.shown(e, kind)).map((e) => this.item(e)));
      }
    } finally {
      this.loading = false;
      $("events-older").disabled = false;
      this.showOlder();
    }
  },
  showOlder() {
    $("events-older").hidden = this.older === null;
    $("events").dataset.older = this.older === null ? "none" : String(this.older);
  },
  redraw() {
    const kind = $("event-kind").value;
    $("events").replaceChildren(...this.kept.filter((e) => this.shown(e, kind)).reverse().map((e) => this.item(e)));
  },
  shown(e, kind) {  // "plan" also shows "plan_decided"; "proposals" both tasks_proposed and proposals_decided
    return !kind || e.kind === kind || e.kind.startsWith(`${kind}_`) || (kind === "proposals" && e.kind === "tasks_proposed");
  },
};

// ---------------------------------------------------------------- timeline

// One lane per teammate; each claim a bar coloured by how it ended (the legend under it).
const OUTCOME_COLORS = { running: "#f59e0b", completed: "#22c55e", failed: "#ef4444", expired: "#f472b6",
  released: "#38bdf8", canceled: "#a855f7", asked: "#14b8a6", approved: "#818cf8", rejected: "#fb923c", split: "#a3e635",
  ended: "#5b6676" };

const timeline = {
  draw() {
    const canvas = $("timeline");
    if (canvas.offsetParent === null) return;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, lanes = [...board.teammates.keys()];
    const laneHeight = 22, top = 18;
    const height = Math.max(120, top + lanes.length * laneHeight + 10);
    canvas.style.height = `${height}px`;
    canvas.width = width * ratio; canvas.height = height * ratio;
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    g.clearRect(0, 0, width, height);
    const now = nowMs();
    const claims = board.claims;
    // The last minute, scrolling; or the whole run (also while it is shorter than a minute).
    const first = claims.length ? claims[0].claim_ms : now - 60_000;
    const start = $("timeline-all").checked ? first : Math.max(first, now - 60_000);
    const span = Math.max(1000, now - start), left = 90, plot = width - left - 8;
    const x = (ms) => left + ((ms - start) / span) * plot;
    g.font = "11px system-ui"; g.fillStyle = "#8897a8";
    for (let i = 0; i < 4; i++) { const t = start + (span * i) / 4; g.fillText(clock(t), x(t), 12); }
    const bars = [];
    lanes.forEach((name, i) => {
      const y = top + i * laneHeight;
      g.fillStyle = "#8897a8"; g.fillText(name.slice(0, 12), 4, y + 14);
      g.fillStyle = "#1c2531"; g.fillRect(left, y + 3, plot, laneHeight - 6);
      for (const c of claims) {
        if (c.teammate !== name) continue;
        const end = c.end_ms ?? now;
        if (end < start) continue;
        // Whole pixels, at least 3 wide, so each bar shows its own colour unblended.
        const x0 = Math.round(Math.max(left, x(c.claim_ms)));
        const w = Math.max(3, Math.round(x(end)) - x0 - 1);
        const kind = outcomeKind(c);
        g.fillStyle = OUTCOME_COLORS[kind];
        g.fillRect(x0, y + 4, w, laneHeight - 8);
        bars.push({ task: c.task, teammate: name, attempt: c.attempt, kind, color: OUTCOME_COLORS[kind], x: x0, y: y + 4, w, h: laneHeight - 8 });
      }
    });
    board.timelineBars = bars;
  },
};

// ---------------------------------------------------------------- live feed

let source = null;
let downSince = null;

function setConn(state, text) {
  const conn = $("conn");
  conn.dataset.conn = state;
  conn.textContent = text;
}

function connect() {
  source?.close();
  source = new EventSource(`/api/events?after=${board.seq}`);
  source.addEventListener("open", () => { downSince = null; setConn("live", "live"); });
  source.addEventListener("board", (message) => {
    const event = JSON.parse(message.data);
    if (event.seq <= board.seq) return;  // never applied twice
    applyEvent(event);
  });
  source.addEventListener("stats", (message) => header.health(JSON.parse(message.data)));
  source.addEventListener("error", () => {
    downSince = downSince ?? Date.now();
    setConn("reconnecting", `reconnecting since ${clock(downSince)}`);
    if (source.readyState === EventSource.CLOSED) setTimeout(resume, 1000);
  });
}

// The browser gave up (the daemon answered with an error): ask again, and if the
// session is gone, say so.
async function resume() {
  const response = await fetch("/api/board", { credentials: "same-origin" }).catch(() => null);
  if (response && response.status === 401) { setConn("ended", "session ended: log in again"); source?.close(); return; }
  if (!response || !response.ok) { setTimeout(resume, 2000); return; }
  connect();
}

async function start() {
  if (location.pathname === "/login") { showLogin(); return; }
  const response = await fetch("/api/board", { credentials: "same-origin" });
  if (response.status === 401) { location.replace("/login"); return; }
  $("board").hidden = false;
  graph.build();
  applySnapshot(await response.json());
  tables.teammates();
  eventsView.startHistory(board.snapshotSeq);
  connect();
  setInterval(() => { graph.tickLeases(); tables.teammates(); if (!$("tab-timeline").hidden) timeline.draw(); }, 1000);
  for (const tab of document.querySelectorAll("[data-tab]")) {
    tab.addEventListener("click", () => {
      for (const other of document.querySelectorAll("[data-tab]")) other.setAttribute("aria-selected", String(other === tab));
      for (const panel of document.querySelectorAll(".tab")) panel.hidden = panel.id !== `tab-${tab.dataset.tab}`;
      if (tab.dataset.tab === "timeline") timeline.draw();
    });
  }
  $("drawer-close").addEventListener("click", () => drawer.close());
  $("tasks").addEventListener("click", (event) => { const row = event.target.closest("tr[data-task-id]"); if (row) drawer.open(row.dataset.taskId); });
  $("failures").addEventListener("click", (event) => { const row = event.target.closest("tr[data-task-id]"); if (row) drawer.open(row.dataset.taskId); });
  $("page-prev").addEventListener("click", () => tables.loadPage(Math.max(0, tables.page.index - 1)));
  $("page-next").addEventListener("click", () => tables.loadPage(tables.page.index + 1));
  $("timeline-all").addEventListener("change", () => timeline.draw());
  $("event-kind").addEventListener("change", () => eventsView.redraw());
  $("events-older").addEventListener("click", () => eventsView.loadOlder());
  $("event-pause").addEventListener("change", () => { if (!$("event-pause").checked) eventsView.redraw(); });
  document.body.dataset.ready = "true";
}

start();
