// The Workers page (/workers/): every worker seen in the last hour, from GET /api/v1/workers. It reads
// again when the stream says a run started or ended (at most twice a second) and on a timer (lease
// renewals are not events: see nextRefresh); between reads its clock ticks "since the last renewal" and marks a
// worker the moment one of its leases has gone half its length without a renewal.
import { LiveStream, absTime, api, describeError, formatDuration, h, readConfig, shortId, showError, startTicker } from "./common.js";

const config = readConfig();
const tbody = document.getElementById("workers");
const summary = document.getElementById("workers-summary");
const errorEl = document.getElementById("workers-error");
const REFRESH_MS = 3000;
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
      h("span", { class: stale ? "renew stale" : "renew", dataset: { run: run.run_id } },
        `renewed ${unbroken(formatDuration(since))} ago of a ${unbroken(formatDuration(run.lease_ms))} lease`),
    ];
    if (config.can_change) {
      parts.push(" ", h("a", { class: "small", href: `/admin/workcenter/run/?q=${encodeURIComponent(run.run_id)}`,
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

let loading = null;
let again = false;
async function load() {
  if (loading) { again = true; return; }
  loading = (async () => {
    try {
      const answer = await api("/workers");
      skew = Date.parse(answer.now) - Date.now();
      shown = answer.workers;
      errorEl.hidden = true;
      render();
    } catch (err) {
      showError(errorEl, describeError(err, "Loading the workers"));
    }
  })();
  await loading;
  loading = null;
  if (again) { again = false; load(); }
}

let soon = null;
function loadSoon() {
  if (soon) return;
  soon = setTimeout(() => { soon = null; load(); }, 500);
}

const stream = new LiveStream("/ws/work-items/", {
  onHello: () => loadSoon(),
  onEvent: (msg) => { if (msg.event && (msg.event.type.startsWith("run.") || msg.event.type.startsWith("action."))) loadSoon(); },
});
window.__wcStream = stream;

// A live worker renews every third of its lease; the mark comes at half of it. The page reads at
// least every eighth of the shortest lease on screen (between 0.5 and 3 s), so the renewals it
// shows are never so old that a live worker would look stale.
function nextRefresh() {
  const leases = shown.flatMap((w) => w.held.map((run) => run.lease_ms)).filter((ms) => ms > 0);
  const every = leases.length ? Math.min(REFRESH_MS, Math.max(500, Math.min(...leases) / 8)) : REFRESH_MS;
  setTimeout(() => { load().finally(nextRefresh); }, every);
}
startTicker(render);
load().then(() => { stream.start(); nextRefresh(); });
