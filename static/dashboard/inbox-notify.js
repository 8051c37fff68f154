// The inbox's browser notifications, opt-in per person: the choice is kept with the user
// (GET/PATCH /me/settings), so it follows them to every browser; each browser still asks its own
// permission. Offered only to a person who may act on what it announces (change_workitem: the
// page builds a Notifier for them only).
//
// A notification when a question (a stage starts waiting) or a failure (an item needs attention)
// arrives, naming the item and the stage; clicking it opens the inbox at that row. Not for what
// the person did themselves (the item's newest event, as the inbox read it, carries their actor), and
// at most one per item per minute, across this browser's tabs (localStorage; the notification's
// tag also makes a second one replace the first).
//
// On the inbox its Notifier reads the inbox's own reads. Every other dashboard page of a person
// who turned notifications on (boot config `notify`) watches too (`notifyElsewhere`), so a lead
// with any Work Center tab open is told.
import { LiveStream, api, describeError, setInboxCount } from "./common.js";

const PER_ITEM_MS = 60_000;
const SHARED_KEY = "wc-inbox-notified"; // {item id: ms of its last notification}
const TEXT = 160;

const cut = (text) => { const t = String(text || "").replace(/\s+/g, " ").trim(); return t.length > TEXT ? `${t.slice(0, TEXT - 1)}…` : t; };

export class Notifier {
  constructor({ username, openRow }) {
    this.me = `user:${username}`;
    this.openRow = openRow;
    this.on = false;
    this.loaded = false;
    this.known = null; // the rows of the last read, by question (or failure) and run
    this.sent = new Map(); // item id -> ms (this tab; the shared record is in localStorage)
    this.toggle = document.getElementById("notify-toggle");
    this.status = document.getElementById("notify-status");
    this.prompt = document.getElementById("notify-prompt");
    this.promptText = document.getElementById("notify-prompt-text");
    this.allow = document.getElementById("notify-allow");
  }

  start() {
    this.toggle.addEventListener("click", () => this.onToggle());
    this.allow.addEventListener("click", () => this.askPermission());
    document.getElementById("notify-off").addEventListener("click", () => this.save(false));
    api("/me/settings").then((s) => {
      this.on = Boolean(s.browser_notifications);
      this.loaded = true;
      this.render();
    }).catch((err) => { this.status.textContent = describeError(err, "Reading your notification setting"); });
  }

  permission() {
    return "Notification" in window ? Notification.permission : "unsupported";
  }

  render() {
    const p = this.permission();
    this.toggle.disabled = !this.loaded;
    this.toggle.setAttribute("aria-pressed", String(this.on));
    this.toggle.textContent = this.on ? "Notifications on" : "Notify me";
    const words = {
      granted: "A notification when a question or a failure you can act on arrives.",
      default: "On for you: this browser still needs your permission (below).",
      denied: "On for you, but this browser blocks notifications from this site.",
      unsupported: "On for you, but this browser cannot show notifications.",
    };
    this.status.textContent = this.on ? words[p] : "";
    this.prompt.hidden = !this.on || p === "granted";
    this.allow.hidden = p !== "default";
    this.promptText.textContent = p === "default"
      ? "You asked to be told when a new question or failure arrives. This browser needs your permission to show notifications."
      : p === "denied"
        ? "This browser blocks notifications from this site: allow them in the site's settings (the icon left of the address), then reload."
        : "This browser cannot show notifications; your choice still holds in the browsers that can.";
  }

  async askPermission() {
    if (this.permission() === "default") {
      try { await Notification.requestPermission(); } catch { /* an old browser: the callback form */ }
    }
    this.render();
  }

  async onToggle() {
    const want = !this.on;
    if (want) await this.askPermission(); // in the click: a browser asks only then
    await this.save(want);
  }

  async save(on) {
    this.toggle.disabled = true;
    try {
      const s = await api("/me/settings", { method: "PATCH", body: { browser_notifications: on } });
      this.on = Boolean(s.browser_notifications);
    } catch (err) {
      this.status.textContent = describeError(err, "Saving your notification setting");
      this.toggle.disabled = false;
      return;
    }
    this.render();
  }

  /** The rows of a read: those new since the last read announce themselves (none at the first). */
  seen(rows, first) {
    const keyOf = (r) => `${r.kind}|${r.item_id}|${r.action_id}|${r.run_id || ""}`;
    const now = new Map(rows.map((r) => [keyOf(r), r]));
    const before = this.known;
    this.known = new Set(now.keys());
    if (first || before === null) return;
    const fresh = new Map();
    for (const [key, r] of now) {
      if (before.has(key)) continue;
      if (!fresh.has(r.item_id)) fresh.set(r.item_id, []);
      fresh.get(r.item_id).push(r);
    }
    for (const [itemId, list] of fresh) this.announce(itemId, list);
  }

  recently(itemId, at) {
    if (at - (this.sent.get(itemId) || 0) < PER_ITEM_MS) return true;
    try {
      const shared = JSON.parse(localStorage.getItem(SHARED_KEY) || "{}");
      return at - (Number(shared[itemId]) || 0) < PER_ITEM_MS;
    } catch { return false; }
  }

  remember(itemId, at) {
    this.sent.set(itemId, at);
    try {
      const shared = JSON.parse(localStorage.getItem(SHARED_KEY) || "{}");
      for (const [id, ms] of Object.entries(shared)) if (at - ms >= PER_ITEM_MS) delete shared[id];
      shared[itemId] = at;
      localStorage.setItem(SHARED_KEY, JSON.stringify(shared));
    } catch { /* storage off: this tab's record still holds */ }
  }

  announce(itemId, list) {
    if (!this.on || this.permission() !== "granted") return;
    if (list.some((r) => r.last_actor === this.me)) return; // the person's own doing
    const at = Date.now();
    if (this.recently(itemId, at)) return;
    const r = list[0];
    const question = r.kind === "question";
    const more = list.length > 1 ? ` (+${list.length - 1} more)` : "";
    const key = `${r.item_id}/${r.stage_id}`;
    let note;
    try {
      note = new Notification(`${question ? "Question" : "Needs attention"}: ${r.title}`, {
        body: `${r.stage_id} ${question ? "asks" : "failed"}: ${cut(r.text) || (question ? "(no question given)" : "(no error given)")}${more}`,
        tag: `wc-inbox-${r.item_id}`,
      });
    } catch {
      return; // a browser that shows them only from a service worker
    }
    this.remember(itemId, at);
    note.onclick = () => {
      window.focus();
      this.openRow(key);
      if (note.close) note.close();
    };
  }
}

const NEEDS = ["waiting", "needs_attention"]; // the item statuses the inbox lists

/** Any dashboard page but the inbox, for a person who turned notifications on, in a browser that
 * shows them: the page follows every item's stored events (its own /ws/work-items/ stream, which
 * only such a person opens) and reads the inbox again when an item starts or goes on waiting or
 * needing attention; what is new since the last read is announced as on the inbox, and the nav
 * badge follows the same read. Clicking a notification opens the inbox at its row. */
export function notifyElsewhere({ username }) {
  if (!("Notification" in window) || Notification.permission !== "granted") return null;
  const notifier = new Notifier({ username, openRow: (key) => window.location.assign(`/inbox/#${key}`) });
  notifier.on = true;
  let first = true;
  let reading = null;
  let again = false;
  const read = () => {
    if (reading) { again = true; return; }
    reading = api("/inbox").then((data) => {
      notifier.seen(data.rows, first);
      first = false;
      setInboxCount(data.items);
    }).catch(() => { /* the next event or reconnection reads again */ }).finally(() => {
      reading = null;
      if (again) { again = false; read(); }
    });
  };
  const stream = new LiveStream("/ws/work-items/", {
    onHello: () => read(), // the first read is the baseline; one after a reconnection announces what came meanwhile
    onEvent: (msg) => { if (NEEDS.includes(msg.work_item?.status)) read(); },
    onState: () => {}, // the page's own stream shows the connection
  });
  stream.start();
  return stream;
}
