// The work item page's actions: Start, Retry (and answer), Edit contract and Cancel, with their
// dialogs. An open dialog never goes stale (UI.md): it follows the hub ("event", "detail"),
// recomputes what it would do and says what changed before the lead confirms. What the lead typed
// is never overwritten: answers are kept per question across re-renders, and the Edit dialog
// loads new values only when asked to, and only into the fields the lead has not edited.
// Retry and Cancel send the state token of the preview they show (`expected_state_token`): if the
// item moved since (a claim, a failure, a retry elsewhere) the server refuses (state_changed) and
// says what happened; the dialog shows it and recomputes.
import { STATUS_LABEL, api, describeError, formatDuration, h, shortId, showError, wireDialogClose } from "./common.js";
import { $, TERMINAL, base, config, emit, graphView, itemId, on, refreshAll, state } from "./item-core.js";

const RETRYABLE = new Set(["waiting", "needs_attention"]);
const PREVIEW_IDS = 16; // the preview's action_id query takes at most this many stages
const MAX_ANSWER = 8000;

// each button only for whom the API takes it (config.may: dashboard/views.py, the routes' own
// permission checks) and only in a state the API takes it in
function renderButtons(d) {
  if (!config.can_change) return;
  const may = config.may || {};
  $("btn-retry").hidden = !may.retry || !RETRYABLE.has(d.status);
  $("btn-retry").textContent = d.status === "waiting" ? "Answer & retry…" : "Retry…";
  $("btn-cancel").hidden = !may.cancel || TERMINAL.has(d.status);
  $("btn-edit").hidden = !may.edit || TERMINAL.has(d.status);
  $("btn-start").hidden = !may.start || d.status !== "draft";
}

// --- shared ------------------------------------------------------------------------------------

function stageName(actionId, fallback) {
  return graphView.nodeByActionId(actionId)?.name || state.detail?.actions.find((a) => a.id === actionId)?.stage_id
    || fallback || shortId(actionId);
}

const statusWord = (s) => STATUS_LABEL[s] || s;
const actorName = (actor) => String(actor || "someone").replace(/^user:/, "");

function lastKnownEventId() {
  let last = 0;
  for (const id of state.events.keys()) if (id > last) last = id;
  for (const e of state.detail?.events || []) if (e.id > last) last = e.id;
  return last;
}

/** Events after `afterId` of the given types, from the detail and the live ones seen, oldest first. */
function eventsAfter(afterId, types, seen) {
  const byId = new Map();
  for (const e of [...(state.detail?.events || []), ...seen]) if (e.id > afterId && types.includes(e.type)) byId.set(e.id, e);
  return [...byId.values()].sort((a, b) => a.id - b.id);
}

function actorsOf(events) {
  return [...new Set(events.map((e) => actorName(e.actor)))].join(", ");
}

function setNotice(el, text) {
  el.querySelector(".notice-text").textContent = text || "";
  el.hidden = !text;
}

/** A refusal for a state that moved since the dialog's preview (409 state_changed), in words. */
function refusalText(err, what) {
  if (err.code !== "state_changed") return describeError(err, what);
  const msg = (err.message || "the item changed").replace(/\.$/, "");
  return `${what} refused: ${msg}; nothing was done. The dialog now shows the item as it is: confirm again if you still want to.`;
}

// --- retry and answer ----------------------------------------------------------------------------

const retry = { open: false, seq: 0, preview: null, retryable: false, since: 0, seen: [], timer: null, sending: false };
const typedAnswers = new Map(); // "<action id>:<run id>" (one question) -> what the lead typed
let answerSeq = 0;

const questionKey = (w) => `${w.action_id}:${w.run_id || ""}`;

async function fetchPreview() {
  const p = await api(`${base}/retry-preview`);
  const waiting = p.waiting_stages || [];
  // a waiting graph item: the retry answers every waiting stage at once; the preview of exactly that
  const currentWaits = waiting.some((w) => w.action_id === p.target_action_id);
  if (p.mode !== "graph" || !currentWaits || waiting.length < 2 || waiting.length > PREVIEW_IDS) return p;
  const q = waiting.map((w) => `action_id=${encodeURIComponent(w.action_id)}`).join("&");
  try {
    return await api(`${base}/retry-preview?${q}`);
  } catch (err) {
    if (err.code === "invalid_input") return p; // a stage stopped waiting meanwhile: the next update catches up
    throw err;
  }
}

/** What the retry resets: the server's answer, or (too many stages for one query) the union. */
function resetIds(p) {
  const ids = new Set(p.reset_action_ids);
  const waiting = p.waiting_stages || [];
  if (waiting.some((w) => w.action_id === p.target_action_id) && waiting.length > PREVIEW_IDS) {
    for (const w of waiting) for (const id of w.reset_action_ids) ids.add(id);
  }
  return [...ids];
}

function renderPreview(p) {
  const d = state.detail;
  const running = p.superseded_run_ids.map((rid) => {
    const run = d?.runs.find((r) => r.id === rid);
    return `${run ? stageName(run.action_id, "a stage") : "a stage"} (worker ${shortId(run?.owner_boot_id)})`;
  });
  const lines = [];
  if (p.mode === "graph") {
    const ids = resetIds(p);
    const names = ids.map((id) => stageName(id));
    lines.push(h("p", { id: "retry-reset-line" }, h("strong", {}, "This will reset: "),
      `${names.join(", ")} (${names.length} stage${names.length === 1 ? "" : "s"}).`));
    graphView.setOutlined(ids);
  } else {
    lines.push(h("p", { id: "retry-reset-line" }, h("strong", {}, "This will restart: "), `${p.target_stage_id} as a new attempt.`));
    graphView.setOutlined(p.target_action_id ? [p.target_action_id] : []);
  }
  lines.push(h("p", { id: "retry-running-line" }, running.length
    ? [h("strong", {}, "Running work that will be stopped: "), `${running.join(", ")}.`]
    : h("span", { class: "muted" }, "No running work will be stopped.")));
  $("retry-preview").replaceChildren(...lines);
}

function sinceText(iso) {
  return iso ? `waiting ${formatDuration(Date.now() - Date.parse(iso))}` : "";
}

function answerBox(w) {
  const id = `retry-answer-${++answerSeq}`;
  const textarea = h("textarea", { id, rows: "3", maxlength: String(MAX_ANSWER), dataset: { actionId: w.action_id } });
  textarea.value = typedAnswers.get(questionKey(w)) || "";
  textarea.addEventListener("input", () => {
    typedAnswers.set(questionKey(w), textarea.value);
    showError($("retry-error"), ""); // a refusal for a missing answer is out of date once the lead types
  });
  return h("fieldset", { class: "answer", dataset: { key: questionKey(w), actionId: w.action_id, stage: w.stage_id } },
    h("legend", {}, h("span", { class: "answer-stage" }, stageName(w.action_id, w.stage_id)),
      h("span", { class: "answer-since muted", dataset: { since: w.waiting_since || "" } }, sinceText(w.waiting_since))),
    h("p", { class: "quote answer-question" }, w.waiting_reason || "(no question given)"),
    h("label", { for: id }, "Your answer ", h("span", { class: "muted answer-need" })),
    textarea,
    h("p", { class: "answer-resets muted small" }));
}

function renderAnswers(p) {
  const wrap = $("retry-answers");
  const list = $("retry-answer-list");
  const waiting = p ? p.waiting_stages || [] : [];
  const required = p ? waiting.some((w) => w.action_id === p.target_action_id) : false;
  wrap.hidden = !waiting.length;
  $("retry-answers-intro").textContent = !waiting.length ? ""
    : required
      ? (waiting.length > 1 ? `${waiting.length} stages wait for an answer — each gets its own (all required):` : "The item waits for your answer (required):")
      : "These stages also wait for an answer (optional: an answered stage is reset with it):";
  // keyed by question: a box the lead is typing in stays the same element (focus, caret, text)
  const keep = new Map([...list.children].map((el) => [el.dataset.key, el]));
  const boxes = waiting.map((w) => {
    const box = keep.get(questionKey(w)) || answerBox(w);
    keep.delete(questionKey(w));
    box.querySelector(".answer-stage").textContent = stageName(w.action_id, w.stage_id);
    box.querySelector(".answer-need").textContent = required ? "(required)" : "(optional)";
    const others = w.reset_action_ids.filter((id) => id !== w.action_id).map((id) => stageName(id));
    box.querySelector(".answer-resets").textContent = p.mode === "graph"
      ? `Answering resets ${stageName(w.action_id, w.stage_id)}${others.length ? ` and ${others.join(", ")}` : ""}.` : "";
    return box;
  });
  for (const el of keep.values()) el.remove();
  boxes.forEach((box, i) => { if (list.children[i] !== box) list.insertBefore(box, list.children[i] || null); });
  $("retry-confirm").textContent = required ? (waiting.length > 1 ? `Send ${waiting.length} answers & retry` : "Send answer & retry") : "Retry";
}

function describeChanges(before, p, wasRetryable) {
  const changes = [];
  if (!wasRetryable) changes.push("the item needs a retry again");
  const oldWaiting = new Map((before?.waiting_stages || []).map((w) => [w.action_id, w]));
  const newWaiting = new Map((p.waiting_stages || []).map((w) => [w.action_id, w]));
  for (const [id, w] of newWaiting) {
    const old = oldWaiting.get(id);
    if (!old) changes.push(`${stageName(id, w.stage_id)} is now waiting too — its question is below`);
    else if (old.run_id !== w.run_id) changes.push(`${stageName(id, w.stage_id)} asks a new question`);
  }
  for (const [id, w] of oldWaiting) if (!newWaiting.has(id)) changes.push(`${stageName(id, w.stage_id)} no longer waits`);
  if (before) {
    if (before.target_action_id !== p.target_action_id) changes.push(`the stage to retry is now ${stageName(p.target_action_id, p.target_stage_id)}`);
    const same = (a, b) => a.length === b.length && a.every((x) => b.includes(x));
    if (!same(resetIds(before), resetIds(p))) changes.push("the stages to reset changed");
    if (!same(before.superseded_run_ids, p.superseded_run_ids)) {
      changes.push(p.superseded_run_ids.length ? "the running work to stop changed" : "no running work will be stopped now");
    }
  }
  return changes;
}

function notRetryableText() {
  const d = state.detail;
  const retried = eventsAfter(retry.since, ["work_item.retried"], retry.seen);
  const detailFresh = d && (d.events?.[0]?.id || 0) >= Math.max(0, ...retry.seen.map((e) => e.id));
  const status = detailFresh ? d.status : (retried.length ? "ready" : null);
  const now = status ? ` and is now ${statusWord(status)}` : "";
  if (retried.length) return `Updated: the item was retried elsewhere (by ${actorsOf(retried)})${now} — nothing to retry.`;
  return status ? `Updated: the item is now ${statusWord(status)} — nothing to retry.` : "Updated: the item no longer needs a retry — nothing to retry.";
}

async function refreshRetry(reason) {
  const status = state.detail?.status;
  const detailLast = state.detail?.events?.[0]?.id || 0;
  if (reason !== "open" && retry.seen.some((e) => e.id > detailLast)) return; // a fresher detail follows
  const seq = ++retry.seq;
  let p = null;
  let failure = null;
  if (reason !== "open" && status && !RETRYABLE.has(status)) {
    // the detail is as fresh as the last event: no preview to ask for (it would answer 409)
    failure = { code: "invalid_state", message: `the item is ${statusWord(status)}: only an item that is waiting or needs attention can be retried` };
  } else {
    try { p = await fetchPreview(); } catch (err) { failure = err; }
  }
  if (seq !== retry.seq || !retry.open) return;
  const notice = $("retry-notice");
  if (failure && failure.code !== "invalid_state") {
    if (reason === "open") $("retry-preview").replaceChildren();
    showError($("retry-error"), describeError(failure, "Retry preview"));
    return;
  }
  const before = retry.preview;
  const wasRetryable = retry.retryable;
  $("retry-confirm").disabled = !p;
  if (!p) {
    retry.retryable = false;
    retry.preview = null;
    const said = failure.message.replace(/\.$/, "");
    setNotice(notice, reason === "open" ? `${said.charAt(0).toUpperCase()}${said.slice(1)}.` : notRetryableText());
    $("retry-preview").replaceChildren(h("p", { class: "muted" }, "Nothing to retry now."));
    renderAnswers(null);
    graphView.setOutlined([]);
    return;
  }
  retry.retryable = true;
  retry.preview = p;
  renderPreview(p);
  renderAnswers(p);
  if (reason === "open") {
    const first = $("retry-answer-list").querySelector("textarea");
    (first || $("retry-confirm")).focus();
  } else {
    const changes = describeChanges(before, p, wasRetryable);
    if (changes.length) setNotice(notice, `Updated: ${changes.join("; ")}.`);
  }
}

function scheduleRetryRefresh() {
  if (!retry.open || retry.sending) return;
  clearTimeout(retry.timer);
  retry.timer = setTimeout(() => refreshRetry("update"), 150);
}

function openRetry() {
  const waiting = state.detail?.status === "waiting";
  $("retry-title").textContent = waiting ? "Answer and retry" : "Retry";
  showError($("retry-error"), "");
  setNotice($("retry-notice"), "");
  $("retry-confirm").disabled = true;
  $("retry-preview").replaceChildren(h("p", { class: "muted" }, "Working out what a retry would do…"));
  renderAnswers(null);
  Object.assign(retry, { open: true, preview: null, retryable: false, since: lastKnownEventId(), seen: [] });
  $("retry-dialog").showModal();
  refreshRetry("open");
}

function retryBody() {
  const p = retry.preview;
  const waiting = p.waiting_stages || [];
  const required = waiting.some((w) => w.action_id === p.target_action_id);
  const answers = waiting.map((w) => ({ w, action_id: w.action_id, answer: (typedAnswers.get(questionKey(w)) || "").trim() }));
  const missing = answers.filter((a) => !a.answer);
  if (required && missing.length) {
    return { error: `Write an answer for each waiting stage first: ${missing.map((a) => stageName(a.action_id, a.w.stage_id)).join(", ")}.`,
      focus: missing[0].action_id };
  }
  const long = answers.find((a) => a.answer.length > MAX_ANSWER);
  if (long) return { error: `The answer for ${stageName(long.action_id)} is longer than 8 000 characters.`, focus: long.action_id };
  const given = answers.filter((a) => a.answer).map(({ action_id, answer }) => ({ action_id, answer }));
  const body = { ...(given.length ? { answers: given } : {}), expected_state_token: p.state_token };
  return { body, keys: answers.filter((a) => a.answer).map((a) => questionKey(a.w)) };
}

async function submitRetry(e) {
  e.preventDefault();
  if (!retry.retryable || !retry.preview) return;
  const { body, keys, error, focus } = retryBody();
  if (error) {
    showError($("retry-error"), error);
    $("retry-answer-list").querySelector(`textarea[data-action-id="${CSS.escape(focus)}"]`)?.focus();
    return;
  }
  showError($("retry-error"), "");
  $("retry-confirm").disabled = true;
  retry.sending = true;
  clearTimeout(retry.timer);
  let refused = false;
  try {
    await api(`${base}/retry`, { method: "POST", body });
    for (const k of keys) typedAnswers.delete(k);
    $("retry-dialog").close();
    refreshAll();
  } catch (err) {
    showError($("retry-error"), refusalText(err, body.answers ? "Answer" : "Retry"));
    // the preview on screen is the one refused: Confirm waits for the fresh one (refreshRetry
    // enables it), or a second click would send the same stale token again
    retry.retryable = false;
    refused = true;
    refreshAll(); // the fresh detail updates the dialog: it says what changed, if anything did
  } finally {
    retry.sending = false;
  }
  if (refused) refreshRetry("update");
}

// --- edit ----------------------------------------------------------------------------------------

const EDIT_FIELDS = [
  ["title", "edit-title-input", "title"],
  ["goal", "edit-goal", "goal"],
  ["acceptance_criteria", "edit-criteria", "acceptance criteria"],
  ["work_dir", "edit-workdir", "work directory"],
];
const edit = { open: false, revision: 0, values: null, since: 0, seen: [] };

function contractValues(d) {
  return { title: d.title, goal: d.goal, acceptance_criteria: (d.acceptance_criteria || []).join("\n"), work_dir: d.work_dir || "" };
}

// what the API would store for a field's text: compared, not the raw text, to see what the lead changed
function normalized(field, text) {
  if (field === "acceptance_criteria") return text.split("\n").map((s) => s.trim()).filter(Boolean).join("\n");
  return text.trim();
}

const editedFields = () => EDIT_FIELDS.filter(([f, id]) => normalized(f, $(id).value) !== normalized(f, edit.values[f]));

function openEdit() {
  const d = state.detail;
  if (!d) return;
  Object.assign(edit, { open: true, revision: d.revision, values: contractValues(d), since: lastKnownEventId(), seen: [] });
  for (const [f, id] of EDIT_FIELDS) $(id).value = edit.values[f];
  $("edit-revision").textContent = String(d.revision);
  $("edit-dialog").dataset.revision = String(d.revision);
  setNotice($("edit-notice"), "");
  $("edit-save").disabled = false;
  showError($("edit-error"), "");
  $("edit-dialog").showModal();
}

function editOnDetail(d) {
  if (!edit.open) return;
  const notice = $("edit-notice");
  if (TERMINAL.has(d.status)) {
    setNotice(notice, `Updated: the item is now ${statusWord(d.status)} — its contract can no longer be edited.`);
    $("edit-reload").hidden = true;
    $("edit-save").disabled = true;
    return;
  }
  const now = contractValues(d);
  const changed = EDIT_FIELDS.filter(([f]) => now[f] !== edit.values[f]);
  if (!changed.length && d.revision === edit.revision) return;
  const by = actorsOf(eventsAfter(edit.since, ["work_item.updated", "workflow.retriaged"], edit.seen)) || "someone";
  const what = changed.length ? changed.map(([, , label]) => label).join(", ") : "the contract";
  const head = d.revision !== edit.revision ? `Revision ${edit.revision} → ${d.revision}: ` : "Changed meanwhile: ";
  const mine = changed.filter(([f]) => editedFields().some(([g]) => g === f)).map(([, , label]) => label);
  const kept = mine.length ? ` You edited the ${mine.join(", ")} too: loading keeps your text there.` : "";
  setNotice(notice, `${head}${what} changed by ${by}.${kept}`);
  $("edit-reload").hidden = false;
}

function reloadEdit() {
  const d = state.detail;
  const mine = new Set(editedFields().map(([f]) => f));
  const now = contractValues(d);
  const kept = [];
  for (const [f, id, label] of EDIT_FIELDS) {
    if (mine.has(f)) kept.push(label); else $(id).value = now[f];
  }
  Object.assign(edit, { revision: d.revision, values: now, since: lastKnownEventId(), seen: [] });
  $("edit-revision").textContent = String(d.revision);
  $("edit-dialog").dataset.revision = String(d.revision);
  setNotice($("edit-notice"), `Loaded revision ${d.revision}.${kept.length ? ` Kept your edits of the ${kept.join(", ")}.` : ""}`);
  $("edit-reload").hidden = true;
  showError($("edit-error"), "");
}

async function submitEdit(e) {
  e.preventDefault();
  const body = { expected_revision: edit.revision };
  for (const [f, id] of editedFields()) {
    const text = $(id).value;
    body[f] = f === "acceptance_criteria" ? normalized(f, text).split("\n").filter(Boolean) : text.trim();
  }
  if (Object.keys(body).length === 1) { showError($("edit-error"), "Nothing changed."); return; }
  $("edit-save").disabled = true;
  try {
    await api(base, { method: "PATCH", body });
    edit.open = false;
    $("edit-dialog").close();
    refreshAll();
  } catch (err) {
    if (err.code === "revision_conflict") {
      const current = err.extra && err.extra.revision;
      showError($("edit-error"), `Save refused: the item changed meanwhile${current ? ` (it is at revision ${current} now, you edited revision ${edit.revision})` : ""} — nothing was saved. Load the new values, check your edits and save again.`);
      refreshAll();
    } else {
      showError($("edit-error"), describeError(err, "Saving the contract"));
    }
  } finally {
    if (edit.open && !TERMINAL.has(state.detail?.status)) $("edit-save").disabled = false;
  }
}

// --- cancel --------------------------------------------------------------------------------------

// row: what a cancel would do now (the bulk preview of this one item: its running runs, its token)
const cancel = { open: false, status: null, seq: 0, row: null, timer: null, sending: false };

const stopsKey = (row) => (row?.stops || []).map((s) => s.run_id).join(",");

function renderCancelPreview(row) {
  const stops = (row?.stops || []).map((s) =>
    `${stageName(s.action_id, s.stage_id)} (worker ${shortId(s.owner_boot_id)})`);
  $("cancel-preview").replaceChildren(h("p", { id: "cancel-running-line" }, stops.length
    ? [h("strong", {}, "Running work that will be stopped: "), `${stops.join(", ")}.`]
    : h("span", { class: "muted" }, "No running work will be stopped.")));
}

async function refreshCancel(reason) {
  const seq = ++cancel.seq;
  let row = null;
  try {
    const p = await api("/work-items/bulk-preview", { method: "POST", body: { operation: "cancel", ids: [itemId] } });
    row = p.rows[0];
  } catch (err) {
    if (seq === cancel.seq && cancel.open) showError($("cancel-error"), describeError(err, "Cancel preview"));
    return;
  }
  if (seq !== cancel.seq || !cancel.open) return;
  const before = cancel.row;
  cancel.row = row;
  if (!row.allowed) {
    $("cancel-confirm").disabled = true;
    $("cancel-preview").replaceChildren();
    // a terminal item: cancelOnDetail says so; anything else (a live reservation) is said here
    if (row.code !== "invalid_state" || reason === "open") {
      setNotice($("cancel-notice"), `Not possible now: ${(row.message || row.code).replace(/\.$/, "")}.`);
    }
    return;
  }
  renderCancelPreview(row);
  $("cancel-confirm").disabled = cancel.sending;
  if (reason === "open" || !before) return;
  const changes = [];
  if (before.status !== row.status) changes.push(`the item is now ${statusWord(row.status)}`);
  if (stopsKey(before) !== stopsKey(row)) {
    changes.push(row.stops.length ? "the running work to stop changed (below)" : "no running work will be stopped now");
  }
  if (!before.allowed) changes.push("it can be cancelled again");
  if (changes.length) setNotice($("cancel-notice"), `Updated: ${changes.join("; ")}.`);
}

function scheduleCancelRefresh() {
  if (!cancel.open || cancel.sending) return;
  clearTimeout(cancel.timer);
  cancel.timer = setTimeout(() => refreshCancel("update"), 150);
}

function openCancel() {
  Object.assign(cancel, { open: true, status: state.detail?.status || null, row: null });
  showError($("cancel-error"), "");
  setNotice($("cancel-notice"), "");
  $("cancel-confirm").disabled = true;
  $("cancel-preview").replaceChildren(h("p", { class: "muted" }, "Checking what a cancel would stop…"));
  $("cancel-dialog").showModal();
  refreshCancel("open");
}

function cancelOnDetail(d) {
  if (!cancel.open || d.status === cancel.status) return;
  cancel.status = d.status;
  if (TERMINAL.has(d.status)) {
    setNotice($("cancel-notice"), d.status === "done"
      ? "Updated: the item is done meanwhile — it can no longer be cancelled."
      : "Updated: the item was cancelled meanwhile — nothing to cancel.");
    $("cancel-confirm").disabled = true;
  }
}

async function submitCancel(e) {
  e.preventDefault();
  const row = cancel.row;
  if (!row || !row.allowed || TERMINAL.has(cancel.status)) return;
  showError($("cancel-error"), "");
  $("cancel-confirm").disabled = true;
  cancel.sending = true;
  clearTimeout(cancel.timer);
  try {
    await api(`${base}/cancel`, { method: "POST", body: { expected_state_token: row.state_token } });
    $("cancel-dialog").close();
    refreshAll();
  } catch (err) {
    showError($("cancel-error"), refusalText(err, "Cancel"));
    cancel.sending = false;
    refreshCancel("update"); // what a cancel would do now, with the token of now
    refreshAll();
  } finally {
    cancel.sending = false;
  }
}

// --- wiring --------------------------------------------------------------------------------------

function wireDialogs() {
  if (!config.can_change) return;
  const retryDlg = $("retry-dialog");
  wireDialogClose(retryDlg);
  retryDlg.addEventListener("close", () => { retry.open = false; clearTimeout(retry.timer); graphView.setOutlined([]); });
  $("btn-retry").addEventListener("click", openRetry);
  $("retry-form").addEventListener("submit", submitRetry);

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
  cancelDlg.addEventListener("close", () => { cancel.open = false; clearTimeout(cancel.timer); });
  $("btn-cancel").addEventListener("click", openCancel);
  $("cancel-form").addEventListener("submit", submitCancel);

  const editDlg = $("edit-dialog");
  wireDialogClose(editDlg);
  editDlg.addEventListener("close", () => { edit.open = false; });
  $("btn-edit").addEventListener("click", openEdit);
  $("edit-reload").addEventListener("click", reloadEdit);
  $("edit-form").addEventListener("submit", submitEdit);

  setInterval(() => {
    if (!retry.open) return;
    for (const el of document.querySelectorAll("#retry-answer-list .answer-since[data-since]")) {
      if (el.dataset.since) el.textContent = sinceText(el.dataset.since);
    }
  }, 1000);
}

on("detail", (d) => {
  renderButtons(d);
  if (!config.can_change) return;
  scheduleRetryRefresh();
  editOnDetail(d);
  cancelOnDetail(d);
  scheduleCancelRefresh();
});
// every event is followed by a fresh detail (item.js): the dialogs recompute on the detail, with
// the events seen meanwhile to say who changed what
on("event", (ev) => {
  if (!config.can_change) return;
  if (retry.open) retry.seen.push(ev);
  if (edit.open) edit.seen.push(ev);
});
wireDialogs();
