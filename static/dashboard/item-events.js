// The work item page's list of events, newest first: each row reads what its event really
// carries (DOMAIN §11): the stage chip from the event's action, the "→ stage" of a changes
// request from its target, worker ids short with the full id on hover.
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

function eventSummary(ev) {
  const d = ev.data || {};
  const parts = [];
  switch (ev.type) {
    case "run.claimed": parts.push(["by worker ", workerId(d.owner_boot_id), ` epoch ${d.lease_epoch}`]); break;
    case "work_item.retried": if (d.target_stage_id) parts.push(`from ${d.target_stage_id}`); break;
    case "review.changes_requested": break; // the arrow says it
    case "action.guidance_added": parts.push(`“${String(d.guidance || "").slice(0, 80)}”`); break;
    default:
      for (const [k, v] of Object.entries(d)) {
        if (v === null || v === undefined || v === "" || typeof v === "object") continue;
        parts.push(`${k.replace(/_/g, " ")} ${String(v).slice(0, 60)}`);
        if (parts.length >= 3) break;
      }
  }
  return parts.flatMap((p, i) => (i ? [" · "] : []).concat(p));
}

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
  return h("span", { class: "event-target", title: `back to stage ${stage}` }, ` → ${stage}`);
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

function stageChip(stage) {
  return h("span", { class: "event-stage", title: `stage ${stage}` }, stage);
}

function eventRow(ev) {
  const stage = stageOf(ev);
  const target = returnTarget(ev);
  const dataset = { id: String(ev.id), type: ev.type, status: eventStatus(ev.type) };
  // an action the page does not know yet (a plan just added it): the chip follows with the detail
  if (ev.action_id && !stage) dataset.pendingStage = ev.action_id;
  if (!target.exact) dataset.pendingTarget = "";
  return h("li", { class: "event", dataset },
    h("span", { class: "dot", dataset: { status: eventStatus(ev.type) }, "aria-hidden": "true" }),
    h("div", { class: "event-body" },
      h("div", { class: "event-line" },
        h("span", { class: "event-type" }, ev.type, target.stage ? targetEl(target.stage) : null),
        stage ? stageChip(stage) : null),
      h("div", { class: "event-detail" }, eventSummary(ev)),
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

/** Rows drawn before the detail knew their actions get their stage chip and their "→ stage" as
 *  soon as it does. */
function fillPendingStages() {
  for (const li of $("events").querySelectorAll("li.event[data-pending-stage]")) {
    const ev = state.events.get(Number(li.dataset.id));
    const stage = ev ? stageOf(ev) : "";
    if (!stage) continue;
    delete li.dataset.pendingStage;
    li.querySelector(".event-line").append(stageChip(stage));
  }
  for (const li of $("events").querySelectorAll("li.event[data-pending-target]")) {
    const ev = state.events.get(Number(li.dataset.id));
    const target = ev ? returnTarget(ev) : { exact: false };
    if (!target.exact) continue;
    delete li.dataset.pendingTarget;
    const type = li.querySelector(".event-type");
    type.querySelector(".event-target")?.remove();
    if (target.stage) type.append(targetEl(target.stage));
  }
}

on("events", addEvents);
on("detail", fillPendingStages);
