// The work item page's timeline of events, newest first.
import { h, shortId, timeEl } from "./common.js";
import { $, on, state } from "./item-core.js";

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

on("events", addEvents);
