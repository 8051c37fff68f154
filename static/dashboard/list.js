// The work item list (UI.md "List"): rows from GET /work-items, kept live by /ws/work-items/.
import {
  LiveStream, STATUS_LABEL, api, badge, describeError, h, installSlashFocus, readConfig, setBadge,
  showError, startTicker, timeEl, wireDialogClose,
} from "./common.js";

const config = readConfig();
const STATUSES = ["draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"];
const NEEDS_ME = ["waiting", "needs_attention"];
const LIMIT = 200;
const PROGRESS_ORDER = ["completed", "running", "waiting", "failed", "ready", "cancelled"];

const tbody = document.getElementById("items");
const search = document.getElementById("search");
const filtersEl = document.getElementById("status-filters");
const needsMeBtn = document.getElementById("needs-me");
const summaryEl = document.getElementById("list-summary");
const listError = document.getElementById("list-error");

const rows = new Map(); // id -> {item, tr}
const state = { status: "", needsMe: false, search: "", total: 0 };
const counts = {};

// --- rendering -----------------------------------------------------------------------------------

function progress(item) {
  const c = item.action_counts || {};
  const total = Object.entries(c).filter(([s]) => s !== "superseded").reduce((a, [, n]) => a + n, 0);
  const done = c.completed || 0;
  const bar = h("div", { class: "progress", role: "img", "aria-label": `${done} of ${total} actions completed` });
  for (const status of PROGRESS_ORDER) {
    const n = c[status] || 0;
    if (!n || !total) continue;
    bar.append(h("span", { class: "progress-seg", dataset: { status }, style: `width:${(100 * n) / total}%`,
      title: `${n} ${STATUS_LABEL[status] || status}` }));
  }
  return h("div", { class: "progress-cell" }, bar, h("span", { class: "progress-text" }, total ? `${done}/${total}` : "—"));
}

function workspace(item) {
  const key = item.workspace_key || item.work_dir || "";
  if (!key) return h("span", { class: "muted" }, "—");
  const base = key.replace(/\/+$/, "").split("/").pop() || key;
  return h("span", { class: "mono", title: key }, base);
}

function currentStage(item) {
  const a = item.current_action;
  if (!a) return h("span", { class: "muted" }, item.status === "draft" ? "not started" : "—");
  // a waiting linear item: the action that asked is completed by design, the stage still waits
  const asks = item.status === "waiting" && a.status === "completed";
  const status = asks ? "waiting" : a.status;
  return h("span", { class: "stage-cell", title: asks ? `${a.stage_id}: its run ended by asking; the item waits for your answer` : null },
    h("span", { class: "dot", dataset: { status }, "aria-hidden": "true" }),
    a.stage_id, h("span", { class: "muted stage-status" }, `· ${STATUS_LABEL[status] || status}`));
}

/** A "needs me" row says what it waits for: the waiting stage and the start of its question, or
 * the failed stage and its error (WorkItemSummary.attention). */
function attentionLine(item) {
  const a = item.attention;
  if (!a || !NEEDS_ME.includes(item.status)) return null;
  const waiting = a.kind === "waiting";
  const more = a.count > 1 ? ` (+${a.count - 1} more stage${a.count > 2 ? "s" : ""} ${waiting ? "waiting" : "failed"})` : "";
  const text = a.text || (waiting ? "(no question given)" : "(no error given)");
  return h("div", { class: "attention-line", dataset: { status: waiting ? "waiting" : "failed", kind: a.kind },
    title: `${a.stage_id} ${waiting ? "asks" : "failed"}: ${a.text}${more}` },
  h("span", { class: "attention-icon", "aria-hidden": "true" }, waiting ? "?" : "!"),
  h("span", { class: "attention-stage" }, a.stage_id), waiting ? " asks: " : " failed: ",
  h("span", { class: "attention-text" }, waiting ? `“${text}”` : text), more,
  a.since ? [" · ", timeEl(a.since, "age")] : null);
}

function rowCells(item) {
  return [
    h("td", { class: "col-status" }, badge(item.status)),
    h("td", { class: "col-title" },
      h("div", { class: "title-line" },
        h("a", { href: `/work-items/${encodeURIComponent(item.id)}/`, title: `${item.title}\n${item.goal}` }, item.title),
        item.work_item_type ? h("span", { class: "tag" }, item.work_item_type) : null),
      attentionLine(item)),
    h("td", { class: "col-stage" }, currentStage(item)),
    h("td", { class: "col-progress" }, progress(item)),
    h("td", { class: "col-ws" }, workspace(item)),
    h("td", { class: "col-time col-age" }, timeEl(item.created_at, "age")),
    h("td", { class: "col-time col-changed" }, timeEl(item.updated_at)),
  ];
}

function renderRow(item, tr) {
  tr = tr || h("tr", { dataset: { id: item.id } });
  tr.dataset.status = item.status;
  tr.replaceChildren(...rowCells(item));
  return tr;
}

function animate(tr, cls) {
  tr.classList.remove("row-new", "row-flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add(cls);
  tr.addEventListener("animationend", () => tr.classList.remove(cls), { once: true });
}

function matches(item) {
  if (state.needsMe && !NEEDS_ME.includes(item.status)) return false;
  if (!state.needsMe && state.status && item.status !== state.status) return false;
  const q = state.search.toLowerCase();
  return !q || item.title.toLowerCase().includes(q) || (item.goal || "").toLowerCase().includes(q);
}

/** Replace the table with `items`, keeping the DOM of rows that stay; rows that arrive slide in. */
function applyList(items, { animateNew }) {
  const keep = new Set(items.map((i) => i.id));
  for (const [id, r] of rows) if (!keep.has(id)) { r.tr.remove(); rows.delete(id); }
  let prev = null;
  for (const item of items) {
    let r = rows.get(item.id);
    if (!r) {
      r = { item, tr: renderRow(item) };
      rows.set(item.id, r);
      if (animateNew) animate(r.tr, "row-new");
    } else if (r.item.updated_at !== item.updated_at || r.item.status !== item.status) {
      r.item = item;
      renderRow(item, r.tr);
    }
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== r.tr) tbody.insertBefore(r.tr, want);
    prev = r.tr;
  }
  renderSummary();
}

function upsert(item) {
  const r = rows.get(item.id);
  if (!matches(item)) {
    if (r) { r.tr.remove(); rows.delete(item.id); state.total = Math.max(0, state.total - 1); renderSummary(); }
    return;
  }
  if (r) {
    if (Date.parse(item.updated_at) < Date.parse(r.item.updated_at)) return; // an older picture
    r.item = item;
    renderRow(item, r.tr);
    animate(r.tr, "row-flash");
  } else {
    const tr = renderRow(item);
    rows.set(item.id, { item, tr });
    tbody.prepend(tr);
    animate(tr, "row-new");
    state.total += 1;
    renderSummary();
  }
}

function renderSummary() {
  const shown = rows.size;
  if (!shown) {
    summaryEl.textContent = state.search || state.status || state.needsMe ? "No work items match." : "No work items yet.";
  } else {
    summaryEl.textContent = state.total > shown ? `Showing ${shown} of ${state.total}.` : `${shown} work item${shown === 1 ? "" : "s"}.`;
  }
}

function renderFilters() {
  const total = STATUSES.reduce((a, s) => a + (counts[s] || 0), 0);
  const chip = (status, label, n) => h("button", {
    type: "button", class: "chip", dataset: { status: status || "all" },
    "aria-pressed": String(!state.needsMe && state.status === status),
    onclick: () => { state.status = status; state.needsMe = false; refresh({ animateNew: false }); renderFilters(); },
  }, status ? h("span", { class: "dot", dataset: { status }, "aria-hidden": "true" }) : null, label,
  h("span", { class: "chip-count" }, String(n)));
  filtersEl.replaceChildren(chip("", "All", total), ...STATUSES.map((s) => chip(s, STATUS_LABEL[s], counts[s] || 0)));
  needsMeBtn.setAttribute("aria-pressed", String(state.needsMe));
  document.getElementById("needs-me-count").textContent = String(NEEDS_ME.reduce((a, s) => a + (counts[s] || 0), 0));
}

// --- loading -------------------------------------------------------------------------------------

function query(params) {
  const q = new URLSearchParams({ limit: String(LIMIT), ...params });
  if (state.search) q.set("search", state.search);
  return `/work-items?${q}`;
}

let loadSeq = 0;
async function refresh({ animateNew }) {
  const seq = ++loadSeq;
  try {
    let items;
    let total;
    if (state.needsMe) {
      const pages = await Promise.all(NEEDS_ME.map((s) => api(query({ status: s }))));
      items = pages.flatMap((p) => p.items).sort((a, b) => Date.parse(b.updated_at) - Date.parse(a.updated_at));
      total = pages.reduce((a, p) => a + p.count, 0);
    } else {
      const page = await api(query(state.status ? { status: state.status } : {}));
      items = page.items;
      total = page.count;
    }
    if (seq !== loadSeq) return;
    state.total = total;
    applyList(items, { animateNew });
    showError(listError, "");
  } catch (err) {
    if (seq === loadSeq) showError(listError, describeError(err, "Loading the list"));
  }
  recount();
}

// per-status counts: one tiny request per status (the list API counts every match)
let countTimer = null;
let countSeq = 0;
function recount() {
  clearTimeout(countTimer);
  countTimer = setTimeout(async () => {
    const seq = ++countSeq;
    try {
      const q = (s) => { const p = new URLSearchParams({ status: s, limit: "1" }); if (state.search) p.set("search", state.search); return `/work-items?${p}`; };
      const pages = await Promise.all(STATUSES.map((s) => api(q(s))));
      if (seq !== countSeq) return;
      STATUSES.forEach((s, i) => { counts[s] = pages[i].count; });
      renderFilters();
    } catch { /* the next event or refresh recounts */ }
  }, 250);
}

// --- live ----------------------------------------------------------------------------------------

const stream = new LiveStream("/ws/work-items/", {
  gapCheck: true,
  onHello: () => refresh({ animateNew: true }),
  onEvent: (msg) => {
    if (msg.work_item) upsert(msg.work_item);
    recount();
  },
});
window.__wcStream = stream;

// --- controls ------------------------------------------------------------------------------------

let searchTimer = null;
search.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { state.search = search.value.trim(); refresh({ animateNew: false }); }, 200);
});
search.addEventListener("keydown", (e) => { if (e.key === "Escape") { search.value = ""; search.dispatchEvent(new Event("input")); search.blur(); } });
needsMeBtn.addEventListener("click", () => {
  state.needsMe = !state.needsMe;
  state.status = "";
  renderFilters();
  refresh({ animateNew: false });
});
installSlashFocus(search);

const dialog = document.getElementById("new-item");
if (dialog) {
  const form = document.getElementById("new-item-form");
  const errorEl = document.getElementById("new-item-error");
  const submit = document.getElementById("new-item-submit");
  const fld = (name) => form.elements.namedItem(name);
  wireDialogClose(dialog);
  document.getElementById("new-item-open").addEventListener("click", () => {
    showError(errorEl, "");
    dialog.showModal();
    document.getElementById("ni-title").focus();
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    const title = fld("title").value.trim();
    const goal = fld("goal").value.trim();
    const missing = [!title && "title", !goal && "goal"].filter(Boolean);
    if (missing.length) {
      for (const m of missing) fld(m).setAttribute("aria-invalid", "true");
      showError(errorEl, `Please fill in the ${missing.join(" and ")}.`);
      fld(missing[0]).focus();
      return;
    }
    const body = {
      title, goal, start: fld("start").checked,
      acceptance_criteria: fld("acceptance_criteria").value.split("\n").map((s) => s.trim()).filter(Boolean),
    };
    if (fld("work_dir").value.trim()) body.work_dir = fld("work_dir").value.trim();
    submit.disabled = true;
    try {
      const item = await api("/work-items", { method: "POST", body });
      form.reset();
      fld("start").checked = true;
      dialog.close();
      showError(errorEl, "");
      if (stream.state !== "live") refresh({ animateNew: true });
      summaryEl.textContent = `Created “${item.title}”.`;
    } catch (err) {
      for (const f of (err.extra && err.extra.errors) || []) if (fld(f.field)) fld(f.field).setAttribute("aria-invalid", "true");
      showError(errorEl, describeError(err, "Create"));
    } finally {
      submit.disabled = false;
    }
  });
}

renderFilters();
refresh({ animateNew: false }).then(() => stream.start());
startTicker();
