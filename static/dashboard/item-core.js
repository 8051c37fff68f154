// What the modules of the work item page share: its configuration, its state, the graph view and
// a small event hub. item.js loads the data and feeds the hub; the header, the panel, the
// timeline and the dialogs each listen to it and draw their own part of the page.
//
// Kinds: "detail" (a WorkItemDetail was loaded), "graph" (a Graph was drawn), "events" (events
// to show, any order), "event" (one live event), "progress" (a live progress message), "select"
// and "open" (a node selected / opened in the graph), "open-run" (the timeline asks the panel to
// show one run) and "tick" (once a second, the page's one clock).
import { readConfig } from "./common.js";
import { GraphView } from "./graph.js";

export const config = readConfig();
export const itemId = config.item_id;
export const base = `/work-items/${encodeURIComponent(itemId)}`;
export const TERMINAL = new Set(["done", "cancelled"]);
export const state = { detail: null, graph: null, events: new Map(), panelOpen: false };
export const $ = (id) => document.getElementById(id);

const listeners = new Map();

export function on(kind, fn) {
  if (!listeners.has(kind)) listeners.set(kind, []);
  listeners.get(kind).push(fn);
}

export function emit(kind, ...args) {
  for (const fn of listeners.get(kind) || []) {
    try { fn(...args); } catch (err) { console.error(`item page: a ${kind} listener failed`, err); }
  }
}

export const graphView = new GraphView($("graph"), {
  onSelect: (node) => emit("select", node),
  onOpen: (node) => emit("open", node),
});

// item.js installs the real loaders; a module that changed something asks for fresh data here
export const refreshers = { graph: () => {}, detail: () => {} };
export function refreshAll() { refreshers.graph(); refreshers.detail(); }
