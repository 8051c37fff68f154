// Bulk retry / cancel from the list: a checkbox per loaded row, a bar that names the selection, and
// a dialog that previews every row once (POST /work-items/bulk-preview), then sends the change with
// the revisions and the state tokens the lead saw (POST /work-items/bulk). A row that changed since
// the preview (its contract, or its state: a claim, a failure, a retry elsewhere) is refused alone;
// the dialog says so per row, in words. A waiting row shows each stage's question with a box for
// its own answer, sent as the bulk's `answers` ({item: [{action_id, answer}]}), as the item page's
// Retry dialog does for one item. The buttons read and look like the item page's: "Retry 3 items"
// (primary), "Cancel 5 items" (the danger red of "Cancel item").
import { api, badge, describeError, formatDuration, h, shortId, showError, wireDialogClose } from "./common.js";

const VERB = {
  retry: { title: "Retry", done: "Retried", confirm: "Retry", button: "btn-primary" },
  cancel: { title: "Cancel", done: "Cancelled", confirm: "Cancel", button: "btn-danger" },
};
const MAX_ANSWER = 8000;

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** "stops test — worker 3f2a…" for each run the change would stop. */
function stopsText(stops) {
  if (!stops || !stops.length) return "";
  return `stops ${stops.map((s) => `${s.stage_id || "a stage"} — worker ${shortId(s.owner_boot_id)}`).join("; ")}`;
}

/** What an allowed row will do, in words. */
function effectText(op, row) {
  const parts = [];
  if (op === "retry") {
    const stages = row.reset_stage_ids || [];
    if ((row.waiting_stages || []).length) parts.push(`answers ${plural(row.waiting_stages.length, "question")} (below)`);
    if (stages.length) parts.push(`resets ${stages.join(", ")} (${plural(stages.length, "stage")})`);
    else if (row.new_action) parts.push("starts a fresh attempt of its current stage");
    else parts.push("resets nothing");
  } else {
    parts.push("cancels the item");
  }
  const stops = stopsText(row.stops);
  parts.push(stops || "stops no running work");
  return parts.join("; ");
}

function refusalText(op, res) {
  const msg = (res.message || res.code || "refused").replace(/\.$/, "");
  if (res.code !== "revision_conflict" && res.code !== "state_changed") return `Refused: ${msg}.`;
  // the server says what changed ("changed since the preview (revision 1 → 2); …", "stage build
  // was claimed since the preview; …"); say it once
  const said = /since the preview/i.test(msg) ? msg : `changed since the preview — ${msg}`;
  return `Refused: ${said}. Select it again to see what a ${op} would do now.`;
}

/** The body of POST /work-items/bulk: `items` ({id, revision, state_token}, as the page read
 * them) each fenced by its revision and state token; `answers` by item id, for a retry. */
export function bulkBody(operation, items, reason, answers) {
  const body = {
    operation, ids: items.map((r) => r.id), reason,
    expected_revisions: Object.fromEntries(items.map((r) => [r.id, r.revision])),
    expected_state_tokens: Object.fromEntries(items.map((r) => [r.id, r.state_token])),
  };
  if (answers) body.answers = answers;
  return body;
}

export class BulkSelection {
  /**
   * `rows()` gives the loaded rows ({item, tr}) in order; `onItems(items)` takes the summaries the
   * bulk answer returns (the list updates those rows at once; the stream confirms them later).
   */
  constructor({ rows, onItems }) {
    this.rows = rows;
    this.onItems = onItems;
    this.selected = new Set();
    this.bar = document.getElementById("bulk-bar");
    this.countEl = document.getElementById("bulk-count");
    this.all = document.getElementById("select-all");
    this.dialog = document.getElementById("bulk-dialog");
    this.all.addEventListener("change", () => {
      if (this.all.checked) for (const r of this.rows()) this.selected.add(r.item.id);
      else this.selected.clear();
      this.sync();
    });
    document.getElementById("bulk-retry").addEventListener("click", () => this.open("retry"));
    document.getElementById("bulk-cancel").addEventListener("click", () => this.open("cancel"));
    document.getElementById("bulk-clear").addEventListener("click", () => { this.selected.clear(); this.sync(); });
    wireDialogClose(this.dialog);
    this.form = document.getElementById("bulk-form");
    this.form.addEventListener("submit", (e) => { e.preventDefault(); this.confirm(); });
    this.dialog.addEventListener("close", () => { this.preview = null; this.sync(); });
  }

  /** The checkbox cell of a row. */
  cell(item) {
    const box = h("input", { type: "checkbox", class: "row-select", "aria-label": `Select “${item.title}”` });
    box.checked = this.selected.has(item.id);
    box.addEventListener("change", () => {
      if (box.checked) this.selected.add(item.id); else this.selected.delete(item.id);
      this.sync();
    });
    return h("td", { class: "col-select" }, box);
  }

  /** Forget rows that are no longer loaded (a filter changed, a row left): the bar acts on what is seen. */
  prune() {
    const loaded = new Set(this.rows().map((r) => r.item.id));
    for (const id of this.selected) if (!loaded.has(id)) this.selected.delete(id);
    this.sync();
  }

  sync() {
    const rows = this.rows();
    let on = 0;
    for (const r of rows) {
      const box = r.tr.querySelector("input.row-select");
      const checked = this.selected.has(r.item.id);
      if (box && box.checked !== checked) box.checked = checked;
      r.tr.classList.toggle("selected", checked);
      if (checked) on += 1;
    }
    const n = this.selected.size;
    this.all.checked = rows.length > 0 && on === rows.length;
    this.all.indeterminate = on > 0 && on < rows.length;
    this.bar.hidden = n === 0;
    this.countEl.textContent = `${n} selected`;
  }

  async open(op) {
    const ids = this.rows().map((r) => r.item.id).filter((id) => this.selected.has(id));
    if (!ids.length) return;
    this.op = op;
    this.preview = null;
    const verb = VERB[op];
    const title = document.getElementById("bulk-title");
    title.textContent = `${verb.title} ${plural(ids.length, "work item")}`;
    const list = document.getElementById("bulk-rows");
    list.replaceChildren(h("li", { class: "muted" }, "Checking what this would do…"));
    const submit = document.getElementById("bulk-submit");
    submit.textContent = verb.confirm;
    submit.className = `btn ${verb.button}`;
    submit.hidden = false;
    submit.disabled = true;
    const reason = this.form.elements.namedItem("reason");
    reason.removeAttribute("aria-invalid");
    document.getElementById("bulk-fields").hidden = false;
    const errorEl = document.getElementById("bulk-error");
    showError(errorEl, "");
    document.getElementById("bulk-intro").textContent = "";
    this.dialog.showModal();
    try {
      const p = await api("/work-items/bulk-preview", { method: "POST", body: { operation: op, ids } });
      if (!this.dialog.open || this.op !== op) return;
      this.preview = p;
      this.renderPreview();
    } catch (err) {
      list.replaceChildren();
      showError(errorEl, describeError(err, `${verb.title} preview`));
    }
  }

  renderPreview() {
    const p = this.preview;
    const allowed = p.rows.filter((r) => r.allowed);
    const refused = p.rows.length - allowed.length;
    document.getElementById("bulk-intro").textContent = allowed.length
      ? `${plural(allowed.length, "item")} will change${refused ? `; ${refused} cannot (greyed, with the reason)` : ""}.`
      : "None of the selected items can be changed this way.";
    document.getElementById("bulk-rows").replaceChildren(...p.rows.map((row) => h("li", {
      class: `bulk-row${row.allowed ? "" : " bulk-row-refused"}`, dataset: { id: row.id, allowed: String(row.allowed) },
    }, badge(row.status), h("span", { class: "bulk-row-title", title: row.title }, row.title),
    h("span", { class: "bulk-row-effect" }, row.allowed ? effectText(p.operation, row) : `Not possible: ${(row.message || row.code || "").replace(/\.$/, "")}.`),
    p.operation === "retry" && row.allowed ? this.answerBoxes(row) : null)));
    const submit = document.getElementById("bulk-submit");
    submit.disabled = !allowed.length;
    const questions = this.questions().length;
    const verb = VERB[p.operation].confirm;
    submit.textContent = !allowed.length ? verb
      : questions ? `Send ${plural(questions, "answer")} & ${verb.toLowerCase()} ${plural(allowed.length, "item")}`
        : `${verb} ${plural(allowed.length, "item")}`;
  }

  /** One box per waiting stage of a row: its question, how long it has waited, the answer. */
  answerBoxes(row) {
    const waiting = row.waiting_stages || [];
    if (!waiting.length) return null;
    return h("div", { class: "bulk-answers answer-list" }, ...waiting.map((w) => {
      const id = `bulk-answer-${row.id}-${w.action_id}`;
      const since = w.waiting_since ? `waiting ${formatDuration(Date.now() - Date.parse(w.waiting_since))}` : "";
      return h("fieldset", { class: "answer", dataset: { item: row.id, actionId: w.action_id, stage: w.stage_id } },
        h("legend", {}, h("span", { class: "answer-stage" }, w.stage_id), h("span", { class: "answer-since muted" }, since)),
        h("p", { class: "quote answer-question" }, w.waiting_reason || "(no question given)"),
        h("label", { for: id }, "Your answer ", h("span", { class: "muted" }, "(required)")),
        this.answerArea(id, row.id, w.action_id));
    }));
  }

  answerArea(id, itemId, actionId) {
    const area = h("textarea", { id, rows: "2", maxlength: String(MAX_ANSWER), dataset: { item: itemId, actionId } });
    area.addEventListener("input", () => { // a refusal for a missing answer is out of date once the lead types
      area.removeAttribute("aria-invalid");
      showError(document.getElementById("bulk-error"), "");
    });
    return area;
  }

  /** The answer boxes of the allowed rows, in order. */
  questions() {
    return [...document.querySelectorAll("#bulk-rows .bulk-answers textarea")];
  }

  async confirm() {
    const p = this.preview;
    if (!p) return;
    const errorEl = document.getElementById("bulk-error");
    const reasonEl = this.form.elements.namedItem("reason");
    const reason = reasonEl.value.trim();
    const boxes = this.questions();
    const missing = boxes.filter((box) => !box.value.trim());
    reasonEl.toggleAttribute("aria-invalid", !reason);
    for (const box of boxes) box.toggleAttribute("aria-invalid", missing.includes(box));
    if (!reason || missing.length) {
      const stages = missing.map((box) => box.closest("fieldset").dataset.stage);
      const unanswered = missing.length
        && `an answer to ${missing.length === 1 ? `the question of ${stages[0]}` : `each question (${missing.length} unanswered)`}`;
      showError(errorEl, `Please give ${[!reason && "a reason", unanswered].filter(Boolean).join(" and ")}.`);
      (!reason ? reasonEl : missing[0]).focus();
      return;
    }
    showError(errorEl, "");
    const allowed = p.rows.filter((r) => r.allowed);
    let answers;
    if (boxes.length) {
      answers = {};
      for (const box of boxes) {
        (answers[box.dataset.item] ||= []).push({ action_id: box.dataset.actionId, answer: box.value.trim() });
      }
    }
    const body = bulkBody(p.operation, allowed, reason, answers);
    const submit = document.getElementById("bulk-submit");
    submit.disabled = true;
    let out;
    try {
      out = await api("/work-items/bulk", { method: "POST", body });
    } catch (err) {
      submit.disabled = false;
      showError(errorEl, describeError(err, VERB[p.operation].title));
      return;
    }
    const byId = new Map(out.results.map((r) => [r.id, r]));
    let ok = 0;
    for (const li of document.querySelectorAll("#bulk-rows .bulk-row")) {
      const res = byId.get(li.dataset.id);
      if (!res) continue;
      li.dataset.result = res.ok ? "ok" : "refused";
      li.querySelector(".bulk-row-effect").textContent = res.ok ? `${VERB[p.operation].done}.` : refusalText(p.operation, res);
      if (res.ok) {
        ok += 1;
        this.selected.delete(res.id);
        if (res.work_item) li.querySelector(".badge").replaceWith(badge(res.work_item.status)); // its state now
      }
    }
    const refused = out.results.length - ok;
    document.getElementById("bulk-intro").textContent = `${VERB[p.operation].done} ${plural(ok, "item")}${refused ? `; ${refused} refused (see below)` : ""}.`;
    this.onItems(out.results.filter((r) => r.ok && r.work_item).map((r) => r.work_item));
    submit.hidden = true;
    document.getElementById("bulk-fields").hidden = true;
    for (const box of this.questions()) box.closest(".bulk-answers").hidden = true;
    this.form.reset();
    this.sync();
  }
}
