// The work item page (UI.md "Work item"): header, stage graph, side panel, timeline and dialogs.
import {
  LiveStream, STATUS_LABEL, absTime, api, badge, coalesce, describeError, formatCount, h, readConfig,
  setBadge, shortId, showError, startTicker, timeEl, wireDialogClose,
} from "./common.js";
import { GraphView } from "./graph.js";

const config = readConfig();
const itemId = config.item_id;
const base = `/work-items/${encodeURIComponent(itemId)}`;
const TERMINAL = new Set(["done", "cancelled"]);
const RETRYABLE = new Set(["waiting", "needs_attention"]);

const state = { detail: null, graph: null, events: new Map(), panelOpen: false, retryOpen: false };
const $ = (id) => document.getElementById(id);

// --- graph ---------------------------------------------------------------------------------------

const graphView = new GraphView($("graph"), {
  onSelect: (node) => { if (state.panelOpen) renderPanel(node); },
  onOpen: (node) => openPanel(node),
});
window.__wcGraph = graphView;

function drawGraph(graph) {
  state.graph = graph;
  const timing = graphView.setGraph(graph);
  renderEmpty();
  renderNodeList(graph);
  if (state.panelOpen) renderPanel(graphView.selectedData());
  return timing;
}

// a draft has no actions yet: say so instead of drawing an empty canvas
function renderEmpty() {
  const empty = !state.graph || state.graph.nodes.length === 0;
  $("graph-empty").hidden = !empty;
  $("graph-empty").textContent = state.detail && state.detail.status === "draft"
    ? "Not started — no stages yet." : "No stages yet.";
}

function renderNodeList(graph) {
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
    renderHead(detail);
    addEvents(detail.events);
    if (state.panelOpen) renderPanel(graphView.selectedData());
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
      addEvents(page.events);
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

// --- header --------------------------------------------------------------------------------------

function renderHead(d) {
  $("item-title").textContent = d.title;
  document.title = `${d.title} · Work Center`;
  setBadge($("item-status"), d.status);
  const stats = d.execution_stats || {};
  const meta = [
    ["Revision", String(d.revision)],
    ["Workflow", [d.workflow_template, d.work_item_type].filter(Boolean).join(" · ")],
    ["Mode", `${d.execution_mode}${d.planning_mode === "ai" ? " · planned" : ""}`],
    ["Runs", String(d.runs.length)],
    ["Tokens", formatCount(stats.total_tokens)],
    ["Tool calls", formatCount(stats.tool_count)],
    ["Workspace", d.workspace_key || d.work_dir || "—"],
    ["Updated", timeEl(d.updated_at)],
  ];
  $("item-meta").replaceChildren(...meta.flatMap(([k, v]) => [h("div", { class: "meta-item" }, h("dt", {}, k), h("dd", {}, v))]));
  if (config.can_change) {
    $("btn-retry").hidden = !RETRYABLE.has(d.status);
    $("btn-retry").textContent = d.status === "waiting" ? "Answer & retry…" : "Retry…";
    $("btn-cancel").hidden = TERMINAL.has(d.status);
    $("btn-edit").hidden = TERMINAL.has(d.status);
    $("btn-start").hidden = d.status !== "draft";
  }
  if (state.graph) renderEmpty();
}

// --- timeline ------------------------------------------------------------------------------------

function eventSummary(ev) {
  const d = ev.data || {};
  const parts = [];
  switch (ev.type) {
    case "run.claimed": parts.push(`by worker ${shortId(d.owner_boot_id)} epoch ${d.lease_epoch}`); break;
    case "work_item.retried": if (d.target_stage_id) parts.push(`from ${d.target_stage_id}`); break;
    case "action.guidance_added": parts.push(`“${String(d.guidance || "").slice(0, 80)}”`); break;
    default:
      for (const [k, v] of Object.entries(d)) {
        if (v === null || v === undefined || v === "" || typeof v === "object") continue;
        parts.push(`${k.replace(/_/g, " ")} ${String(v).slice(0, 60)}`);
        if (parts.length >= 3) break;
      }
  }
  return parts.join(" · ");
}

function stageOf(ev) {
  if (!ev.action_id || !state.detail) return "";
  const a = state.detail.actions.find((x) => x.id === ev.action_id);
  return a ? a.stage_id : "";
}

function eventStatus(type) {
  if (/failed|needs_attention|stale|interrupted/.test(type)) return "failed";
  if (/waiting|changes_requested/.test(type)) return "waiting";
  if (/claimed|started/.test(type)) return "running";
  if (/completed|approved|done/.test(type)) return "completed";
  if (/cancel|supersed/.test(type)) return "cancelled";
  return "ready";
}

function eventRow(ev) {
  const stage = stageOf(ev);
  const decision = ev.data && ev.data.review_decision === "changes_requested" && ev.data.next_stage_id
    ? ` → ${ev.data.next_stage_id}` : "";
  return h("li", { class: "event", dataset: { id: String(ev.id), type: ev.type, status: eventStatus(ev.type) } },
    h("span", { class: "dot", dataset: { status: eventStatus(ev.type) }, "aria-hidden": "true" }),
    h("div", { class: "event-body" },
      h("div", { class: "event-line" }, h("span", { class: "event-type" }, ev.type + decision),
        stage ? h("span", { class: "event-stage" }, stage) : null),
      h("div", { class: "event-detail" }, eventSummary(ev)),
      h("div", { class: "event-meta" }, h("span", { class: "event-actor" }, ev.actor), " · ", timeEl(ev.created_at), ` · #${ev.id}`)));
}

const MAX_EVENTS = 500;
function addEvents(events) {
  const list = $("events");
  const fresh = events.filter((e) => !state.events.has(e.id)).sort((a, b) => b.id - a.id);
  if (!fresh.length) return;
  for (const e of fresh) state.events.set(e.id, e);
  const nodes = fresh.map(eventRow);
  // merge newest-first: most arrivals are newer than everything shown
  const firstShown = list.firstElementChild ? Number(list.firstElementChild.dataset.id) : -1;
  if (fresh[fresh.length - 1].id > firstShown) {
    list.prepend(...nodes);
  } else {
    const all = [...state.events.values()].sort((a, b) => b.id - a.id).slice(0, MAX_EVENTS);
    list.replaceChildren(...all.map(eventRow));
  }
  while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
}

// --- side panel ----------------------------------------------------------------------------------

function section(title, ...content) {
  return h("section", { class: "panel-section" }, h("h3", {}, title), ...content);
}

function evidenceItem(ev) {
  if (typeof ev === "string") return h("li", {}, ev);
  if (!ev || typeof ev !== "object") return h("li", {}, String(ev));
  const label = ev.label || ev.title || ev.path || ev.url || JSON.stringify(ev);
  const href = ev.url && /^https?:\/\//.test(ev.url) ? ev.url : null;
  return h("li", {}, ev.kind ? h("span", { class: "tag" }, ev.kind) : null,
    href ? h("a", { href, target: "_blank", rel: "noopener noreferrer" }, label) : h("span", {}, label),
    ev.path && ev.path !== label ? h("span", { class: "mono muted" }, ` ${ev.path}`) : null);
}

function runCard(run) {
  const counters = [["tokens", run.total_tokens], ["tool calls", run.tool_count], ["LLM requests", run.llm_request_count], ["loops", run.loop_count]]
    .filter(([, v]) => v).map(([k, v]) => `${formatCount(v)} ${k}`).join(" · ");
  return h("li", { class: "run", dataset: { status: run.status, id: run.id } },
    h("div", { class: "run-head" }, badge(run.status), h("span", { class: "mono muted", title: run.id }, shortId(run.id)),
      h("span", { class: "muted" }, `epoch ${run.lease_epoch} · worker ${shortId(run.owner_boot_id)}`)),
    h("div", { class: "run-times muted" }, "started ", timeEl(run.started_at), run.ended_at ? [" · ended ", timeEl(run.ended_at)] : " · running"),
    run.summary ? h("p", { class: "run-summary" }, run.summary) : null,
    run.waiting_reason ? h("p", { class: "run-waiting" }, h("strong", {}, "Question: "), run.waiting_reason) : null,
    run.review_decision ? h("p", {}, h("strong", {}, "Review: "), run.review_decision.replace(/_/g, " ")) : null,
    run.error ? h("p", { class: "run-error" }, h("strong", {}, "Error: "), run.error) : null,
    (run.evidence || []).length ? h("ul", { class: "evidence" }, ...run.evidence.map(evidenceItem)) : null,
    run.response ? h("details", { class: "run-response" }, h("summary", {}, "Response"), h("pre", { class: "live-response", dataset: { run: run.id } }, run.response)) : null,
    counters ? h("div", { class: "run-counters muted" }, counters) : null);
}

function contextEntry(c) {
  if (typeof c === "string") return h("li", {}, c);
  if (c && typeof c === "object") {
    return h("li", {}, c.type ? h("span", { class: "tag" }, c.type) : null, c.role ? h("span", { class: "muted" }, `${c.role} `) : null,
      c.summary || c.text || c.content || h("code", {}, JSON.stringify(c)));
  }
  return h("li", {}, String(c));
}

function dependencyResults(action) {
  const d = state.detail;
  return (action.depends_on_stage_ids || []).map((stage) => {
    const node = (state.graph?.nodes || []).find((n) => n.stage_id === stage);
    const run = node ? d.runs.find((r) => r.action_id === node.id && r.status === "completed") : null;
    return h("li", {}, h("span", { class: "dot", dataset: { status: node ? node.status : "ready" }, "aria-hidden": "true" }),
      h("strong", {}, stage), ` — ${node ? STATUS_LABEL[node.status] || node.status : "missing"}`,
      run && run.summary ? h("div", { class: "muted" }, run.summary) : null);
  });
}

function guidanceBox(action) {
  const d = state.detail;
  const isCurrent = d.current_action_id === action.id && ["ready", "running"].includes(d.status) && ["ready", "running"].includes(action.status);
  if (!config.can_change || !isCurrent) return null;
  const area = h("textarea", { id: "guidance-text", rows: "3", placeholder: "What should this stage do differently?" });
  const err = h("p", { class: "form-error", role: "alert", hidden: true });
  const btn = h("button", { type: "submit", class: "btn btn-primary btn-small" }, "Send guidance");
  const form = h("form", { class: "guidance", novalidate: true }, h("label", { for: "guidance-text" }, "Guidance for this stage"),
    h("p", { class: "muted small" }, "The stage restarts with your guidance added to its context."), area, err, h("div", { class: "dialog-actions" }, btn));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!area.value.trim()) { showError(err, "Write the guidance first."); area.focus(); return; }
    btn.disabled = true;
    try {
      await api(`${base}/guidance`, { method: "POST", body: { action_id: action.id, revision: d.revision, guidance: area.value } });
      area.value = "";
      showError(err, "");
      refreshGraph(); refreshDetail();
    } catch (ex) {
      showError(err, describeError(ex, "Guidance"));
    } finally { btn.disabled = false; }
  });
  return form;
}

function renderPanel(node) {
  const body = $("panel-body");
  if (!node || !state.detail) { body.replaceChildren(h("p", { class: "muted" }, "Select a stage in the graph.")); return; }
  const action = state.detail.actions.find((a) => a.id === node.id);
  $("panel-title").replaceChildren(node.name, " ", badge(node.status));
  if (!action) { body.replaceChildren(h("p", { class: "muted" }, "Loading…")); refreshDetail(); return; }
  const runs = state.detail.runs.filter((r) => r.action_id === action.id);
  const brief = action.brief || {};
  const facts = [["Stage", action.stage_id], ["Type", action.type], ["Attempt", `${action.attempt} of ${action.max_attempts}`],
    ["Workspace", action.workspace_mode], ["Sequence", String(action.sequence)], ["Action", shortId(action.id, 12)]];
  if (node.lease) facts.push(["Lease", `worker ${shortId(node.lease.owner_boot_id)} · epoch ${node.lease.lease_epoch} · expires ${absTime(node.lease.expires_at)}`]);
  const content = [
    h("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    (node.blocked_by || []).length ? section("Blocked by", h("ul", { class: "blocked-list" }, ...node.blocked_by.map((b) => h("li", {}, b)))) : null,
    guidanceBox(action),
    section("Brief", h("dl", { class: "brief" },
      h("dt", {}, "Objective"), h("dd", {}, brief.objective || "—"),
      h("dt", {}, "Approach"), h("dd", {}, brief.approach || "—"),
      h("dt", {}, "Expected outcome"), h("dd", {}, brief.expected_outcome || "—"))),
    action.instruction ? h("details", { class: "panel-section instruction" }, h("summary", {}, "Instruction"), h("pre", {}, action.instruction)) : null,
    (action.context || []).length ? section(`Context (${action.context.length})`, h("ul", { class: "context" }, ...action.context.map(contextEntry))) : null,
    (action.depends_on_stage_ids || []).length ? section("Depends on", h("ul", { class: "deps" }, ...dependencyResults(action))) : null,
    section(`Runs (${runs.length})`, runs.length ? h("ol", { class: "runs" }, ...runs.map(runCard)) : h("p", { class: "muted" }, "No runs yet.")),
  ];
  // keep a half-typed guidance across live re-renders
  const typed = document.getElementById("guidance-text")?.value;
  const open = [...body.querySelectorAll("details[open]")].map((el) => el.querySelector("summary")?.textContent);
  body.replaceChildren(...content.filter(Boolean));
  if (typed) { const area = document.getElementById("guidance-text"); if (area) area.value = typed; }
  for (const el of body.querySelectorAll("details")) if (open.includes(el.querySelector("summary")?.textContent)) el.open = true;
}

function openPanel(node) {
  state.panelOpen = true;
  $("panel").hidden = false;
  $("workspace").classList.add("with-panel");
  renderPanel(node);
}

function closePanel() {
  state.panelOpen = false;
  $("panel").hidden = true;
  $("workspace").classList.remove("with-panel");
  $("graph").focus({ preventScroll: true });
}

$("panel-close").addEventListener("click", closePanel);

// --- dialogs -------------------------------------------------------------------------------------

function stageList(ids) {
  return ids.map((id) => graphView.nodeByActionId(id)?.name || state.detail?.actions.find((a) => a.id === id)?.stage_id || shortId(id));
}

async function openRetry() {
  const dlg = $("retry-dialog");
  const preview = $("retry-preview");
  const confirm = $("retry-confirm");
  const d = state.detail;
  showError($("retry-error"), "");
  confirm.disabled = true;
  preview.replaceChildren(h("p", { class: "muted" }, "Working out what a retry would do…"));
  const waiting = d && d.status === "waiting";
  $("retry-answer-wrap").hidden = !waiting;
  $("retry-answer").value = "";
  if (waiting) {
    const run = d.runs.find((r) => r.status === "waiting" && r.waiting_reason);
    $("retry-question").textContent = run ? run.waiting_reason : "";
    $("retry-question").hidden = !run;
  }
  state.retryOpen = true;
  dlg.showModal();
  try {
    const p = await api(`${base}/retry-preview`);
    if (!state.retryOpen) return;
    const running = p.superseded_run_ids.map((rid) => {
      const run = d.runs.find((r) => r.id === rid);
      const node = run ? graphView.nodeByActionId(run.action_id) : null;
      return `${node ? node.name : "a stage"} (worker ${shortId(run?.owner_boot_id)}, epoch ${run?.lease_epoch ?? "?"})`;
    });
    const lines = [];
    if (p.mode === "graph") {
      const names = stageList(p.reset_action_ids);
      lines.push(h("p", { id: "retry-reset-line" }, h("strong", {}, "This will reset: "), `${names.join(", ")} (${names.length} stage${names.length === 1 ? "" : "s"}).`));
      graphView.setOutlined(p.reset_action_ids);
    } else {
      lines.push(h("p", { id: "retry-reset-line" }, h("strong", {}, "This will restart: "), `${p.target_stage_id} as a new attempt.`));
      graphView.setOutlined(p.target_action_id ? [p.target_action_id] : []);
    }
    lines.push(h("p", { id: "retry-running-line" }, running.length
      ? [h("strong", {}, "Running work that will be stopped: "), `${running.join(", ")}.`]
      : h("span", { class: "muted" }, "No running work will be stopped.")));
    preview.replaceChildren(...lines);
    confirm.disabled = false;
    (waiting ? $("retry-answer") : confirm).focus();
  } catch (err) {
    preview.replaceChildren();
    showError($("retry-error"), describeError(err, "Retry preview"));
  }
}

function wireDialogs() {
  if (!config.can_change) return;
  const retryDlg = $("retry-dialog");
  wireDialogClose(retryDlg);
  retryDlg.addEventListener("close", () => { state.retryOpen = false; graphView.setOutlined([]); });
  $("btn-retry").addEventListener("click", openRetry);
  $("retry-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const waiting = state.detail && state.detail.status === "waiting";
    const answer = $("retry-answer").value.trim();
    if (waiting && !answer) { showError($("retry-error"), "Write your answer first: the item is waiting for it."); $("retry-answer").focus(); return; }
    $("retry-confirm").disabled = true;
    try {
      await api(`${base}/retry`, { method: "POST", body: waiting ? { answer } : {} });
      retryDlg.close();
      refreshGraph(); refreshDetail();
    } catch (err) {
      showError($("retry-error"), describeError(err, "Retry"));
      $("retry-confirm").disabled = false;
    }
  });

  $("btn-start").addEventListener("click", async () => {
    const btn = $("btn-start");
    btn.disabled = true;
    showError($("head-error"), "");
    try {
      const detail = await api(`${base}/start`, { method: "POST" });
      state.detail = detail;
      renderHead(detail);
      addEvents(detail.events || []);
      refreshGraph(); refreshDetail();
    } catch (err) {
      showError($("head-error"), describeError(err, "Start"));
    } finally { btn.disabled = false; }
  });

  const cancelDlg = $("cancel-dialog");
  wireDialogClose(cancelDlg);
  $("btn-cancel").addEventListener("click", () => { showError($("cancel-error"), ""); cancelDlg.showModal(); });
  $("cancel-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api(`${base}/cancel`, { method: "POST" });
      cancelDlg.close();
      refreshGraph(); refreshDetail();
    } catch (err) { showError($("cancel-error"), describeError(err, "Cancel")); }
  });

  const editDlg = $("edit-dialog");
  wireDialogClose(editDlg);
  $("btn-edit").addEventListener("click", () => {
    const d = state.detail;
    if (!d) return;
    $("edit-title-input").value = d.title;
    $("edit-goal").value = d.goal;
    $("edit-criteria").value = (d.acceptance_criteria || []).join("\n");
    $("edit-workdir").value = d.work_dir || "";
    $("edit-revision").textContent = String(d.revision);
    editDlg.dataset.revision = String(d.revision);
    showError($("edit-error"), "");
    editDlg.showModal();
  });
  $("edit-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const d = state.detail;
    const body = { expected_revision: Number(editDlg.dataset.revision) };
    const title = $("edit-title-input").value.trim();
    const goal = $("edit-goal").value.trim();
    const criteria = $("edit-criteria").value.split("\n").map((s) => s.trim()).filter(Boolean);
    const workDir = $("edit-workdir").value.trim();
    if (title !== d.title) body.title = title;
    if (goal !== d.goal) body.goal = goal;
    if (JSON.stringify(criteria) !== JSON.stringify(d.acceptance_criteria || [])) body.acceptance_criteria = criteria;
    if (workDir !== (d.work_dir || "")) body.work_dir = workDir;
    if (Object.keys(body).length === 1) { showError($("edit-error"), "Nothing changed."); return; }
    try {
      await api(base, { method: "PATCH", body });
      editDlg.close();
      refreshGraph(); refreshDetail();
    } catch (err) { showError($("edit-error"), describeError(err, "Saving the contract")); }
  });
}

// --- keyboard ------------------------------------------------------------------------------------

document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && !document.querySelector("dialog[open]") && state.panelOpen) { closePanel(); }
});
$("fit").addEventListener("click", () => graphView.fit(true));
$("zoom-in").addEventListener("click", () => graphView.zoomBy(1.2));
$("zoom-out").addEventListener("click", () => graphView.zoomBy(1 / 1.2));
// the panel opening, closing or the window resizing changes the graph's room: refit unless the user panned
new ResizeObserver(coalesce(() => { if (!graphView.userMoved) graphView.fit(false); })).observe($("graph"));

// --- live ----------------------------------------------------------------------------------------

const stream = new LiveStream(`/ws/work-items/${encodeURIComponent(itemId)}/`, {
  onHello: (msg, { first }) => {
    if (msg.graph) drawGraph(msg.graph); else refreshGraph();
    if (!first) catchUpEvents();
    refreshDetail();
  },
  onEvent: (msg) => {
    addEvents([msg.event]);
    refreshGraph();
    refreshDetail();
  },
  onProgress: (msg) => {
    const pre = document.querySelector(`pre.live-response[data-run="${CSS.escape(msg.run_id)}"]`);
    if (pre && msg.response_tail) pre.textContent = msg.response_tail;
  },
});
window.__wcStream = stream;

wireDialogs();
startTicker(() => graphView.tick());
Promise.all([loadGraph(), loadDetail()]).then(() => stream.start());
