// The work item page's side panel: the selected stage's facts, brief, context, dependencies,
// guidance box and runs.
import {
  STATUS_LABEL, absTime, api, badge, describeError, formatCount, h, shortId, showError, timeEl,
} from "./common.js";
import { $, base, config, graphView, on, refreshAll, refreshers, state } from "./item-core.js";

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
      refreshAll();
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
  if (!action) { body.replaceChildren(h("p", { class: "muted" }, "Loading…")); refreshers.detail(); return; }
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

on("select", (node) => { if (state.panelOpen) renderPanel(node); });
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
