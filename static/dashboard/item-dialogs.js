// The work item page's actions: Start, Retry (and answer), Edit contract and Cancel, with their dialogs.
import { api, describeError, h, shortId, showError, wireDialogClose } from "./common.js";
import { $, TERMINAL, base, config, emit, graphView, on, refreshAll, state } from "./item-core.js";

const RETRYABLE = new Set(["waiting", "needs_attention"]);
const dialogState = { retryOpen: false };

function renderButtons(d) {
  if (!config.can_change) return;
  $("btn-retry").hidden = !RETRYABLE.has(d.status);
  $("btn-retry").textContent = d.status === "waiting" ? "Answer & retry…" : "Retry…";
  $("btn-cancel").hidden = TERMINAL.has(d.status);
  $("btn-edit").hidden = TERMINAL.has(d.status);
  $("btn-start").hidden = d.status !== "draft";
}

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
  dialogState.retryOpen = true;
  dlg.showModal();
  try {
    const p = await api(`${base}/retry-preview`);
    if (!dialogState.retryOpen) return;
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
  retryDlg.addEventListener("close", () => { dialogState.retryOpen = false; graphView.setOutlined([]); });
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
      refreshAll();
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
      emit("detail", detail);
      emit("events", detail.events || []);
      refreshAll();
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
      refreshAll();
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
      refreshAll();
    } catch (err) { showError($("edit-error"), describeError(err, "Saving the contract")); }
  });
}

on("detail", renderButtons);
wireDialogs();
