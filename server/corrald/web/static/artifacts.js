// The task drawer's artifacts: the current artifact of each name, from the task's detail
// and then from the board's feed (artifact_added), each a link to its download
// (GET /api/tasks/ID/artifacts/NAME, always served as an attachment, never shown here).
// Names and media types are whatever a teammate sent: they reach the DOM as text only.

const SHORT_SHA = 12;
const UNITS = ["KiB", "MiB", "GiB"];

export function humanSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  let value = bytes;
  let unit = "B";
  for (const next of UNITS) {
    if (value < 1024) break;
    value /= 1024;
    unit = next;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${unit}`;
}

// Each segment encoded on its own: the name's `/`s stay path separators of the route.
export function downloadPath(taskId, name) {
  return `/api/tasks/${encodeURIComponent(taskId)}/artifacts/${name.split("/").map(encodeURIComponent).join("/")}`;
}

function cell(text, title) {
  const td = document.createElement("td");
  td.textContent = String(text);
  if (title) td.title = title;
  return td;
}

export class ArtifactsView {
  constructor(body, table, none) {
    this.body = body;  // the table's <tbody>: a row per name, sorted by name
    this.table = table;
    this.none = none;
    this.taskId = null;
    this.byName = new Map();
  }

  // A drawer opening on a task: what the feed brings from now on is kept for it.
  reset(taskId) {
    this.taskId = taskId;
    this.byName.clear();
    this.draw();
  }

  // The task's detail: its artifacts as read, unless the feed brought a newer one of a
  // name while the detail was on its way.
  shown(taskId, artifacts) {
    if (taskId !== this.taskId) return;
    for (const artifact of artifacts) {
      const known = this.byName.get(artifact.name);
      if (!known || known.create_ms < artifact.create_ms) this.byName.set(artifact.name, artifact);
    }
    this.draw();
  }

  // An artifact_added event: a new name, or a later upload superseding a name.
  added(taskId, artifact) {
    if (taskId !== this.taskId) return;
    this.byName.set(artifact.name, artifact);
    this.draw();
  }

  draw() {
    const names = [...this.byName.keys()].sort();
    this.body.replaceChildren(...names.map((name) => this.row(this.byName.get(name))));
    this.table.hidden = names.length === 0;
    this.none.hidden = names.length > 0;
    this.body.dataset.count = String(names.length);
  }

  row(artifact) {
    const row = document.createElement("tr");
    row.dataset.artifactName = artifact.name;
    const link = document.createElement("a");
    link.className = "artifact-link";
    link.href = downloadPath(this.taskId, artifact.name);
    link.textContent = artifact.name;
    link.title = `download ${artifact.name}`;
    const name = document.createElement("td");
    name.append(link);
    const added = artifact.create_ms ? new Date(artifact.create_ms).toLocaleTimeString() : "—";
    row.append(name, cell(artifact.media_type), cell(humanSize(artifact.size), `${artifact.size} bytes`),
      cell(artifact.sha256.slice(0, SHORT_SHA), artifact.sha256), cell(artifact.attempt), cell(added));
    return row;
  }
}
