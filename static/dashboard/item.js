// The work item page (UI.md "Work item"): loads the item and its graph, follows the live stream
// and hands every update to the page's parts (item-core.js's hub): header, graph, side panel,
// timeline and dialogs.
import { LiveStream, api, badge, coalesce, describeError, h, showError, startTicker } from "./common.js";
import { $, base, emit, graphView, itemId, refreshers, state } from "./item-core.js";
import "./item-head.js";
import "./item-panel.js";
import "./item-events.js";
import "./item-dialogs.js";
import "./item-needs.js";
import "./item-runs.js";

// --- graph ---------------------------------------------------------------------------------------

function drawGraph(graph) {
  state.graph = graph;
  const timing = graphView.setGraph(graph);
  renderEmpty();
  renderNodeList(graph);
  emit("graph", graph);
  return timing;
}

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
  const deps = new Map();
  for (const e of graph.edges) {
    const key = graph.execution_mode === "graph" ? e.target : e.target_action_id;
    const src = graph.execution_mode === "graph" ? e.source : graph.nodes.find((n) => n.id === e.source_action_id)?.name;
    if (!deps.has(key)) deps.set(key, []);
    deps.get(key).push(src);
  }
  const rows = graph.nodes.map((n) => h("tr", { dataset: { id: n.id, status: n.status } },
    h("td", {}, h("button", { type: "button", class: "linkish", onclick: () => { graphView.select(graphView.keyOf(n), { open: true }); } }, n.name)),
    h("td", {}, n.type),
    h("td", {}, badge(n.status)),
    h("td", {}, `${n.attempt}/${n.max_attempts}`),
    h("td", {}, n.run ? `${graphView.durationText(n)}${n.run.ended_at ? "" : " (running)"}` : "—"),
    h("td", {}, (deps.get(graph.execution_mode === "graph" ? n.stage_id : n.id) || []).join(", ") || "—"),
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
    emit("detail", detail);
    emit("events", detail.events);
    if (state.graph) renderEmpty();
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
      emit("events", page.events);
      if (!page.events.length) break;
      after = page.last_id;
      if (page.events.length < 1000) break;
    }
    if (after > stream.lastId) stream.lastId = after;
  } catch { /* the next event retries */ } finally { catching = false; }
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
    if (msg.graph) drawGraph(msg.graph); else refreshGraph();
    if (!first) catchUpEvents();
    refreshDetail();
  },
  onEvent: (msg) => {
    emit("events", [msg.event]);
    emit("event", msg.event);
    refreshGraph();
    refreshDetail();
  },
  onProgress: (msg) => emit("progress", msg),
});
window.__wcStream = stream;

// one clock for the page: graph nodes, header, panel, timeline and banner tick in the same task
startTicker(() => { graphView.tick(); emit("tick"); });
Promise.all([loadGraph(), loadDetail()]).then(() => stream.start());
