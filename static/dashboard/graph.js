// The stage graph (UI.md "graph"): a layered layout drawn as SVG, updated in place.
//
// One node per stage, linear and graph items alike (item-stages.js folds a linear item's action
// per retry or review loop into its stage): the node shows its stage's current status and a
// count of its attempts ("×18"); a review that requested changes draws a back-edge to the stage
// it sent the work back to ("↺ ×2"). The path to a failed stage is red, to a waiting one amber.
//
// setGraph() diffs the new snapshot against what is drawn: when the node and edge sets are the
// same only the changed nodes are restyled (no layout); when they differ (plan applied, changes
// requested) the layout is recomputed and nodes glide to their new places.
//
// Legibility: node text is never drawn below 12 px on screen by the automatic view. The view
// never zooms in past 1 and never out below LEGIBLE_ZOOM; a graph that does not fit at that zoom
// is panned to the part that matters (the selected stage, else a failed, waiting or running one,
// else the first) and a minimap in the corner shows where the view is. The Fit button shows a
// graph of more than FIT_ALL_FROM stages whole, at whatever zoom that takes.
//
// Layouts, chosen for the room the graph has (the part of the container no panel covers):
//   * a linear chain wraps into rows ("snake"), as many stages per row as fit legibly;
//   * a small graph: dagre's layered layout, left-to-right or top-to-bottom, whichever is larger;
//   * a large graph (> LARGE stages): a linear-time layered layout (longest-path ranks, barycentre
//     ordering, balanced placement), also in both directions.
import dagre from "../vendor/dagre-3.1.3/dagre.esm.js";
import { STATUS_ICON, STATUS_LABEL, formatDuration, markLatest, measureLatest, runDurationMs, shortId } from "./common.js";
import { stageHistory } from "./item-stages.js";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 224;
const NODE_H = 78;
const FONT_MIN = 13; // the smallest node font, in px at zoom 1 (graph.css)
export const LEGIBLE_ZOOM = 12.25 / FONT_MIN;
const LARGE = 80;
const FIT_ALL_FROM = 24;
const PAD = 14;
const RING_R = 7;
const RING_C = 2 * Math.PI * RING_R;
const MODE_MARK = { shared: "shared", read: "read", "isolated-write": "isolated", integrate: "integrate" };
const HIGHLIGHT = new Set(["failed", "waiting"]);
const SINCE = HIGHLIGHT; // the statuses whose node counts the time since they began
const LABEL = STATUS_LABEL;
const ICON = STATUS_ICON;
const LOOP_ROOM = 40; // room above (or beside) the stages for the back-edges of review loops
const MINIMAP_W = 200;
const MINIMAP_H = 130;

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
const clip = (s, n) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
const f1 = (v) => (Math.round(v * 10) / 10).toString();

/** A running stage whose run has lasted past its stage's usual duration (the node's
 *  `overdue_after_s`, from earlier runs of the same workflow and stage; docs/dashboard.md). */
export function overdue(n, now = Date.now()) {
  return !!(n.overdue_after_s && n.run && !n.run.ended_at && runDurationMs(n.run, now) > n.overdue_after_s * 1000);
}

/** What a stopping node (an orphan: its run's renewals are refused, DOMAIN §6.1) says, short
 *  (the node) and whole (its tooltip and the panel). */
export function stoppingWords(graph) {
  if (graph && graph.status === "needs_attention") {
    return { short: "runs again after a retry", long: "stopping: the item needs attention; this stage runs again after a retry" };
  }
  return { short: "its run is being stopped", long: "stopping: this run no longer holds the stage; it ends when its lease does" };
}

function svgEl(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function smoothPath(points) {
  if (!points || points.length < 2) return "";
  const [p0, ...rest] = points;
  let d = `M${f1(p0.x)},${f1(p0.y)}`;
  if (rest.length === 1) return `${d}L${f1(rest[0].x)},${f1(rest[0].y)}`;
  // smooth through the bend points: quadratic curves between midpoints
  for (let i = 0; i < rest.length - 1; i++) {
    const c = rest[i];
    const n = rest[i + 1];
    d += `Q${f1(c.x)},${f1(c.y)} ${f1((c.x + n.x) / 2)},${f1((c.y + n.y) / 2)}`;
  }
  const last = rest[rest.length - 1];
  return `${d}L${f1(last.x)},${f1(last.y)}`;
}

/** A cubic from one node's outgoing side to the next node's incoming side. */
function flowPath(a, b, dir) {
  if (dir === "TB") {
    const x1 = a.x + NODE_W / 2, y1 = a.y + NODE_H, x2 = b.x + NODE_W / 2, y2 = b.y;
    const dy = Math.max(24, (y2 - y1) / 2);
    return `M${f1(x1)},${f1(y1)}C${f1(x1)},${f1(y1 + dy)} ${f1(x2)},${f1(y2 - dy)} ${f1(x2)},${f1(y2)}`;
  }
  const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
  const dx = Math.max(24, (x2 - x1) / 2);
  return `M${f1(x1)},${f1(y1)}C${f1(x1 + dx)},${f1(y1)} ${f1(x2 - dx)},${f1(y2)} ${f1(x2)},${f1(y2)}`;
}

// --- layouts: each returns {nodes: Map key -> {x, y} (top left), edges: Map "a->b" -> path d,
//     width, height, dir} ---------------------------------------------------------------------

/** A chain wrapped into rows of `cols`, alternating direction so each step stays short. */
function snakeLayout(keys, cols) {
  const gapX = 44;
  const gapY = 32;
  const nodes = new Map();
  keys.forEach((key, i) => {
    const row = Math.floor(i / cols);
    const pos = i % cols;
    const col = row % 2 ? cols - 1 - pos : pos;
    nodes.set(key, { x: PAD + col * (NODE_W + gapX), y: PAD + row * (NODE_H + gapY) });
  });
  const edges = new Map();
  for (let i = 0; i + 1 < keys.length; i++) {
    const a = nodes.get(keys[i]);
    const b = nodes.get(keys[i + 1]);
    let d;
    if (Math.abs(a.y - b.y) < 1) {
      const ltr = b.x > a.x;
      const y = a.y + NODE_H / 2;
      d = ltr ? `M${f1(a.x + NODE_W)},${f1(y)}L${f1(b.x)},${f1(y)}` : `M${f1(a.x)},${f1(y)}L${f1(b.x + NODE_W)},${f1(y)}`;
    } else {
      d = flowPath(a, b, "TB");
    }
    edges.set(`${keys[i]}->${keys[i + 1]}`, d);
  }
  const rows = Math.ceil(keys.length / cols);
  const used = Math.min(cols, keys.length);
  return { nodes, edges, dir: cols === 1 ? "TB" : "LR", snake: cols,
    width: 2 * PAD + used * NODE_W + (used - 1) * gapX, height: 2 * PAD + rows * NODE_H + (rows - 1) * gapY };
}

function dagreLayout(keys, pairs, dir) {
  const g = new dagre.graphlib.Graph();
  g.setGraph(dir === "TB"
    ? { rankdir: "TB", nodesep: 22, ranksep: 30, edgesep: 10, marginx: PAD, marginy: PAD }
    : { rankdir: "LR", nodesep: 18, ranksep: 50, edgesep: 10, marginx: PAD, marginy: PAD });
  g.setDefaultEdgeLabel(() => ({}));
  for (const key of keys) g.setNode(key, { width: NODE_W, height: NODE_H });
  for (const [a, b] of pairs) g.setEdge(a, b);
  dagre.layout(g);
  const nodes = new Map();
  for (const key of g.nodes()) { const p = g.node(key); nodes.set(key, { x: p.x - NODE_W / 2, y: p.y - NODE_H / 2 }); }
  const edges = new Map();
  for (const e of g.edges()) edges.set(`${e.v}->${e.w}`, smoothPath(g.edge(e).points));
  const gg = g.graph();
  const finite = (v) => (Number.isFinite(v) && v > 0 ? v : 0);
  return { nodes, edges, dir, width: finite(gg.width), height: finite(gg.height) };
}

/** Ranks and orders for the large-graph layout (direction-free): {rankOf, ranks: [[key]]}. */
function layering(keys, pairs) {
  const index = new Map(keys.map((k, i) => [k, i]));
  const n = keys.length;
  const succ = Array.from({ length: n }, () => []);
  const pred = Array.from({ length: n }, () => []);
  const indeg = new Int32Array(n);
  for (const [a, b] of pairs) {
    const i = index.get(a);
    const j = index.get(b);
    succ[i].push(j);
    pred[j].push(i);
    indeg[j]++;
  }
  // longest path from the sources (Kahn's order; a cycle's leftovers keep their input order)
  const rank = new Int32Array(n);
  const order = [];
  const queue = [];
  for (let i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
  for (let q = 0; q < queue.length; q++) {
    const i = queue[q];
    order.push(i);
    for (const j of succ[i]) { if (rank[j] < rank[i] + 1) rank[j] = rank[i] + 1; if (--indeg[j] === 0) queue.push(j); }
  }
  if (order.length < n) for (let i = 0; i < n; i++) if (indeg[i] > 0) order.push(i);
  // a node that feeds only later ranks moves down next to its first consumer (shorter edges)
  for (let q = order.length - 1; q >= 0; q--) {
    const i = order[q];
    if (!succ[i].length || !pred[i].length) continue;
    let m = Infinity;
    for (const j of succ[i]) m = Math.min(m, rank[j]);
    if (m - 1 > rank[i]) rank[i] = m - 1;
  }
  let depth = 0;
  for (let i = 0; i < n; i++) if (rank[i] + 1 > depth) depth = rank[i] + 1;
  let ranks = Array.from({ length: depth }, () => []);
  for (let i = 0; i < n; i++) ranks[rank[i]].push(i); // input (sequence) order first
  // a rank wider than CAP (a fan-out: dozens of stages after one) wraps into several columns, the
  // stages that feed nothing first, those with successors last (next to them)
  const cap = Math.max(12, Math.ceil(1.5 * Math.sqrt(n)));
  if (ranks.some((r) => r.length > cap)) {
    const wrapped = [];
    for (const r of ranks) {
      if (r.length <= cap) { wrapped.push(r); continue; }
      const sorted = [...r.filter((i) => !succ[i].length), ...r.filter((i) => succ[i].length)];
      const cols = Math.ceil(sorted.length / cap);
      const per = Math.ceil(sorted.length / cols);
      for (let c = 0; c < cols; c++) wrapped.push(sorted.slice(c * per, (c + 1) * per).sort((a, b) => a - b));
    }
    ranks = wrapped;
    depth = ranks.length;
    ranks.forEach((r, d) => r.forEach((i) => { rank[i] = d; }));
  }
  // barycentre sweeps: down by predecessors, up by successors
  const pos = new Float64Array(n);
  const place = () => ranks.forEach((r) => r.forEach((i, p) => { pos[i] = p - r.length / 2; }));
  place();
  const sweep = (r, nbrs) => {
    const bc = new Map();
    for (const i of r) {
      const list = nbrs[i];
      if (!list.length) { bc.set(i, pos[i]); continue; }
      let s = 0;
      for (const j of list) s += pos[j];
      bc.set(i, s / list.length);
    }
    r.sort((a, b) => bc.get(a) - bc.get(b) || a - b);
    r.forEach((i, p) => { pos[i] = p - r.length / 2; });
  };
  for (let pass = 0; pass < 3; pass++) {
    for (let d = 1; d < depth; d++) sweep(ranks[d], pred);
    for (let d = depth - 2; d >= 0; d--) sweep(ranks[d], succ);
  }
  return { n, succ, pred, rank, ranks };
}

function fastLayout(keys, pairs, dir, lay) {
  const { n, pred, succ, rank, ranks } = lay;
  const along = dir === "TB" ? NODE_H : NODE_W; // size along the flow
  const across = dir === "TB" ? NODE_W : NODE_H;
  const rankGap = dir === "TB" ? 36 : 56;
  const sep = dir === "TB" ? 24 : 18;
  const step = across + sep;
  const c = new Float64Array(n); // cross-axis coordinate (top/left of the node)
  ranks.forEach((r) => r.forEach((i, p) => { c[i] = p * step; }));
  // balanced placement: each node wants the mean of its neighbours; keep order and spacing
  const settle = (r, nbrs) => {
    const m = r.length;
    if (!m) return;
    const want = new Float64Array(m);
    for (let p = 0; p < m; p++) {
      const list = nbrs[r[p]];
      if (!list.length) { want[p] = c[r[p]]; continue; }
      let s = 0;
      for (const j of list) s += c[j];
      want[p] = s / list.length;
    }
    const down = new Float64Array(m);
    const up = new Float64Array(m);
    for (let p = 0; p < m; p++) down[p] = p ? Math.max(want[p], down[p - 1] + step) : want[p];
    for (let p = m - 1; p >= 0; p--) up[p] = p < m - 1 ? Math.min(want[p], up[p + 1] - step) : want[p];
    for (let p = 0; p < m; p++) c[r[p]] = (down[p] + up[p]) / 2;
  };
  for (let pass = 0; pass < 2; pass++) {
    for (let d = 1; d < ranks.length; d++) settle(ranks[d], pred);
    for (let d = ranks.length - 2; d >= 0; d--) settle(ranks[d], succ);
  }
  // keep every rank inside the band of the widest one: no drift into a staircase
  const widest = ranks.reduce((m, r) => Math.max(m, r.length), 0);
  const lo = -((widest - 1) / 2) * step;
  const hi = ((widest - 1) / 2) * step;
  for (const r of ranks) {
    const m = r.length;
    for (let p = 0; p < m; p++) c[r[p]] = Math.max(c[r[p]], lo + p * step);
    for (let p = m - 1; p >= 0; p--) c[r[p]] = Math.min(c[r[p]], hi - (m - 1 - p) * step);
  }
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < n; i++) { if (c[i] < min) min = c[i]; if (c[i] > max) max = c[i]; }
  const nodes = new Map();
  for (let i = 0; i < n; i++) {
    const a = PAD + rank[i] * (along + rankGap);
    const b = PAD + c[i] - min;
    nodes.set(keys[i], dir === "TB" ? { x: b, y: a } : { x: a, y: b });
  }
  const edges = new Map();
  for (const [a, b] of pairs) edges.set(`${a}->${b}`, flowPath(nodes.get(a), nodes.get(b), dir));
  const alongLen = ranks.length * along + Math.max(0, ranks.length - 1) * rankGap;
  const acrossLen = n ? max - min + across : 0;
  return { nodes, edges, dir, width: 2 * PAD + (dir === "TB" ? acrossLen : alongLen),
    height: 2 * PAD + (dir === "TB" ? alongLen : acrossLen) };
}

// --- the view --------------------------------------------------------------------------------

export class GraphView {
  constructor(container, { onSelect = () => {}, onOpen = () => {} } = {}) {
    this.container = container;
    this.onSelect = onSelect;
    this.onOpen = onOpen;
    this.nodes = new Map(); // stage id -> {data, el, x, y, sig}
    this.edges = new Map(); // "a->b" -> {el, source, target}
    this.structure = "";
    this.mode = "graph";
    this.selected = null;
    this.outlined = new Set();
    this.view = { k: 1, x: 0, y: 0 };
    this.size = { width: 0, height: 0 };
    this.variants = new Map();
    this.variant = null;
    this.userMoved = false;
    this.covers = [];
    this.succ = new Map();
    this.pred = new Map();

    this.svg = svgEl("svg", { class: "graph-svg", role: "img", "aria-label": "Stage graph" });
    const defs = svgEl("defs");
    defs.innerHTML = '<marker id="wc-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head"/></marker>'
      + '<marker id="wc-arrow-failed" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head-failed"/></marker>'
      + '<marker id="wc-arrow-waiting" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head-waiting"/></marker>'
      + '<marker id="wc-arrow-loop" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head-loop"/></marker>';
    this.viewport = svgEl("g", { class: "viewport" });
    this.edgeLayer = svgEl("g", { class: "edges" });
    this.loopLayer = svgEl("g", { class: "loops" });
    this.nodeLayer = svgEl("g", { class: "nodes" });
    this.viewport.append(this.edgeLayer, this.nodeLayer, this.loopLayer);
    this.loops = [];
    this.svg.append(defs, this.viewport);
    container.append(this.svg);
    this.installMinimap();
    this.installPanZoom();
    this.installKeyboard();
    this.nodeLayer.addEventListener("click", (e) => {
      const g = e.target.closest("g.node");
      if (g) { this.select(g.dataset.key, { open: true }); container.focus({ preventScroll: true }); }
    });
  }

  /** One node per stage, linear and graph items alike: a node's key is its stage id. */
  keyOf(n) { return n.stage_id; }

  /** Elements drawn over the graph (the side panel): the view keeps its content out from under them. */
  coverBy(...elements) { this.covers.push(...elements); }

  /**
   * The nodes to draw: one per stage (item-stages.js), the stage's current action with the status
   * it shows, its attempts folded into it. Edges: a graph item's dependencies between stages; a
   * linear item's chain of stages in the order they first ran. Review loops are drawn apart, as
   * back-edges. Returns {shown: [node], pairs: [[a, b]], loops: [{source, target, count}]}.
   */
  displayed(graph) {
    const hist = this.history;
    const shown = hist.order.map((stage) => {
      const s = hist.stages.get(stage);
      return { ...s.node, status: s.status, action_status: s.node.status, attempts: s.attempts.length, since: s.since,
        loop_back: hist.loops.filter((l) => l.source === stage).reduce((t, l) => t + l.count, 0) };
    });
    const pairs = [];
    const seen = new Set();
    const add = (a, b) => {
      const k = `${a}->${b}`;
      if (a === b || seen.has(k) || !hist.stages.has(a) || !hist.stages.has(b)) return;
      seen.add(k);
      pairs.push([a, b]);
    };
    if (this.mode === "graph") for (const e of graph.edges) add(e.source, e.target);
    else for (let i = 0; i + 1 < hist.order.length; i++) add(hist.order[i], hist.order[i + 1]);
    const loops = hist.loops.filter((l) => hist.stages.has(l.source) && hist.stages.has(l.target) && !seen.has(`${l.source}->${l.target}`));
    return { shown, pairs, loops };
  }

  /**
   * Draw a Graph (API.md) snapshot. Returns {nodes, edges, relayout, layout_ms, render_ms, total_ms},
   * also the detail of the performance measures "wc-graph" (this update), "wc-graph-relayout" (the
   * last update that laid the graph out) and "wc-graph-painted" (that one until the browser drew
   * the frame: style, layout and paint included).
   */
  setGraph(graph, history = null) {
    const t0 = performance.now();
    this.mode = graph.execution_mode === "linear" ? "linear" : "graph";
    this.graph = graph;
    this.history = history || stageHistory(graph, null);
    const { shown, pairs, loops } = this.displayed(graph);
    this.shown = shown;
    const keys = shown.map((n) => this.keyOf(n));
    const structure = `${this.mode}|${keys.join(",")}|${pairs.map((p) => p.join("->")).sort().join(",")}`
      + `|${loops.map((l) => `${l.source}~>${l.target}`).sort().join(",")}`;
    let layoutMs = 0;
    let relayout = false;
    if (structure !== this.structure) {
      relayout = true;
      // the first nodes drawn (also after an empty draft's graph) appear in place, without a glide
      const first = this.nodes.size === 0;
      this.structure = structure;
      this.keys = keys;
      this.pairs = pairs;
      this.loops = loops;
      this.variants = new Map();
      this.layering = null;
      // the room is measured before the new nodes are in the document (reading it after would
      // force a layout of every node inside this call)
      const region = this.region();
      const tl = performance.now();
      const layout = this.pickLayout(region);
      layoutMs = performance.now() - tl;
      this.lazy = shown.length > LARGE;
      if (first || !this.userMoved) this.view = this.fitView(region, layout, {}) || this.view;
      this.renderStructure(shown, layout, !first && shown.length <= LARGE);
      if (first || !this.userMoved) this.fit({ animate: !first, region });
      else this.fillVisible();
    } else {
      for (const n of shown) {
        const entry = this.nodes.get(this.keyOf(n));
        if (entry) this.restyle(entry, n);
      }
    }
    this.drawLoops();
    this.highlightPaths();
    this.applyOutline();
    this.minimapDirty = true;
    this.drawMinimap();
    const t1 = performance.now();
    const total = t1 - t0;
    const timing = { nodes: shown.length, edges: pairs.length, relayout, layout_ms: layoutMs,
      render_ms: total - layoutMs, total_ms: total };
    measureLatest("wc-graph", t0, timing, t1);
    if (relayout) {
      measureLatest("wc-graph-relayout", t0, timing, t1);
      requestAnimationFrame(() => setTimeout(() => measureLatest("wc-graph-painted", t0, timing), 0));
    }
    return timing;
  }

  // --- layout choice ---------------------------------------------------------------------------

  variantLayout(name) {
    let layout = this.variants.get(name);
    if (layout) return layout;
    const [kind, arg] = name.split(":");
    if (kind === "snake") layout = snakeLayout(this.keys, Number(arg));
    else if (kind === "dagre") layout = dagreLayout(this.keys, this.pairs, arg);
    else {
      if (!this.layering) this.layering = layering(this.keys, this.pairs);
      layout = fastLayout(this.keys, this.pairs, arg, this.layering);
    }
    if (this.loops && this.loops.length) {
      // the back-edges of review loops arch above the stages (beside them when the flow runs down)
      if (layout.dir === "TB" && !layout.snake) layout.width += LOOP_ROOM;
      else {
        for (const p of layout.nodes.values()) p.y += LOOP_ROOM;
        for (const [k, d] of layout.edges) layout.edges.set(k, d.replace(/(-?[\d.]+),(-?[\d.]+)/g, (m, x, y) => `${x},${f1(Number(y) + LOOP_ROOM)}`));
        layout.height += LOOP_ROOM;
      }
    }
    layout.name = name;
    this.variants.set(name, layout);
    return layout;
  }

  /** The layout that shows the graph largest in the given room (ties: the wider reading). */
  pickLayout(region) {
    const n = this.keys.length;
    if (!n) return { nodes: new Map(), edges: new Map(), width: 0, height: 0, dir: "LR", name: "empty" };
    let names;
    if (this.mode === "linear") {
      names = [];
      for (let cols = Math.min(n, 12); cols >= 1; cols--) names.push(`snake:${cols}`);
    } else if (n > LARGE) names = ["fast:LR", "fast:TB"];
    else names = ["dagre:LR", "dagre:TB"];
    const w = Math.max(1, region.w);
    const h = Math.max(1, region.h);
    let best = null;
    let bestScore = -1;
    for (const name of names) {
      // a wrapped chain needs no layout to be sized: skip those that cannot beat the best
      const layout = this.variantLayout(name);
      const score = Math.min(1, w / layout.width, h / layout.height);
      if (score > bestScore + 0.02) { best = layout; bestScore = score; }
    }
    return best;
  }

  region() {
    const r = this.container.getBoundingClientRect();
    let right = r.width || 800;
    for (const el of this.covers) {
      if (!el || el.hidden) continue;
      const p = el.getBoundingClientRect();
      if (!p.width || p.left >= r.right || p.right <= r.left || p.top >= r.bottom || p.bottom <= r.top) continue;
      right = Math.min(right, p.left - r.left - 8);
    }
    this.lastRegion = { w: Math.max(160, right), h: r.height || 500, cw: r.width || 800 };
    return this.lastRegion;
  }

  /** The layout drawn from now on; its name and size are the detail of the mark "wc-graph-layout". */
  useLayout(layout) {
    this.variant = layout;
    this.size = { width: layout.width, height: layout.height };
    markLatest("wc-graph-layout", { layout: layout.name, width: layout.width, height: layout.height });
  }

  renderStructure(shown, layout, animate) {
    this.useLayout(layout);
    this.svg.classList.toggle("animate", animate);
    const seen = new Set();
    const fresh = [];
    for (const n of shown) {
      const key = this.keyOf(n);
      seen.add(key);
      let entry = this.nodes.get(key);
      if (!entry) {
        entry = { el: null, data: null, sig: "", key };
        this.nodes.set(key, entry);
        fresh.push(entry);
      }
      const p = layout.nodes.get(key);
      entry.x = p.x;
      entry.y = p.y;
      if (entry.el) {
        entry.el.style.transform = `translate(${p.x}px,${p.y}px)`;
        this.restyle(entry, n);
      } else {
        entry.data = n;
      }
    }
    for (const [key, entry] of this.nodes) {
      if (!seen.has(key)) { entry.el.remove(); this.nodes.delete(key); if (this.selected === key) this.selected = null; }
    }
    if (fresh.length) {
      // one parse for every new node (a 1,000-stage graph is one innerHTML, not a thousand)
      const now = Date.now();
      const holder = svgEl("g");
      const near = this.nearView();
      holder.innerHTML = fresh.map((entry) => this.nodeMarkup(entry, entry.data, now, animate, near(entry))).join("");
      const els = [...holder.children];
      // placed through the CSSOM (the page's Content-Security-Policy refuses style attributes)
      fresh.forEach((entry, i) => {
        entry.el = els[i];
        entry.el.style.transform = `translate(${entry.x}px,${entry.y}px)`;
        this.bindEntry(entry);
      });
      const frag = document.createDocumentFragment();
      frag.append(...els);
      this.nodeLayer.append(frag);
      if (animate) requestAnimationFrame(() => requestAnimationFrame(() => fresh.forEach((e) => e.el.classList.remove("entering"))));
    }
    // edges
    const freshEdges = [];
    for (const [key, d] of layout.edges) {
      const entry = this.edges.get(key);
      if (entry) { entry.el.setAttribute("d", d); continue; }
      const [source, target] = key.split("->");
      freshEdges.push({ key, source, target, d });
    }
    for (const [key, entry] of this.edges) if (!layout.edges.has(key)) { entry.el.remove(); this.edges.delete(key); }
    if (freshEdges.length) {
      const holder = svgEl("g");
      holder.innerHTML = freshEdges.map((e) => `<path class="edge" marker-end="url(#wc-arrow)" d="${e.d}"/>`).join("");
      const els = [...holder.children];
      freshEdges.forEach((e, i) => this.edges.set(e.key, { el: els[i], source: e.source, target: e.target }));
      const frag = document.createDocumentFragment();
      frag.append(...els);
      this.edgeLayer.append(frag);
    }
    this.succ = new Map();
    this.pred = new Map();
    for (const e of this.edges.values()) {
      if (!this.succ.has(e.source)) this.succ.set(e.source, []);
      if (!this.pred.has(e.target)) this.pred.set(e.target, []);
      this.succ.get(e.source).push(e.target);
      this.pred.get(e.target).push(e.source);
    }
  }

  /** Move the drawn nodes and edges to another layout of the same structure. */
  applyLayout(layout, animate) {
    if (layout === this.variant) return;
    this.useLayout(layout);
    this.svg.classList.toggle("animate", animate && this.nodes.size <= LARGE);
    for (const [key, entry] of this.nodes) {
      const p = layout.nodes.get(key);
      if (!p) continue;
      entry.x = p.x;
      entry.y = p.y;
      entry.el.style.transform = `translate(${p.x}px,${p.y}px)`;
    }
    for (const [key, entry] of this.edges) { const d = layout.edges.get(key); if (d) entry.el.setAttribute("d", d); }
    this.drawLoops();
    this.minimapDirty = true;
  }

  /** The review loops: a back-edge from the review to the stage it sent work back to, with the
   *  number of times it did ("↺ ×2"). Drawn over the nodes, in the review colour. */
  drawLoops() {
    const parts = [];
    const tb = this.variant && this.variant.dir === "TB" && !this.variant.snake;
    for (const l of this.loops || []) {
      const a = this.nodes.get(l.source);
      const b = this.nodes.get(l.target);
      if (!a || !b) continue;
      let d;
      let lx;
      let ly;
      if (tb) {
        const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x + NODE_W, y2 = b.y + NODE_H / 2;
        const bx = Math.max(x1, x2) + LOOP_ROOM - 4;
        d = `M${f1(x1)},${f1(y1)}C${f1(bx)},${f1(y1)} ${f1(bx)},${f1(y2)} ${f1(x2)},${f1(y2)}`;
        lx = x1 + 0.75 * (bx - x1);
        ly = (y1 + y2) / 2;
      } else {
        const x1 = a.x + NODE_W * 0.3, y1 = a.y, x2 = b.x + NODE_W * 0.7, y2 = b.y;
        const top = Math.min(y1, y2) - LOOP_ROOM + 2;
        d = `M${f1(x1)},${f1(y1)}C${f1(x1)},${f1(top)} ${f1(x2)},${f1(top)} ${f1(x2)},${f1(y2)}`;
        lx = (x1 + x2) / 2;
        ly = 0.125 * y1 + 0.75 * top + 0.125 * y2;
      }
      const text = `↺ ×${l.count}`;
      const w = 16 + text.length * 7.5;
      const source = this.nodes.get(l.source).data?.name || l.source;
      const target = this.nodes.get(l.target).data?.name || l.target;
      const tip = `${source} requested changes ${l.count} time${l.count === 1 ? "" : "s"}: the work went back to ${target}`;
      parts.push(`<g class="loop" data-source="${esc(l.source)}" data-target="${esc(l.target)}" data-count="${l.count}" role="img" aria-label="${esc(tip)}">`
        + `<title>${esc(tip)}</title><path class="loop-edge" marker-end="url(#wc-arrow-loop)" d="${d}"/>`
        + `<g class="loop-label" transform="translate(${f1(lx - w / 2)},${f1(ly - 10)})"><rect width="${f1(w)}" height="20" rx="10"/>`
        + `<text x="${f1(w / 2)}" y="14.5" text-anchor="middle">${esc(text)}</text></g></g>`);
    }
    const html = parts.join("");
    if (this.loopsDrawn !== html) { this.loopLayer.innerHTML = html; this.loopsDrawn = html; }
  }

  // --- nodes -----------------------------------------------------------------------------------

  signature(entry, n) {
    const lease = n.lease;
    const run = n.run;
    return [n.id, n.status, n.name, n.type, n.attempt, n.max_attempts, n.workspace_mode,
      lease ? `${lease.owner_boot_id}|${lease.lease_epoch}|${lease.expires_at}|${lease.renewed_at}` : "",
      run ? `${run.id}|${run.status}|${run.started_at}|${run.ended_at}` : "",
      (n.blocked_by || []).join("|"), n.attempts, n.since, n.loop_back, n.action_status, n.stopping, n.overdue_after_s].join("§");
  }

  /** The lease's liveness: {stale, silentMs, remaining, span}, or null without a lease. */
  liveness(lease, now) {
    if (!lease) return null;
    const expires = Date.parse(lease.expires_at);
    const renewed = Date.parse(lease.renewed_at || lease.expires_at);
    const span = Math.max(1, expires - renewed);
    const silentMs = Math.max(0, now - renewed);
    return { stale: silentMs > span / 2, silentMs, remaining: Math.max(0, expires - now), span };
  }

  extraLine(n, live) {
    if (n.stopping) return { cls: "node-extra node-stopping", text: stoppingWords(this.graph).short };
    if (live) {
      if (live.stale) return { cls: "node-extra node-hb", text: `⚠ no heartbeat for ${formatDuration(live.silentMs)}` };
      if (overdue(n)) return { cls: "node-extra node-overdue", text: `⚠ usually ≤ ${formatDuration(n.usual_duration_s * 1000)}` };
      return { cls: "node-extra", text: `${shortId(n.lease.owner_boot_id, 6)} e${n.lease.lease_epoch}` };
    }
    if ((n.blocked_by || []).length) return { cls: "node-extra node-why", text: clip(n.blocked_by[0], 30) };
    return null;
  }

  /** The time a node shows: how long a waiting or failed stage has waited or been failed (from
   *  the end of the run that asked or failed, live), else its current or last run's length. */
  durationText(n, now = Date.now()) {
    if (SINCE.has(n.status) && n.since != null) return formatDuration(Math.max(0, now - n.since));
    return n.run && n.run.started_at ? formatDuration(runDurationMs(n.run, now)) : "";
  }

  nodeInner(entry, n, now) {
    const lease = n.lease;
    const live = this.liveness(lease, now);
    const label = n.stopping ? "stopping" : LABEL[n.status] || n.status;
    const attempt = `${n.attempt}/${n.max_attempts}`;
    const mode = MODE_MARK[n.workspace_mode] || n.workspace_mode;
    const attempts = n.attempts || 0;
    const since = SINCE.has(n.status) && n.since != null;
    const tip = [`${n.name} (${n.type})`, `status: ${label}`, `attempt ${attempt}`, `workspace: ${n.workspace_mode}`];
    if (since) tip.push(`${n.status === "waiting" ? "waiting since" : "failed at"} ${new Date(n.since).toLocaleTimeString()}`);
    if (n.run) {
      tip.push(`${n.run.ended_at ? "last run" : "running for"}: ${formatDuration(runDurationMs(n.run, now))}`
        + ` (started ${new Date(n.run.started_at).toLocaleTimeString()}${n.run.ended_at ? `, ended ${new Date(n.run.ended_at).toLocaleTimeString()}` : ""})`);
    }
    if (lease) {
      tip.push(`lease: worker ${lease.owner_boot_id}, epoch ${lease.lease_epoch}, expires ${new Date(lease.expires_at).toLocaleTimeString()}`
        + `, renewed ${new Date(lease.renewed_at).toLocaleTimeString()}`);
    }
    if (n.stopping) tip.push(stoppingWords(this.graph).long);
    else if (n.usual_duration_s) tip.push(`usually takes ≤ ${formatDuration(n.usual_duration_s * 1000)}; longer than usual after ${formatDuration(n.overdue_after_s * 1000)}`);
    if (attempts > 1) tip.push(`${attempts} attempts (runs) of this stage: open it to see each`);
    if (n.loop_back) tip.push(`requested changes ${n.loop_back} time${n.loop_back === 1 ? "" : "s"}`);
    if ((n.blocked_by || []).length) tip.push("blocked by:", ...n.blocked_by.map((b) => `• ${b}`));
    const right = [];
    let used = 0;
    // the lease ring tells a live claim's time left; an orphan's lease is not a live claim (its
    // renewals are refused), so a stopping node draws none
    if (lease && !n.stopping) {
      right.push(`<g class="ring" transform="translate(${NODE_W - 17},17)"><circle class="ring-bg" r="${RING_R}"/>`
        + `<circle class="ring-fg" r="${RING_R}" stroke-dasharray="${RING_C.toFixed(2)}" stroke-dashoffset="${(RING_C * (1 - Math.min(1, live.remaining / live.span))).toFixed(2)}" transform="rotate(-90)"/></g>`);
      used += 30;
    }
    if (attempts > 1) {
      // every attempt of the stage (failed, interrupted, superseded, retried, re-run after a review)
      const text = `×${attempts}`;
      const w = 14 + 8 * text.length;
      right.push(` <g class="node-badge" transform="translate(${NODE_W - 10 - used - w},6)" data-attempts="${attempts}"><rect width="${w}" height="20" rx="10"/>`
        + `<text x="${w / 2}" y="15" text-anchor="middle">${text}</text></g>`);
      used += w + 6;
    }
    const nameChars = Math.floor((NODE_W - 24 - used) / 8.6);
    const dur = this.durationText(n, now);
    const extra = this.extraLine(n, live);
    return `<title>${esc(tip.join("\n"))}</title>`
      + `<rect class="node-box" width="${NODE_W}" height="${NODE_H}" rx="8"/>`
      + `<rect class="node-stripe" width="4" height="${NODE_H - 14}" x="0" y="7" rx="2"/>`
      + `<text class="node-name" x="14" y="22">${esc(clip(n.name, nameChars))}</text>`
      // the lines are parted by a space, undrawn, so their text reads as words (the accessible name, speak)
      // a folded node counts its attempts in the badge: the current action's own try count
      // ("1/2") beside "×18" would read as a second, contradicting count (it stays in the tooltip)
      + ` <text class="node-sub" x="14" y="39">${esc(clip(n.type, 12))} · ${attempts > 1 ? "" : `${attempt} · `}<tspan class="mode" data-mode="${esc(n.workspace_mode)}">${esc(mode)}</tspan></text>`
      + ` <text class="node-status" x="14" y="56">${esc(n.stopping ? "■" : ICON[n.status] || "•")} ${esc(label)}`
      + `${dur ? ` · ${since && n.status === "waiting" ? "for " : ""}<tspan class="node-dur">${esc(dur)}</tspan>${since && n.status === "failed" ? " ago" : ""}` : ""}</text>`
      + (extra ? ` <text class="${extra.cls}" x="14" y="72">${esc(extra.text)}</text>` : "")
      + right.join("");
  }

  nodeClasses(entry, n, now) {
    const live = this.liveness(n.lease, now);
    const cls = ["node"];
    if ((n.blocked_by || []).length) cls.push("blocked");
    if (live && live.remaining === 0) cls.push("lease-expired");
    if (live && live.stale && !n.stopping) cls.push("hb-stale");
    if (n.stopping) cls.push("stopping");
    else if (overdue(n, now)) cls.push("overdue");
    if ((n.attempts || 0) > 1) cls.push("folded");
    return cls;
  }

  /** A large graph draws only the box of a node far from the view; its text comes when it nears it. */
  liteInner() {
    return `<rect class="node-box" width="${NODE_W}" height="${NODE_H}" rx="8"/>`
      + `<rect class="node-stripe" width="4" height="${NODE_H - 14}" x="0" y="7" rx="2"/>`;
  }

  nodeMarkup(entry, n, now, entering, full = true) {
    entry.sig = this.signature(entry, n);
    entry.full = full;
    const cls = this.nodeClasses(entry, n, now);
    if (entering) cls.push("entering");
    return `<g class="${cls.join(" ")}" data-key="${esc(entry.key)}" data-status="${esc(n.status)}" data-id="${esc(n.id)}"`
      + ` data-stage="${esc(n.stage_id)}" id="${esc(this.domId(entry.key))}" role="button" aria-label="${esc(`${n.name}: ${LABEL[n.status] || n.status}`)}"`
      + `>${full ? this.nodeInner(entry, n, now) : this.liteInner()}</g>`;
  }

  bindEntry(entry) {
    const el = entry.el;
    if (!entry.full) { entry.dur = entry.extra = entry.ring = null; entry.live = false; return; }
    entry.dur = el.querySelector(".node-dur");
    entry.extra = el.querySelector(".node-extra");
    entry.ring = el.querySelector(".ring-fg");
    const d = entry.data;
    entry.live = !!(d && (d.lease || (d.run && !d.run.ended_at) || (SINCE.has(d.status) && d.since != null)));
    this.speak(entry);
  }

  /** A drawn node's accessible name is the text it shows, line by line (WCAG 2.5.3: the name
   *  contains the visible label), the whole stage name first when the drawing shortens it. */
  speak(entry) {
    const lines = [...entry.el.querySelectorAll("text")].map((t) => t.textContent.trim()).filter(Boolean);
    const name = entry.data && entry.data.name;
    if (name && lines[0] !== name) lines.unshift(name);
    // the status icons and dots are drawn, not spoken (their words follow them)
    entry.el.setAttribute("aria-label", lines.join(", ").replace(/\s*·\s*/g, ", ").replace(/[\p{So}]\s*/gu, ""));
  }

  /** Re-draw one node's content only when something it shows changed. */
  restyle(entry, n) {
    const sig = this.signature(entry, n);
    entry.data = n;
    if (entry.sig === sig) return false;
    entry.sig = sig;
    const el = entry.el;
    const now = Date.now();
    const keep = ["on-path", "path-failed", "path-waiting", "selected", "outlined", "entering"].filter((c) => el.classList.contains(c));
    el.setAttribute("class", [...this.nodeClasses(entry, n, now), ...keep].join(" "));
    el.dataset.status = n.status;
    el.dataset.id = n.id;
    el.dataset.stage = n.stage_id;
    el.setAttribute("aria-label", `${n.name}: ${LABEL[n.status] || n.status}`);
    if (entry.full) el.innerHTML = this.nodeInner(entry, n, now);
    this.bindEntry(entry);
    this.minimapDirty = true;
    return true;
  }

  /** Once a second: running durations, heartbeat warnings and lease rings. */
  tick(now = Date.now()) {
    for (const entry of this.nodes.values()) {
      if (!entry.live) continue;
      const n = entry.data;
      let said = false;
      if (entry.dur) { const t = this.durationText(n, now); if (entry.dur.textContent !== t) { entry.dur.textContent = t; said = true; } }
      const live = this.liveness(n.lease, now);
      if (!live) { if (said) this.speak(entry); continue; }
      const extra = this.extraLine(n, live);
      if (extra && entry.extra) {
        if (entry.extra.textContent !== extra.text) { entry.extra.textContent = extra.text; said = true; }
        if (entry.extra.getAttribute("class") !== extra.cls) entry.extra.setAttribute("class", extra.cls);
      }
      if (said) this.speak(entry);
      entry.el.classList.toggle("hb-stale", live.stale && !n.stopping);
      entry.el.classList.toggle("overdue", overdue(n, now) && !n.stopping);
      entry.el.classList.toggle("lease-expired", live.remaining === 0);
      if (entry.ring) entry.ring.setAttribute("stroke-dashoffset", (RING_C * (1 - Math.min(1, live.remaining / live.span))).toFixed(2));
    }
  }

  /**
   * Outline each failed/waiting node and the dependency path that led to it: from the node back to
   * the root, at each step the dependency that finished last (the one it actually waited for; by
   * sequence when no run ended). Other ancestors and unrelated branches stay plain. The path has
   * the colour of the stage it leads to: red to a failure only, amber to a wait.
   */
  highlightPaths() {
    // stage -> "failed" | "waiting": the colour of the path it is on (failure wins where they meet)
    const onPath = new Map();
    const edgeOn = new Map();
    const mark = (map, key, kind) => { if (map.get(key) !== "failed") map.set(key, kind); };
    const finished = (key) => {
      const d = this.nodes.get(key)?.data;
      const t = d && d.run ? Date.parse(d.run.ended_at || d.run.started_at) : NaN;
      return Number.isFinite(t) ? t : -Infinity;
    };
    for (const [key, entry] of this.nodes) {
      if (!entry.data || !HIGHLIGHT.has(entry.data.status)) continue;
      const kind = entry.data.status;
      let cur = key;
      const walked = new Set([cur]);
      mark(onPath, cur, kind);
      for (;;) {
        const preds = this.pred.get(cur) || [];
        if (!preds.length) break;
        let best = preds[0];
        for (const p of preds) {
          const a = finished(p);
          const b = finished(best);
          if (a > b || (a === b && (this.nodes.get(p)?.data?.sequence || 0) > (this.nodes.get(best)?.data?.sequence || 0))) best = p;
        }
        mark(edgeOn, `${best}->${cur}`, kind);
        if (walked.has(best)) break;
        walked.add(best);
        mark(onPath, best, kind);
        cur = best;
      }
    }
    for (const [key, entry] of this.nodes) {
      const kind = onPath.get(key) || "";
      if ((entry.el.dataset.path || "") === kind) continue;
      entry.el.classList.toggle("on-path", !!kind);
      entry.el.classList.remove("path-failed", "path-waiting");
      if (kind) { entry.el.classList.add(`path-${kind}`); entry.el.dataset.path = kind; } else delete entry.el.dataset.path;
    }
    for (const [key, e] of this.edges) {
      const kind = edgeOn.get(key) || "";
      if ((e.el.dataset.path || "") === kind) continue;
      e.el.classList.toggle("on-path", !!kind);
      e.el.classList.remove("path-failed", "path-waiting");
      if (kind) { e.el.classList.add(`path-${kind}`); e.el.dataset.path = kind; } else delete e.el.dataset.path;
      e.el.setAttribute("marker-end", kind ? `url(#wc-arrow-${kind})` : "url(#wc-arrow)");
    }
  }

  /** Outline the nodes whose action ids are given (the retry preview); empty clears. */
  setOutlined(actionIds) {
    this.outlined = new Set(actionIds || []);
    this.applyOutline();
  }

  applyOutline() {
    for (const entry of this.nodes.values()) {
      const on = !!entry.data && this.outlined.has(entry.data.id);
      if (entry.el.classList.contains("outlined") !== on) entry.el.classList.toggle("outlined", on);
    }
    this.svg.classList.toggle("has-outline", this.outlined.size > 0);
  }

  /** The drawn node (its stage's) of any action of the stage, current or earlier. */
  nodeByActionId(id) {
    for (const entry of this.nodes.values()) if (entry.data && entry.data.id === id) return entry.data;
    for (const s of this.history ? this.history.stages.values() : []) {
      if (s.actionIds.has(id)) return this.nodes.get(s.stage)?.data || null;
    }
    return null;
  }

  /** The stage's history (item-stages.js): its attempts, oldest first. */
  stageOf(key) { return this.history ? this.history.stages.get(key) || null : null; }

  domId(key) { return `wc-node-${String(key).replace(/[^\w-]/g, "_")}`; }

  // --- selection and keyboard ------------------------------------------------------------------

  select(key, { open = false, scroll = true } = {}) {

    if (this.selected && this.nodes.has(this.selected)) this.nodes.get(this.selected).el.classList.remove("selected");
    this.selected = key && this.nodes.has(key) ? key : null;
    if (this.selected) {
      const entry = this.nodes.get(this.selected);
      entry.el.classList.add("selected");
      if (scroll) this.ensureVisible(entry);
      this.container.setAttribute("aria-activedescendant", entry.el.id);
      this.onSelect(entry.data);
      if (open) this.onOpen(entry.data);
    } else {
      this.container.removeAttribute("aria-activedescendant");
      this.onSelect(null);
    }
  }

  selectedData() { return this.selected ? this.nodes.get(this.selected).data : null; }

  installKeyboard() {
    this.container.addEventListener("keydown", (e) => {
      if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Enter", "Home", "+", "=", "-", "0"].includes(e.key)) return;
      if (e.key === "+" || e.key === "=") { this.zoomBy(1.2); e.preventDefault(); return; }
      if (e.key === "-") { this.zoomBy(1 / 1.2); e.preventDefault(); return; }
      if (e.key === "0") { this.fit({ animate: true, all: true }); e.preventDefault(); return; }
      e.preventDefault();
      if (!this.nodes.size) return;
      if (!this.selected || e.key === "Home") {
        this.select(this.keys && this.keys.length ? this.keys[0] : this.nodes.keys().next().value);
        return;
      }
      if (e.key === "Enter") { this.select(this.selected, { open: true }); return; }
      const cur = this.nodes.get(this.selected);
      const tb = this.variant && this.variant.dir === "TB" && !this.variant.snake;
      const snake = this.variant && this.variant.snake;
      const forward = snake ? ["ArrowRight", "ArrowDown"] : [tb ? "ArrowDown" : "ArrowRight"];
      const backward = snake ? ["ArrowLeft", "ArrowUp"] : [tb ? "ArrowUp" : "ArrowLeft"];
      let candidates = [];
      if (forward.includes(e.key)) candidates = this.succ.get(this.selected) || [];
      else if (backward.includes(e.key)) candidates = this.pred.get(this.selected) || [];
      const dx = { ArrowLeft: -1, ArrowRight: 1 }[e.key] || 0;
      const dy = { ArrowUp: -1, ArrowDown: 1 }[e.key] || 0;
      if (!candidates.length) {
        // no edge that way: the nearest node on screen in that direction
        candidates = [...this.nodes.keys()].filter((k) => {
          const o = this.nodes.get(k);
          return k !== this.selected && (dx ? (o.x - cur.x) * dx > 1 : (o.y - cur.y) * dy > 1);
        });
      }
      if (!candidates.length) return;
      const dist = (k) => {
        const o = this.nodes.get(k);
        return dx ? Math.abs(o.x - cur.x) * 0.5 + Math.abs(o.y - cur.y) : Math.abs(o.y - cur.y) * 0.5 + Math.abs(o.x - cur.x);
      };
      candidates.sort((a, b) => dist(a) - dist(b));
      this.select(candidates[0]);
    });
  }

  // --- pan and zoom ----------------------------------------------------------------------------

  applyView() {
    const { k, x, y } = this.view;
    this.viewport.setAttribute("transform", `translate(${x.toFixed(1)},${y.toFixed(1)}) scale(${k.toFixed(4)})`);
    this.svg.style.setProperty("--zoom", k.toFixed(3));
    // text smaller than ~5 px is noise: far out, nodes are drawn as coloured boxes only
    this.svg.classList.toggle("far", k < 0.4);
    this.drawMinimap();
    if (this.lazy) this.scheduleFill();
  }

  /** A test for "near the view" (within a screen of it): the nodes of a large graph drawn in full. */
  nearView() {
    if (!this.lazy) return () => true;
    const { k, x, y } = this.view;
    if (k < 0.4) return () => false; // far out: boxes only
    const w = this.lastRegion ? this.lastRegion.cw : 1200;
    const h = this.lastRegion ? this.lastRegion.h : 800;
    const x0 = (-x - w) / k;
    const x1 = (-x + 2 * w) / k;
    const y0 = (-y - h) / k;
    const y1 = (-y + 2 * h) / k;
    return (e) => e.x + NODE_W >= x0 && e.x <= x1 && e.y + NODE_H >= y0 && e.y <= y1;
  }

  scheduleFill() {
    if (this.fillFrame) return;
    this.fillFrame = requestAnimationFrame(() => { this.fillFrame = 0; this.fillVisible(); });
  }

  fillVisible() {
    if (!this.lazy) return;
    const near = this.nearView();
    const now = Date.now();
    for (const entry of this.nodes.values()) {
      if (entry.full || !entry.el || !near(entry)) continue;
      entry.full = true;
      entry.el.innerHTML = this.nodeInner(entry, entry.data, now);
      this.bindEntry(entry);
    }
  }

  /** Where the automatic view looks when the graph is larger than its room: the selected stage,
   *  else the first failed or waiting one, else the first needing attention or running, else the first. */
  focusPoint(layout) {
    if (this.selected && layout.nodes.has(this.selected)) return layout.nodes.get(this.selected);
    const nodes = this.graph ? this.graph.nodes : [];
    for (const statuses of [HIGHLIGHT, new Set(["needs_attention", "running"])]) {
      for (const n of nodes) if (statuses.has(n.status) && layout.nodes.has(this.keyOf(n))) return layout.nodes.get(this.keyOf(n));
    }
    return null; // nothing stands out: the view starts at the graph's beginning (top left)
  }

  fit(options = {}) {
    const { animate = false, all = false, region: given } = typeof options === "boolean" ? { animate: options } : options;
    if (!given && !this.container.getBoundingClientRect().width) return; // hidden (the timeline tab): refit when shown
    const region = given || this.region();
    if (this.keys && this.keys.length && this.variant && this.variant.name !== "empty") {
      this.applyLayout(this.pickLayout(region), animate);
    }
    const view = this.fitView(region, this.variant, { all });
    if (!view) return;
    this.view = view;
    this.viewport.classList.toggle("glide", animate && this.nodes.size <= LARGE);
    this.applyView();
    this.userMoved = false;
  }

  /**
   * The automatic view (and Fit): the largest zoom up to 1 that shows the whole graph in the room
   * no panel covers, but never below the legible zoom; a graph still too large is panned to its
   * focus. `all` (the Fit button) shows a graph of more than FIT_ALL_FROM stages whole at any zoom.
   */
  fitView(region, layout, { all = false }) {
    const width = layout ? layout.width : 0;
    const height = layout ? layout.height : 0;
    if (!(width > 0 && height > 0 && Number.isFinite(width) && Number.isFinite(height))) return null;
    const whole = Math.min(1, region.w / width, region.h / height);
    const count = layout.nodes.size;
    const k = all && count > FIT_ALL_FROM ? Math.max(0.01, whole) : Math.max(whole, LEGIBLE_ZOOM);
    let x = (region.w - width * k) / 2;
    let y = (region.h - height * k) / 2;
    const focus = this.focusPoint(layout);
    if (width * k > region.w + 0.5) {
      x = focus ? region.w / 2 - (focus.x + NODE_W / 2) * k : 0;
      x = Math.min(0, Math.max(region.w - width * k, x));
    }
    if (height * k > region.h + 0.5) {
      y = focus ? region.h / 2 - (focus.y + NODE_H / 2) * k : 0;
      y = Math.min(0, Math.max(region.h - height * k, y));
    }
    return { k, x, y };
  }

  zoomBy(factor, cx, cy) {
    const region = this.region();
    cx = cx ?? region.w / 2;
    cy = cy ?? region.h / 2;
    const k = Math.max(0.01, Math.min(2, this.view.k * factor));
    const f = k / this.view.k;
    this.view = { k, x: cx - (cx - this.view.x) * f, y: cy - (cy - this.view.y) * f };
    this.viewport.classList.remove("glide");
    this.applyView();
    this.userMoved = true;
  }

  /** Pan (never zoom) so that the node is inside the room no panel covers. */
  ensureVisible(entry) {
    if (!entry) return;
    const region = this.region();
    const { k, x, y } = this.view;
    const sx = entry.x * k + x;
    const sy = entry.y * k + y;
    const pad = 16;
    let dx = 0;
    let dy = 0;
    if (sx < pad) dx = pad - sx; else if (sx + NODE_W * k > region.w - pad) dx = region.w - pad - (sx + NODE_W * k);
    if (sy < pad) dy = pad - sy; else if (sy + NODE_H * k > region.h - pad) dy = region.h - pad - (sy + NODE_H * k);
    if (dx || dy) {
      this.view = { k, x: x + dx, y: y + dy };
      this.viewport.classList.toggle("glide", this.nodes.size <= LARGE);
      this.applyView();
    }
  }

  /** The room changed (panel opened or closed, window resized): refit, or keep the selection in sight. */
  roomChanged() {
    if (!this.container.getBoundingClientRect().width) return; // hidden (the timeline tab)
    if (!this.userMoved) this.fit();
    else if (this.selected) this.ensureVisible(this.nodes.get(this.selected));
    this.drawMinimap();
  }

  installPanZoom() {
    this.svg.addEventListener("wheel", (e) => {
      e.preventDefault();
      const rect = this.container.getBoundingClientRect();
      this.zoomBy(Math.exp(-e.deltaY * 0.0015), e.clientX - rect.left, e.clientY - rect.top);
    }, { passive: false });
    let drag = null;
    this.svg.addEventListener("pointerdown", (e) => {
      if (e.button !== 0 || e.target.closest("g.node")) return;
      drag = { x: e.clientX, y: e.clientY, vx: this.view.x, vy: this.view.y, id: e.pointerId };
      this.svg.setPointerCapture(e.pointerId);
      this.svg.classList.add("panning");
      this.viewport.classList.remove("glide");
    });
    this.svg.addEventListener("pointermove", (e) => {
      if (!drag || e.pointerId !== drag.id) return;
      this.view = { ...this.view, x: drag.vx + e.clientX - drag.x, y: drag.vy + e.clientY - drag.y };
      this.applyView();
      this.userMoved = true;
    });
    const end = (e) => { if (drag && e.pointerId === drag.id) { drag = null; this.svg.classList.remove("panning"); } };
    this.svg.addEventListener("pointerup", end);
    this.svg.addEventListener("pointercancel", end);
  }

  // --- minimap ---------------------------------------------------------------------------------

  installMinimap() {
    this.minimap = document.createElement("canvas");
    this.minimap.className = "minimap";
    this.minimap.hidden = true;
    this.minimap.setAttribute("aria-hidden", "true");
    this.minimap.title = "Overview: click or drag to move the view";
    this.container.append(this.minimap);
    this.minimapDirty = true;
    let dragging = null;
    const moveTo = (e) => {
      const r = this.minimap.getBoundingClientRect();
      const m = this.minimapScale;
      if (!m) return;
      const gx = (e.clientX - r.left) / m;
      const gy = (e.clientY - r.top) / m;
      const region = this.region();
      const { k } = this.view;
      this.view = { k, x: region.w / 2 - gx * k, y: region.h / 2 - gy * k };
      this.viewport.classList.remove("glide");
      this.applyView();
      this.userMoved = true;
    };
    this.minimap.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      e.preventDefault();
      e.stopPropagation();
      dragging = e.pointerId;
      this.minimap.setPointerCapture(e.pointerId);
      moveTo(e);
    });
    this.minimap.addEventListener("pointermove", (e) => { if (dragging === e.pointerId) moveTo(e); });
    const end = (e) => { if (dragging === e.pointerId) dragging = null; };
    this.minimap.addEventListener("pointerup", end);
    this.minimap.addEventListener("pointercancel", end);
    this.minimap.addEventListener("wheel", (e) => e.stopPropagation());
  }

  drawMinimap() {
    if (this.minimapFrame) return;
    this.minimapFrame = requestAnimationFrame(() => { this.minimapFrame = 0; this.paintMinimap(); });
  }

  paintMinimap() {
    const { width, height } = this.size;
    const region = this.region();
    const { k, x, y } = this.view;
    const shown = width > 0 && height > 0 && this.nodes.size > FIT_ALL_FROM
      && (width * k > region.w + 1 || height * k > region.h + 1 || x < -1 || y < -1
        || x + width * k > region.w + 1 || y + height * k > region.h + 1);
    this.minimap.hidden = !shown;
    if (!shown) return;
    const m = Math.min(MINIMAP_W / width, MINIMAP_H / height);
    this.minimapScale = m;
    const cw = Math.max(24, Math.round(width * m));
    const ch = Math.max(16, Math.round(height * m));
    const dpr = window.devicePixelRatio || 1;
    if (this.minimap.width !== cw * dpr || this.minimap.height !== ch * dpr) {
      this.minimap.width = cw * dpr;
      this.minimap.height = ch * dpr;
      this.minimap.style.width = `${cw}px`;
      this.minimap.style.height = `${ch}px`;
      this.minimapDirty = true;
    }
    if (this.minimapDirty || !this.minimapBase) {
      this.minimapDirty = false;
      const base = this.minimapBase || document.createElement("canvas");
      base.width = this.minimap.width;
      base.height = this.minimap.height;
      const ctx = base.getContext("2d");
      ctx.setTransform(dpr * m, 0, 0, dpr * m, 0, 0);
      const css = getComputedStyle(this.container);
      const colour = {};
      for (const entry of this.nodes.values()) {
        const st = entry.data ? entry.data.status : "ready";
        if (!(st in colour)) colour[st] = getComputedStyle(entry.el).getPropertyValue("--st").trim() || css.color;
        ctx.fillStyle = colour[st];
        ctx.fillRect(entry.x, entry.y, NODE_W, NODE_H);
      }
      this.minimapBase = base;
    }
    const ctx = this.minimap.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.minimap.width, this.minimap.height);
    ctx.drawImage(this.minimapBase, 0, 0);
    ctx.setTransform(dpr * m, 0, 0, dpr * m, 0, 0);
    ctx.strokeStyle = getComputedStyle(this.minimap).color || "#2563eb";
    ctx.lineWidth = 2 / m;
    ctx.strokeRect(-x / k, -y / k, region.w / k, region.h / k);
  }
}
