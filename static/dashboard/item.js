// The work item page (UI.md "Work item"): loads the item and its graph, follows the live stream
// and hands every update to the page's parts (item-core.js's hub): header, graph, side panel,
// timeline and dialogs. Live updates come whole from the stream (the item's pushed state): the
// page reads over HTTP only when it loads, after a gap in the stream, and after its own actions.
import { LiveStream, api, badge, coalesce, describeError, h, showError, startTicker } from "./common.js";
import { $, base, emit, graphView, itemId, on, refreshers, state } from "./item-core.js";
import { stageHistory } from "./item-stages.js";
import { logView } from "./item-log.js";
import "./item-head.js";
import "./item-panel.js";
import "./item-events.js";
import "./item-dialogs.js";
import "./item-needs.js";
import "./item-runs.js";

// --- graph ---------------------------------------------------------------------------------------

// one history per stage (item-stages.js) for the graph, the Timeline and the panel: they agree
function drawGraph(graph) {
  state.graph = graph;
  const timing = drawStages();
  renderEmpty();
  emit("graph", graph);
  restoreOnce();
  return timing;
}

/** The stages of the graph and detail held, drawn: their history, the graph, its text alternative. */
function drawStages() {
  state.history = stageHistory(state.graph, state.detail);
  const timing = graphView.setGraph(state.graph, state.history);
  renderNodeList(state.graph);
  return timing;
}

// --- the selected stage lives in the URL (?stage=<stage_id>): reload, back and forward keep it ---
// Opening a stage (click, Enter, the Timeline) adds a history entry; moving the selection with
// the arrow keys while the panel is open replaces it; closing the panel adds one without a stage.

let stageRestored = false;
/** The stage named by the URL opens once the page has the graph and the detail to show it. */
function restoreOnce() {
  if (stageRestored || !state.graph || !state.graph.nodes.length || !state.detail) return;
  stageRestored = true;
  restoreStage();
}
let restoring = false;
let selectWrite = null;

function writeStage(stage, push) {
  const url = new URL(location.href);
  if (stage) url.searchParams.set("stage", stage); else url.searchParams.delete("stage");
  if (url.href === location.href) return;
  history[push ? "pushState" : "replaceState"]({ stage: stage || null }, "", url);
}

function restoreStage() {
  const stage = new URLSearchParams(location.search).get("stage");
  restoring = true;
  try {
    if (stage && graphView.nodes.has(stage)) graphView.select(stage, { open: true });
    else if (state.panelOpen) $("panel-close").click();
  } finally { restoring = false; }
}

on("select", (node) => {
  if (restoring) return;
  selectWrite = node ? node.stage_id : null;
  queueMicrotask(() => { if (selectWrite !== null && state.panelOpen) writeStage(selectWrite, false); selectWrite = null; });
});
on("open", (node) => { if (!restoring) { selectWrite = null; writeStage(node.stage_id, true); } });
on("close", () => { if (!restoring) writeStage(null, true); });
window.addEventListener("popstate", restoreStage);

// the skip link (the page's first focusable element) moves the keyboard to the graph
$("skip-graph")?.addEventListener("click", (e) => {
  e.preventDefault();
  $("tab-graph").click();
  $("graph").focus();
});

// a draft has no actions yet: say so instead of drawing an empty canvas
function renderEmpty() {
  const empty = !state.graph || state.graph.nodes.length === 0;
  $("graph-empty").hidden = !empty;
  $("graph-empty").textContent = state.detail && state.detail.status === "draft"
    ? "Not started — no stages yet." : "No stages yet.";
}

// the text alternative of a large graph is built when it is opened (not on every event while closed)
let nodeListPending = null;
$("node-list-wrap").addEventListener("toggle", () => {
  if ($("node-list-wrap").open && nodeListPending) { const g = nodeListPending; nodeListPending = null; renderNodeList(g); }
});

function renderNodeList(graph) {
  if (graph.nodes.length > 80 && !$("node-list-wrap").open) { nodeListPending = graph; return; }
  nodeListPending = null;
  // one row per stage, as the graph draws it (its attempts folded into it, item-stages.js)
  const shown = graphView.shown || [];
  const names = new Map(shown.map((n) => [n.stage_id, n.name]));
  const deps = new Map();
  const dep = (a, b) => {
    const name = names.get(a) || a;
    if (!deps.has(b)) deps.set(b, []);
    if (!deps.get(b).includes(name)) deps.get(b).push(name);
  };
  if (graph.execution_mode === "graph") for (const e of graph.edges) dep(e.source, e.target);
  else for (let i = 0; i + 1 < shown.length; i++) dep(shown[i].stage_id, shown[i + 1].stage_id);
  const rows = shown.map((n) => h("tr", { dataset: { id: n.id, stage: n.stage_id, status: n.status } },
    h("td", {}, h("button", { type: "button", class: "linkish", onclick: () => { graphView.select(graphView.keyOf(n), { open: true }); } }, n.name)),
    h("td", {}, n.type),
    h("td", {}, badge(n.status)),
    h("td", {}, String(n.attempts || 0)), // as the Timeline counts them: 0 for a stage that never ran
    h("td", {}, n.run ? `${graphView.durationText(n)}${n.run.ended_at || n.since != null ? "" : " (running)"}` : "—"),
    h("td", {}, (deps.get(n.stage_id) || []).join(", ") || "—"),
    h("td", {}, (n.blocked_by || []).join("; ") || "—")));
  $("node-list").replaceChildren(...rows);
}

// --- data ----------------------------------------------------------------------------------------

async function loadGraph() {
  try {
    const graph = await api(`${base}/graph`);
    drawGraph(graph);
    // the per-item stream cannot see gaps by id (ids are global); the graph's last id can
    if (stream.lastId !== null && graph.last_event_id > stream.lastId) catchUpEvents();
  } catch (err) {
    showError($("head-error"), describeError(err, "Loading the graph"));
  }
}

async function loadDetail() {
  try {
    const detail = await api(base);
    state.detail = detail;
    if (state.graph) drawStages();
    emit("detail", detail);
    emit("events", detail.events);
    if (state.graph) renderEmpty();
    restoreOnce();
  } catch (err) {
    showError($("head-error"), describeError(err, "Loading the work item"));
  }
}

let catching = false;
async function catchUpEvents() {
  if (catching) return;
  catching = true;
  try {
    let after = stream.lastId;
    for (;;) {
      const page = await api(`${base}/events?after_id=${after}&limit=1000`);
      keepEvents(page.events);
      emit("events", page.events);
      if (!page.events.length) break;
      after = page.last_id;
      if (page.events.length < 1000) break;
    }
    if (after > stream.lastId) stream.lastId = after;
  } catch { /* the next event retries */ } finally { catching = false; }
}

// --- the pushed state -------------------------------------------------------------------------------
// The per-item stream pushes the item's state (workcenter/item_page_state.py): whole in the hello and
// when a node, edge, action or run is gone, else a diff on the state of rev `base_rev`. The page applies a diff
// only on the state it shows (`shownRev`); on any other base it has missed one (a dropped
// message, a reconnect) and reads the whole state back once (GET …/state), never per event.

let shownRev = null;
const DETAIL_EVENTS = 500;
const byRunOrder = (a, b) => (a.started_at < b.started_at ? 1 : a.started_at > b.started_at ? -1 : a.id < b.id ? 1 : -1);

function merged(list, changed, order) {
  if (!changed.length) return list;
  const byId = new Map(list.map((x) => [x.id, x]));
  for (const x of changed) byId.set(x.id, x);
  return [...byId.values()].sort(order);
}

/** A hello leaves a stage's earlier attempts out (`left_out` counts them: ended actions that are
 * not their stage's newest, with their nodes and edges, and ended runs that are not their stage's
 * newest): they no longer change, so the page puts back those it holds. When it holds fewer, it
 * shows the hello's and reads the whole state back once. */
const ENDED_ACTIONS = new Set(["completed", "failed", "superseded", "cancelled"]);
function withEarlierAttempts(st, held) {
  const lo = st.left_out;
  const ids = (list) => new Set(list.map((x) => x.id));
  const inActions = ids(st.actions);
  const inRuns = ids(st.runs);
  const inNodes = ids(st.graph.nodes);
  const actions = (held.actions || []).filter((a) => !inActions.has(a.id) && ENDED_ACTIONS.has(a.status));
  const runs = (held.runs || []).filter((r) => !inRuns.has(r.id) && r.ended_at);
  const nodes = ((state.graph && state.graph.nodes) || []).filter((n) => !inNodes.has(n.id) && ENDED_ACTIONS.has(n.status));
  const left = ids(actions);
  const edgeKey = (e) => `${e.source_action_id} ${e.target_action_id}`;
  const inEdges = new Set(st.graph.edges.map(edgeKey));
  const edges = ((state.graph && state.graph.edges) || []).filter((e) => !inEdges.has(edgeKey(e))
    && (left.has(e.source_action_id) || left.has(e.target_action_id)));
  if (actions.length !== lo.actions || runs.length !== lo.runs || nodes.length !== lo.nodes || edges.length !== lo.edges) {
    queueMicrotask(() => resync(null));
    return st;
  }
  return { ...st,
    actions: st.actions.concat(actions).sort((a, b) => a.sequence - b.sequence),
    runs: st.runs.concat(runs).sort(byRunOrder),
    graph: { ...st.graph, nodes: st.graph.nodes.concat(nodes).sort((a, b) => a.sequence - b.sequence), edges: st.graph.edges.concat(edges) } };
}

/** Apply a pushed state; false when it is a diff on a state the page does not show. A diff's
 * nodes, actions and runs replace those of the same id or are new (put in order), its `edges`
 * are new ones. The state leaves long texts out (an action's instruction, brief and context, a
 * run's response and evidence): what the page read of them (the detail at load, the panel on
 * open) is kept. */
function applyState(st, lastEventId) {
  const events = state.detail ? state.detail.events : [];
  const keepTexts = (list, held) => {
    if (!held || !held.length) return list;
    const old = new Map(held.map((x) => [x.id, x]));
    return list.map((x) => (old.has(x.id) ? { ...old.get(x.id), ...x } : x));
  };
  if (st.base_rev == null) {
    const held = state.detail || {};
    if (st.left_out) st = withEarlierAttempts(st, held);
    state.detail = { ...st.item, actions: keepTexts(st.actions, held.actions), runs: keepTexts(st.runs, held.runs), events };
    shownRev = st.rev;
    drawGraph(st.graph);
    emit("detail", state.detail);
    renderEmpty();
    return true;
  }
  if (st.base_rev !== shownRev || !state.graph || !state.detail) return false;
  const nodes = new Map(st.nodes.map((n) => [n.id, n]));
  let graphNodes = state.graph.nodes;
  if (nodes.size) {
    graphNodes = graphNodes.map((n) => nodes.get(n.id) || n);
    const known = new Set(graphNodes.map((n) => n.id));
    const added = st.nodes.filter((n) => !known.has(n.id));
    if (added.length) graphNodes = graphNodes.concat(added).sort((x, y) => x.sequence - y.sequence);
  }
  const graph = { ...state.graph, status: st.item.status || state.graph.status,
    last_event_id: Math.max(state.graph.last_event_id, lastEventId || 0), nodes: graphNodes,
    edges: st.edges && st.edges.length ? state.graph.edges.concat(st.edges) : state.graph.edges };
  state.detail = { ...state.detail, ...st.item, events,
    actions: merged(state.detail.actions, keepTexts(st.actions, state.detail.actions), (a, b) => a.sequence - b.sequence),
    runs: merged(state.detail.runs, keepTexts(st.runs, state.detail.runs), byRunOrder) };
  shownRev = st.rev;
  drawGraph(graph);
  emit("detail", state.detail);
  return true;
}

/** The newest events first, at most as many as the detail holds (the durations read them). */
function keepEvents(list) {
  if (!state.detail || !list.length) return;
  const seen = new Set(state.detail.events.map((e) => e.id));
  const fresh = list.filter((e) => !seen.has(e.id));
  if (fresh.length) state.detail.events = [...fresh].sort((a, b) => b.id - a.id).concat(state.detail.events).slice(0, DETAIL_EVENTS);
}

/** Read the whole state back (a diff did not apply). One read at a time: a diff that arrives
 * meanwhile is tried on what it returns, and only one made after that read asks again. */
let resyncing = false;
let heldDiff = null;
async function resync(diff) {
  if (resyncing) { heldDiff = diff; return; }
  resyncing = true;
  let readTo = 0;
  try {
    const st = await api(`${base}/state`);
    applyState(st);
    readTo = st.graph.last_event_id;
    if (stream.lastId !== null && readTo > stream.lastId) catchUpEvents();
  } catch (err) {
    showError($("head-error"), describeError(err, "Loading the work item"));
  } finally {
    resyncing = false;
  }
  const held = heldDiff;
  heldDiff = null;
  if (held && (held.state === null || !applyState(held.state, held.id)) && held.id > readTo) resync(held);
}

const refreshGraph = coalesce(loadGraph);
let detailTimer = null;
let detailLoading = null;
function refreshDetail() {
  // the detail carries every run and the newest 500 events: at most ~3 reads a second
  if (detailTimer) return;
  detailTimer = setTimeout(async () => {
    detailTimer = null;
    if (detailLoading) { await detailLoading; }
    detailLoading = loadDetail().finally(() => { detailLoading = null; });
  }, 300);
}
refreshers.graph = refreshGraph;
refreshers.detail = refreshDetail;

// --- zoom ----------------------------------------------------------------------------------------

// Fit shows the whole graph (a large one even below the legible zoom); the automatic view keeps
// text legible and pans to what matters
$("fit").addEventListener("click", () => graphView.fit({ animate: true, all: true }));
$("zoom-in").addEventListener("click", () => graphView.zoomBy(1.2));
$("zoom-out").addEventListener("click", () => graphView.zoomBy(1 / 1.2));
// the side panel opens over the graph's right side: the view keeps its content out from under it
graphView.coverBy($("panel"));
// the panel opening, closing or the window resizing changes the graph's room: refit unless the
// user panned (then only the selected stage is kept in sight)
const roomObserver = new ResizeObserver(coalesce(() => graphView.roomChanged()));
roomObserver.observe($("graph"));
roomObserver.observe($("panel"));

// --- live ----------------------------------------------------------------------------------------

const stream = new LiveStream(`/ws/work-items/${encodeURIComponent(itemId)}/`, {
  onHello: (msg, { first }) => {
    if (msg.state) applyState({ ...msg.state, graph: msg.graph });
    else if (msg.graph) { drawGraph(msg.graph); resync(null); } else resync(null); // too large to push
    if (!first) catchUpEvents();
    logView.follow(); // a follow belongs to its socket: sent again on each one
  },
  onEvent: (msg) => {
    keepEvents([msg.event]);
    emit("events", [msg.event]);
    emit("event", msg.event);
    if (msg.state && (msg.state.read || !applyState(msg.state, msg.event.id))) {
      resync({ state: msg.state.read ? null : msg.state, id: msg.event.id });
    }
  },
  onProgress: (msg) => emit("progress", msg),
  onLog: (msg) => logView.receive(msg),
});
logView.send = (msg) => stream.send(msg);

// one clock for the page: graph nodes, header, panel, timeline and banner tick in the same task
startTicker(() => { graphView.tick(); emit("tick"); });
// #run=<id>&seq=<n>&find=<text> (a link from the Logs page): that run's log, open at the match
function openFromHash() {
  const link = new URLSearchParams(location.hash.slice(1));
  const run = link.get("run") && state.detail && state.detail.runs.find((r) => r.id === link.get("run"));
  if (!run) return;
  logView.openAt(run.id, link.get("seq"), link.get("find"));
  emit("open-run", run);
}

Promise.all([loadGraph(), loadDetail()]).then(() => { openFromHash(); stream.start(); });
