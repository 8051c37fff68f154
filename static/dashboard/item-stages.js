// One stage, its history: what the graph's nodes, the Timeline's rows and the side panel's list of
// attempts all read, so the tabs never disagree (a pure module: no page, no DOM).
//
// A stage is drawn once, linear and graph items alike. Its attempts are every run of every action
// of the stage (a linear item appends an action per retry or review loop; a graph item resets its
// action in place and keeps the runs), oldest first, plus each earlier action of the stage that
// was superseded or cancelled before it ran. The status the stage shows is that of its current
// (newest) action, told as the lead reads it:
//   * a linear stage that asked a question is `completed` by DOMAIN §7.4 while the item waits:
//     it shows `waiting`;
//   * a review whose newest run requested changes shows `changes_requested` until it runs again;
//   * a waiting or failed stage says since when (`since`, ms): the end of the run that asked or
//     failed, not that run's length.
// A review that requested changes sends work back to a stage: a loop {source, target, count}.

const ms = (iso) => (iso ? Date.parse(iso) : NaN);

// what a person or the store did between two attempts of a stage: the reason it ran again
const CAUSES = {
  "work_item.retried": "retried",
  "review.changes_requested": "changes requested",
  "action.guidance_added": "guidance",
  "action.retry_scheduled": "retried automatically",
  "action.reset": "reset",
  "workflow.retriaged": "contract changed",
};

function actorName(actor) {
  if (!actor) return "";
  const [kind, name] = String(actor).split(":", 2);
  return name && (kind === "user" || kind === "admin") ? name : "";
}

/** The cause of an attempt's successor, in words ("retried by lead", "review asked for changes"). */
function causeText(ev) {
  const who = actorName(ev.actor);
  const by = who ? ` by ${who}` : "";
  switch (ev.type) {
    case "work_item.retried": return `retried${by}`;
    case "review.changes_requested": return "sent back by a review that requested changes";
    case "action.guidance_added": return `restarted with guidance${by}`;
    case "action.retry_scheduled": return "retried automatically";
    case "action.reset": return `reset${by}`;
    case "workflow.retriaged": return `contract changed${by}`;
    default: return CAUSES[ev.type] || ev.type;
  }
}

/** The outcome an attempt shows: a run's status, but a review's completed run that requested
 *  changes is `changes_requested` (its own colour and words, not a green "completed"). */
export function attemptStatus(run) {
  if (run.status === "completed" && run.review_decision === "changes_requested") return "changes_requested";
  return run.status;
}

/**
 * stageHistory(graph, detail) → {order: [stage_id], stages: Map stage_id -> Stage, loops: [Loop]}
 *   Stage: {stage, name, node (the current action's graph node), nodes (every node of the stage,
 *           linear items: one per action), actionIds: Set, attempts: [Attempt], status, since}
 *   Attempt: {key, run|null, action|null, actionId, status, start, end (ms; null while it runs),
 *             reason, cause (why the next attempt came), target (a changes request's stage)}
 *   Loop: {source (the review's stage), target, count}
 * `detail` (WorkItemDetail) may be null: the stages then come from the graph alone and carry the
 * graph's last run of each node only.
 */
export function stageHistory(graph, detail) {
  const linear = graph.execution_mode !== "graph";
  const stages = new Map();
  const order = [];
  const stageOfAction = new Map();
  const nodes = [...graph.nodes].sort((a, b) => a.sequence - b.sequence);
  for (const n of nodes) {
    let s = stages.get(n.stage_id);
    if (!s) {
      s = { stage: n.stage_id, name: n.name, node: n, nodes: [], actionIds: new Set(), attempts: [], status: n.status, since: null };
      stages.set(n.stage_id, s);
      order.push(n.stage_id);
    }
    s.nodes.push(n);
    s.node = n; // by sequence: the newest action of the stage
    s.actionIds.add(n.id);
    stageOfAction.set(n.id, n.stage_id);
  }
  const actions = detail ? [...detail.actions].sort((a, b) => a.sequence - b.sequence) : [];
  const actionById = new Map(actions.map((a) => [a.id, a]));
  for (const a of actions) {
    const stage = a.stage_id || a.type;
    const s = stages.get(stage);
    if (!s) continue;
    s.actionIds.add(a.id);
    stageOfAction.set(a.id, stage);
  }
  const runs = detail ? detail.runs.filter((r) => r.started_at) : nodes.filter((n) => n.run).map((n) => ({ ...n.run, action_id: n.id }));
  for (const r of runs) {
    const s = stages.get(stageOfAction.get(r.action_id));
    if (!s) continue;
    s.attempts.push({ key: r.id, run: r, action: actionById.get(r.action_id) || null, actionId: r.action_id,
      status: attemptStatus(r), start: ms(r.started_at), end: r.ended_at ? ms(r.ended_at) : null,
      reason: r.status === "waiting" ? r.waiting_reason || "" : r.error || "", cause: "", target: null });
  }
  // an earlier action of the stage that never ran (superseded by guidance or a retry before a
  // claim) is an attempt too
  const ran = new Set(runs.map((r) => r.action_id));
  for (const a of actions) {
    const s = stages.get(stageOfAction.get(a.id));
    if (!s || ran.has(a.id) || a.id === s.node.id || !["superseded", "cancelled"].includes(a.status)) continue;
    const t = ms(a.updated_at);
    s.attempts.push({ key: a.id, run: null, action: a, actionId: a.id, status: a.status, start: t, end: t,
      reason: `${a.status} before it ran`, cause: "", target: null });
  }
  // why each attempt was followed by another: the first cause among the events between them
  const events = detail ? [...(detail.events || [])].filter((e) => e.type in CAUSES).sort((a, b) => a.id - b.id) : [];
  const loops = new Map();
  for (const s of stages.values()) {
    s.attempts.sort((x, y) => x.start - y.start || (x.key < y.key ? -1 : 1));
    s.attempts.forEach((at, i) => {
      const next = s.attempts[i + 1];
      if (at.status === "changes_requested") {
        const action = at.action;
        let target = action && action.changes_requested_stage_id;
        const ev = events.find((e) => e.type === "review.changes_requested" && e.run_id === at.key);
        if (ev && ev.data && ev.data.target_stage_id) target = ev.data.target_stage_id;
        if (!target && linear && action) {
          const after = actions.find((a) => a.sequence > action.sequence);
          if (after) target = after.stage_id || after.type;
        }
        at.target = target || null;
        const targetName = target && stages.has(target) ? stages.get(target).name : target;
        at.reason = `requested changes${targetName ? ` → ${targetName}` : ""}${at.run.summary ? `: ${at.run.summary}` : ""}`;
        if (target && stages.has(target) && target !== s.stage) {
          const k = `${s.stage}->${target}`;
          if (!loops.has(k)) loops.set(k, { source: s.stage, target, count: 0 });
          loops.get(k).count++;
        }
      } else if (at.status === "completed" && at.run && !at.reason) {
        at.reason = at.run.summary || "";
      }
      if (!next || at.end === null) return;
      const cause = events.find((e) => {
        const t = ms(e.created_at);
        if (t < at.end - 1 || t > next.start + 1) return false;
        if (e.type === "review.changes_requested" || e.type === "work_item.retried") {
          const target = e.data && e.data.target_stage_id;
          if (target) return target === s.stage;
          return e.type === "work_item.retried" && linear; // a linear retry names no stage: the current one
        }
        return !e.action_id || s.actionIds.has(e.action_id);
      });
      if (cause) at.cause = causeText(cause);
    });
  }
  // the status each stage shows
  const current = detail ? detail.current_action_id : null;
  const itemStatus = detail ? detail.status : graph.status;
  const last = nodes[nodes.length - 1];
  for (const s of stages.values()) {
    const n = s.node;
    let status = n.status;
    const latest = s.attempts.length ? s.attempts[s.attempts.length - 1] : null;
    const asked = linear && itemStatus === "waiting" && n.status === "completed"
      && (current ? current === n.id : n === last && n.run && n.run.status === "waiting");
    if (asked) status = "waiting";
    else if (latest && latest.status === "changes_requested" && ["completed", "ready"].includes(n.status)
      && latest.actionId === n.id) status = "changes_requested";
    s.status = status;
    if (status === "waiting" || status === "failed") {
      const ended = latest && latest.end !== null ? latest.end : (n.run && n.run.ended_at ? ms(n.run.ended_at) : NaN);
      s.since = Number.isFinite(ended) ? ended : null;
    }
  }
  return { order, stages, loops: [...loops.values()] };
}
