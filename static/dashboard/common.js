// Shared pieces of the dashboard pages: the JSON API client, the live stream, time and status words.

export const STATUS_LABEL = {
  draft: "draft", ready: "ready", running: "running", waiting: "waiting", needs_attention: "needs attention",
  done: "done", cancelled: "cancelled", completed: "completed", failed: "failed", superseded: "superseded",
  interrupted: "interrupted", retryable: "retryable", changes_requested: "changes requested",
};
export const STATUS_ICON = {
  draft: "○", ready: "○", running: "▶", waiting: "?", needs_attention: "!", failed: "✕",
  done: "✓", completed: "✓", cancelled: "–", superseded: "–", interrupted: "‖", retryable: "↻", changes_requested: "↺",
};

export function readConfig() {
  const node = document.getElementById("wc-config");
  return node ? JSON.parse(node.textContent) : {};
}

// --- the nav's inbox badge and the tab title ----------------------------------------------------
// The badge counts the items waiting for an answer or needing attention (the overview's `waiting`
// + `needs_attention`; the inbox counts the same items): as the page opens from its boot config,
// then from every overview the list's stream pushes (LiveStream below) and from the inbox's own
// reads. The tab title carries it too: "(3) Work items · Work Center".

let inboxCount = 0;

/** The tab title with the count in front; a page that retitles itself (the item page) keeps it. */
function titleWithCount() {
  const bare = document.title.replace(/^\(\d+\) /, "");
  const want = inboxCount ? `(${inboxCount}) ${bare}` : bare;
  if (document.title !== want) document.title = want;
}

/** Show `n` items needing someone in the nav badge and the tab title. */
export function setInboxCount(n) {
  inboxCount = Math.max(0, Number(n) || 0);
  const badgeEl = document.getElementById("nav-inbox-count");
  if (badgeEl) {
    badgeEl.textContent = String(inboxCount);
    badgeEl.hidden = inboxCount === 0;
    badgeEl.setAttribute("aria-label", `${inboxCount} item${inboxCount === 1 ? "" : "s"} need${inboxCount === 1 ? "s" : ""} someone`);
  }
  titleWithCount();
}

const titleNode = document.querySelector("title");
if (titleNode) new MutationObserver(titleWithCount).observe(titleNode, { childList: true, characterData: true, subtree: true });
setInboxCount(readConfig().inbox_count);
// notifications on for this person: this page announces new questions and failures too
if (readConfig().notify) import("./inbox-notify.js").then((m) => m.notifyElsewhere(readConfig()));

// --- performance entries --------------------------------------------------------------------------
// The pages time their own drawing with the User Timing API: the browser's performance tools show
// the entries, and the browser tests read them (performance.getEntriesByName). Only the latest entry
// of a name is kept: a page open all day would otherwise pile up one per update.

/** The mark `name` now, carrying `detail`; the previous mark of that name goes. */
export function markLatest(name, detail = null) {
  performance.clearMarks(name);
  performance.mark(name, { detail });
}

/** The measure `name` from `start` to `end` (performance.now() times), carrying `detail`; the
 * previous measure of that name goes. */
export function measureLatest(name, start, detail = null, end = performance.now()) {
  performance.clearMeasures(name);
  performance.measure(name, { start, end, detail });
}

// --- DOM ------------------------------------------------------------------------------------------

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    // through the CSSOM: the Content-Security-Policy (style-src 'self') refuses style="" markup
    else if (k === "style") el.style.cssText = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function badge(status, extraClass = "") {
  return h("span", { class: `badge ${extraClass}`.trim(), dataset: { status } },
    h("span", { class: "badge-icon", "aria-hidden": "true" }, STATUS_ICON[status] || "•"), STATUS_LABEL[status] || status);
}

export function setBadge(el, status) {
  el.dataset.status = status;
  el.replaceChildren(h("span", { class: "badge-icon", "aria-hidden": "true" }, STATUS_ICON[status] || "•"),
    STATUS_LABEL[status] || status);
}

export function showError(el, message) {
  if (!el) return;
  el.textContent = message || "";
  el.hidden = !message;
}

// --- time -----------------------------------------------------------------------------------------

const absFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

export function absTime(iso) {
  return iso ? absFormat.format(new Date(iso)) : "";
}

export function relTime(iso, now = Date.now()) {
  if (!iso) return "";
  const s = Math.round((now - Date.parse(iso)) / 1000);
  const future = s < 0;
  const a = Math.abs(s);
  let text;
  if (a < 5) return "just now";
  if (a < 60) text = `${a} s`;
  else if (a < 3600) text = `${Math.floor(a / 60)} min`;
  else if (a < 86400) text = `${Math.floor(a / 3600)} h`;
  else text = `${Math.floor(a / 86400)} d`;
  return future ? `in ${text}` : `${text} ago`;
}

export function ageText(iso, now = Date.now()) {
  const text = relTime(iso, now);
  return text === "just now" ? "new" : text.replace(/ ago$/, "");
}

/** A <time> kept fresh by the ticker: relative text, absolute time (viewer's zone) on hover. */
export function timeEl(iso, mode = "rel") {
  const el = h("time", { datetime: iso || "", title: absTime(iso), dataset: { rel: mode } });
  el.textContent = mode === "age" ? ageText(iso) : relTime(iso);
  return el;
}

export function refreshTimes(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll("time[data-rel]")) {
    const iso = el.getAttribute("datetime");
    const text = el.dataset.rel === "age" ? ageText(iso, now) : relTime(iso, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

export function startTicker(extra) {
  setInterval(() => { refreshTimes(); if (extra) extra(); }, 1000);
}

/** A duration for people: "0 s", "42 s", "3 m 07 s", "1 h 05 m", "2 d 3 h". */
export function formatDuration(ms) {
  const s = Math.max(0, Math.floor(Number(ms || 0) / 1000));
  const pad = (n) => String(n).padStart(2, "0");
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${pad(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} m`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** How long a run took (ended) or has taken so far (running), in ms; one rule for every view. */
export function runDurationMs(run, now = Date.now()) {
  if (!run || !run.started_at) return 0;
  const end = run.ended_at ? Date.parse(run.ended_at) : now;
  return Math.max(0, end - Date.parse(run.started_at));
}

export function shortId(id, n = 8) {
  return id ? (id.length > n ? `${id.slice(0, n)}…` : id) : "";
}

export function formatCount(n) {
  n = Number(n || 0);
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(n >= 1e5 ? 0 : 1)}k`;
  return n.toLocaleString();
}

// --- API ------------------------------------------------------------------------------------------

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || (status === 0 ? "network" : "http_error");
    this.extra = (body && body.extra) || {};
  }
}

function cookie(name) {
  const m = document.cookie.match(new RegExp(`(?:^|; )${name}=([^;]*)`));
  return m ? decodeURIComponent(m[1]) : "";
}

export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    headers["X-CSRFToken"] = cookie("csrftoken");
  }
  let resp;
  try {
    resp = await fetch(`/api/v1${path}`, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin", signal,
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, { message: "the server could not be reached" });
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) throw new ApiError(resp.status, data || { message: `the server answered ${resp.status}` });
  return data;
}

/** An API failure in words, prefixed with what the user tried ("Retry refused: …"). */
export function describeError(err, what) {
  if (!(err instanceof ApiError)) return `${what} failed: ${err && err.message ? err.message : err}`;
  const msg = err.message.replace(/\.$/, "");
  switch (err.code) {
    case "network": return `${what} failed: the server could not be reached — check the connection and try again.`;
    case "not_authenticated": return `${what} refused: you are signed out — reload the page to sign in again.`;
    case "permission_denied":
      return err.extra && err.extra.reason === "csrf"
        ? `${what} refused: the page's security token expired — reload the page and try again.`
        : `${what} refused: your account lacks the permission (${err.extra.permission || msg}).`;
    case "not_found": return `${what} failed: it no longer exists (${msg}).`;
    case "revision_conflict": return `${what} refused: the item changed meanwhile — reload shows the current state (${msg}).`;
    case "invalid_state": return `${what} refused: ${msg}.`;
    case "reservation_active": return `${what} refused: an integration is being finalised right now (${msg}). Try again shortly.`;
    case "invalid_input": {
      const errors = (err.extra && err.extra.errors) || [];
      if (errors.length) {
        const parts = errors.map((e) => `${(e.field || "").replace(/_/g, " ")}: ${e.message}`);
        return `${what} refused — please check ${parts.join("; ")}.`;
      }
      return `${what} refused: ${msg}.`;
    }
    default: return `${what} failed: ${msg}.`;
  }
}

// --- live stream (API.md §4) ------------------------------------------------------------------------

const STATE_LABEL = {
  connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", catching_up: "Catching up…",
  signed_out: "Signed out — reload", forbidden: "No access", silent: "No word from the server",
};

// The server sends {"type": "heartbeat"} every `heartbeat_s` seconds (the hello says how often,
// dashboard/stream/heartbeat.py): past this many intervals without any message the stream is
// called silent, a stopped or hung server, or a connection that died without a close.
export const SILENT_BEATS = 2.5;

export function showConnection(state, detail = "", label = "") {
  const el = document.getElementById("conn");
  if (!el) return;
  el.dataset.state = state;
  const text = label || STATE_LABEL[state] || state;
  const node = el.querySelector(".conn-label");
  if (node.textContent !== text) node.textContent = text;
  el.title = detail || text;
}

/**
 * A websocket that never leaves the page stale: exponential backoff with jitter on loss, resume
 * with `?after_id=<last seen id>` (the server replays with no gap and no duplicate), duplicate
 * events dropped by id, and `gapCheck` (global stream: ids are one sequence) forcing a resume when
 * an id was skipped.
 */
export class LiveStream {
  constructor(path, { onHello, onEvent, onProgress, onOverview, onLog, onState, gapCheck = false } = {}) {
    this.path = path;
    this.onLog = onLog || (() => {});
    this.onHello = onHello || (() => {});
    this.onOverview = onOverview || (() => {});
    this.onEvent = onEvent || (() => {});
    this.onProgress = onProgress || (() => {});
    this.onState = onState || showConnection;
    this.gapCheck = gapCheck;
    this.lastId = null; // null until the first hello: the page's own fetch is the starting state
    this.attempt = 0;
    this.ws = null;
    this.timer = null;
    this.catchUpTo = 0;
    this.stopped = false;
    this.state = "connecting";
    this.beatMs = 0; // the hello's heartbeat_s, in ms; 0: the server sends none
    this.heardAt = 0; // performance.now() of the last message
    this.quietState = null; // while silent: the state to return to when a message arrives
    window.addEventListener("online", () => this.reconnectNow());
    this.watch = setInterval(() => this.checkSilence(), 1000); // one timer per stream
  }

  setState(state, detail, label) {
    this.state = state;
    this.onState(state, detail, label);
  }

  /** Once a second: a stream silent past SILENT_BEATS heartbeats says so, counting up. */
  checkSilence(now = performance.now()) {
    if (!this.beatMs || !this.ws || !this.heardAt) return;
    if (this.state !== "silent" && this.state !== "live" && this.state !== "catching_up") return;
    const quiet = now - this.heardAt;
    if (quiet <= SILENT_BEATS * this.beatMs) return;
    if (this.state !== "silent") this.quietState = this.state;
    const s = Math.floor(quiet / 1000);
    this.setState("silent", `No message, not even a heartbeat (every ${Math.round(this.beatMs / 1000)} s), for ${s} s: `
      + "the server may be stopped or the connection lost", `No word from the server for ${s} s`);
  }

  heard() {
    this.heardAt = performance.now();
    if (this.state === "silent") { const back = this.quietState || "live"; this.quietState = null; this.setState(back); }
  }

  url() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = this.lastId !== null ? `?after_id=${this.lastId}` : "";
    return `${proto}//${location.host}${this.path}${q}`;
  }

  start(afterId = null) {
    if (afterId !== null && afterId !== undefined) this.lastId = afterId;
    this.connect();
    return this;
  }

  connect() {
    clearTimeout(this.timer);
    if (this.stopped) return;
    let ws;
    try { ws = new WebSocket(this.url()); } catch { this.scheduleReconnect(); return; }
    this.ws = ws;
    ws.onmessage = (m) => {
      if (ws !== this.ws) return;
      this.heard();
      let msg;
      try { msg = JSON.parse(m.data); } catch { return; }
      this.handle(msg);
    };
    ws.onclose = (e) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (e.code === 4401) { this.stopped = true; this.setState("signed_out", "Your session ended: reload to sign in"); return; }
      if (e.code === 4403) { this.stopped = true; this.setState("forbidden", "Your account may not view work items"); return; }
      this.scheduleReconnect();
    };
    ws.onerror = () => {};
  }

  handle(msg) {
    if (msg.type === "heartbeat") return;
    if (msg.type === "hello") {
      this.attempt = 0;
      this.beatMs = Number(msg.heartbeat_s || 0) * 1000;
      const serverLast = Number(msg.last_event_id || 0);
      const first = this.lastId === null;
      if (first) this.lastId = serverLast;
      this.catchUpTo = serverLast;
      this.setState(!first && serverLast > this.lastId ? "catching_up" : "live");
      if (msg.overview) setInboxCount(msg.overview.waiting + msg.overview.needs_attention);
      this.onHello(msg, { first });
    } else if (msg.type === "event" && msg.event) {
      const id = Number(msg.event.id);
      if (this.lastId !== null && id <= this.lastId) {
        // a duplicate (replay overlap, or the page read it over HTTP first): still the replay's progress
        if (this.state === "catching_up" && id >= this.catchUpTo) this.setState("live");
        return;
      }
      if (this.gapCheck && this.lastId !== null && this.lastId > 0 && id > this.lastId + 1) {
        // an id was skipped: resume from the last one seen so the server replays the hole
        this.resume();
        return;
      }
      this.lastId = id;
      this.onEvent(msg);
      if (this.state === "catching_up" && id >= this.catchUpTo) this.setState("live");
    } else if (msg.type === "progress") {
      this.onProgress(msg);
    } else if (msg.type === "log") {
      this.onLog(msg);
    } else if (msg.type === "overview" && msg.overview) {
      setInboxCount(msg.overview.waiting + msg.overview.needs_attention);
      this.onOverview(msg);
    }
  }

  /** Send `msg` to the server (a log follow); false when the socket is not open (the page sends
   *  it again after the next hello). */
  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(msg));
    return true;
  }

  /** Reconnect at once with ?after_id=<last seen id>. */
  resume() {
    const ws = this.ws;
    this.ws = null;
    if (ws) { ws.onclose = null; ws.onmessage = null; try { ws.close(); } catch { /* closed */ } }
    this.setState("catching_up");
    this.connect();
  }

  reconnectNow() {
    if (this.stopped || this.ws) return;
    this.attempt = 0;
    this.connect();
  }

  scheduleReconnect() {
    if (this.stopped) return;
    const delay = Math.min(15000, 500 * 2 ** this.attempt) * (0.75 + Math.random() * 0.5);
    this.attempt += 1;
    this.setState("reconnecting", `Connection lost; retrying in ${Math.round(delay / 1000)} s`);
    this.timer = setTimeout(() => this.connect(), delay);
  }
}

/** Run `fn` at most once per animation frame (coalesces bursts of events). */
export function coalesce(fn) {
  let pending = false;
  let running = false;
  let again = false;
  const run = async () => {
    pending = false;
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } finally {
      running = false;
      if (again) { again = false; schedule(); }
    }
  };
  const schedule = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(run);
  };
  return schedule;
}

export function installSlashFocus(input) {
  document.addEventListener("keydown", (e) => {
    if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (document.querySelector("dialog[open]")) return;
    e.preventDefault();
    input.focus();
    input.select();
  });
}

export function wireDialogClose(dialog) {
  for (const b of dialog.querySelectorAll("[data-close]")) b.addEventListener("click", () => dialog.close());
}
