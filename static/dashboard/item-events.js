// The work item page's list of events, newest first. Each row reads as a sentence a lead
// understands ("Triage planned 4 stages", "Retried by lead: the runner is fixed", "Review asked for
// changes → Implement"), from what its event really carries (DOMAIN §11): the stage from the event's
// action, the stage a changes request sends the work back to from its target, worker ids short
// with the full id on hover. The stored type (`action.completed`, …) is on hover, for whoever
// reads the API beside the page; the line under the sentence says the details (an error, a reason).
import { h, shortId, timeEl } from "./common.js";
import { $, on, state } from "./item-core.js";

const WORKER_ACTORS = /^(worker|recovery):(.+)$/;

/** A worker's boot id: 8 characters, the full id on hover (never a wrapping UUID). */
function workerId(id) {
  return h("span", { class: "mono worker-id", title: id || "" }, shortId(String(id || "")));
}

function actorEl(actor) {
  const m = WORKER_ACTORS.exec(actor || "");
  if (!m) return h("span", { class: "event-actor" }, actor || "");
  return h("span", { class: "event-actor", title: actor }, `${m[1]}:`, workerId(m[2]));
}

/** Who did it, as a person reads it: "lead", "root (admin)", "a worker", "recovery". */
function actorName(actor) {
  const [kind, ...rest] = String(actor || "").split(":");
  const name = rest.join(":");
  if (kind === "user") return name || "someone";
  if (kind === "admin") return `${name || "someone"} (admin)`;
  if (kind === "worker") return "its worker";
  if (kind === "recovery") return "recovery";
  return actor ? String(actor) : "the system";
}

/** A stage as the page names it: the workflow's name for it, else its id in words ("fix_tests" → "Fix tests"). */
export function stageLabel(stageId) {
  if (!stageId) return "";
  const stages = state.detail?.workflow_snapshot?.stages || [];
  const stage = stages.find((s) => (s.id || s.type) === stageId);
  const text = stage?.name || String(stageId).replace(/[_-]+/g, " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

const quote = (text, max = 160) => {
  const t = String(text || "").trim();
  return t.length > max ? `“${t.slice(0, max - 1)}…”` : `“${t}”`;
};
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
const FIELD_WORDS = {
  title: "title", goal: "goal", acceptance_criteria: "acceptance criteria", work_dir: "work directory",
  instruction: "instruction", brief: "brief", max_attempts: "attempt limit", workspace_mode: "workspace",
};
const fields = (list) => (list || []).map((f) => FIELD_WORDS[f] || String(f).replace(/_/g, " ")).join(", ");

/** Where a changes request sends the work: a graph review's event names its target stage; a
 *  linear review's action.completed names the next action's type, and that next action (the one
 *  appended right after the review) its stage — `exact` is false until the page knows it. */
export function returnTarget(ev) {
  const d = ev.data || {};
  if (ev.type === "review.changes_requested") return { stage: d.target_stage_id || "", exact: true };
  if (ev.type !== "action.completed" || d.review_decision !== "changes_requested") return { stage: "", exact: true };
  const actions = state.detail ? state.detail.actions : [];
  const review = actions.find((a) => a.id === ev.action_id);
  const next = review && actions.find((a) => a.sequence === review.sequence + 1);
  return next ? { stage: next.stage_id, exact: true } : { stage: d.next_action_type || "", exact: false };
}

function targetEl(stage) {
  return h("span", { class: "event-target", title: `back to stage ${stage}` }, ` → ${stageLabel(stage)}`);
}

/** The stage's attempt (1, 2, …) a run.claimed event started; null while the page's history
 *  does not hold that run yet (the row is drawn again when it does). */
function attemptNumber(ev) {
  const s = state.history && state.history.stages.get(stageOf(ev));
  const i = s ? s.attempts.findIndex((a) => a.key === ev.run_id) : -1;
  return i < 0 ? null : i + 1;
}

function stageOf(ev) {
  if (!ev.action_id || !state.detail) return "";
  const a = state.detail.actions.find((x) => x.id === ev.action_id);
  return a ? a.stage_id : "";
}

/**
 * The sentence of an event and the line of details under it: {text: [nodes], detail: [nodes]}.
 * `subject` is the stage's name (a span the tests and the eye can find), or "A stage" while the
 * page does not know the event's action yet (a plan just created it: the row is redrawn then).
 */
function eventWords(ev, stage) {
  const d = ev.data || {};
  const who = actorName(ev.actor);
  const subject = h("span", { class: "event-stage", dataset: { stage } }, stage ? stageLabel(stage) : "A stage");
  const S = (...rest) => [subject, ...rest];
  const reason = d.reason ? [quote(d.reason)] : [];
  switch (ev.type) {
    case "work_item.created": return { text: [d.status === "draft" ? `Created as a draft by ${who}` : `Created by ${who}`] };
    case "work_item.started": return { text: [`Started by ${who}`] };
    case "work_item.updated":
      return { text: [`Contract edited by ${who}: ${fields(d.changed_fields) || "no field"}`], detail: [`now revision ${d.revision}`] };
    case "workflow.retriaged":
      return { text: [`${fields(d.changed_fields) || "Contract"} changed by ${who}: the item starts again from triage`.replace(/^./, (c) => c.toUpperCase())],
        detail: [`now revision ${d.revision}`] };
    case "work_item.cancelled": return { text: [`Cancelled by ${who}${d.reason ? ":" : ""}`], detail: reason };
    case "work_item.retried":
      return { text: [`Retried by ${who}${d.reason ? `: ${quote(d.reason, 80)}` : ""}`],
        detail: [d.target_stage_id ? `${stageLabel(d.target_stage_id)} starts again` : stage ? `${stageLabel(stage)} runs again` : ""] };
    case "action.guidance_added": return { text: S(` got guidance from ${who}`), detail: [quote(d.guidance, 80)] };
    case "run.claimed": {
      // which attempt of the stage this run is, numbered as the panel and the Timeline number them
      // (the lease epoch counts the claims of one action: a linear retry starts a new action at 1)
      const n = attemptNumber(ev);
      return { text: S(" started on worker ", workerId(d.owner_boot_id)),
        detail: n > 1 ? [h("span", { title: `lease epoch ${d.lease_epoch}` }, `attempt ${n} of this stage`)] : [] };
    }
    case "action.waiting": return { text: S(" asks for an answer"), detail: d.reason ? [quote(d.reason)] : [] };
    case "action.retry_scheduled":
      return { text: S(` failed on attempt ${d.attempt} of ${d.max_attempts}; it runs again`), detail: d.error ? [quote(d.error)] : [] };
    case "action.retry_exhausted":
      return { text: S(` failed on its last attempt (${d.attempt} of ${d.max_attempts})`), detail: d.error ? [quote(d.error)] : [] };
    case "action.failed": return { text: S(" failed"), detail: d.error ? [quote(d.error)] : [] };
    case "action.completed": {
      if (d.review_decision === "changes_requested") {
        const target = returnTarget(ev);
        return { text: S(" asked for changes", target.stage ? targetEl(target.stage) : "") };
      }
      if (d.review_decision === "approved") return { text: S(" approved the work") };
      if (d.next_action_count) return { text: S(` planned ${plural(d.next_action_count, "stage")}`) };
      return { text: S(" completed") };
    }
    case "review.changes_requested": return { text: S(" asked for changes", targetEl(d.target_stage_id || "")) };
    case "work_item.completed": return { text: ["Done"], detail: d.summary ? [quote(d.summary)] : [] };
    case "run.interrupted":
      return { text: S(d.retryable ? " was interrupted; it runs again" : " was interrupted and needs a retry"), detail: reason };
    case "run.stale_recovered":
      return { text: S(d.status === "cancelled" ? ": a run left behind was closed (the item was cancelled)"
        : ": a run left behind was closed (a newer attempt replaced it)") };
    case "run.released":
      return { text: S(`'s run was released by ${who}; ${d.retryable ? "it runs again" : "it needs a retry"}`), detail: reason };
    case "action.reset": return { text: S(` was reset by ${who} (it was ${String(d.previous_status || "").replace(/_/g, " ")})`), detail: reason };
    case "action.marked_failed": return { text: S(` was marked failed by ${who}`), detail: reason };
    case "action.edited": return { text: S(`: ${fields(d.changed_fields)} edited by ${who}`), detail: reason };
    default: return { text: [String(ev.type).replace(/[._]/g, " ")] };
  }
}

function eventStatus(ev) {
  const type = ev.type;
  if (type === "action.completed" && ev.data?.review_decision === "changes_requested") return "waiting";
  if (/failed|needs_attention|stale|interrupted|exhausted/.test(type)) return "failed";
  if (/waiting|changes_requested/.test(type)) return "waiting";
  if (/claimed|started/.test(type)) return "running";
  if (/completed|approved|done/.test(type)) return "completed";
  if (/cancel|supersed/.test(type)) return "cancelled";
  return "ready";
}

function eventRow(ev) {
  const stage = stageOf(ev);
  const target = returnTarget(ev);
  const status = eventStatus(ev);
  const dataset = { id: String(ev.id), type: ev.type, status, stage };
  // an action the page does not know yet (a plan just added it): the row is redrawn with the detail
  if (ev.action_id && !stage) dataset.pendingStage = ev.action_id;
  if (!target.exact) dataset.pendingTarget = "";
  if (ev.type === "run.claimed" && ev.run_id && attemptNumber(ev) === null) dataset.pendingAttempt = "";
  const words = eventWords(ev, stage);
  const detail = (words.detail || []).filter((part) => part !== "" && part != null);
  return h("li", { class: "event", dataset },
    h("span", { class: "dot", dataset: { status }, "aria-hidden": "true" }),
    h("div", { class: "event-body" },
      h("div", { class: "event-line" }, h("span", { class: "event-text", title: ev.type }, ...words.text)),
      detail.length ? h("div", { class: "event-detail" }, ...detail) : null,
      h("div", { class: "event-meta" }, actorEl(ev.actor), " · ", timeEl(ev.created_at), ` · #${ev.id}`)));
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

/** Rows drawn before the detail knew their actions (their stage, the stage a changes request
 *  returns to) are redrawn as soon as it does. */
function fillPending() {
  for (const li of $("events").querySelectorAll("li.event[data-pending-stage], li.event[data-pending-target], li.event[data-pending-attempt]")) {
    const ev = state.events.get(Number(li.dataset.id));
    if (!ev) continue;
    if (li.dataset.pendingStage !== undefined && !stageOf(ev)) continue;
    if (li.dataset.pendingTarget !== undefined && !returnTarget(ev).exact) continue;
    if (li.dataset.pendingAttempt !== undefined && attemptNumber(ev) === null) continue;
    li.replaceWith(eventRow(ev));
  }
}

on("events", addEvents);
on("detail", fillPending);
