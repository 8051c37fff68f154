// The work item page's header: title, status and the facts line.
import { formatCount, h, setBadge, timeEl } from "./common.js";
import { $, on } from "./item-core.js";

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
}

on("detail", renderHead);
