// The work item page's header: title, status, the facts line and where the time went (elapsed,
// time running, time waiting on a person; live while the item is open).
import { formatCount, formatDuration, h, setBadge, timeEl } from "./common.js";
import { $, on, state } from "./item-core.js";
import { itemTimes, onTick } from "./item-runs.js";

const MODE_WORDS = { graph: "parallel stages", linear: "stages in order" };

function timeItem(key, label, title) {
  return h("div", { class: "meta-item meta-time", dataset: { time: key }, title },
    h("dt", {}, label), h("dd", {}, ""));
}

function renderTimes(d, now = Date.now()) {
  const t = itemTimes(d, now);
  const set = (key, text, title) => {
    const el = $("item-meta").querySelector(`[data-time="${key}"]`);
    if (!el) return;
    const dd = el.querySelector("dd");
    if (dd.textContent !== text) dd.textContent = text;
    if (title && el.title !== title) el.title = title;
  };
  set("elapsed", formatDuration(t.elapsed),
    t.ended ? "From the item's creation to its end" : "From the item's creation to now");
  const overlap = t.runningSum > t.running
    ? `; ${formatDuration(t.runningSum)} if the runs that overlapped were added up` : "";
  set("running", formatDuration(t.running),
    `Time with at least one run going (${t.runs} run${t.runs === 1 ? "" : "s"}): overlapping runs counted once${overlap}`);
  set("waiting", formatDuration(t.waiting),
    `Time the item waited on a person: from a question or a failure to the answer, retry or reset that resumed it${t.waitingOpen ? " (still waiting)" : ""}`);
  return t;
}

function renderHead(d) {
  $("item-title").textContent = d.title;
  document.title = `${d.title} · Work Center`;
  setBadge($("item-status"), d.status);
  const stats = d.execution_stats || {};
  const plural = (n, word) => `${formatCount(n)} ${word}${Number(n) === 1 ? "" : "s"}`;
  // compact: one line of times, one of facts (it still fits at 800 px)
  const meta = [
    ["Usage", `${plural(d.runs.length, "run")} · ${plural(stats.total_tokens || 0, "token")} · ${plural(stats.tool_count || 0, "tool call")}`],
    // the mode in words (the stored names, graph / linear and ai planning, are on hover)
    ["Workflow", h("span", { title: `execution_mode ${d.execution_mode} · planning_mode ${d.planning_mode || "static"}` },
      [d.workflow_template, d.work_item_type, MODE_WORDS[d.execution_mode] || d.execution_mode,
        d.planning_mode === "ai" ? "planned by triage" : null].filter(Boolean).join(" · "))],
    ["Revision", String(d.revision)],
    ["Workspace", d.workspace_key || d.work_dir || "—"],
    ["Updated", timeEl(d.updated_at)],
  ];
  $("item-meta").replaceChildren(
    timeItem("elapsed", "Elapsed"), timeItem("running", "Running"), timeItem("waiting", "Waiting on a person"),
    ...meta.map(([k, v]) => h("div", { class: "meta-item" }, h("dt", {}, k), h("dd", {}, v))));
  const t = renderTimes(d);
  live = !t.ended || t.live || t.waitingOpen;
}

let live = false;
onTick((now) => { if (live && state.detail) renderTimes(state.detail, now); });

on("detail", renderHead);
