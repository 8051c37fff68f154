// The Logs page: search every run's log (GET /api/v1/logs/search). Each result names the item, the
// stage and the run, shows the matching lines with the lines around them, and opens the item's page
// at that run's log with the text found (#run=<id>&seq=<chunk>&find=<text>). The query lives in the address
// (?q=…&status=…&since=…), so a search can be shared and survives a reload.
import { api, badge, describeError, h, installSlashFocus, shortId, showError, startTicker, timeEl } from "./common.js";

const form = document.getElementById("log-search");
const q = document.getElementById("log-q");
const status = document.getElementById("log-status");
const since = document.getElementById("log-since");
const results = document.getElementById("log-results");
const summary = document.getElementById("logs-summary");
const error = document.getElementById("logs-error");
let asked = 0; // the newest search: an older answer arriving late is dropped

function marked(line, text) {
  const at = line.toLowerCase().indexOf(text.toLowerCase());
  if (at < 0) return [line];
  return [line.slice(0, at), h("mark", {}, line.slice(at, at + text.length)), line.slice(at + text.length)];
}

function matchBlock(m, text) {
  return h("li", { class: "log-match", dataset: { stream: m.stream } },
    h("div", { class: "log-match-meta muted small" }, m.stream === "stdout" ? "" : `${m.stream} · `, timeEl(m.at), ` · chunk ${m.seq}`),
    h("pre", { class: "log-match-lines mono" },
      ...m.before.map((l) => h("span", { class: "log-context" }, `${l}\n`)),
      h("span", { class: "log-hit" }, ...marked(m.line, text), "\n"),
      ...m.after.map((l) => h("span", { class: "log-context" }, `${l}\n`))));
}

function resultCard(run, text) {
  const first = run.matches[0];
  const href = `/work-items/${encodeURIComponent(run.work_item.id)}/#run=${encodeURIComponent(run.run_id)}`
    + `${first ? `&seq=${first.seq}` : ""}&find=${encodeURIComponent(text)}`;
  return h("li", { class: "log-result", dataset: { run: run.run_id } },
    h("div", { class: "log-result-head" },
      h("a", { href, class: "log-result-title" }, run.work_item.title),
      badge(run.work_item.status),
      h("span", { class: "muted" }, `stage ${run.stage_id || "?"}`),
      h("span", { class: "mono muted", title: run.run_id }, `run ${shortId(run.run_id)}`),
      badge(run.run_status),
      h("span", { class: "muted small" }, "started ", timeEl(run.started_at))),
    h("ol", { class: "log-matches" }, ...run.matches.map((m) => matchBlock(m, text))));
}

async function search(push = true) {
  const text = q.value.trim();
  showError(error, "");
  if (text.length < 3) {
    results.replaceChildren();
    summary.textContent = text ? "Type at least three characters." : "Find the runs that printed a text: every run's log, newest match first.";
    return;
  }
  const params = new URLSearchParams({ q: text });
  if (status.value) params.set("status", status.value);
  if (since.value) params.set("since", new Date(Date.now() - Number(since.value) * 1000).toISOString());
  if (push) {
    const shown = new URLSearchParams({ q: text });
    if (status.value) shown.set("status", status.value);
    if (since.value) shown.set("since", since.value);
    history.replaceState(null, "", `?${shown}`);
  }
  const mine = ++asked;
  summary.textContent = "Searching…";
  try {
    const out = await api(`/logs/search?${params}`);
    if (mine !== asked) return;
    results.replaceChildren(...out.runs.map((r) => resultCard(r, text)));
    const n = out.runs.length;
    summary.textContent = n ? `${n}${out.truncated ? "+" : ""} run${n === 1 ? "" : "s"} printed “${text}”${out.truncated ? " (the newest shown)" : ""}.`
      : `No run printed “${text}”.`;
  } catch (err) {
    if (mine !== asked) return;
    summary.textContent = "";
    showError(error, describeError(err, "Search"));
  }
}

form.addEventListener("submit", (e) => { e.preventDefault(); search(); });
status.addEventListener("change", () => search());
since.addEventListener("change", () => search());
installSlashFocus(q);
startTicker(); // "started 9 s ago" keeps true while the results stay on screen

const start = new URLSearchParams(location.search);
q.value = start.get("q") || "";
status.value = start.get("status") || "";
since.value = start.get("since") || "";
if (q.value) search(false); else q.focus();
