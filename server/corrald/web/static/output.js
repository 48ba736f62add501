// The task drawer's live output: the latest attempt's text, decoded by the daemon and
// followed over a stream of its own (GET /api/tasks/ID/output) that ends with the attempt.
// Output is whatever a teammate wrote: it reaches the DOM as text nodes, never as markup.

const KEPT_CHARS = 256 * 1024;  // the most the box holds; older text is dropped
const AT_BOTTOM_PX = 4;

export class OutputView {
  constructor(box, note, status) {
    this.box = box;  // a <pre>: one text node per event, the oldest trimmed past KEPT_CHARS
    this.note = note;
    this.status = status;
    this.taskId = null;
    this.source = null;
    this.attempt = null;
    this.position = null;  // the last event's id, ATTEMPT:OFFSET, as the stream resumes from it
    this.kept = 0;
    this.ended = false;
  }

  // Follows the task's latest attempt from the start of what the daemon shows.
  follow(taskId) {
    this.stop();
    this.reset(taskId);
    this.say("connecting", "connecting…");
    const source = new EventSource(`/api/tasks/${encodeURIComponent(taskId)}/output`);
    this.source = source;
    source.addEventListener("start", (message) => this.started(JSON.parse(message.data)));
    source.addEventListener("output", (message) => {
      this.position = message.lastEventId;
      this.append(JSON.parse(message.data).text);
    });
    source.addEventListener("end", (message) => {
      this.position = message.lastEventId;
      this.ended = true;
      source.close();
      this.say("ended", `attempt ${this.attempt} ended`);
    });
    source.addEventListener("error", () => {
      if (this.source !== source || this.ended) return;
      // Closed: the daemon refused the stream; otherwise the browser resumes from `position`.
      if (source.readyState === EventSource.CLOSED) this.say("closed", "output unavailable now: reopen the task to try again");
      else this.say("reconnecting", "reconnecting…");
    });
  }

  // A task with no claim yet has no output.
  none(taskId) {
    this.stop();
    this.reset(taskId);
    this.say("none", "no output: not claimed yet");
  }

  // A claim of the shown task, from the board's feed: a newer attempt replaces the view.
  claimed(task) {
    if (this.taskId !== task.id) return;
    if (this.source && !this.ended && (this.attempt === null || this.attempt === task.attempt)) return;
    this.follow(task.id);
  }

  stop() {
    this.source?.close();
    this.source = null;
  }

  reset(taskId) {
    this.taskId = taskId;
    this.attempt = this.position = null;
    this.ended = false;
    this.kept = 0;
    this.box.replaceChildren();
    this.note.hidden = true;
  }

  started(start) {
    // A stream resumed where the box ends goes on; any other start draws the box anew.
    if (this.position !== `${start.attempt}:${start.offset}`) {
      this.reset(this.taskId);
      this.position = `${start.attempt}:${start.offset}`;
    }
    this.attempt = start.attempt;
    this.box.dataset.attempt = String(start.attempt);
    if (start.omitted > 0) this.omit();
    this.say("live", `attempt ${start.attempt} · following`);
  }

  append(text) {
    const box = this.box;
    // Follows the end only while the reader is there; one who scrolled up keeps their place.
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - AT_BOTTOM_PX;
    box.append(document.createTextNode(text));
    this.kept += text.length;
    while (this.kept > KEPT_CHARS && box.firstChild) {
      const first = box.firstChild;
      const over = this.kept - KEPT_CHARS;
      if (first.data.length <= over) {
        this.kept -= first.data.length;
        first.remove();
      } else {
        first.deleteData(0, over);
        this.kept -= over;
      }
      this.omit();
    }
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  omit() {
    this.note.hidden = false;
    this.note.textContent = `earlier output omitted: the whole of it with \`corral tasks output ${this.taskId}\``;
  }

  say(state, text) {
    this.box.dataset.state = state;
    this.status.textContent = text;
  }
}
