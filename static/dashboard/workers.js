// The Workers page (/workers/): every worker seen in the last hour, pushed over /ws/workers/ (see below).
// Between two updates its clock ticks "since the last renewal" and marks a worker the moment one of its
// leases has gone half its length without a renewal.
import { LiveStream, absTime, formatDuration, h, readConfig, shortId, startTicker } from "./common.js";

const config = readConfig();
const tbody = document.getElementById("workers");
const summary = document.getElementById("workers-summary");
let skew = 0; // server clock - browser clock, from the answer's `now`
let shown = [];

function staleFor(run, now) {
  return now - Date.parse(run.renewed_at) - run.lease_ms / 2;
}

function heldCell(worker, now) {
  if (!worker.held.length) return h("td", { class: "muted" }, "nothing");
  return h("td", {}, h("ul", { class: "held" }, ...worker.held.map((run) => {
    const since = now - Date.parse(run.renewed_at);
    const stale = staleFor(run, now) > 0;
    const parts = [
      h("a", { href: `/work-items/${encodeURIComponent(run.work_item_id)}/` }, run.title),
      h("span", { class: "muted" }, ` · ${run.stage_id} · e${run.lease_epoch} · `),
      h("span", { class: stale ? "renew stale" : "renew", dataset: { run: run.run_id, renewed: run.renewed_at } },
        `renewed ${unbroken(formatDuration(since))} ago of a ${unbroken(formatDuration(run.lease_ms))} lease`),
    ];
    // only for whom the admin's Release is open (active staff who may see runs and repair them):
    // config.may.release is computed by the admin's own checks (dashboard/views.py)
    if (config.may?.release) {
      parts.push(" ", h("a", { class: "small release-link", href: `/admin/workcenter/run/?q=${encodeURIComponent(run.run_id)}`,
        title: "Open the run in the admin, where Release interrupts it now" }, "Release…"));
    }
    return h("li", {}, ...parts);
  })));
}

// "2 s", "4 min": a figure never wraps away from its unit in a narrow column
const unbroken = (text) => text.replaceAll(" ", "\u00a0");

function render() {
  const now = Date.now() + skew;
  const rows = shown.map((w) => {
    const stale = w.held.some((run) => staleFor(run, now) > 0);
    return h("tr", { dataset: { boot: w.boot_id, renewing: stale ? "false" : "true" }, class: stale ? "worker-stale" : "" },
      h("td", {}, h("span", { class: "mono", title: w.boot_id }, shortId(w.boot_id, 18)),
        stale ? h("span", { class: "stale-mark" }, "not renewing") : ""),
      heldCell(w, now),
      h("td", { class: "col-num" }, String(w.finished_1h)),
      h("td", { class: "col-num" }, String(w.failed_1h)),
      // to the second, on the page's clock: "just now" beside "not renewing" would contradict it
      h("td", { class: "col-time" }, h("time", { datetime: w.last_seen, title: absTime(w.last_seen) },
        `${formatDuration(now - Date.parse(w.last_seen))} ago`)));
  });
  tbody.replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No worker in the last hour."))]));
  const holding = shown.filter((w) => w.held.length).length;
  const stale = shown.filter((w) => w.held.some((run) => staleFor(run, now) > 0)).length;
  summary.textContent = `${shown.length} worker${shown.length === 1 ? "" : "s"} in the last hour, ${holding} holding runs`
    + (stale ? `, ${stale} not renewing` : "") + ".";
}

// The figures come over /ws/workers/ (dashboard/workers_stream.py): the hello carries them all (what
// GET /api/v1/workers answers), then each "workers" message the rows of the workers that changed, whole,
// and the boot ids that left the hour. No HTTP request per update; a reconnect brings a whole hello.
const byBoot = new Map();

function place(msg) {
  skew = Date.parse(msg.now) - Date.now();
  shown = [...byBoot.values()].sort((a, b) => Date.parse(b.last_seen) - Date.parse(a.last_seen) || (a.boot_id < b.boot_id ? -1 : 1));
  render();
}

class WorkersStream extends LiveStream {
  handle(msg) {
    if (msg.type === "workers") {
      for (const boot of msg.gone || []) byBoot.delete(boot);
      for (const w of msg.workers || []) byBoot.set(w.boot_id, w);
      place(msg);
      return;
    }
    super.handle(msg);
  }
}

const stream = new WorkersStream("/ws/workers/", {
  onHello: (msg) => {
    byBoot.clear();
    for (const w of msg.workers || []) byBoot.set(w.boot_id, w);
    place(msg);
  },
});

startTicker(render);
stream.start();
