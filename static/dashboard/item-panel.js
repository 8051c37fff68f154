// The work item page's side panel: the selected stage's facts, brief, context, dependencies,
// guidance box and every run of the stage with its start, end and duration (live while it runs).
import {
  STATUS_LABEL, absTime, api, badge, describeError, formatCount, formatDuration, h, runDurationMs, shortId,
  showError, timeEl,
} from "./common.js";
import { $, base, config, emit, graphView, on, refreshAll, refreshers, state } from "./item-core.js";
import { stoppingWords } from "./graph.js";
import { onTick, runsOfNode } from "./item-runs.js";
import { logSection, logView } from "./item-log.js";

// the run the timeline opened: its card stays marked across live re-renders until another opens
let markedRun = null;
// the run whose log the panel shows, when picked (a card's Log button, the timeline); else the newest
let pickedLogRun = null;

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

function durationEl(run) {
  const live = !run.ended_at;
  return h("span", { class: "run-duration", dataset: live ? { live: "", started: run.started_at } : {},
    title: live ? "running for (live)" : "from claim to end" }, formatDuration(runDurationMs(run)));
}

/** The stage's runs added up (they never overlap within a stage), live while one runs. */
function stageRunTime(runs) {
  const live = runs.find((r) => !r.ended_at);
  const done = runs.filter((r) => r.ended_at).reduce((t, r) => t + runDurationMs(r), 0);
  const dataset = live ? { liveTotal: "", started: live.started_at, done: String(done) } : {};
  return h("span", {}, h("span", { class: "run-total", dataset }, formatDuration(done + (live ? runDurationMs(live) : 0))),
    h("span", { class: "muted" }, ` in ${runs.length} run${runs.length === 1 ? "" : "s"}`));
}

/** Every attempt of the stage, newest first: the same list the graph's "×N" counts and the
 *  Timeline draws (item-stages.js): outcome, duration, worker, reason and what came after it. */
function attemptsSection(node, action) {
  const stage = graphView.stageOf(node.stage_id);
  const attempts = stage ? [...stage.attempts].reverse() : [];
  const total = attempts.length;
  const items = attempts.map((at, i) => (at.run
    ? runCard(at.run, total - i, at.run.action_id === action.id, at)
    : h("li", { class: "run attempt attempt-unrun", dataset: { status: at.status, id: at.key } },
      h("div", { class: "run-head" }, h("span", { class: "run-number" }, `#${total - i}`), badge(at.status),
        h("span", { class: "muted" }, "never ran")),
      at.cause ? h("p", { class: "attempt-cause muted" }, `Then ${at.cause}.`) : null)));
  return section(`Attempts (${total})`, total ? h("ol", { class: "runs attempts", reversed: true }, ...items)
    : h("p", { class: "muted" }, "No runs yet."));
}

// --- a run's long texts: not in the pushed state (its response and evidence; its summary and
// error cut to 300 characters); the panel reads every run of the stage it shows, whole, when it
// opens the stage and again when one of them ended or a new one began meanwhile
const runTexts = new Map(); // run id -> RunOut as read
const stageReads = new Map(); // stage id -> what its runs were when last read (see runsKey)
const runsKey = (runs) => runs.map((r) => `${r.id}:${r.ended_at || ""}`).sort().join(",");

function readStageRuns(node) {
  if (!node || !state.detail) return;
  const key = runsKey(runsOfNode(state.detail, node));
  if (!key || stageReads.get(node.stage_id) === key) return;
  stageReads.set(node.stage_id, key);
  api(`${base}/stages/${encodeURIComponent(node.stage_id)}/runs`).then((out) => {
    for (const r of out.runs) runTexts.set(r.id, r);
    const shown = state.panelOpen && graphView.selectedData();
    if (shown && shown.stage_id === node.stage_id) renderPanel(shown);
  }).catch(() => { stageReads.delete(node.stage_id); }); // the next open or update asks again
}

/** A run as the panel shows it: its pushed fields, with the texts read whole where they are current. */
function withTexts(run) {
  const t = runTexts.get(run.id);
  if (!t) return run;
  // an ended run no longer changes: what was read of it after its end is the whole of it
  if (run.ended_at && t.ended_at === run.ended_at) return { ...run, ...t, status: run.status };
  // a running one's counters and summary move on in the pushed state: only its texts come from the read
  return { ...run, response: run.response ?? t.response, evidence: run.evidence ?? t.evidence };
}

function runCard(pushed, number, ownAction, attempt = null) {
  const run = withTexts(pushed);
  const status = attempt ? attempt.status : run.status;
  const counters = [["tokens", run.total_tokens], ["tool calls", run.tool_count], ["LLM requests", run.llm_request_count], ["loops", run.loop_count]]
    .filter(([, v]) => v).map(([k, v]) => `${formatCount(v)} ${k}`).join(" · ");
  return h("li", { class: `run attempt${run.id === markedRun ? " marked" : ""}`, dataset: { status, id: run.id } },
    h("div", { class: "run-head" }, h("span", { class: "run-number" }, `#${number}`), badge(status), durationEl(run),
      h("span", { class: "mono muted run-id", title: run.id }, shortId(run.id)),
      h("button", { type: "button", class: "btn btn-small btn-quiet run-log-button", dataset: { run: run.id },
        "aria-pressed": String(run.id === logView.runId) }, run.id === logView.runId ? "Log shown" : "Log")),
    h("dl", { class: "run-times" },
      h("dt", {}, "Started"), h("dd", {}, timeEl(run.started_at)),
      h("dt", {}, "Ended"), h("dd", {}, run.ended_at ? timeEl(run.ended_at) : h("span", { class: "muted" }, "still running"))),
    h("div", { class: "run-worker muted" }, "worker ", h("span", { class: "mono", title: run.owner_boot_id }, shortId(run.owner_boot_id)),
      ` · epoch ${run.lease_epoch}`, ownAction ? null : h("span", { class: "tag run-earlier", title: "a run of an earlier action of this stage" }, "earlier action")),
    run.summary ? h("p", { class: "run-summary" }, run.summary) : null,
    run.waiting_reason ? h("p", { class: "run-waiting" }, h("strong", {}, "Question: "), run.waiting_reason) : null,
    run.review_decision ? h("p", { class: "run-review" }, h("strong", {}, "Review: "), run.review_decision === "changes_requested"
      ? `requested changes${attempt && attempt.target ? ` → ${graphView.nodes.get(attempt.target)?.data?.name || attempt.target}` : ""}` : "approved") : null,
    run.error ? h("p", { class: "run-error" }, h("strong", {}, "Error: "), run.error) : null,
    (run.evidence || []).length ? h("ul", { class: "evidence" }, ...run.evidence.map(evidenceItem)) : null,
    run.response ? h("details", { class: "run-response" }, h("summary", {}, "Response"), h("pre", { class: "live-response", dataset: { run: run.id } }, run.response)) : null,
    counters ? h("div", { class: "run-counters muted" }, counters) : null,
    attempt && attempt.cause ? h("p", { class: "attempt-cause muted" }, `Then ${attempt.cause}.`) : null);
}

/** A context entry (DOMAIN §12.9: {type, stage_id?, vp_id?, role?, summary, evidence,
 *  review_decision?, waiting_reason?, answer?, source_title?}) in words, never as raw JSON. */
function contextEntry(c) {
  if (typeof c === "string") return h("li", {}, c);
  if (!c || typeof c !== "object") return h("li", {}, String(c));
  const text = c.summary || c.text || c.content || "";
  const evidence = (c.evidence || []).map((e) => (typeof e === "string" ? e : e && (e.label || e.title || e.path || e.url))).filter(Boolean);
  const lines = [
    c.review_decision ? h("div", {}, h("strong", {}, "Review: "), c.review_decision === "changes_requested" ? "requested changes" : "approved") : null,
    c.waiting_reason ? h("div", {}, h("strong", {}, "Question: "), c.waiting_reason) : null,
    c.answer ? h("div", {}, h("strong", {}, "Answer: "), c.answer) : null,
    evidence.length ? h("div", { class: "muted" }, `Evidence: ${evidence.slice(0, 5).join(" · ")}${evidence.length > 5 ? ` (+${evidence.length - 5})` : ""}`) : null,
  ].filter(Boolean);
  return h("li", { class: "context-entry" },
    c.type ? h("span", { class: "tag" }, c.type) : null,
    c.stage_id && c.stage_id !== c.type ? h("span", { class: "muted" }, `${c.stage_id} `) : null,
    c.role ? h("span", { class: "muted" }, `${c.role} `) : null,
    c.source_title ? h("span", { class: "muted" }, `from “${c.source_title}” `) : null,
    text || (lines.length ? null : h("span", { class: "muted" }, "no summary")),
    ...lines);
}

/** The entries in order, each run of identical ones drawn once with its count (a stage retried 17
 *  times carries 17 alike entries of its failed attempts). */
function contextList(entries) {
  const out = [];
  let last = null;
  for (const c of entries) {
    const key = JSON.stringify(c);
    if (last && last.key === key) { last.count++; continue; }
    last = { key, c, count: 1 };
    out.push(last);
  }
  return out.map(({ c, count }) => {
    const li = contextEntry(c);
    if (count > 1) li.append(h("span", { class: "muted context-count" }, ` ×${count}`));
    return li;
  });
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
      // the revision held now (the panel is not drawn again on every update)
      await api(`${base}/guidance`, { method: "POST", body: { action_id: action.id, revision: state.detail.revision, guidance: area.value } });
      area.value = "";
      showError(err, "");
      refreshAll();
    } catch (ex) {
      showError(err, describeError(ex, "Guidance"));
    } finally { btn.disabled = false; }
  });
  return form;
}

// --- the instruction: not in the pushed state; read (with the brief and context) when the lead
// opens the stage, once per version of the action (its updated_at), never on a live update
const textsReading = new Set();
function readTexts(node) {
  const action = node && state.detail && state.detail.actions.find((a) => a.id === node.id);
  if (!action || action.texts_for === action.updated_at) return;
  const key = `${action.id}@${action.updated_at}`;
  if (textsReading.has(key)) return;
  textsReading.add(key);
  api(`${base}/actions/${encodeURIComponent(action.id)}/instruction`).then((t) => {
    const held = state.detail && state.detail.actions.find((a) => a.id === action.id);
    if (held) Object.assign(held, { instruction: t.instruction, brief: t.brief, context: t.context, texts_for: action.updated_at });
    if (state.panelOpen && graphView.selectedData()?.id === action.id) renderPanel(graphView.selectedData());
  }).catch((err) => {
    const pre = document.querySelector("#panel-body .instruction pre");
    if (pre) pre.textContent = describeError(err, "Reading the instruction");
  }).finally(() => textsReading.delete(key));
}
on("open", readTexts);
on("select", (node) => { if (state.panelOpen) readTexts(node); });

function instructionSection(action) {
  if (action.instruction === undefined) {
    return h("details", { class: "panel-section instruction" }, h("summary", {}, "Instruction"), h("pre", { class: "muted" }, "Loading…"));
  }
  return action.instruction ? h("details", { class: "panel-section instruction" }, h("summary", {}, "Instruction"), h("pre", {}, action.instruction)) : null;
}

/** What the panel draws for a node, in one string: it is drawn again only when this changed
 *  (a relayout, a select of the same stage or an update of another stage leave it as it is). */
function panelSignature(node, action) {
  const stage = graphView.stageOf(node.stage_id);
  const runs = runsOfNode(state.detail, node).map((r) => [r, runTexts.get(r.id)?.ended_at ?? null, !!runTexts.get(r.id)]);
  const d = state.detail;
  return JSON.stringify([node, action, runs, markedRun, pickedLogRun, d.status, d.current_action_id === action.id, config.can_change,
    stage ? stage.attempts.map((a) => [a.key, a.status, a.cause, a.end, a.reason]) : null]);
}
let drawn = null; // the signature on screen

function renderPanel(node) {
  const body = $("panel-body");
  if (!node || !state.detail) { drawn = null; body.replaceChildren(h("p", { class: "muted" }, "Select a stage in the graph.")); return; }
  const action0 = state.detail.actions.find((a) => a.id === node.id);
  const signature = action0 ? panelSignature(node, action0) : null;
  if (signature && signature === drawn && body.childElementCount) return;
  drawn = signature;
  readStageRuns(node);
  const action = action0;
  $("panel-title").replaceChildren(node.name, " ", badge(node.status));
  if (!action) { body.replaceChildren(h("p", { class: "muted" }, "Loading…")); refreshers.detail(); return; }
  const runs = runsOfNode(state.detail, node);
  const brief = action.brief || {};
  const facts = [["Stage", action.stage_id], ["Type", action.type], ["Attempt", `${action.attempt} of ${action.max_attempts}`],
    ["Workspace", action.workspace_mode], ["Sequence", String(action.sequence)], ["Action", shortId(action.id, 12)]];
  if (runs.length) facts.splice(3, 0, ["Run time", stageRunTime(runs)]);
  if (node.lease) facts.push(["Lease", `worker ${shortId(node.lease.owner_boot_id)} · epoch ${node.lease.lease_epoch} · expires ${absTime(node.lease.expires_at)}`]);
  if (node.stopping) facts.push(["Now", stoppingWords(state.graph).long]);
  else if (node.usual_duration_s) {
    facts.push(["Usually", `≤ ${formatDuration(node.usual_duration_s * 1000)}; longer than usual after ${formatDuration(node.overdue_after_s * 1000)}`]);
  }
  const content = [
    h("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    (node.blocked_by || []).length ? section("Blocked by", h("ul", { class: "blocked-list" }, ...node.blocked_by.map((b) => h("li", {}, b)))) : null,
    logSection(runs, pickedLogRun, runNumbers(node)),
    guidanceBox(action),
    section("Brief", h("dl", { class: "brief" },
      h("dt", {}, "Objective"), h("dd", {}, brief.objective || "—"),
      h("dt", {}, "Approach"), h("dd", {}, brief.approach || "—"),
      h("dt", {}, "Expected outcome"), h("dd", {}, brief.expected_outcome || "—"))),
    instructionSection(action),
    (action.context || []).length ? section(`Context (${action.context.length})`, h("ul", { class: "context" }, ...contextList(action.context))) : null,
    (action.depends_on_stage_ids || []).length ? section("Depends on", h("ul", { class: "deps" }, ...dependencyResults(action))) : null,
    attemptsSection(node, action),
  ];
  // keep a half-typed guidance across live re-renders
  const typed = document.getElementById("guidance-text")?.value;
  const open = [...body.querySelectorAll("details[open]")].map((el) => el.querySelector("summary")?.textContent);
  body.replaceChildren(...content.filter(Boolean));
  logView.placed();
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
  drawn = null;
  markedRun = null;
  pickedLogRun = null;
  logView.stop(); // the page receives no log while the panel is closed
  $("panel").hidden = true;
  $("workspace").classList.remove("with-panel");
  $("graph").focus({ preventScroll: true });
  emit("close");
}

$("panel-close").addEventListener("click", closePanel);
// a run card's Log button shows that run's log
$("panel-body").addEventListener("click", (e) => {
  const button = e.target.closest(".run-log-button");
  if (!button) return;
  pickedLogRun = button.dataset.run;
  renderPanel(graphView.selectedData());
  logView.lines.focus({ preventScroll: true });
});

/** Each run of the stage by the number its card shows (attempts in order, 1 first). */
function runNumbers(node) {
  const stage = graphView.stageOf(node.stage_id);
  const numbers = new Map();
  (stage ? stage.attempts : []).forEach((at, i) => { if (at.run) numbers.set(at.run.id, i + 1); });
  return numbers;
}

on("select", (node) => {
  if (markedRun && node && !runsOfNode(state.detail, node).some((r) => r.id === markedRun)) markedRun = null;
  if (pickedLogRun && node && !runsOfNode(state.detail, node).some((r) => r.id === pickedLogRun)) pickedLogRun = null;
  if (state.panelOpen) renderPanel(node);
});
// the timeline opens a run: select its stage, open the panel and bring the run's card into view
on("open-run", (run) => {
  const action = state.detail && state.detail.actions.find((a) => a.id === run.action_id);
  let node = graphView.nodeByActionId(run.action_id);
  if (!node && action) node = (state.graph?.nodes || []).find((n) => n.stage_id === action.stage_id) || null;
  if (!node) return;
  markedRun = run.id;
  pickedLogRun = run.id;
  graphView.select(graphView.keyOf(node), { open: true, scroll: !$("graph").hidden });
  if (!state.panelOpen) openPanel(node);
  const card = $("panel-body").querySelector(`li.run[data-id="${CSS.escape(run.id)}"]`);
  if (card) {
    card.scrollIntoView({ block: "start" });
    card.classList.remove("flash");
    void card.offsetWidth; // restart the flash
    card.classList.add("flash");
  }
});
// a running run's duration grows with the page's clock
onTick((now) => {
  for (const el of document.querySelectorAll("#panel-body .run-duration[data-live], #panel-body .run-total[data-live-total]")) {
    const ms = runDurationMs({ started_at: el.dataset.started }, now) + Number(el.dataset.done || 0);
    const text = formatDuration(ms);
    if (el.textContent !== text) el.textContent = text;
  }
});
on("open", openPanel);
on("graph", () => { if (state.panelOpen) renderPanel(graphView.selectedData()); });
on("detail", () => { if (state.panelOpen) renderPanel(graphView.selectedData()); });
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && !document.querySelector("dialog[open]") && state.panelOpen) { closePanel(); }
});
// a run's response grows live while the panel shows it
on("progress", (msg) => {
  const pre = document.querySelector(`pre.live-response[data-run="${CSS.escape(msg.run_id)}"]`);
  if (pre && msg.response_tail) pre.textContent = msg.response_tail;
});
