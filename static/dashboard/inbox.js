// The inbox (docs/dashboard.md "Inbox"): every stage that waits for an answer and every item that
// needs attention, oldest first, grouped by item, live.
//
// Where things come from: GET /inbox, read again whenever the list's stream (/ws/work-items/)
// carries an event of an item on screen or of one that now waits or needs attention (push only:
// no timer asks the server). Each row carries its item's revision and state token, the fence of
// the bulk retry that answers it: a question answered, asked again or changed after the read is
// refused alone (state_changed, in the server's words) and the other answers still go through.
// An answer being typed is never lost: a re-read keeps the box (and its text) of a question that
// still waits, and keeps a question that stopped waiting on screen, marked, until it is dismissed.
import {
  LiveStream, STATUS_LABEL, api, badge, describeError, h, readConfig, setInboxCount, shortId, showError,
  startTicker, timeEl,
} from "./common.js";
import { BulkSelection, bulkBody } from "./list-bulk.js";
import { Notifier } from "./inbox-notify.js";

const config = readConfig();
const may = config.may || {};
const NEEDS = ["waiting", "needs_attention"];
const MAX_ANSWER = 8000;
const REASON = "answered in the inbox";

const table = document.getElementById("inbox");
const summaryEl = document.getElementById("inbox-summary");
const errorEl = document.getElementById("inbox-error");
const emptyEl = document.getElementById("inbox-empty");
const sendBar = document.getElementById("inbox-send");

const state = { data: null, loaded: false };
const groups = new Map(); // item id -> {tbody, head, item}
const rowEls = new Map(); // row key -> {tr, row, info, box?, area?, result}
const typed = new Map(); // question key -> what the person typed
const stale = new Map(); // question key -> {row, why}: stopped waiting while an answer was typed
const recent = new Map(); // item id -> its latest events seen on the stream (type, actor, action), oldest first
const RECENT = 20;
const results = new Map(); // row element key -> {kind, text}: what became of its last send
const sending = new Set(); // question keys on their way: a re-read meanwhile does not call them stale
let current = null; // the row key the keyboard is on

const bulk = may.bulk ? new BulkSelection({ rows: () => [...groups.values()].map((g) => ({ item: g.item, tr: g.tbody })), onItems: () => reload() }) : null;
const notifier = may.retry ? new Notifier({ username: config.username, openRow: (key) => goTo(key) }) : null;

const rowKey = (r) => `${r.item_id}/${r.stage_id}`;
const questionKey = (r) => `${r.item_id}|${r.action_id}|${r.run_id || ""}`;
const actorName = (actor) => String(actor || "someone").replace(/^user:/, "");
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// --- reading ---------------------------------------------------------------------------------------

let reading = null;
let helloSeen = false;
let readBeforeHello = false;
let again = false;

/** Read the inbox again; a call while a read is on its way makes one more read after it. */
function reload() {
  if (reading) { again = true; return reading; }
  reading = (async () => {
    try {
      const data = await api("/inbox");
      showError(errorEl, "");
      apply(data);
    } catch (err) {
      showError(errorEl, describeError(err, "Reading the inbox"));
    } finally {
      reading = null;
      if (again) { again = false; reload(); }
    }
  })();
  return reading;
}

// a question's read may outrun the event that ended it: this reason is told again as events arrive
const UNKNOWN_WHY = "it no longer waits for an answer";

/** Why a question the person was answering no longer waits, from the events seen since the read. */
function whyGone(row) {
  const events = [...(recent.get(row.item_id) || [])].reverse(); // newest first
  const retried = events.filter((e) => e.type === "work_item.retried");
  const mine = retried.find((e) => e.action_id === row.action_id) || retried[0];
  if (mine) return `answered meanwhile by ${actorName(mine.actor)}`;
  const cancelled = events.find((e) => e.type === "work_item.cancelled");
  if (cancelled) return `the item was cancelled meanwhile by ${actorName(cancelled.actor)}`;
  const reset = events.find((e) => e.type === "action.reset" && e.action_id === row.action_id);
  if (reset) return `the stage was reset meanwhile by ${actorName(reset.actor)}`;
  return UNKNOWN_WHY;
}

function apply(data) {
  const before = state.data;
  state.data = data;
  state.loaded = true;
  const waitingNow = new Map(data.rows.filter((r) => r.kind === "question").map((r) => [questionKey(r), r]));
  // a question being answered that stopped waiting stays on screen, marked, with its text
  for (const r of before ? before.rows : []) {
    const key = questionKey(r);
    if (r.kind !== "question" || waitingNow.has(key) || !(typed.get(key) || "").trim() || stale.has(key)
        || sending.has(key)) continue;
    const asked = data.rows.find((n) => n.kind === "question" && n.item_id === r.item_id && n.action_id === r.action_id);
    stale.set(key, { row: r, why: asked ? "the stage asked a new question meanwhile: read it below" : whyGone(r) });
  }
  render();
  if (notifier) notifier.seen(data.rows, before === null);
  setInboxCount(data.items);
}

// --- rendering -------------------------------------------------------------------------------------

/** The rows by item, each item where its oldest row is; stale rows beside their item's. */
function grouped() {
  const out = new Map();
  const add = (r, extra) => {
    if (!out.has(r.item_id)) out.set(r.item_id, { item: { id: r.item_id, title: r.title, status: r.item_status }, rows: [] });
    out.get(r.item_id).rows.push({ ...r, ...extra });
  };
  for (const r of state.data.rows) add(r, {});
  for (const [key, s] of stale) add(s.row, { staleKey: key, why: s.why });
  return out;
}

function triedLine(r) {
  const earlier = r.tried.filter((t) => t.run_id !== r.run_id);
  const parts = [h("span", { class: "tried-count" }, `Attempt ${r.attempts || 1}`)];
  if (earlier.length) {
    const items = earlier.map((t) => h("li", { dataset: { status: t.status } },
      h("span", { class: "dot", dataset: { status: t.status }, "aria-hidden": "true" }),
      h("span", { class: "tried-status" }, STATUS_LABEL[t.status] || t.status), ": ",
      t.summary || t.error || h("span", { class: "muted" }, "(no summary)"),
      t.ended_at ? [" · ", timeEl(t.ended_at)] : null));
    parts.push(h("details", { class: "tried" }, h("summary", {}, `what it tried before (${plural(earlier.length, "run")})`),
      h("ul", { class: "tried-list" }, items)));
  }
  const own = r.tried.find((t) => t.run_id === r.run_id);
  if (own && own.summary) parts.splice(1, 0, h("span", { class: "tried-summary" }, ` · this run: ${own.summary}`));
  return h("div", { class: "tried-line muted small" }, parts);
}

function rowInfo(r) {
  const question = r.kind === "question";
  const head = h("div", { class: "row-head" },
    h("span", { class: "row-icon", dataset: { status: question ? "waiting" : "failed" }, "aria-hidden": "true" }, question ? "?" : "!"),
    h("span", { class: "row-stage" }, r.stage_id), question ? " asks" : " failed",
    h("span", { class: "row-since muted" }, " · ", timeEl(r.since)),
    question && r.current && r.item_status === "waiting" ? h("span", { class: "tag row-current", title: "The item resumes from this stage: answer it whenever you answer another stage of this item" }, "resumes here") : null,
    !question && r.failed_stages > 1 ? h("span", { class: "muted" }, ` (+${r.failed_stages - 1} more stage${r.failed_stages > 2 ? "s" : ""} failed)`) : null);
  const text = r.text || (question ? "(no question given)" : "(no error given)");
  return [head, h("p", { class: question ? "quote row-text" : "row-error row-text" }, text), triedLine(r)];
}

function answerBox(r, key) {
  const id = `answer-${r.item_id}-${r.action_id}`;
  const area = h("textarea", { id, rows: "2", maxlength: String(MAX_ANSWER), class: "row-answer",
    "aria-label": `Your answer to ${r.stage_id} of “${r.title}”`, dataset: { key } });
  area.value = typed.get(key) || "";
  area.addEventListener("input", () => {
    typed.set(key, area.value);
    if (results.has(key)) { results.delete(key); showResult(rowEls.get(key)); }
    renderSendBar();
  });
  area.addEventListener("focus", () => setCurrent(area.closest("tr").dataset.key, { focus: false }));
  const note = r.item_status === "needs_attention"
    ? h("p", { class: "muted small row-note" }, "The item also needs attention: sending the answer retries its failed stage too.") : null;
  return { box: h("div", { class: "row-box" }, h("label", { for: id, class: "visually-hidden" }, "Your answer"), area, note), area };
}

function failureActions(r) {
  if (!bulk) return null;
  const act = (op) => { bulk.selected = new Set([r.item_id]); bulk.sync(); bulk.open(op); };
  return h("div", { class: "row-actions" },
    h("button", { type: "button", class: "btn btn-small", "aria-haspopup": "dialog", onclick: () => act("retry") }, "Retry…"),
    h("button", { type: "button", class: "btn btn-small btn-danger-quiet", "aria-haspopup": "dialog", onclick: () => act("cancel") }, "Cancel…"));
}

/** One row's element, made once per question (or failure) and kept across reads: its box keeps
 * focus, caret and text while the rest of the row is redrawn. */
function rowEl(r) {
  const key = r.staleKey || (r.kind === "question" ? questionKey(r) : `failure|${r.item_id}|${r.action_id}|${r.run_id || ""}`);
  let el = rowEls.get(key);
  if (!el) {
    const tr = h("tr", { class: "inbox-row", tabindex: "-1", dataset: { key: rowKey(r), kind: r.kind, item: r.item_id, stage: r.stage_id } });
    tr.addEventListener("click", (e) => { if (!e.target.closest("button, a, textarea, input, summary")) setCurrent(tr.dataset.key); });
    el = { tr, info: h("div", { class: "row-info" }), result: h("p", { class: "row-result small", role: "status" }) };
    if (r.kind === "question" && may.retry) Object.assign(el, answerBox(r, key));
    tr.append(...(bulk ? [h("td", { class: "col-select" })] : []),
      h("td", { class: "row-cell" }, el.info, el.box || null, r.kind === "failure" ? failureActions(r) : null, el.result));
    rowEls.set(key, el);
  }
  el.row = r;
  el.key = key;
  el.tr.dataset.stale = r.staleKey ? "true" : "false";
  const info = rowInfo(r);
  if (r.staleKey) info.unshift(h("p", { class: "row-stale" }, `Not sent: ${r.why}. Your answer is kept here. `,
    h("button", { type: "button", class: "btn btn-small btn-quiet", onclick: () => dismiss(key) }, "Dismiss")));
  el.info.replaceChildren(...info);
  if (el.area) el.area.readOnly = Boolean(r.staleKey);
  showResult(el);
  return el;
}

function groupEl(id, g) {
  let group = groups.get(id);
  if (!group) {
    const tbody = h("tbody", { class: "inbox-item", dataset: { item: id } });
    const head = h("tr", { class: "inbox-item-head" });
    tbody.append(head);
    group = { tbody, head };
    groups.set(id, group);
  }
  group.item = g.item;
  const counts = { question: 0, failure: 0 };
  for (const r of g.rows) if (!r.staleKey) counts[r.kind] += 1;
  const what = [counts.question && plural(counts.question, "question"), counts.failure && "needs attention"].filter(Boolean).join(" · ");
  group.head.replaceChildren(...(bulk ? [bulk.cell(g.item)] : []), h("td", { class: "item-cell" },
    badge(g.item.status), h("a", { class: "item-title", href: `/work-items/${encodeURIComponent(id)}/`, title: g.item.title }, g.item.title),
    h("span", { class: "muted small item-what" }, what || "no longer waiting"), h("span", { class: "muted small mono item-id" }, shortId(id))));
  return group;
}

function render() {
  const byItem = grouped();
  const keepRows = new Set();
  let prevGroup = table.tHead;
  for (const [id, g] of byItem) {
    const group = groupEl(id, g);
    if (prevGroup.nextSibling !== group.tbody) table.insertBefore(group.tbody, prevGroup.nextSibling);
    prevGroup = group.tbody;
    let prev = group.head;
    for (const r of g.rows) {
      const el = rowEl(r);
      keepRows.add(el.key);
      if (prev.nextSibling !== el.tr) group.tbody.insertBefore(el.tr, prev.nextSibling);
      prev = el.tr;
    }
  }
  for (const [key, el] of rowEls) if (!keepRows.has(key)) { el.tr.remove(); rowEls.delete(key); }
  for (const [id, g] of groups) if (!byItem.has(id)) { g.tbody.remove(); groups.delete(id); }
  const d = state.data;
  const parts = [d.questions && plural(d.questions, "question"), d.failures && `${plural(d.failures, "item")} needing attention`];
  summaryEl.textContent = d.rows.length
    ? `${parts.filter(Boolean).join(" and ")}${d.questions ? `, across ${plural(d.items, "item")}` : ""}${d.truncated ? " (the oldest 500 items)" : ""}.`
    : "Nothing needs you.";
  emptyEl.hidden = byItem.size > 0;
  if (bulk) bulk.prune();
  if (current && !rowByKey(current)) current = null;
  markCurrent();
  renderSendBar();
}

function dismiss(key) {
  stale.delete(key);
  typed.delete(key);
  render();
}

// --- answering in place ------------------------------------------------------------------------------

/** The typed answers that may be sent: {item: [{el, action_id, answer}]} of the questions still waiting. */
function typedAnswers() {
  const out = new Map();
  for (const el of rowEls.values()) {
    const text = (el.area?.value || "").trim();
    if (!el.area || el.row.staleKey || !text) continue;
    if (!out.has(el.row.item_id)) out.set(el.row.item_id, []);
    out.get(el.row.item_id).push({ el, action_id: el.row.action_id, answer: text });
  }
  return out;
}

function renderSendBar() {
  if (!sendBar) return;
  const n = [...typedAnswers().values()].reduce((a, list) => a + list.length, 0);
  sendBar.hidden = n === 0;
  document.getElementById("inbox-send-count").textContent = `${plural(n, "answer")} typed`;
  document.getElementById("inbox-send-button").textContent = n ? `Send ${plural(n, "answer")}` : "Send";
}

function showResult(el) {
  if (!el) return;
  const res = results.get(el.key);
  el.result.dataset.result = res ? res.kind : "";
  el.result.textContent = res ? res.text : "";
  el.result.hidden = !res;
}

function setResult(el, kind, text) {
  results.set(el.key, { kind, text });
  showResult(el);
}

/** Every typed answer, one bulk retry: each item in its own transaction, fenced by the revision
 * and state token of the read that showed its questions. */
async function send() {
  const byItem = typedAnswers();
  for (const s of stale.keys()) { const el = rowEls.get(s); if (el) setResult(el, "refused", "Not sent: see above."); }
  if (!byItem.size) return;
  const ids = [];
  const answers = {};
  for (const [itemId, list] of byItem) {
    const long = list.find((a) => a.answer.length > MAX_ANSWER);
    const first = list[0].el.row;
    const resumes = first.item_status === "waiting"
      && state.data.rows.find((r) => r.kind === "question" && r.item_id === itemId && r.current);
    if (long) {
      setResult(long.el, "refused", "Not sent: the answer is longer than 8,000 characters.");
    } else if (resumes && !list.some((a) => a.action_id === resumes.action_id)) {
      for (const a of list) setResult(a.el, "refused", `Not sent: answer ${resumes.stage_id} too — the item resumes from it.`);
    } else {
      ids.push(itemId);
      answers[itemId] = list.map(({ action_id, answer }) => ({ action_id, answer }));
      for (const a of list) { setResult(a.el, "sending", "Sending…"); sending.add(a.el.key); }
    }
  }
  if (!ids.length) return;
  const fenced = ids.map((id) => {
    const row = state.data.rows.find((r) => r.item_id === id);
    return { id, revision: row.revision, state_token: row.state_token };
  });
  const body = bulkBody("retry", fenced, REASON, answers);
  const button = document.getElementById("inbox-send-button");
  button.disabled = true;
  let out;
  try {
    out = await api("/work-items/bulk", { method: "POST", body });
  } catch (err) {
    for (const id of ids) for (const a of byItem.get(id)) { sending.delete(a.el.key); setResult(a.el, "refused", describeError(err, "Sending the answer")); }
    render();
    return;
  } finally {
    button.disabled = false;
  }
  let sent = 0;
  const waiting = new Set(state.data.rows.filter((r) => r.kind === "question").map(questionKey));
  for (const res of out.results) {
    for (const a of byItem.get(res.id) || []) {
      const key = a.el.key;
      sending.delete(key);
      if (res.ok) {
        sent += 1;
        typed.delete(key);
        results.delete(key);
        if (a.el.area) a.el.area.value = "";
        continue;
      }
      const why = (res.message || res.code || "refused").replace(/\.$/, "");
      results.set(key, { kind: "refused", text: `Refused: ${why}. Your answer is kept: read the question again and send it if it still stands.` });
      // a re-read while it was on its way may have taken its question away: keep it on screen
      if (!waiting.has(key) && !stale.has(key)) stale.set(key, { row: a.el.row, why: "the server refused it (below)" });
    }
  }
  const refused = out.results.filter((r) => !r.ok).length;
  document.getElementById("inbox-send-note").textContent = `Sent ${plural(sent, "answer")}${refused ? `; ${plural(refused, "item")} refused (see the row)` : ""}.`;
  render();
  reload();
}

// --- the keyboard ------------------------------------------------------------------------------------

const navRows = () => [...table.querySelectorAll("tr.inbox-row")];
const rowByKey = (key) => navRows().find((tr) => tr.dataset.key === key) || null;

function markCurrent() {
  for (const tr of table.querySelectorAll("tr.inbox-row.current")) if (tr.dataset.key !== current) tr.classList.remove("current");
  const tr = current && rowByKey(current);
  if (tr) tr.classList.add("current");
}

function setCurrent(key, { focus = true } = {}) {
  current = key;
  markCurrent();
  const tr = rowByKey(key);
  if (tr && focus) { tr.focus({ preventScroll: true }); tr.scrollIntoView({ block: "nearest" }); }
}

function move(step) {
  const all = navRows();
  if (!all.length) return;
  const at = all.findIndex((tr) => tr.dataset.key === current);
  const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
  setCurrent(all[next].dataset.key);
}

function currentEl() {
  const tr = current && rowByKey(current);
  return tr ? [...rowEls.values()].find((el) => el.tr === tr) : null;
}

function act(op) {
  const el = currentEl();
  if (!bulk) return;
  if (el && !bulk.selected.has(el.row.item_id)) { bulk.selected = new Set([el.row.item_id]); bulk.sync(); }
  if (bulk.selected.size) bulk.open(op);
}

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || document.querySelector("dialog[open]")) return;
  const t = e.target;
  if (t && t.classList && t.classList.contains("row-answer")) {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
    if (e.key === "Escape") { e.preventDefault(); t.blur(); setCurrent(t.closest("tr").dataset.key); }
    return;
  }
  if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)) && e.key !== "Escape") return;
  if (t && /^(BUTTON|A|SUMMARY)$/.test(t.tagName) && (e.key === "Enter" || e.key === " ")) return;
  const el = currentEl();
  switch (e.key) {
    case "j": case "ArrowDown": e.preventDefault(); move(1); break;
    case "k": case "ArrowUp": e.preventDefault(); move(-1); break;
    case "a": case "Enter":
      if (el?.area && !el.row.staleKey) { e.preventDefault(); el.area.focus(); }
      else if (e.key === "Enter" && el?.row.kind === "failure") { e.preventDefault(); act("retry"); }
      break;
    case "x":
      if (bulk && el) {
        e.preventDefault();
        const id = el.row.item_id;
        if (bulk.selected.has(id)) bulk.selected.delete(id); else bulk.selected.add(id);
        bulk.sync();
      }
      break;
    case "r": if (bulk) { e.preventDefault(); act("retry"); } break;
    case "c": if (bulk) { e.preventDefault(); act("cancel"); } break;
    case "Escape": if (t && t.blur) t.blur(); current = null; markCurrent(); break;
    default: break;
  }
});

// --- the row a link or a notification names (#<item>/<stage>) -----------------------------------------

function goTo(key) {
  if (location.hash !== `#${key}`) history.replaceState(null, "", `#${key}`);
  const tr = rowByKey(key);
  if (!tr) return;
  setCurrent(key);
  tr.classList.remove("row-flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add("row-flash");
}

const hashKey = () => {
  try { return decodeURIComponent(location.hash.slice(1)); } catch { return ""; }
};
window.addEventListener("hashchange", () => { if (hashKey()) goTo(hashKey()); });

// --- live ---------------------------------------------------------------------------------------------

function onEvent(msg) {
  const ev = msg.event;
  const item = msg.work_item;
  const id = ev?.work_item_id || item?.id;
  if (!id) return;
  if (!recent.has(id)) recent.set(id, []);
  const events = recent.get(id);
  events.push({ type: ev?.type, actor: ev?.actor, action_id: ev?.action_id });
  if (events.length > RECENT) events.shift();
  let told = false; // a stale question of this item whose reason was not known yet: its event may say it now
  for (const s of stale.values()) {
    if (s.row.item_id !== id || s.why !== UNKNOWN_WHY) continue;
    s.why = whyGone(s.row);
    told = told || s.why !== UNKNOWN_WHY;
  }
  if (told) render();
  if (!state.loaded) return;
  if (groups.has(id) || (item && NEEDS.includes(item.status))) reload();
}

const stream = new LiveStream("/ws/work-items/", {
  gapCheck: true,
  onHello: (msg, { first }) => {
    helloSeen = true;
    // a read made before the stream's starting point may miss the events in between: once more
    if (!first || readBeforeHello) reload();
  },
  onEvent,
});

if (sendBar) document.getElementById("inbox-send-button").addEventListener("click", () => send());
stream.start();
reload().then(() => {
  readBeforeHello = state.loaded && !helloSeen;
  if (hashKey()) goTo(hashKey());
});
if (notifier) notifier.start();
startTicker();
