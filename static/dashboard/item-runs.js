// Where the time of a work item went: the rules shared by the header and the side panel
// (elapsed, time running, time waiting on a person) and the timeline view, a tab beside the
// graph: one row per stage with the attempts its graph node counts (item-stages.js, one
// computation for both tabs), a bar per run from its claim to its end coloured by outcome (at
// least 8 px wide, its duration written on it where it fits), a bar that grows while a run runs,
// and hatched spans where the item waited on a person; the axis fits the runs and the waits.
//
// Every duration goes through common.js's runDurationMs and formatDuration, so the header, the
// panel, the graph's nodes and the timeline agree to the second.
import { STATUS_LABEL, absTime, formatDuration, h, measureLatest, runDurationMs } from "./common.js";
import { $, TERMINAL, emit, on, state } from "./item-core.js";
import { attemptStatus, stageHistory } from "./item-stages.js";

const ms = (iso) => (iso ? Date.parse(iso) : null);

// --- one clock for every live duration of the page's time views -------------------------------------
// The header, the panel and the timeline tick together with one `now`, so they never disagree by
// a second. A page hub that emits "tick" (each second, beside the graph's own tick) takes over
// from this module's interval, so the graph's nodes then tick in the same task too.
const tickers = [];
export function onTick(fn) { tickers.push(fn); }
function tickAll() {
  const now = Date.now();
  for (const fn of tickers) {
    try { fn(now); } catch (err) { console.error("item page: a clock listener failed", err); }
  }
}
let ownClock = setInterval(tickAll, 1000);
on("tick", () => { if (ownClock) { clearInterval(ownClock); ownClock = null; } tickAll(); });

// events that hand a blocked item back to the workers (or end it): a person acted
const RESUMES = new Set(["work_item.retried", "workflow.retriaged", "work_item.cancelled", "action.reset"]);
// events that leave the item needing a person although the run's own status does not say so
function blocksByEvent(ev) {
  const d = ev.data || {};
  if (ev.type === "action.retry_exhausted" || ev.type === "action.marked_failed") return true;
  return (ev.type === "run.interrupted" || ev.type === "run.released") && d.retryable === false;
}

/** When the item ended (done/cancelled: its last terminal event), else null. */
export function itemEndMs(detail) {
  if (!TERMINAL.has(detail.status)) return null;
  const types = detail.status === "done" ? ["work_item.completed", "action.completed"] : ["work_item.cancelled"];
  const ev = (detail.events || []).find((e) => types.includes(e.type)); // newest first
  return ms(ev ? ev.created_at : detail.updated_at);
}

/** [start, end] of a run in ms; a running run ends now (the rule of runDurationMs). */
export function runSpan(run, now = Date.now()) {
  const start = ms(run.started_at);
  return [start, start + runDurationMs(run, now)];
}

/** Total length of intervals, overlapping parts counted once. */
export function unionMs(intervals) {
  const sorted = intervals.filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0]);
  let total = 0;
  let cur = null;
  for (const [a, b] of sorted) {
    if (!cur || a > cur[1]) { if (cur) total += cur[1] - cur[0]; cur = [a, b]; } else cur[1] = Math.max(cur[1], b);
  }
  if (cur) total += cur[1] - cur[0];
  return total;
}

/**
 * The spans in which the item waited on a person: from a run that ended `waiting` (a question)
 * or `failed`, or an event that left the item needing attention (retries exhausted, a
 * non-retryable interruption, an admin marking it failed), to the first retry / answer /
 * contract change / reset / cancel after it, or the next claim, or the item's end, or now while
 * it still waits. Each: {start, end, open, kind: "waiting"|"attention", actionId, runId, reason}.
 */
export function personSpans(detail, now = Date.now()) {
  const starts = [];
  for (const r of detail.runs) {
    if ((r.status === "waiting" || r.status === "failed") && r.ended_at) {
      starts.push({ start: ms(r.ended_at), kind: r.status === "waiting" ? "waiting" : "attention", actionId: r.action_id,
        runId: r.id, reason: r.status === "waiting" ? r.waiting_reason : r.error });
    }
  }
  for (const ev of detail.events || []) {
    if (blocksByEvent(ev)) {
      starts.push({ start: ms(ev.created_at), kind: "attention", actionId: ev.action_id, runId: ev.run_id,
        reason: (ev.data && (ev.data.error || ev.data.reason)) || ev.type });
    }
  }
  const resumes = (detail.events || []).filter((e) => RESUMES.has(e.type)).map((e) => ms(e.created_at));
  const claims = detail.runs.map((r) => ms(r.started_at));
  const end = itemEndMs(detail);
  const blockedNow = detail.status === "waiting" || detail.status === "needs_attention";
  const spans = [];
  for (const s of starts) {
    let e = Infinity;
    for (const t of resumes) if (t >= s.start && t < e) e = t;
    for (const t of claims) if (t > s.start && t < e) e = t;
    if (end !== null && end < e) e = Math.max(s.start, end);
    let open = false;
    if (e === Infinity) {
      if (!blockedNow) continue; // resumed by something these events no longer show
      e = Math.max(s.start, now);
      open = true;
    }
    spans.push({ ...s, end: e, open });
  }
  return spans.sort((a, b) => a.start - b.start);
}

/** Elapsed, running and waiting-on-a-person times of the item, in ms. */
export function itemTimes(detail, now = Date.now()) {
  const created = ms(detail.created_at);
  const end = itemEndMs(detail);
  const runs = detail.runs.filter((r) => r.started_at);
  const intervals = runs.map((r) => runSpan(r, now));
  const spans = personSpans(detail, now);
  return {
    elapsed: Math.max(0, (end ?? now) - created),
    ended: end !== null,
    running: unionMs(intervals),
    runningSum: intervals.reduce((t, [a, b]) => t + (b - a), 0),
    runs: runs.length,
    live: runs.some((r) => !r.ended_at),
    waiting: unionMs(spans.map((s) => [s.start, s.end])),
    waitingOpen: spans.some((s) => s.open),
    spans,
  };
}

/** Every run of a node's stage, newest first: the runs of the stage's attempts (item-stages.js),
 *  every action of the stage (a linear item's retries and loops, a graph item's superseded ones). */
export function runsOfNode(detail, node) {
  if (!detail || !node) return [];
  const stage = state.history && state.history.stages.get(node.stage_id);
  if (!stage) return detail.runs.filter((r) => r.action_id === node.id);
  return detail.runs.filter((r) => stage.actionIds.has(r.action_id));
}

// --- the timeline view -----------------------------------------------------------------------------

const view = $("runs-view");
const tabs = [$("tab-graph"), $("tab-runs")];
const ui = { shown: false, bars: [], waits: [], domain: [0, 1], ticksFor: "", live: false, zoom: 1 };
const MAX_ZOOM = 64;

const clockFmt = {
  min: new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" }),
  sec: new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" }),
  day: new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" }),
};
const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5,
  36e5, 72e5, 108e5, 216e5, 432e5, 864e5, 1728e5, 6048e5];

function tickLabel(t, step) {
  const d = new Date(t);
  if (step >= 864e5) return clockFmt.day.format(d);
  if (step >= 6e4) return clockFmt.min.format(d);
  if (step >= 1e3) return clockFmt.sec.format(d);
  return `${clockFmt.sec.format(d)}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

/** The rows: the graph's stages, in its order, each with the attempts the graph's node counts
 *  (item-stages.js, one computation for both tabs) and the status the node shows. */
function stageRows(detail) {
  const hist = state.history || (state.graph ? stageHistory(state.graph, detail) : null);
  const rows = [];
  const stageOf = new Map();
  if (!hist) return { rows, stageOf };
  for (const stage of hist.order) {
    const s = hist.stages.get(stage);
    for (const id of s.actionIds) stageOf.set(id, stage);
    rows.push({ stage, name: s.name, status: s.status, attempts: s.attempts, runs: s.attempts.filter((a) => a.run).map((a) => a.run), waits: [] });
  }
  return { rows, stageOf };
}

function runLabel(run, index, row, now) {
  const status = STATUS_LABEL[attemptStatus(run)] || run.status;
  const end = run.ended_at ? `ended ${absTime(run.ended_at)}` : "still running";
  return `${row.name}, attempt ${index + 1} of ${row.attempts.length}: ${status}, ${formatDuration(runDurationMs(run, now))}`
    + ` (started ${absTime(run.started_at)}, ${end})`;
}

// what the drawing depends on: a live update that changes none of it keeps the drawn rows
function signature(detail) {
  const runs = detail.runs.map((r) => `${r.id}:${r.status}:${r.ended_at || ""}`).join(",");
  const hist = state.history ? [...state.history.stages.values()] : [];
  const nodes = hist.map((st) => `${st.stage}:${st.name}:${st.status}:${st.attempts.length}`).join(",");
  const marks = (detail.events || []).filter((e) => RESUMES.has(e.type) || blocksByEvent(e)).map((e) => e.id).join();
  return `${detail.id}|${detail.status}|${detail.actions.map((a) => `${a.id}:${a.status}`).join(",")}|${runs}|${nodes}|${marks}`;
}

function render(force = false) {
  if (!ui.shown) return;
  const t0 = performance.now();
  const detail = state.detail;
  if (!detail) { view.replaceChildren(h("p", { class: "tl-empty muted" }, "Loading…")); return; }
  const sig = signature(detail);
  if (!force && sig === ui.sig) return;
  ui.sig = sig;
  const now = Date.now();
  const { rows, stageOf } = stageRows(detail);
  const times = itemTimes(detail, now);
  for (const s of times.spans) {
    const row = rows.find((r) => r.stage === stageOf.get(s.actionId));
    if (row) row.waits.push(s);
  }
  ui.bars = [];
  ui.waits = [];
  const body = h("div", { class: "tl-body", role: "list" });
  const frag = document.createDocumentFragment();
  for (const row of rows) {
    const track = h("div", { class: "tl-track" });
    for (const s of row.waits) {
      const kind = s.kind === "waiting" ? "waiting on an answer" : "waiting for a person to act";
      const el = h("div", { class: "tl-wait", dataset: { kind: s.kind }, title: `${kind}${s.reason ? ` — ${s.reason}` : ""}` });
      ui.waits.push({ el, s });
      track.append(el);
    }
    row.attempts.forEach((at, i) => {
      if (!at.run) return; // superseded before it ran: counted, nothing to draw
      const run = at.run;
      const dur = h("span", { class: "tl-dur", "aria-hidden": "true" });
      const el = h("button", { type: "button", class: "tl-bar", dataset: { status: at.status, run: run.id, stage: row.stage, attempt: String(i + 1) },
        "aria-label": runLabel(run, i, row, now) }, dur);
      el.title = el.getAttribute("aria-label");
      el.tabIndex = ui.bars.length ? -1 : 0;
      ui.bars.push({ el, dur, run, row, i });
      track.append(el);
    });
    const count = row.attempts.length;
    frag.append(h("div", { class: "tl-row", role: "listitem", dataset: { stage: row.stage, status: row.status, attempts: String(count) } },
      h("div", { class: "tl-label", title: `${row.name} — ${STATUS_LABEL[row.status] || row.status}${count > 1 ? ` — ${count} attempts` : ""}` },
        h("span", { class: "dot", dataset: { status: row.status }, "aria-hidden": "true" }), h("span", { class: "tl-name" }, row.name),
        h("span", { class: "tl-count muted" }, count > 1 ? `×${count}` : "")),
      track));
  }
  body.append(h("div", { class: "tl-grid", "aria-hidden": "true" }), frag);
  const head = h("div", { class: "tl-head" }, h("div", { class: "tl-corner" }, "Stage"), h("div", { class: "tl-axis", "aria-hidden": "true" }));
  // no stage yet: the graph area's own empty note ("Not started — no stages yet.") says so
  const content = rows.length ? [head, body] : [];
  const zoomButtons = h("span", { class: "tl-zoom" },
    h("button", { type: "button", class: "btn btn-small btn-quiet", dataset: { zoom: "out" }, "aria-label": "Zoom the timeline out" }, "−"),
    h("button", { type: "button", class: "btn btn-small btn-quiet", dataset: { zoom: "in" }, "aria-label": "Zoom the timeline in" }, "+"),
    h("button", { type: "button", class: "btn btn-small btn-quiet", dataset: { zoom: "fit" }, "aria-label": "Fit the whole timeline" }, "Fit"));
  // the colours' legend is the toolbar's, one for both tabs (it shows the waiting keys here)
  const legend = rows.length ? h("p", { class: "tl-legend muted" }, zoomButtons,
    "A bar per attempt, from its claim to its end; click one to open it.") : null;
  // a live redraw keeps the keyboard on the bar it was on
  const active = view.contains(document.activeElement) ? document.activeElement : null;
  view.replaceChildren(...content, ...(legend ? [legend] : []));
  let again = null;
  if (active && active.dataset.run) again = view.querySelector(`.tl-bar[data-run="${CSS.escape(active.dataset.run)}"]`);
  else if (active && active.dataset.zoom) again = view.querySelector(`[data-zoom="${active.dataset.zoom}"]`);
  if (again && again.dataset.run) for (const { el } of ui.bars) el.tabIndex = el === again ? 0 : -1;
  if (again) again.focus({ preventScroll: true });
  ui.live = times.live || times.waitingOpen || !times.ended;
  ui.ticksFor = "";
  place(now);
  measureLatest("wc-runs", t0, { rows: rows.length, bars: ui.bars.length }); // the drawing's cost
}

/** Position every bar, span and tick. The time domain fits the runs and the waits on a person
 *  (a small margin each side), not the item's creation: the first claim to the last end, or now
 *  while a run runs or the item waits. Only an item with no run yet spans creation → now. */
function place(now = Date.now()) {
  const detail = state.detail;
  if (!detail || !ui.shown) return;
  let lo = Infinity;
  let hi = -Infinity;
  for (const { run } of ui.bars) { const [a, b] = runSpan(run, now); lo = Math.min(lo, a); hi = Math.max(hi, b); }
  for (const w of ui.waits) { if (w.s.open) w.s.end = Math.max(w.s.start, now); lo = Math.min(lo, w.s.start); hi = Math.max(hi, w.s.end); }
  if (!Number.isFinite(lo)) { lo = ms(detail.created_at); hi = itemEndMs(detail) ?? now; }
  if (!(hi > lo)) hi = lo + 1000;
  const margin = (hi - lo) * 0.015;
  lo -= margin;
  hi += margin;
  ui.domain = [lo, hi];
  const pct = (t) => `${(((t - lo) / (hi - lo)) * 100).toFixed(4)}%`;
  const wid = (a, b) => `${(((b - a) / (hi - lo)) * 100).toFixed(4)}%`;
  // a duration is written on its bar when it fits there (bars are at least 8 px: clickable)
  const track = view.querySelector(".tl-track");
  const trackPx = track ? track.getBoundingClientRect().width : 0;
  for (const { el, dur, run, row, i } of ui.bars) {
    const [a, b] = runSpan(run, now);
    el.style.left = pct(a);
    el.style.width = wid(a, b);
    const text = formatDuration(b - a);
    const fits = trackPx * ((b - a) / (hi - lo)) >= 12 + 6.6 * text.length;
    if (dur.textContent !== (fits ? text : "")) dur.textContent = fits ? text : "";
    el.classList.toggle("labelled", fits);
    if (!run.ended_at) { const label = runLabel(run, i, row, now); el.setAttribute("aria-label", label); el.title = label; }
  }
  for (const { el, s } of ui.waits) {
    el.style.left = pct(s.start);
    el.style.width = wid(s.start, s.end);
    el.dataset.duration = formatDuration(s.end - s.start);
  }
  drawTicks(lo, hi);
}

function drawTicks(lo, hi) {
  const axis = view.querySelector(".tl-axis");
  const grid = view.querySelector(".tl-grid");
  if (!axis) return;
  const width = axis.getBoundingClientRect().width || 600;
  const want = Math.max(2, Math.floor(width / 90));
  const step = STEPS.find((s) => (hi - lo) / s <= want) || STEPS[STEPS.length - 1];
  const first = Math.ceil(lo / step) * step;
  const key = `${first}|${step}|${lo}|${hi}`;
  if (key === ui.ticksFor) return;
  ui.ticksFor = key;
  const ticks = [];
  const lines = [];
  for (let t = first; t <= hi; t += step) {
    const left = `${(((t - lo) / (hi - lo)) * 100).toFixed(3)}%`;
    ticks.push(h("span", { class: "tl-tick", style: `left:${left}` }, tickLabel(t, step)));
    lines.push(h("span", { class: "tl-line", style: `left:${left}` }));
  }
  axis.replaceChildren(...ticks);
  axis.title = `${absTime(new Date(lo).toISOString())} → ${absTime(new Date(hi).toISOString())} (${formatDuration(hi - lo)})`;
  grid.replaceChildren(...lines);
}

// --- tabs (ARIA tabs: arrow keys, Home and End move between them) ---------------------------------------

function showTab(which, focus = false) {
  const runs = which === "runs";
  tabs[0].setAttribute("aria-selected", String(!runs));
  tabs[1].setAttribute("aria-selected", String(runs));
  tabs[0].tabIndex = runs ? -1 : 0;
  tabs[1].tabIndex = runs ? 0 : -1;
  $("graph").hidden = runs;
  view.hidden = !runs;
  view.closest(".graph-wrap")?.classList.toggle("showing-runs", runs);
  ui.shown = runs;
  if (runs) render(true);
  if (focus) (runs ? tabs[1] : tabs[0]).focus();
}

tabs[0].addEventListener("click", () => showTab("graph"));
tabs[1].addEventListener("click", () => showTab("runs"));
for (const tab of tabs) {
  tab.addEventListener("keydown", (e) => {
    const i = tabs.indexOf(tab);
    let next = null;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") next = (i + 1) % tabs.length;
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") next = (i + tabs.length - 1) % tabs.length;
    else if (e.key === "Home") next = 0;
    else if (e.key === "End") next = tabs.length - 1;
    if (next === null) return;
    e.preventDefault();
    showTab(next === 1 ? "runs" : "graph", true);
  });
}

// --- zoom: the time axis widens (the view scrolls sideways); the stage names stay ------------------------

function setZoom(z, clientX = null) {
  z = Math.max(1, Math.min(MAX_ZOOM, z));
  const axis = view.querySelector(".tl-axis");
  if (!axis || z === ui.zoom) return;
  const before = axis.getBoundingClientRect();
  const viewRect = view.getBoundingClientRect();
  const label = view.querySelector(".tl-corner").getBoundingClientRect().width;
  const anchor = clientX ?? (viewRect.left + label + viewRect.right) / 2; // else the middle of what shows
  const frac = (anchor - before.left) / before.width; // the time under the anchor stays under it
  ui.zoom = z;
  view.style.setProperty("--tl-zoom", String(z));
  const after = axis.getBoundingClientRect();
  view.scrollLeft += after.left + frac * after.width - anchor;
  ui.ticksFor = "";
  place();
}

view.addEventListener("wheel", (e) => {
  if (!(e.ctrlKey || e.metaKey)) return; // a plain wheel scrolls the rows
  e.preventDefault();
  setZoom(ui.zoom * Math.exp(-e.deltaY * 0.002), e.clientX);
}, { passive: false });
// arrow keys move between bars: along a row in time, up and down to the nearest bar in time
function moveFocus(bar, key) {
  const all = [...view.querySelectorAll(".tl-bar")];
  if (!bar) { all[0]?.focus(); return; }
  const row = bar.closest(".tl-row");
  const inRow = [...row.querySelectorAll(".tl-bar")];
  let next = null;
  if (key === "ArrowRight" || key === "ArrowLeft") {
    next = inRow[inRow.indexOf(bar) + (key === "ArrowRight" ? 1 : -1)] || null;
  } else {
    const rows = [...view.querySelectorAll(".tl-row")];
    const x = bar.getBoundingClientRect().left;
    for (let i = rows.indexOf(row) + (key === "ArrowDown" ? 1 : -1); i >= 0 && i < rows.length && !next; i += key === "ArrowDown" ? 1 : -1) {
      const bars = [...rows[i].querySelectorAll(".tl-bar")];
      if (bars.length) next = bars.reduce((a, b) => (Math.abs(b.getBoundingClientRect().left - x) < Math.abs(a.getBoundingClientRect().left - x) ? b : a));
    }
  }
  if (!next) return;
  for (const b of all) b.tabIndex = -1;
  next.tabIndex = 0;
  next.focus();
  next.scrollIntoView({ block: "nearest", inline: "nearest" });
}

view.addEventListener("keydown", (e) => {
  if (e.target.closest("input, textarea")) return;
  if (["ArrowRight", "ArrowLeft", "ArrowUp", "ArrowDown"].includes(e.key)) {
    e.preventDefault();
    moveFocus(e.target.closest(".tl-bar"), e.key);
    return;
  }
  if (e.key === "+" || e.key === "=") setZoom(ui.zoom * 1.5);
  else if (e.key === "-") setZoom(ui.zoom / 1.5);
  else if (e.key === "0") setZoom(1);
  else return;
  e.preventDefault();
});

view.addEventListener("click", (e) => {
  const zoom = e.target.closest("[data-zoom]");
  if (zoom) { setZoom(zoom.dataset.zoom === "fit" ? 1 : ui.zoom * (zoom.dataset.zoom === "in" ? 1.5 : 1 / 1.5)); return; }
  const bar = e.target.closest(".tl-bar");
  if (!bar || !state.detail) return;
  const run = state.detail.runs.find((r) => r.id === bar.dataset.run);
  if (run) emit("open-run", run);
});

on("detail", () => render());
on("graph", () => { if (state.detail) render(); });
onTick((now) => { if (ui.shown && ui.live) place(now); });
new ResizeObserver(() => { if (ui.shown) { ui.ticksFor = ""; place(); } }).observe(view);
