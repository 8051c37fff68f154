// The overview strip above the list: what runs, what waits on a person, what needs attention, what
// finished in the last 24 h, and a sparkline of actions finished per hour. Loaded once with
// GET /overview, then kept fresh by the `overview` the live stream pushes (at most once a second).
import { ageText, absTime, formatCount, h } from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const svg = (tag, attrs = {}, ...children) => {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
};

const hourFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

export class OverviewStrip {
  constructor(root) {
    this.root = root;
    this.data = null;
  }

  /** Apply an overview unless it is older than the one on screen (a GET answered after a push). */
  apply(ov) {
    if (!ov) return;
    if (this.data && ov.generated_at && this.data.generated_at && Date.parse(ov.generated_at) < Date.parse(this.data.generated_at)) return;
    this.data = ov;
    this.render();
  }

  /** The figures that are status counts, from the list's own counts between two pushed overviews
   * (only global counts: the list passes them when no search narrows them). */
  setCounts(counts) {
    if (!this.data) return;
    if (this.data.waiting === counts.waiting && this.data.needs_attention === counts.needs_attention) return;
    this.data = { ...this.data, waiting: counts.waiting, needs_attention: counts.needs_attention };
    this.render();
  }

  /** The wait's age changes with the clock: the page's ticker calls this every second. */
  tick() {
    const el = this.root.querySelector("[data-oldest-wait]");
    if (el && this.data && this.data.oldest_wait_since) {
      const text = `oldest ${ageText(this.data.oldest_wait_since)}`;
      if (el.textContent !== text) el.textContent = text;
    }
  }

  render() {
    const ov = this.data;
    const stat = (key, label, value, status, extra) => h("div", { class: "ov-stat", dataset: { key, status } },
      h("span", { class: "ov-line" }, h("span", { class: "ov-value" }, formatCount(value)), extra || null),
      h("span", { class: "ov-label" }, status ? h("span", { class: "dot", dataset: { status }, "aria-hidden": "true" }) : null, label));
    let oldest = null;
    if (ov.oldest_wait_since && ov.oldest_wait_item) {
      oldest = h("a", {
        class: "ov-oldest", href: `/work-items/${encodeURIComponent(ov.oldest_wait_item.id)}/`,
        title: `Waiting longest: ${ov.oldest_wait_item.title} — since ${absTime(ov.oldest_wait_since)}`,
        dataset: { oldestWait: "" },
      }, `oldest ${ageText(ov.oldest_wait_since)}`);
    }
    this.root.replaceChildren(
      stat("running", "Running now", ov.running, "running"),
      stat("waiting", "Waiting on a person", ov.waiting, "waiting", oldest),
      stat("needs_attention", "Needs attention", ov.needs_attention, "needs_attention"),
      stat("finished_24h", "Finished (24 h)", ov.finished_24h, "done"),
      this.sparkline(ov.actions_finished_per_hour || [], ov.hours_from),
    );
  }

  sparkline(perHour, hoursFrom) {
    const W = 192;
    const H = 30;
    const n = perHour.length || 24;
    const gap = 1;
    const bw = W / n - gap;
    const max = Math.max(1, ...perHour);
    const total = perHour.reduce((a, b) => a + b, 0);
    const peak = perHour.length ? Math.max(...perHour) : 0;
    const from = hoursFrom ? Date.parse(hoursFrom) : Date.now() - (n - 1) * 3600e3;
    const label = `Actions finished per hour over the last 24 hours: ${total} in all, at most ${peak} in one hour.`;
    const chart = svg("svg", { class: "ov-spark", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": label },
      svg("title", {}, label),
      svg("line", { class: "ov-spark-base", x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5 }));
    perHour.forEach((v, i) => {
      const bh = v ? Math.max(2, Math.round((v / max) * (H - 2))) : 1;
      const start = new Date(from + i * 3600e3);
      const end = new Date(from + (i + 1) * 3600e3);
      const when = i === n - 1 ? `${hourFormat.format(start)}–now` : `${hourFormat.format(start)}–${hourFormat.format(end)}`;
      chart.append(svg("rect", { class: v ? "ov-bar" : "ov-bar ov-bar-zero", x: (i * (bw + gap)).toFixed(2), y: H - bh, width: bw.toFixed(2), height: bh, rx: 1 },
        svg("title", {}, `${when}: ${v} action${v === 1 ? "" : "s"} finished`)));
    });
    return h("div", { class: "ov-stat ov-chart", dataset: { key: "actions_per_hour" } }, chart,
      h("span", { class: "ov-label" }, `Actions finished / hour · ${formatCount(total)} in 24 h`));
  }
}
