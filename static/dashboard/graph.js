// The stage graph (UI.md "graph"): dagre's layered layout drawn as SVG, updated in place.
//
// setGraph() diffs the new snapshot against what is drawn: when the node and edge sets are the
// same only the changed nodes are restyled (no layout); when they differ (plan applied, changes
// requested) the layout is recomputed and nodes glide to their new places.
import dagre from "../vendor/dagre-3.1.3/dagre.esm.js";
import { STATUS_ICON, STATUS_LABEL, shortId } from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 184;
const NODE_H = 66;
const RING_R = 7;
const RING_C = 2 * Math.PI * RING_R;
const MODE_MARK = { shared: "shared", read: "read", "isolated-write": "isolated", integrate: "integrate" };
const HIGHLIGHT = new Set(["failed", "waiting"]);

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const clip = (s, n) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

function svgEl(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function edgePath(points) {
  if (!points || points.length < 2) return "";
  const [p0, ...rest] = points;
  let d = `M${p0.x.toFixed(1)},${p0.y.toFixed(1)}`;
  if (rest.length === 1) return `${d}L${rest[0].x.toFixed(1)},${rest[0].y.toFixed(1)}`;
  // smooth through the bend points: quadratic curves between midpoints
  for (let i = 0; i < rest.length - 1; i++) {
    const c = rest[i];
    const n = rest[i + 1];
    const mx = (c.x + n.x) / 2;
    const my = (c.y + n.y) / 2;
    d += `Q${c.x.toFixed(1)},${c.y.toFixed(1)} ${mx.toFixed(1)},${my.toFixed(1)}`;
  }
  const last = rest[rest.length - 1];
  return `${d}L${last.x.toFixed(1)},${last.y.toFixed(1)}`;
}

export class GraphView {
  constructor(container, { onSelect = () => {}, onOpen = () => {} } = {}) {
    this.container = container;
    this.onSelect = onSelect;
    this.onOpen = onOpen;
    this.nodes = new Map(); // key -> {data, el, x, y}
    this.edges = new Map(); // "a->b" -> {el, source, target, points}
    this.structure = "";
    this.mode = "graph";
    this.selected = null;
    this.outlined = new Set();
    this.view = { k: 1, x: 0, y: 0 };
    this.size = { width: 0, height: 0 };
    this.leaseSpans = new Map();
    this.userMoved = false;

    this.svg = svgEl("svg", { class: "graph-svg", role: "img", "aria-label": "Stage graph" });
    const defs = svgEl("defs");
    defs.innerHTML = '<marker id="wc-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head"/></marker>'
      + '<marker id="wc-arrow-hl" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-head-hl"/></marker>';
    this.viewport = svgEl("g", { class: "viewport" });
    this.edgeLayer = svgEl("g", { class: "edges" });
    this.nodeLayer = svgEl("g", { class: "nodes" });
    this.viewport.append(this.edgeLayer, this.nodeLayer);
    this.svg.append(defs, this.viewport);
    container.append(this.svg);
    this.installPanZoom();
    this.installKeyboard();
    this.nodeLayer.addEventListener("click", (e) => {
      const g = e.target.closest("g.node");
      if (g) { this.select(g.dataset.key, { open: true }); container.focus({ preventScroll: true }); }
    });
  }

  keyOf(n) { return this.mode === "graph" ? n.stage_id : n.id; }

  edgeKeys(e) {
    return this.mode === "graph" ? [e.source, e.target] : [e.source_action_id, e.target_action_id];
  }

  /** Draw a Graph (API.md) snapshot. Returns {relayout, layout_ms, render_ms}. */
  setGraph(graph) {
    const t0 = performance.now();
    performance.mark("wc-graph-start");
    this.mode = graph.execution_mode === "linear" ? "linear" : "graph";
    this.graph = graph;
    const keys = graph.nodes.map((n) => this.keyOf(n));
    const edgeKeys = graph.edges.map((e) => this.edgeKeys(e).join("->"));
    const structure = `${this.mode}|${keys.join(",")}|${edgeKeys.sort().join(",")}`;
    let layoutMs = 0;
    let relayout = false;
    if (structure !== this.structure) {
      relayout = true;
      // the first nodes drawn (also after an empty draft's graph) appear in place, without a glide
      const first = this.nodes.size === 0;
      this.structure = structure;
      const tl = performance.now();
      const positions = this.layout(graph);
      layoutMs = performance.now() - tl;
      performance.mark("wc-graph-layout");
      this.renderStructure(graph, positions, !first);
      if (first || !this.userMoved) this.fit(!first);
    } else {
      for (const n of graph.nodes) {
        const entry = this.nodes.get(this.keyOf(n));
        if (entry) this.restyle(entry, n);
      }
    }
    this.highlightPaths();
    this.applyOutline();
    const total = performance.now() - t0;
    performance.mark("wc-graph-end");
    try { performance.measure("wc-graph", "wc-graph-start", "wc-graph-end"); } catch { /* marks cleared */ }
    const timing = { nodes: graph.nodes.length, edges: graph.edges.length, relayout, layout_ms: layoutMs,
      render_ms: total - layoutMs, total_ms: total };
    if (relayout) window.__wcGraphTiming = timing;
    window.__wcGraphLastUpdate = timing;
    return timing;
  }

  layout(graph) {
    // dagre sizes an empty graph -Infinity: nothing to lay out, nothing to fit
    if (!graph.nodes.length) return { nodes: new Map(), edges: new Map(), width: 0, height: 0 };
    const large = graph.nodes.length > 100;
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, edgesep: 8, marginx: 24, marginy: 24,
      ranker: large ? "tight-tree" : "network-simplex" });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of graph.nodes) g.setNode(this.keyOf(n), { width: NODE_W, height: NODE_H });
    for (const e of graph.edges) {
      const [a, b] = this.edgeKeys(e);
      if (g.hasNode(a) && g.hasNode(b) && a !== b) g.setEdge(a, b);
    }
    // large graphs skip the iterative crossing reduction: the initial order is already by sequence
    dagre.layout(g, { disableOptimalOrderHeuristic: large });
    const nodes = new Map();
    for (const key of g.nodes()) { const p = g.node(key); nodes.set(key, { x: p.x - NODE_W / 2, y: p.y - NODE_H / 2 }); }
    const edges = new Map();
    for (const e of g.edges()) edges.set(`${e.v}->${e.w}`, g.edge(e).points);
    const gg = g.graph();
    const finite = (v) => (Number.isFinite(v) && v > 0 ? v : 0);
    return { nodes, edges, width: finite(gg.width), height: finite(gg.height) };
  }

  renderStructure(graph, positions, animate) {
    this.size = { width: positions.width, height: positions.height };
    this.svg.classList.toggle("animate", animate);
    const seen = new Set();
    const fresh = [];
    for (const n of graph.nodes) {
      const key = this.keyOf(n);
      seen.add(key);
      const p = positions.nodes.get(key);
      let entry = this.nodes.get(key);
      if (!entry) {
        const el = svgEl("g", { class: "node", "data-key": key });
        entry = { el, data: null, sig: "" };
        this.nodes.set(key, entry);
        fresh.push(el);
      }
      entry.x = p.x;
      entry.y = p.y;
      entry.el.style.transform = `translate(${p.x}px,${p.y}px)`;
      this.restyle(entry, n);
    }
    for (const [key, entry] of this.nodes) {
      if (!seen.has(key)) { entry.el.remove(); this.nodes.delete(key); if (this.selected === key) this.selected = null; }
    }
    if (fresh.length) {
      const frag = document.createDocumentFragment();
      for (const el of fresh) { if (animate) el.classList.add("entering"); frag.append(el); }
      this.nodeLayer.append(frag);
      if (animate) requestAnimationFrame(() => requestAnimationFrame(() => fresh.forEach((el) => el.classList.remove("entering"))));
    }
    // edges
    const seenEdges = new Set();
    const frag = document.createDocumentFragment();
    for (const [key, points] of positions.edges) {
      seenEdges.add(key);
      const [source, target] = key.split("->");
      let entry = this.edges.get(key);
      if (!entry) {
        entry = { el: svgEl("path", { class: "edge", "marker-end": "url(#wc-arrow)" }), source, target };
        this.edges.set(key, entry);
        frag.append(entry.el);
      }
      entry.el.setAttribute("d", edgePath(points));
    }
    this.edgeLayer.append(frag);
    for (const [key, entry] of this.edges) if (!seenEdges.has(key)) { entry.el.remove(); this.edges.delete(key); }
    this.succ = new Map();
    this.pred = new Map();
    for (const e of this.edges.values()) {
      if (!this.succ.has(e.source)) this.succ.set(e.source, []);
      if (!this.pred.has(e.target)) this.pred.set(e.target, []);
      this.succ.get(e.source).push(e.target);
      this.pred.get(e.target).push(e.source);
    }
  }

  /** Re-draw one node's content only when something it shows changed. */
  restyle(entry, n) {
    const lease = n.lease;
    const sig = [n.id, n.status, n.name, n.type, n.attempt, n.max_attempts, n.workspace_mode,
      lease ? `${lease.owner_boot_id}|${lease.lease_epoch}|${lease.expires_at}` : "", (n.blocked_by || []).join("|")].join("§");
    entry.data = n;
    if (entry.sig === sig) return false;
    entry.sig = sig;
    const el = entry.el;
    el.dataset.status = n.status;
    el.dataset.id = n.id;
    el.dataset.stage = n.stage_id;
    el.classList.toggle("blocked", (n.blocked_by || []).length > 0);
    el.setAttribute("role", "button");
    el.setAttribute("aria-label", `${n.name}: ${STATUS_LABEL[n.status] || n.status}`);
    const icon = STATUS_ICON[n.status] || "•";
    const attempt = `${n.attempt}/${n.max_attempts}`;
    const mode = MODE_MARK[n.workspace_mode] || n.workspace_mode;
    let statusLine = `${icon} ${STATUS_LABEL[n.status] || n.status}`;
    let ring = "";
    if (lease) {
      statusLine += ` · ${shortId(lease.owner_boot_id, 6)} e${lease.lease_epoch}`;
      ring = `<g class="ring" transform="translate(${NODE_W - 16},16)"><circle class="ring-bg" r="${RING_R}"/>`
        + `<circle class="ring-fg" r="${RING_R}" stroke-dasharray="${RING_C.toFixed(2)}" stroke-dashoffset="0" transform="rotate(-90)"/></g>`;
    }
    const tip = [`${n.name} (${n.type})`, `status: ${STATUS_LABEL[n.status] || n.status}`, `attempt ${attempt}`, `workspace: ${n.workspace_mode}`];
    if (lease) tip.push(`lease: worker ${lease.owner_boot_id}, epoch ${lease.lease_epoch}, expires ${new Date(lease.expires_at).toLocaleTimeString()}`);
    if ((n.blocked_by || []).length) tip.push("blocked by:", ...n.blocked_by.map((b) => `• ${b}`));
    el.innerHTML = `<title>${esc(tip.join("\n"))}</title>`
      + `<rect class="node-box" width="${NODE_W}" height="${NODE_H}" rx="7"/>`
      + `<rect class="node-stripe" width="4" height="${NODE_H - 12}" x="0" y="6" rx="2"/>`
      + `<text class="node-name" x="14" y="21">${esc(clip(n.name, lease ? 19 : 22))}</text>`
      + `<text class="node-sub" x="14" y="38">${esc(clip(n.type, 12))} · ${attempt} · <tspan class="mode" data-mode="${esc(n.workspace_mode)}">${esc(mode)}</tspan></text>`
      + `<text class="node-status" x="14" y="55">${esc(statusLine)}${(n.blocked_by || []).length ? " · blocked" : ""}</text>`
      + ring;
    if (lease) this.updateRing(entry);
    return true;
  }

  updateRing(entry, now = Date.now()) {
    const lease = entry.data && entry.data.lease;
    const ring = entry.el.querySelector(".ring-fg");
    if (!lease || !ring) return;
    const key = `${lease.run_id}|${lease.lease_epoch}|${lease.expires_at}`;
    const remaining = Math.max(0, Date.parse(lease.expires_at) - now);
    let span = this.leaseSpans.get(key);
    if (!span) { span = Math.max(remaining, 1000); this.leaseSpans.set(key, span); }
    const frac = Math.max(0, Math.min(1, remaining / span));
    ring.setAttribute("stroke-dashoffset", (RING_C * (1 - frac)).toFixed(2));
    entry.el.classList.toggle("lease-expired", remaining === 0);
  }

  tick() {
    const now = Date.now();
    for (const entry of this.nodes.values()) if (entry.data && entry.data.lease) this.updateRing(entry, now);
  }

  /** Outline the failed/waiting nodes and every path from the root that leads to them. */
  highlightPaths() {
    const onPath = new Set();
    const stack = [];
    for (const [key, entry] of this.nodes) if (entry.data && HIGHLIGHT.has(entry.data.status)) { onPath.add(key); stack.push(key); }
    while (stack.length) {
      const k = stack.pop();
      for (const p of (this.pred && this.pred.get(k)) || []) if (!onPath.has(p)) { onPath.add(p); stack.push(p); }
    }
    for (const [key, entry] of this.nodes) entry.el.classList.toggle("on-path", onPath.has(key));
    for (const e of this.edges.values()) {
      const hl = onPath.has(e.source) && onPath.has(e.target);
      if (e.el.classList.contains("on-path") !== hl) {
        e.el.classList.toggle("on-path", hl);
        e.el.setAttribute("marker-end", hl ? "url(#wc-arrow-hl)" : "url(#wc-arrow)");
      }
    }
  }

  /** Outline the nodes whose action ids are given (the retry preview); empty clears. */
  setOutlined(actionIds) {
    this.outlined = new Set(actionIds || []);
    this.applyOutline();
  }

  applyOutline() {
    for (const entry of this.nodes.values()) entry.el.classList.toggle("outlined", !!entry.data && this.outlined.has(entry.data.id));
    this.svg.classList.toggle("has-outline", this.outlined.size > 0);
  }

  nodeByActionId(id) {
    for (const entry of this.nodes.values()) if (entry.data && entry.data.id === id) return entry.data;
    return null;
  }

  // --- selection and keyboard ------------------------------------------------------------------

  select(key, { open = false, scroll = true } = {}) {
    if (this.selected && this.nodes.has(this.selected)) this.nodes.get(this.selected).el.classList.remove("selected");
    this.selected = key && this.nodes.has(key) ? key : null;
    if (this.selected) {
      const entry = this.nodes.get(this.selected);
      entry.el.classList.add("selected");
      if (scroll) this.ensureVisible(entry);
      this.container.setAttribute("aria-activedescendant", "");
      this.onSelect(entry.data);
      if (open) this.onOpen(entry.data);
    } else {
      this.onSelect(null);
    }
  }

  selectedData() { return this.selected ? this.nodes.get(this.selected).data : null; }

  installKeyboard() {
    this.container.addEventListener("keydown", (e) => {
      if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Enter", "Home", "+", "=", "-", "0"].includes(e.key)) return;
      if (e.key === "+" || e.key === "=") { this.zoomBy(1.2); e.preventDefault(); return; }
      if (e.key === "-") { this.zoomBy(1 / 1.2); e.preventDefault(); return; }
      if (e.key === "0") { this.fit(true); e.preventDefault(); return; }
      e.preventDefault();
      if (!this.nodes.size) return;
      if (!this.selected || e.key === "Home") {
        const first = [...this.nodes.entries()].sort((a, b) => a[1].x - b[1].x || a[1].y - b[1].y)[0][0];
        this.select(first);
        return;
      }
      if (e.key === "Enter") { this.select(this.selected, { open: true }); return; }
      const cur = this.nodes.get(this.selected);
      let candidates;
      if (e.key === "ArrowRight") candidates = (this.succ.get(this.selected) || []);
      else if (e.key === "ArrowLeft") candidates = (this.pred.get(this.selected) || []);
      else {
        const down = e.key === "ArrowDown";
        candidates = [...this.nodes.keys()].filter((k) => {
          const o = this.nodes.get(k);
          return k !== this.selected && Math.abs(o.x - cur.x) < NODE_W / 2 && (down ? o.y > cur.y : o.y < cur.y);
        });
      }
      if (!candidates.length && (e.key === "ArrowRight" || e.key === "ArrowLeft")) {
        // no edge that way: the nearest node in the next column
        const right = e.key === "ArrowRight";
        candidates = [...this.nodes.keys()].filter((k) => (right ? this.nodes.get(k).x > cur.x + 1 : this.nodes.get(k).x < cur.x - 1));
      }
      if (!candidates.length) return;
      const dist = (k) => { const o = this.nodes.get(k); return Math.abs(o.x - cur.x) * 0.5 + Math.abs(o.y - cur.y); };
      candidates.sort((a, b) => dist(a) - dist(b));
      this.select(candidates[0]);
    });
  }

  // --- pan and zoom ----------------------------------------------------------------------------

  applyView() {
    const { k, x, y } = this.view;
    this.viewport.setAttribute("transform", `translate(${x.toFixed(1)},${y.toFixed(1)}) scale(${k.toFixed(4)})`);
    this.svg.style.setProperty("--zoom", k.toFixed(3));
  }

  fit(animate = false) {
    const rect = this.container.getBoundingClientRect();
    const w = rect.width || 800;
    const hgt = rect.height || 500;
    const { width, height } = this.size;
    if (!(width > 0 && height > 0 && Number.isFinite(width) && Number.isFinite(height))) return;
    const k = Math.max(0.05, Math.min(1.2, Math.min((w - 32) / width, (hgt - 32) / height)));
    this.view = { k, x: (w - width * k) / 2, y: (hgt - height * k) / 2 };
    this.viewport.classList.toggle("glide", animate);
    this.applyView();
    this.userMoved = false;
  }

  zoomBy(factor, cx, cy) {
    const rect = this.container.getBoundingClientRect();
    cx = cx ?? rect.width / 2;
    cy = cy ?? rect.height / 2;
    const k = Math.max(0.05, Math.min(3, this.view.k * factor));
    const f = k / this.view.k;
    this.view = { k, x: cx - (cx - this.view.x) * f, y: cy - (cy - this.view.y) * f };
    this.viewport.classList.remove("glide");
    this.applyView();
    this.userMoved = true;
  }

  ensureVisible(entry) {
    const rect = this.container.getBoundingClientRect();
    const { k, x, y } = this.view;
    const sx = entry.x * k + x;
    const sy = entry.y * k + y;
    const pad = 24;
    let dx = 0;
    let dy = 0;
    if (sx < pad) dx = pad - sx; else if (sx + NODE_W * k > rect.width - pad) dx = rect.width - pad - (sx + NODE_W * k);
    if (sy < pad) dy = pad - sy; else if (sy + NODE_H * k > rect.height - pad) dy = rect.height - pad - (sy + NODE_H * k);
    if (dx || dy) { this.view = { k, x: x + dx, y: y + dy }; this.viewport.classList.add("glide"); this.applyView(); }
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
}
