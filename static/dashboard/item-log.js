// The run log in the item page's panel: the output of the run it shows (the stage's newest, or the
// one a card's "Log" button picked), following live while the run runs (log.follow on the item's
// stream: the page receives the log of this run only, and none once the panel closes), older output
// read on scrolling up, a find box over what is loaded, and the whole log as a download.
import { api, describeError, h, shortId } from "./common.js";

const MAX_LINES = 5000; // lines kept on the page; older ones are read again on scrolling up
const NEAR_END_PX = 24; // this close to the end, the view follows new lines
const STREAM_LABEL = { stdout: "", stderr: "stderr", worker: "worker" };

class LogView {
  constructor() {
    this.send = () => false; // item.js gives the stream's send
    this.runId = null;
    this.lines = h("div", { class: "log-lines mono", role: "log", "aria-label": "Run log", tabindex: "0" });
    this.status = h("span", { class: "log-status muted" });
    this.title = h("span", { class: "log-run muted" });
    this.download = h("a", { class: "btn btn-small btn-quiet log-download", download: "" }, "Download");
    this.note = h("p", { class: "log-note muted small", hidden: true });
    this.jump = h("button", { type: "button", class: "btn btn-small log-jump", hidden: true }, "Jump to live ↓");
    this.findBox = h("input", { type: "search", class: "log-find", placeholder: "Find in log", "aria-label": "Find in log" });
    this.findCount = h("span", { class: "log-find-count muted small", "aria-live": "polite" });
    const prev = h("button", { type: "button", class: "btn btn-small btn-quiet", title: "Previous match (Shift+Enter)",
      "aria-label": "Previous match" }, "↑");
    const next = h("button", { type: "button", class: "btn btn-small btn-quiet", title: "Next match (Enter)",
      "aria-label": "Next match" }, "↓");
    this.el = h("section", { class: "panel-section run-log", id: "run-log" },
      h("div", { class: "log-head" }, h("h3", {}, "Log"), this.title, this.status, this.download),
      h("div", { class: "log-tools" }, this.findBox, prev, next, this.findCount),
      this.note, h("div", { class: "log-frame" }, this.lines, this.jump));
    this.lines.addEventListener("scroll", () => this.scrolled());
    this.jump.addEventListener("click", () => { this.sticky = true; this.toEnd(); });
    this.findBox.addEventListener("input", () => this.find(0));
    this.findBox.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); this.find(e.shiftKey ? -1 : 1); }
      if (e.key === "Escape" && this.findBox.value) { e.stopPropagation(); this.findBox.value = ""; this.find(0); }
    });
    prev.addEventListener("click", () => this.find(-1));
    next.addEventListener("click", () => this.find(1));
    this.deepLink = null; // a link's run, chunk and text, until the panel shows that run (openAt)
    this.reset();
  }

  reset() {
    this.lines.replaceChildren();
    this.open = null; // the last line while it has not ended (a chunk without its newline)
    this.firstSeq = null; // the first chunk on the page: older ones are read before it
    this.lastSeq = 0;
    this.older = false;
    this.loadingOlder = false;
    this.live = false;
    this.sticky = true; // the view follows new lines until the reader scrolls up
    this.hits = [];
    this.hit = -1;
    this.dropped = 0;
    this.received = false;
    this.scrollTop = 0;
    this.startAfter = null; // a deep link's first chunk, less one: the follow starts there
  }

  /** Open `runId`'s log at chunk `seq` with `text` in the find box, when the panel next shows it
   *  (a link from the Logs page: #run=<id>&seq=<n>&find=<text>). */
  openAt(runId, seq, text) {
    this.deepLink = { runId, seq: Number(seq) || 0, text: text || "" };
  }

  /** Show `runId`'s log (the run number for its label); the same run again changes nothing. */
  show(runId, label) {
    this.title.textContent = label || "";
    if (runId === this.runId) return;
    this.runId = runId;
    this.reset();
    const link = this.deepLink && this.deepLink.runId === runId ? this.deepLink : null;
    if (link) {
      this.startAfter = link.seq > 1 ? link.seq - 1 : null;
      this.findBox.value = link.text;
      this.sticky = false;
    }
    this.download.href = `/api/v1/runs/${encodeURIComponent(runId)}/log.txt`;
    this.setStatus("Loading…");
    this.note.hidden = true;
    this.follow();
  }

  /** Follow the shown run's log on the stream, after what the page holds (again after a reconnect). */
  follow() {
    if (!this.runId) return;
    const msg = { type: "log.follow", run_id: this.runId };
    if (this.received && this.lastSeq) msg.after_seq = this.lastSeq;
    else if (this.startAfter !== null) msg.after_seq = this.startAfter;
    this.send(msg);
  }

  stop() {
    if (this.runId) this.send({ type: "log.unfollow" });
    this.runId = null;
    this.reset();
  }

  setStatus(text, live = false) {
    this.status.textContent = text;
    this.status.classList.toggle("live", live);
  }

  /** A `log` message of the stream. */
  receive(msg) {
    if (msg.run_id !== this.runId) return;
    if (msg.error) { this.setStatus("This run's log cannot be read"); return; }
    const chunks = (msg.chunks || []).filter((c) => c.seq > this.lastSeq);
    if (!this.received) {
      this.received = true;
      this.older = !!msg.older;
      this.firstSeq = chunks.length ? chunks[0].seq : msg.next_seq;
    }
    this.append(chunks);
    if (this.deepLink && this.deepLink.runId === this.runId) {
      this.deepLink = null;
      if (this.findBox.value) this.find(1); else this.lines.scrollTop = 0;
    }
    this.live = !!msg.live;
    this.dropped = msg.dropped_bytes || 0;
    this.describe();
    if (!this.lines.childElementCount) {
      this.lines.replaceChildren(h("div", { class: "log-empty muted" }, this.live ? "Nothing printed yet." : "This run printed nothing."));
    }
  }

  describe() {
    this.setStatus(this.live ? "● live" : "ended", this.live);
    const notes = [];
    if (this.dropped) notes.push(`The oldest output (${this.dropped.toLocaleString()} bytes) was dropped: the log keeps its last part.`);
    this.note.textContent = notes.join(" ");
    this.note.hidden = !notes.length;
    this.jump.hidden = this.sticky || !this.live;
  }

  /** Lines of `chunks` as elements; `open`: the line left open before them, continued by the first. */
  build(chunks, open) {
    const out = [];
    for (const c of chunks) {
      const parts = c.text.split("\n");
      parts.forEach((part, i) => {
        if (i === 0 && open && open.dataset.stream === c.stream) { open.textContent += part; return; }
        if (i === parts.length - 1 && part === "") return; // the text ended with its newline
        const line = h("div", { class: "log-line", dataset: { stream: c.stream, seq: String(c.seq) } }, part);
        if (STREAM_LABEL[c.stream]) line.title = STREAM_LABEL[c.stream];
        out.push(line);
        open = line;
      });
      open = c.text.endsWith("\n") ? null : open;
    }
    return { out, open };
  }

  append(chunks) {
    if (!chunks.length) return;
    this.lines.querySelector(".log-empty")?.remove();
    const { out, open } = this.build(chunks, this.open);
    this.lines.append(...out);
    this.open = open;
    this.lastSeq = chunks[chunks.length - 1].seq;
    const over = this.lines.childElementCount - MAX_LINES;
    if (over > 0) {
      for (let i = 0; i < over; i++) this.lines.firstElementChild.remove();
      this.older = true;
      this.firstSeq = Number(this.lines.firstElementChild.dataset.seq) + 1; // that chunk is cut: read it whole again
    }
    if (this.findBox.value) this.find(0, true);
    if (this.sticky) this.toEnd();
  }

  toEnd() {
    this.lines.scrollTop = this.lines.scrollHeight;
    this.jump.hidden = true;
  }

  scrolled() {
    const l = this.lines;
    this.sticky = l.scrollTop + l.clientHeight >= l.scrollHeight - NEAR_END_PX;
    this.scrollTop = l.scrollTop;
    this.jump.hidden = this.sticky || !this.live;
    if (l.scrollTop < 40 && this.older) this.loadOlder();
  }

  /** Read the chunks before the first one shown and put them on top, the view staying where it was. */
  async loadOlder() {
    if (this.loadingOlder || !this.runId) return;
    this.loadingOlder = true;
    const runId = this.runId;
    try {
      const page = await api(`/runs/${encodeURIComponent(runId)}/log?before=${this.firstSeq}&limit=200`);
      if (runId !== this.runId) return;
      const chunks = page.chunks || [];
      const { out } = this.build(chunks, null);
      const height = this.lines.scrollHeight;
      this.lines.prepend(...out);
      this.lines.scrollTop += this.lines.scrollHeight - height;
      this.older = page.older;
      if (chunks.length) this.firstSeq = chunks[0].seq;
      if (this.findBox.value) this.find(0, true);
    } catch (err) {
      this.note.textContent = describeError(err, "Reading older output");
      this.note.hidden = false;
    } finally { this.loadingOlder = false; }
  }

  /** Mark the loaded lines holding the find box's text; step to the next (1) or previous (-1) one. */
  find(step, quiet = false) {
    const q = this.findBox.value.toLowerCase();
    for (const el of this.hits) el.classList.remove("hit", "hit-current");
    this.hits = q ? [...this.lines.children].filter((el) => el.classList.contains("log-line")
      && el.textContent.toLowerCase().includes(q)) : [];
    for (const el of this.hits) el.classList.add("hit");
    if (!this.hits.length) {
      this.hit = -1;
      this.findCount.textContent = q ? "no match in what is loaded" : "";
      return;
    }
    if (step === 0 && quiet) this.hit = Math.min(Math.max(this.hit, 0), this.hits.length - 1);
    else this.hit = ((step === 0 ? 0 : this.hit + step) % this.hits.length + this.hits.length) % this.hits.length;
    const current = this.hits[this.hit];
    current.classList.add("hit-current");
    this.findCount.textContent = `${this.hit + 1} of ${this.hits.length}`;
    if (!quiet) {
      this.sticky = false;
      current.scrollIntoView({ block: "center" });
      this.jump.hidden = !this.live;
    }
  }

  /** After the panel was drawn again (the section moved): back where the reader was. */
  placed() {
    if (this.sticky) this.toEnd();
    else this.lines.scrollTop = this.scrollTop;
  }
}

export const logView = new LogView();

/** The log section for a stage's runs: the picked run's log, else the newest run's (by start);
 *  null when the stage has no run. `numbers`: each run's number as its card shows it. */
export function logSection(runs, picked, numbers) {
  if (!runs.length) { logView.stop(); return null; }
  const byStart = [...runs].sort((a, b) => String(b.started_at).localeCompare(String(a.started_at)));
  const run = byStart.find((r) => r.id === picked) || byStart[0];
  const number = numbers.get(run.id);
  logView.show(run.id, `${number ? `run #${number} · ` : ""}${shortId(run.id)}`);
  return logView.el;
}
