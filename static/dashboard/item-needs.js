// The work item page's "needs me" banner, between the header and the graph: every stage that waits
// for the lead's answer (its question, and how long it has waited, live) or that failed (and why),
// with the button that answers or retries. A waiting linear item shows it too (the action that
// asked is `completed` by DOMAIN §7.4; its node is drawn waiting, item-stages.js).
import { formatDuration, h } from "./common.js";
import { $, config, graphView, on, state } from "./item-core.js";

const NEEDS = new Set(["waiting", "needs_attention"]);

function lastEndedRun(d, actionId) {
  let best = null;
  for (const r of d.runs || []) {
    if (r.action_id !== actionId || r.status === "running") continue;
    const key = r.ended_at || r.started_at || "";
    if (!best || key > (best.ended_at || best.started_at || "")) best = r;
  }
  return best;
}

/** What the item waits for: [{kind: "waiting"|"failed", action, run}] by sequence (empty when nothing). */
export function blockedStages(d) {
  if (!d || !NEEDS.has(d.status)) return [];
  const out = [];
  if (d.execution_mode === "graph") {
    const canonical = new Map();
    for (const a of d.actions) {
      if (a.status === "superseded" || a.status === "cancelled") continue;
      const c = canonical.get(a.stage_id);
      if (!c || a.sequence > c.sequence) canonical.set(a.stage_id, a);
    }
    for (const a of [...canonical.values()].sort((x, y) => x.sequence - y.sequence)) {
      if (a.status === "waiting" || a.status === "failed") out.push({ kind: a.status, action: a, run: lastEndedRun(d, a.id) });
    }
  }
  if (!out.length) {
    const a = d.actions.find((x) => x.id === d.current_action_id);
    if (a) out.push({ kind: d.status === "waiting" ? "waiting" : "failed", action: a, run: lastEndedRun(d, a.id) });
  }
  return out;
}

export function stageName(action) {
  return graphView.nodeByActionId(action.id)?.name || action.stage_id;
}

function sinceText(kind, iso, now = Date.now()) {
  const ms = Math.max(0, now - Date.parse(iso));
  return kind === "waiting" ? `waiting ${formatDuration(ms)}` : `failed ${formatDuration(ms)} ago`;
}

function stageRow(b) {
  const waiting = b.kind === "waiting";
  const text = waiting ? (b.run?.waiting_reason || "") : (b.run?.error || (b.run ? `the run ended ${b.run.status}` : ""));
  const since = b.run?.ended_at;
  return h("li", { class: "needs-stage", dataset: { kind: b.kind, stage: b.action.stage_id, actionId: b.action.id, status: waiting ? "waiting" : "failed" } },
    h("span", { class: "needs-stage-name" }, stageName(b.action)),
    h("span", { class: "needs-verb" }, waiting ? " asks: " : " failed: "),
    text ? h("q", { class: "needs-text" }, text) : h("span", { class: "muted" }, waiting ? "(no question given)" : "(no error given)"),
    since ? h("span", { class: "needs-since", dataset: { since, kind: b.kind }, title: new Date(since).toLocaleString() },
      sinceText(b.kind, since)) : null);
}

let shownKey = "";

function render() {
  const d = state.detail;
  const banner = $("needs-banner");
  const blocked = blockedStages(d);
  const key = JSON.stringify([d?.status, config.can_change, blocked.map((b) => [b.kind, b.action.id, b.run?.id, stageName(b.action)])]);
  if (key === shownKey) return;
  shownKey = key;
  if (!blocked.length) { banner.hidden = true; banner.replaceChildren(); return; }
  const waiting = blocked.filter((b) => b.kind === "waiting");
  const failed = blocked.filter((b) => b.kind === "failed");
  const status = d.status === "waiting" ? "waiting" : "needs_attention";
  const names = (list) => list.map((b) => stageName(b.action)).join(", ");
  const title = status === "waiting"
    ? (waiting.length > 1 ? `Waiting for your answers — ${waiting.length} stages ask` : `Waiting for your answer — ${names(waiting)} asks`)
    : `Needs attention — ${names(failed) || names(blocked)} failed`;
  const button = config.can_change
    ? h("button", { type: "button", class: "btn btn-primary needs-action", id: "needs-answer",
      onclick: () => $("btn-retry")?.click() }, status === "waiting" ? (waiting.length > 1 ? "Answer all…" : "Answer…") : "Retry…")
    : null;
  banner.dataset.status = status;
  banner.setAttribute("aria-label", title);
  banner.replaceChildren(
    h("span", { class: "needs-icon", "aria-hidden": "true" }, status === "waiting" ? "?" : "!"),
    h("div", { class: "needs-body" },
      h("h2", { class: "needs-title", id: "needs-title" }, title),
      h("ul", { class: "needs-list" }, ...blocked.map(stageRow))),
    ...(button ? [button] : [])); // a viewer gets no button (replaceChildren would write "null")
  banner.hidden = false;
}

function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll("#needs-banner .needs-since[data-since]")) {
    const text = sinceText(el.dataset.kind, el.dataset.since, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

on("detail", render);
on("graph", () => { if (state.detail) render(); });
on("tick", tick);
