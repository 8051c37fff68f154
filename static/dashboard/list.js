// The work item list (UI.md "List"): pages of GET /work-items (server-side filter, search, sort and
// cursor), kept live by /ws/work-items/ without one HTTP request per event.
//
// Where things come from:
// * rows: the first page at load or on a filter change, further pages by cursor on scroll or
//   "Load more"; afterwards each event's `work_item` summary updates, inserts or removes a row;
// * status-chip counts: the list answer's `counts`, then the `overview.counts` the stream pushes
//   (at most once a second) — see applyOverview for the search case;
// * the overview strip: GET /overview once, then the pushed `overview`.
import {
  LiveStream, STATUS_LABEL, api, badge, describeError, h, installSlashFocus, markLatest, readConfig,
  showError, startTicker, timeEl, wireDialogClose,
} from "./common.js";
import { BulkSelection } from "./list-bulk.js";
import { OverviewStrip } from "./list-overview.js";

const config = readConfig();
const STATUSES = ["draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"];
const NEEDS_ME = ["waiting", "needs_attention"];
const PROGRESS_ORDER = ["completed", "running", "waiting", "failed", "ready", "cancelled"];
const PAGE = 100;
const SORTS = ["updated", "updated_asc", "created", "created_asc", "status"];
// sort=status: attention first (selectors.ATTENTION_ORDER)
const STATUS_RANK = { needs_attention: 0, waiting: 1, running: 2, ready: 3, draft: 4, done: 5, cancelled: 6 };
const AT_TOP = 40; // px of scroll under which the list is "at the top" and live rows may move freely

const tbody = document.getElementById("items");
const search = document.getElementById("search");
const sortSel = document.getElementById("sort");
const filtersEl = document.getElementById("status-filters");
const needsMeBtn = document.getElementById("needs-me");
const summaryEl = document.getElementById("list-summary");
const listError = document.getElementById("list-error");
const moreBtn = document.getElementById("load-more");
const sentinel = document.getElementById("list-end");
const pill = document.getElementById("live-pill");

const rows = new Map(); // id -> {item, tr}, in the order of the table
const state = { status: "", needsMe: false, search: "", sort: "updated" };
const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
const known = new Map(); // id -> last status seen (pages and events): turns a status change into count moves
const pending = new Map(); // id -> summary whose move would disturb the view: applied by the pill
let nextCursor = null;
let loaded = false; // the first page of the current filter is on screen
let buffered = []; // events that arrived before it
const bulk = config.may?.bulk ? new BulkSelection({ rows: () => [...rows.values()], onItems: (items) => items.forEach((i) => upsert(i)) }) : null;
const overview = new OverviewStrip(document.getElementById("overview"));

// --- rendering -----------------------------------------------------------------------------------

function progress(item) {
  const c = { ...(item.action_counts || {}) };
  // a linear stage that asked a question is `completed` by DOMAIN §7.4 while its item waits: the
  // bar shows it waiting, as the item page's graph does
  if (item.status === "waiting" && !c.waiting && c.completed) {
    c.completed -= 1;
    c.waiting = 1;
  }
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
    h("span", { class: "stage-name", title: asks ? null : a.stage_id }, a.stage_id),
    h("span", { class: "muted stage-status" }, h("span", { class: "stage-sep" }, "· "), STATUS_LABEL[status] || status));
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
    bulk ? bulk.cell(item) : null,
    h("td", { class: "col-status" }, badge(item.status)),
    h("td", { class: "col-title" },
      h("div", { class: "title-line" },
        h("a", { href: `/work-items/${encodeURIComponent(item.id)}/`, title: `${item.title}\n${item.goal}` }, item.title),
        item.work_item_type ? h("span", { class: "tag", title: item.work_item_type }, item.work_item_type) : null),
      attentionLine(item)),
    h("td", { class: "col-stage" }, currentStage(item)),
    h("td", { class: "col-progress" }, progress(item)),
    h("td", { class: "col-ws" }, workspace(item)),
    h("td", { class: "col-time col-age" }, timeEl(item.created_at, "age")),
    h("td", { class: "col-time col-changed" }, timeEl(item.updated_at)),
  ].filter(Boolean);
}

function renderRow(item, tr) {
  tr = tr || h("tr", { dataset: { id: item.id } });
  tr.dataset.status = item.status;
  tr.classList.remove("row-gone");
  tr.replaceChildren(...rowCells(item));
  if (bulk) tr.classList.toggle("selected", bulk.selected.has(item.id));
  return tr;
}

function animate(tr, cls) {
  tr.classList.remove("row-new", "row-flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add(cls);
  tr.addEventListener("animationend", () => tr.classList.remove(cls), { once: true });
}

// --- filter, sort and the URL ---------------------------------------------------------------------

function filterStatuses() {
  if (state.needsMe) return NEEDS_ME;
  return state.status ? [state.status] : STATUSES;
}

function matches(item) {
  if (!filterStatuses().includes(item.status)) return false;
  const q = state.search.toLowerCase();
  return !q || item.title.toLowerCase().includes(q) || (item.goal || "").toLowerCase().includes(q);
}

const time = (iso) => Date.parse(iso) || 0;
const cmpId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** The server's order for the current sort (negative: `a` comes first): newest first breaks ties
 * by id ascending, oldest first by id descending (selectors._SORT_FIELD); sort=status is
 * ATTENTION_ORDER, each status newest change first. */
function compare(a, b) {
  switch (state.sort) {
    case "updated_asc": return time(a.updated_at) - time(b.updated_at) || cmpId(b, a);
    case "created": return time(b.created_at) - time(a.created_at) || cmpId(a, b);
    case "created_asc": return time(a.created_at) - time(b.created_at) || cmpId(b, a);
    case "status": return (STATUS_RANK[a.status] ?? 9) - (STATUS_RANK[b.status] ?? 9) || time(b.updated_at) - time(a.updated_at) || cmpId(a, b);
    default: return time(b.updated_at) - time(a.updated_at) || cmpId(a, b);
  }
}

function readUrl() {
  const q = new URLSearchParams(location.search);
  state.needsMe = q.get("needs") === "1";
  state.status = !state.needsMe && STATUSES.includes(q.get("status")) ? q.get("status") : "";
  state.search = (q.get("q") || "").trim();
  state.sort = SORTS.includes(q.get("sort")) ? q.get("sort") : "updated";
  search.value = state.search;
  sortSel.value = state.sort;
}

function urlOf() {
  const q = new URLSearchParams();
  if (state.needsMe) q.set("needs", "1");
  else if (state.status) q.set("status", state.status);
  if (state.search) q.set("q", state.search);
  if (state.sort !== "updated") q.set("sort", state.sort);
  const s = q.toString();
  return s ? `?${s}` : location.pathname;
}

/** A filter or sort change: a new history entry (back restores the previous filter), then a load.
 * Typing in the search box replaces the entry instead, so back does not step through keystrokes. */
function changeFilter(mutate, { replace = false } = {}) {
  mutate();
  const url = urlOf();
  if (url !== `${location.search}` && !(url === location.pathname && !location.search)) {
    history[replace ? "replaceState" : "pushState"](null, "", url);
  }
  renderFilters();
  load();
}

window.addEventListener("popstate", () => { readUrl(); renderFilters(); load(); });

// --- loading -------------------------------------------------------------------------------------

function listPath(cursor) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (state.needsMe) q.set("status", NEEDS_ME.join(","));
  else if (state.status) q.set("status", state.status);
  if (state.search) q.set("search", state.search);
  if (state.sort !== "updated") q.set("sort", state.sort);
  if (cursor) q.set("cursor", cursor);
  return `/work-items?${q}`;
}

function setCounts(next) {
  for (const s of STATUSES) counts[s] = Number((next && next[s]) || 0);
}

let loadCtl = null;
let gen = 0;
let firstPaint = false;

/** The first page of the current filter; rows that stay keep their DOM (no flicker). */
async function load({ animateNew = false } = {}) {
  if (loadCtl) loadCtl.abort();
  const ctl = new AbortController();
  loadCtl = ctl;
  const my = ++gen;
  loadingMore = false;
  loaded = false; // events wait in `buffered` until the new page is on screen
  try {
    const page = await api(listPath(), { signal: ctl.signal });
    if (my !== gen) return;
    pending.clear();
    renderPill();
    const keep = new Set(page.items.map((i) => i.id));
    for (const [id, r] of rows) if (!keep.has(id)) { r.tr.remove(); rows.delete(id); }
    let prev = null;
    for (const item of page.items) {
      known.set(item.id, item.status);
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
    // the map's order follows the table's
    const ordered = page.items.map((i) => [i.id, rows.get(i.id)]);
    rows.clear();
    for (const [id, r] of ordered) rows.set(id, r);
    nextCursor = page.next_cursor || null;
    setCounts(page.counts);
    loaded = true;
    showError(listError, "");
    renderFilters();
    renderSummary();
    if (bulk) bulk.prune();
    if (!firstPaint) {
      firstPaint = true;
      // the first rows on screen: the mark's time counts from navigation start
      requestAnimationFrame(() => markLatest("wc-list-first-paint"));
    }
    const early = buffered;
    buffered = [];
    for (const msg of early) onEvent(msg);
    checkSentinel();
  } catch (err) {
    if (err.name === "AbortError" || my !== gen) return;
    showError(listError, describeError(err, "Loading the list"));
    // what is on screen stays live; no further pages of a filter that did not load
    nextCursor = null;
    loaded = true;
    renderSummary();
  } finally {
    if (loadCtl === ctl) loadCtl = null;
  }
}

let loadingMore = false;
/** The next page by cursor, appended below; rows already on screen (moved live) are not repeated. */
async function loadMore() {
  if (loadingMore || !nextCursor || !loaded) return;
  loadingMore = true;
  const my = gen;
  renderSummary();
  try {
    const page = await api(listPath(nextCursor));
    if (my !== gen) return;
    const frag = document.createDocumentFragment();
    for (const item of page.items) {
      if (rows.has(item.id) || pending.has(item.id)) continue;
      known.set(item.id, item.status);
      const r = { item, tr: renderRow(item) };
      rows.set(item.id, r);
      frag.append(r.tr);
    }
    tbody.append(frag);
    nextCursor = page.next_cursor || null;
    showError(listError, "");
    if (bulk) bulk.sync();
  } catch (err) {
    if (my === gen) showError(listError, describeError(err, "Loading more"));
  } finally {
    if (my === gen) loadingMore = false;
    renderSummary();
    if (my === gen) checkSentinel();
  }
}

const observer = new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting)) loadMore();
}, { rootMargin: "0px 0px 600px 0px" });
observer.observe(sentinel);
/** After a page lands the sentinel may still be in view (a tall window): the observer only fires
 * on a change, so look again. */
function checkSentinel() {
  if (nextCursor && sentinel.getBoundingClientRect().top < innerHeight + 600) loadMore();
}
moreBtn.addEventListener("click", () => loadMore());

// --- rendering of the frame ------------------------------------------------------------------------

const fmt = (n) => Number(n).toLocaleString();

function total() {
  return filterStatuses().reduce((a, s) => a + (counts[s] || 0), 0);
}

function renderSummary() {
  const shown = rows.size;
  const all = Math.max(total(), shown);
  if (!loaded) summaryEl.textContent = "Loading…";
  else if (!shown) summaryEl.textContent = state.search || state.status || state.needsMe ? "No work items match." : "No work items yet.";
  else summaryEl.textContent = all > shown || nextCursor ? `Showing ${fmt(shown)} of ${fmt(all)}.` : `${fmt(shown)} work item${shown === 1 ? "" : "s"}.`;
  moreBtn.hidden = !nextCursor;
  moreBtn.disabled = loadingMore;
  moreBtn.textContent = loadingMore ? "Loading…" : `Load ${fmt(Math.min(PAGE, Math.max(0, all - shown)) || PAGE)} more`;
}

function renderFilters() {
  const all = STATUSES.reduce((a, s) => a + (counts[s] || 0), 0);
  const chip = (status, label, n) => h("button", {
    type: "button", class: "chip", dataset: { status: status || "all" },
    "aria-pressed": String(!state.needsMe && state.status === status),
    onclick: () => changeFilter(() => { state.status = status; state.needsMe = false; }),
  }, status ? h("span", { class: "dot", dataset: { status }, "aria-hidden": "true" }) : null, label,
  h("span", { class: "chip-count" }, fmt(n)));
  filtersEl.replaceChildren(chip("", "All", all), ...STATUSES.map((s) => chip(s, STATUS_LABEL[s], counts[s] || 0)));
  needsMeBtn.setAttribute("aria-pressed", String(state.needsMe));
  document.getElementById("needs-me-count").textContent = fmt(NEEDS_ME.reduce((a, s) => a + (counts[s] || 0), 0));
}

function renderPill() {
  pill.hidden = pending.size === 0;
  pill.querySelector(".pill-text").textContent = `${pending.size} new/changed`;
}

// --- live ----------------------------------------------------------------------------------------

const atTop = () => window.scrollY < AT_TOP;
const belowView = (tr) => !tr || tr.getBoundingClientRect().top >= innerHeight;

/** Where `item` belongs among the loaded rows (other than itself): the row it goes before, null
 * for the end, or undefined when it sorts after every loaded row while more pages remain (it is on
 * a page not loaded yet, and comes with that page). */
function placeOf(item) {
  for (const [id, r] of rows) {
    // a held row stands where it was, not where its new state sorts: no anchor for others
    if (id !== item.id && !pending.has(id) && compare(item, r.item) < 0) return r;
  }
  return nextCursor ? undefined : null;
}

/** Count moves from what the page knows: a row's previous status, or a creation. */
function adjustCounts(item, eventType) {
  const before = known.get(item.id);
  const q = state.search.toLowerCase();
  const inSearch = !q || item.title.toLowerCase().includes(q) || (item.goal || "").toLowerCase().includes(q);
  if (before === undefined) {
    if (eventType === "work_item.created" && inSearch) counts[item.status] = (counts[item.status] || 0) + 1;
  } else if (!inSearch) {
    if (rows.has(item.id)) counts[before] = Math.max(0, (counts[before] || 0) - 1); // an edit took it out of the search
  } else if (before !== item.status) {
    counts[before] = Math.max(0, (counts[before] || 0) - 1);
    counts[item.status] = (counts[item.status] || 0) + 1;
  }
  known.set(item.id, item.status);
}

/**
 * One summary from the stream (or a bulk answer). Rows move only where that cannot disturb what
 * the user is looking at: at the top of the list everything applies at once (new rows slide in);
 * scrolled down, a change whose row would appear, leave or move at or above the bottom of the
 * viewport is held in `pending` (the row itself updates in place and flashes) and the pill offers
 * it ("3 new/changed — show"); below the viewport it applies, unseen. An item that sorts after
 * every loaded row while pages remain is left to its page.
 */
function upsert(item, eventType) {
  const r = rows.get(item.id);
  if (r && time(item.updated_at) < time(r.item.updated_at)) return; // an older picture
  adjustCounts(item, eventType);
  place(item, { force: false });
}

function place(item, { force }) {
  const r = rows.get(item.id);
  const steady = !force && !atTop();
  if (!matches(item)) {
    if (!r) { pending.delete(item.id); return; }
    if (steady && !belowView(r.tr)) { hold(item, r); r.tr.classList.add("row-gone"); return; }
    r.tr.remove();
    rows.delete(item.id);
    pending.delete(item.id);
    return;
  }
  const before = placeOf(item);
  if (before === undefined) { // its place is on a page not loaded yet
    if (r && !(steady && !belowView(r.tr))) { r.tr.remove(); rows.delete(item.id); }
    else if (r) hold(item, r);
    if (!r) pending.delete(item.id);
    return;
  }
  const ref = before ? before.tr : null;
  const inPlace = r && (ref === r.tr.nextSibling || (!ref && r.tr === tbody.lastElementChild));
  if (r && inPlace) {
    r.item = item;
    renderRow(item, r.tr);
    animate(r.tr, "row-flash");
    pending.delete(item.id);
    return;
  }
  const disturbs = steady && (!belowView(ref) || (r && !belowView(r.tr)));
  if (disturbs) { hold(item, r); return; }
  pending.delete(item.id);
  const tr = r ? renderRow(item, r.tr) : renderRow(item);
  const entry = r || { item, tr };
  entry.item = item;
  tbody.insertBefore(tr, ref);
  // keep the map in table order
  const order = [...tbody.children].map((el) => el.dataset.id);
  const old = new Map(rows);
  if (!r) old.set(item.id, entry);
  rows.clear();
  for (const id of order) if (old.has(id)) rows.set(id, old.get(id));
  animate(tr, r ? "row-flash" : "row-new");
}

/** Held back: the row (if loaded) shows the new state where it stands; the pill offers the move. */
function hold(item, r) {
  pending.set(item.id, item);
  if (r) {
    r.item = item;
    renderRow(item, r.tr);
    animate(r.tr, "row-flash");
  }
}

function showPending() {
  const items = [...pending.values()];
  pending.clear();
  for (const item of items) place(item, { force: true });
  renderPill();
  renderSummary();
  if (bulk) bulk.prune();
  window.scrollTo({ top: 0, behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
}
pill.addEventListener("click", showPending);
// back at the top, what was held applies as it would have live
window.addEventListener("scroll", () => { if (pending.size && atTop()) showPending(); }, { passive: true });

/**
 * The pushed overview: the strip, and the chip counts. The pushed counts are global (no search):
 * while a search is active they do not apply, and the chips keep the search's counts from its
 * last load, moved only by status changes of items the page knows (adjustCounts).
 */
function applyOverview(ov) {
  if (!ov) return;
  overview.apply(ov);
  if (ov.counts && !state.search && loaded) setCounts(ov.counts);
}

function onEvent(msg) {
  if (!loaded) { buffered.push(msg); return; }
  if (msg.work_item) upsert(msg.work_item, msg.event && msg.event.type);
  if (!state.search) overview.setCounts(counts);
  renderFrame();
}

/** Chips, summary, pill and selection once per frame, however many events the frame brought. */
let frameQueued = false;
function renderFrame() {
  if (frameQueued) return;
  frameQueued = true;
  requestAnimationFrame(() => {
    frameQueued = false;
    renderFilters();
    renderSummary();
    renderPill();
    if (bulk) bulk.prune();
  });
}

let helloSeen = false;
let loadedBeforeHello = false;
const stream = new LiveStream("/ws/work-items/", {
  gapCheck: true,
  onHello: (msg, { first }) => {
    helloSeen = true;
    if (msg.overview) overview.apply(msg.overview);
    // the list and the stream start together: a list read before the stream's starting point may
    // miss the events in between, so read it again once (rare: the socket usually answers first)
    if (first && loadedBeforeHello) load();
  },
  onEvent,
  onOverview: (msg) => { applyOverview(msg.overview); renderFrame(); },
});

// --- controls ------------------------------------------------------------------------------------

let searchTimer = null;
search.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    const q = search.value.trim();
    if (q !== state.search) changeFilter(() => { state.search = q; }, { replace: true });
  }, 200);
});
search.addEventListener("keydown", (e) => { if (e.key === "Escape") { search.value = ""; search.dispatchEvent(new Event("input")); search.blur(); } });
needsMeBtn.addEventListener("click", () => changeFilter(() => { state.needsMe = !state.needsMe; state.status = ""; }));
sortSel.addEventListener("change", () => changeFilter(() => { state.sort = sortSel.value; }));
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
      if (stream.state !== "live") load({ animateNew: true });
      summaryEl.textContent = `Created “${item.title}”.`;
    } catch (err) {
      for (const f of (err.extra && err.extra.errors) || []) if (fld(f.field)) fld(f.field).setAttribute("aria-invalid", "true");
      showError(errorEl, describeError(err, "Create"));
    } finally {
      submit.disabled = false;
    }
  });
}

readUrl();
renderFilters();
renderSummary();
stream.start();
load().then(() => { loadedBeforeHello = loaded && !helloSeen; });
api("/overview").then((ov) => { overview.apply(ov); }).catch((err) => {
  document.getElementById("overview").replaceChildren(h("p", { class: "muted small" }, describeError(err, "Loading the overview")));
});
startTicker(() => overview.tick());
