"""Reads (DOMAIN §12.10): lists, details, events, execution statistics."""
from __future__ import annotations

import contextlib
import re

from django.db import connection, transaction
from django.db.models import Max, OuterRef, Q, Subquery, Sum

from .errors import NotFound
from .events import stream_read
from .models import COUNTER_FIELDS, Action, ActionStatus, Event, Run, RunStatus, WorkItem, WorkItemStatus


def clamp_limit(limit, default: int = 100, maximum: int = 500) -> int:
    try:
        value = int(limit)
    except (TypeError, ValueError):
        return default
    if value <= 0:
        return default
    return max(1, min(maximum, value))


def _stats_from(row: dict, prefix: str = "") -> dict:
    return {f: int(row.get(prefix + f) or 0) for f in COUNTER_FIELDS}


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:@-]+")


def work_item_list(*, status: str | None = None, session_id: str | None = None, search: str | None = None,
                   limit=None) -> tuple[list[WorkItem], int]:
    """Items newest `updated_at` first with execution stats; returns (page, total matching)."""
    qs = WorkItem.objects.all()
    if status:
        qs = qs.filter(status=status)
    if search:
        qs = qs.filter(Q(title__icontains=search) | Q(goal__icontains=search))
    items = qs.order_by("-updated_at", "pk")
    if session_id:
        # exact match on origin.session_id or an element of linked_session_ids, checked in Python
        # (portable across SQLite and PostgreSQL); a plain id first narrows the rows in SQL by
        # substring, which JSON escaping cannot hide for such ids
        if _PLAIN_ID.fullmatch(session_id):
            items = items.filter(Q(origin__session_id=session_id) | Q(linked_session_ids__icontains=session_id))
        matched = [i for i in items if (i.origin or {}).get("session_id") == session_id
                   or session_id in (i.linked_session_ids or [])]
        total = len(matched)
        page = matched[: clamp_limit(limit)]
    else:
        total = items.count()
        page = list(items[: clamp_limit(limit)])
    return _with_summary_fields(page), total


def _with_summary_fields(page: list[WorkItem]) -> list[WorkItem]:
    """Attach what WorkItemSummary shows beyond the row (stats, action counts, current action),
    from the same batch reads as `work_item_summaries`."""
    summaries = work_item_summaries([i.pk for i in page])
    for i in page:
        s = summaries.get(i.pk)
        i.execution_stats = s.execution_stats if s else {f: 0 for f in COUNTER_FIELDS}
        i.action_counts = s.action_counts if s else {}
        i.current_action = s.current_action if s else None
        i.attention = s.attention if s else None
    return page


def work_item_summary(item_id: str) -> WorkItem:
    """One item as WorkItemSummary shows it (`work_item_summaries` of one id)."""
    item = work_item_summaries([item_id]).get(item_id)
    if item is None:
        raise NotFound(f"WorkItem not found: {item_id}", extra={"id": item_id})
    return item


def work_item_get(item_id: str) -> WorkItem:
    item = WorkItem.objects.filter(pk=item_id).first()
    if item is None:
        raise NotFound(f"WorkItem not found: {item_id}", extra={"id": item_id})
    return item


_DETAIL_SQL: dict[str, dict[str, str]] = {}
_ROWS: dict[str, object] = {}
DETAIL_EVENTS = 500


def _event_row():
    if "event" not in _ROWS:
        from .services.common import RowSpec

        _ROWS["event"] = RowSpec(Event, "e")
    return _ROWS["event"]


def _detail_sql() -> dict[str, str]:
    """The detail's four reads as fixed statements: the API reads the detail back after every
    claim and submit, and the ORM took longer compiling these queries than running them."""
    sql = _DETAIL_SQL.get(connection.vendor)
    if sql is None:
        from .services.common import ACTION_ROW, ITEM_ROW, RUN_ROW, qn

        item, action, run, event = (qn(m._meta.db_table) for m in (WorkItem, Action, Run, Event))
        sql = _DETAIL_SQL[connection.vendor] = {
            "item": f'SELECT {ITEM_ROW.columns()} FROM {item} i WHERE i."id" = %s',
            "actions": f'SELECT {ACTION_ROW.columns()} FROM {action} a WHERE a."work_item_id" = %s ORDER BY a."sequence"',
            "runs": (f'SELECT {RUN_ROW.columns()} FROM {run} r WHERE r."work_item_id" = %s '
                     f'ORDER BY r."started_at" DESC, r."id" DESC'),
            "events": (f'SELECT {_event_row().columns()} FROM {event} e WHERE e."work_item_id" = %s '
                       f'ORDER BY e."id" DESC LIMIT {DETAIL_EVENTS}'),
        }
    return sql


def work_item_detail(item_id: str) -> dict:
    """The item, its actions by sequence, runs newest first, newest 500 events, with stats."""
    from .services.common import ACTION_ROW, ITEM_ROW, RUN_ROW, hot_cursor

    sql, event_row = _detail_sql(), _event_row()
    with hot_cursor() as cur:
        cur.execute(sql["item"], [item_id])
        row = cur.fetchone()
        if row is None:
            raise NotFound(f"WorkItem not found: {item_id}", extra={"id": item_id})
        item = ITEM_ROW.build(row)
        cur.execute(sql["actions"], [item_id])
        actions = [ACTION_ROW.build(r) for r in cur.fetchall()]
        cur.execute(sql["runs"], [item_id])
        runs = [RUN_ROW.build(r) for r in cur.fetchall()]
        cur.execute(sql["events"], [item_id])
        events = [event_row.build(r) for r in cur.fetchall()]
    per_action: dict[str, dict] = {}  # stats_by_action from the runs just read (one query fewer)
    for run in runs:
        sums = per_action.setdefault(run.action_id, {f: 0 for f in COUNTER_FIELDS})
        for f in COUNTER_FIELDS:
            sums[f] += int(getattr(run, f) or 0)
    zero = {f: 0 for f in COUNTER_FIELDS}
    for a in actions:
        a.execution_stats = per_action.get(a.pk, dict(zero))
    item.execution_stats = {f: sum(s[f] for s in per_action.values()) for f in COUNTER_FIELDS}
    return {"item": item, "actions": actions, "runs": runs, "events": events}


def events_after(*, after_id: int = 0, item_id: str | None = None, limit=None) -> list[Event]:
    """Stored events with id > after_id, oldest first: a page of the stream (`stream_read`)."""
    qs = Event.objects.filter(id__gt=int(after_id or 0))
    if item_id is not None:
        qs = qs.filter(work_item_id=item_id)
    with stream_read():
        return list(qs.order_by("id")[: clamp_limit(limit, default=200, maximum=1000)])


def action_resume_context(action_id: str, exclude_run_id: str | None = None) -> dict | None:
    """DOMAIN §9.3: bounded resume data from the action's interrupted/retryable runs."""
    from .services.normalize import normalize_checkpoint

    runs = list(Run.objects.filter(action_id=action_id, status__in=("interrupted", "retryable"))
                .exclude(pk=exclude_run_id or "").order_by("-ended_at", "-started_at"))
    if not runs:
        return None
    newest = runs[0]
    response = next((r.response for r in runs if r.response), "")
    tool_events = []
    for r in reversed(runs):
        tool_events += list(((r.checkpoint or {}).get("tool_events") or []))
    if not response and not newest.error and not tool_events:
        return None
    return {"status": newest.status, "error": newest.error, "response": response,
            "checkpoint": normalize_checkpoint({"tool_events": tool_events})}


def work_item_events(*, item_id: str, after_id: int = 0, limit=None) -> list[Event]:
    """The catch-up stream of one item (oldest first, id > after_id); unknown item ⇒ NotFound."""
    work_item_get(item_id)
    return events_after(after_id=after_id, item_id=item_id, limit=limit)


def item_last_event_id(item_id: str) -> int:
    with stream_read():
        return Event.objects.filter(work_item_id=item_id).aggregate(m=Max("id"))["m"] or 0


def event_last_id() -> int:
    with stream_read():
        return Event.objects.aggregate(m=Max("id"))["m"] or 0


def event_previous_ids(event: Event) -> tuple[int, int]:
    """The ids of the stored events just before `event`: overall and of its item (0 when none).
    The live stream sends them along so a consumer can tell a lost message from an id hole."""
    return events_previous_ids([event])[event.id]


def run_fence_reason(*, run_id: str, owner_boot_id: str, lease_epoch: int, now=None) -> str:
    """Why a worker call on this run was fenced out (DOMAIN §6.4), read without locks.

    Only used to explain a refusal the service already decided; it never decides anything.
    """
    from . import clock
    from .services.common import stale_reason

    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return stale_reason(None, None, None, now or clock.now(), True)
    item = WorkItem.objects.filter(pk=run.work_item_id).first()
    action = Action.objects.filter(pk=run.action_id).first()
    if run.owner_boot_id != owner_boot_id or run.lease_epoch != lease_epoch:
        if run.status == RunStatus.RUNNING:
            return "stale Run: owner boot id or lease epoch does not match (superseded or already finished)"
    return stale_reason(run, action, item, now or clock.now(), True)


def _latest_completed_runs(action_ids: list[str]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    for run in (Run.objects.filter(action_id__in=action_ids, status=RunStatus.COMPLETED)
                .order_by("action_id", "-ended_at", "-started_at")):
        out.setdefault(run.action_id, run)
    return out


def action_dependencies(*, item_id: str, stage_ids: list[str], actions: list[Action] | None = None,
                        runs: list[Run] | None = None) -> list[dict]:
    """DOMAIN §10.1 list_action_dependencies: the canonical action of each stage [DEV-1], in
    sequence order, with summary, normalised evidence and executor id of its latest completed run.
    `actions` (by sequence) and `runs`: the item's rows when the caller has just read them."""
    from .services.common import canonical_actions
    from .services.normalize import evidence_on_read

    wanted = [s for s in (stage_ids or []) if isinstance(s, str)]
    if not wanted:
        return []
    if actions is None:
        actions = Action.objects.filter(work_item_id=item_id).order_by("sequence")
    canonical = canonical_actions(actions)
    deps = sorted((canonical[s] for s in set(wanted) if s in canonical), key=lambda a: a.sequence)
    if runs is None:
        runs = _latest_completed_runs([a.pk for a in deps])
    else:
        completed = sorted((r for r in runs if r.status == RunStatus.COMPLETED),
                           key=lambda r: (r.ended_at is not None, r.ended_at, r.started_at), reverse=True)
        runs = {}
        for r in completed:
            runs.setdefault(r.action_id, r)
    out = []
    for a in deps:
        run = runs.get(a.pk)
        vp = run.vp_snapshot.get("id") if run is not None and isinstance(run.vp_snapshot, dict) else None
        out.append({
            "action_id": a.pk,
            "stage_id": a.effective_stage_id,
            "type": a.type,
            "status": a.status,
            "summary": run.summary if run is not None else "",
            # already normal when the run was read (the field normalises on read): a cheap check
            "evidence": evidence_on_read(run.evidence) if run is not None else [],
            "vp_id": vp,
        })
    return out


def claim_dependencies(action: Action, item: WorkItem, *, actions: list[Action] | None = None,
                       runs: list[Run] | None = None) -> list[dict]:
    """The dependencies a claimed action receives: graph items only (linear ignores them, §2.2)."""
    if item.execution_mode != "graph":
        return []
    return action_dependencies(item_id=item.pk, stage_ids=list(action.depends_on_stage_ids or []),
                               actions=actions, runs=runs)


# --- graph (API.md "Graph") ---------------------------------------------------------------------

def _stage_names(snapshot) -> dict[str, str]:
    stages = snapshot.get("stages") if isinstance(snapshot, dict) else None
    names: dict[str, str] = {}
    for stage in stages or []:
        if isinstance(stage, dict) and isinstance(stage.get("id"), str):
            names[stage["id"]] = stage.get("name") or stage["id"]
    return names


def _workspace_holders(workspace_key: str) -> list[dict]:
    return list(
        Action.objects.filter(status=ActionStatus.RUNNING, work_item__workspace_key=workspace_key)
        .order_by("updated_at", "pk")
        .values("current_run_id", "workspace_mode", "work_item_id", "work_item__title", "stage_id", "type")
    )


def _blocked_by(action: Action, item: WorkItem, canonical: dict[str, Action], running, holders) -> list[str]:
    """Why a ready node cannot be claimed now: the rules of DOMAIN §5.1-§5.4, in words."""
    from .services.claims import workspace_blocks

    reasons: list[str] = []
    if item.execution_mode == "graph":
        for stage in action.depends_on_stage_ids or []:
            dep = canonical.get(stage)
            if dep is None:
                reasons.append(f"waiting for stage {stage} (missing)")
            elif dep.status != ActionStatus.COMPLETED:
                reasons.append(f"waiting for stage {stage} ({dep.status})")
    if item.workspace_key and workspace_blocks(action.workspace_mode, item.pk, running):
        for h in holders():
            if workspace_blocks(action.workspace_mode, item.pk, [(h["workspace_mode"], h["work_item_id"])]):
                owner = ("this work item" if h["work_item_id"] == item.pk
                         else f'work item {h["work_item_id"]} "{h["work_item__title"]}"')
                reasons.append(f'workspace held by run {h["current_run_id"]} ({h["workspace_mode"]}, '
                               f'stage {h["stage_id"] or h["type"]}) of {owner}')
    if item.execution_mode == "graph":
        if item.status not in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            reasons.append(f"work item is {item.status}")
    elif item.current_action_id != action.pk:
        reasons.append("not the current action of the work item")
    elif item.status != WorkItemStatus.READY or item.current_run_id:
        reasons.append(f"work item is {item.status}")
    return reasons


_NODE_RUN_FIELDS = ("id", "action_id", "status", "started_at", "ended_at", "owner_boot_id", "lease_epoch",
                    "expires_at", "renewed_at")


def _latest_runs(item_id: str) -> dict[str, Run]:
    """{action id: its newest run (by started_at)} for every action of the item, in one statement:
    each of the item's runs is kept only when no run of its action started later (the wc_run_action
    index answers the inner lookup), and only the columns a graph node shows are read."""
    newest = Run.objects.filter(action_id=OuterRef("action_id")).order_by("-started_at", "-pk").values("pk")[:1]
    rows = Run.objects.filter(work_item_id=item_id, pk=Subquery(newest)).only(*_NODE_RUN_FIELDS)
    return {r.action_id: r for r in rows}


def _node_run(run: Run | None) -> dict | None:
    if run is None:
        return None
    return {"id": run.pk, "status": run.status, "started_at": run.started_at, "ended_at": run.ended_at}


def graph_snapshot(item_id: str) -> dict:
    """Nodes (canonical action per stage; linear: every action), edges, leases and the reasons a
    ready node cannot be claimed now. A read: nothing is locked or written."""
    from .services.claims import running_in_workspace
    from .services.common import canonical_actions

    item = work_item_get(item_id)
    actions = list(Action.objects.filter(work_item_id=item_id).order_by("sequence"))
    canonical = canonical_actions(actions)
    graph = item.execution_mode == "graph"
    edges: list[dict] = []
    if graph:
        # a stage whose actions were all superseded or cancelled still shows its latest action
        per_stage: dict[str, Action] = {}
        for a in actions:
            per_stage[a.effective_stage_id] = a
        per_stage.update(canonical)
        nodes = sorted(per_stage.values(), key=lambda a: a.sequence)
        for a in nodes:
            for dep in a.depends_on_stage_ids or []:
                if dep in per_stage:
                    edges.append({"source": dep, "target": a.effective_stage_id,
                                  "source_action_id": per_stage[dep].pk, "target_action_id": a.pk})
        triage = next((a for a in nodes if a.type == "triage"), None)
        if triage is not None:
            for a in nodes:
                if a is not triage and not [d for d in (a.depends_on_stage_ids or []) if d in per_stage]:
                    edges.append({"source": triage.effective_stage_id, "target": a.effective_stage_id,
                                  "source_action_id": triage.pk, "target_action_id": a.pk})
    else:
        nodes = actions
        for prev, nxt in zip(nodes, nodes[1:]):
            edges.append({"source": prev.effective_stage_id, "target": nxt.effective_stage_id,
                          "source_action_id": prev.pk, "target_action_id": nxt.pk})

    latest = _latest_runs(item.pk)
    runs = {r.pk: r for r in latest.values()}
    missing = [a.current_run_id for a in nodes
               if a.status == ActionStatus.RUNNING and a.current_run_id and a.current_run_id not in runs]
    if missing:  # a running action's current run is its newest; this read is only a safety net
        runs.update((r.pk, r) for r in Run.objects.filter(pk__in=missing).only(*_NODE_RUN_FIELDS))
    running = running_in_workspace(item.workspace_key) if item.workspace_key else []
    holder_cache: list = []

    def holders() -> list[dict]:
        if not holder_cache:
            holder_cache.append(_workspace_holders(item.workspace_key))
        return holder_cache[0]

    names = _stage_names(item.workflow_snapshot)
    out_nodes = []
    for a in nodes:
        run = runs.get(a.current_run_id) if a.status == ActionStatus.RUNNING else None
        out_nodes.append({
            "id": a.pk,
            "stage_id": a.effective_stage_id,
            "type": a.type,
            "name": names.get(a.effective_stage_id) or a.effective_stage_id,
            "status": a.status,
            "attempt": a.attempt,
            "max_attempts": a.max_attempts,
            "workspace_mode": a.workspace_mode,
            "sequence": a.sequence,
            "lease": None if run is None else {
                "run_id": run.pk, "owner_boot_id": run.owner_boot_id,
                "lease_epoch": run.lease_epoch, "expires_at": run.expires_at,
                "renewed_at": run.renewed_at or run.started_at,
            },
            "run": _node_run(latest.get(a.pk)),
            "blocked_by": (_blocked_by(a, item, canonical, running, holders)
                           if a.status == ActionStatus.READY else []),
        })
    return {
        "work_item_id": item.pk,
        "execution_mode": item.execution_mode,
        "status": item.status,
        "nodes": out_nodes,
        "edges": edges,
        "last_event_id": item_last_event_id(item.pk),
    }


def action_with_stats(action: Action) -> Action:
    """The action with `execution_stats` (sum over its runs) attached, as the API shows it."""
    row = Run.objects.filter(action_id=action.pk).aggregate(**{f: Sum(f) for f in COUNTER_FIELDS})
    action.execution_stats = _stats_from(row)
    return action


# --- the live stream's batch reads (workcenter/events.py renders committed events in batches) ---

def events_previous_ids(events_: list[Event], *, wait: bool = True) -> dict[int, tuple[int, int]] | None:
    """The previous ids of several events in ONE stream read: {event id: (overall, in-item)}, the
    largest stored ids below each event's, overall and in its item (0 when none), read in one
    `stream_read` (on PostgreSQL one exclusive hold of the stream key for the whole batch).
    `wait=False` (PostgreSQL): take the stream key only if it is free right now, else return
    None at once. A waiting exclusive request holds back every writer's event insert until the
    writers in flight have committed (their commits then cannot share a WAL flush); a request
    that is granted at once costs them only the read itself."""
    from .services.common import hot_cursor, hot_execute

    pairs = sorted({(int(e.id), e.work_item_id) for e in events_})
    out: dict[int, tuple[int, int]] = {}
    if not pairs:
        return out
    with _stream_read_if(wait) as granted, hot_cursor() as cur:
        if not granted:
            return None
        if cur.db.vendor == "postgresql":
            hot_execute(cur, _batch_sql()["previous"], [[p[0] for p in pairs], [p[1] for p in pairs]])
            rows = cur.fetchall()
        else:
            rows = []
            for start in range(0, len(pairs), _VALUES_CHUNK):
                chunk = pairs[start:start + _VALUES_CHUNK]
                hot_execute(cur, _batch_sql()["previous"].format(values=", ".join(["(%s, %s)"] * len(chunk))),
                            [v for p in chunk for v in p])
                rows += cur.fetchall()
    for event_id, overall, in_item in rows:
        out[int(event_id)] = (int(overall or 0), int(in_item or 0))
    return out


def work_item_summaries(item_ids) -> dict[str, WorkItem]:
    """Items as WorkItemSummary shows them, in three fixed statements (the live stream renders
    them per batch right after commits): {item id: item} with `execution_stats`,
    `action_counts` and `current_action` attached; unknown ids are left out (no NotFound)."""
    from .services.common import ITEM_ROW, hot_cursor, hot_execute

    ids = sorted(set(item_ids))
    out: dict[str, WorkItem] = {}
    if not ids:
        return out
    sql, n = _batch_sql(), len(ITEM_ROW.fields)
    counts: dict[str, dict[str, int]] = {}
    stats: dict[str, dict[str, int]] = {}
    with hot_cursor() as cur:
        postgres = cur.db.vendor == "postgresql"
        for start in range(0, len(ids), len(ids) if postgres else _VALUES_CHUNK * 2):
            chunk = ids[start:start + (len(ids) if postgres else _VALUES_CHUNK * 2)]
            params = [chunk] if postgres else chunk
            marks = {} if postgres else {"ids": ", ".join(["%s"] * len(chunk))}
            hot_execute(cur, sql["items"].format(**marks), params)
            for row in cur.fetchall():
                item = ITEM_ROW.build(row[:n])
                a_id, a_type, a_stage, a_status = row[n:]
                item.current_action = (None if a_id is None or a_id != item.current_action_id
                                       else {"id": a_id, "type": a_type, "stage_id": a_stage or a_type,
                                             "status": a_status})
                out[item.pk] = item
            hot_execute(cur, sql["counts"].format(**marks), params)
            for item_id, status, count in cur.fetchall():
                counts.setdefault(item_id, {})[status] = int(count)
            hot_execute(cur, sql["stats"].format(**marks), params)
            for row in cur.fetchall():
                stats[row[0]] = {f: int(v or 0) for f, v in zip(COUNTER_FIELDS, row[1:])}
    for item_id, item in out.items():
        item.action_counts = counts.get(item_id, {})
        item.execution_stats = stats.get(item_id) or {f: 0 for f in COUNTER_FIELDS}
    _attach_attention(out)
    return out


ATTENTION_TEXT = 200


def _attach_attention(items: dict[str, WorkItem]) -> None:
    """`attention` of WorkItemSummary: what a waiting or needs_attention item waits for — its current
    stage (the first blocked one by sequence) and the start of that stage's question (waiting) or
    error (failed), from the stage's last ended run; `count` stages are in that state (graph). One
    read for the whole batch, and none when no item of it needs anyone."""
    wanted = {}
    for item in items.values():
        item.attention = None
        if item.status in (WorkItemStatus.WAITING, WorkItemStatus.NEEDS_ATTENTION) and item.current_action:
            wanted[item.current_action_id] = item
    if not wanted:
        return
    last: dict[str, tuple] = {}
    ids = sorted(wanted)
    for start in range(0, len(ids), _VALUES_CHUNK * 2):
        rows = (Run.objects.filter(action_id__in=ids[start:start + _VALUES_CHUNK * 2])
                .exclude(status=RunStatus.RUNNING).order_by("action_id", "-ended_at", "-started_at")
                .values_list("action_id", "status", "waiting_reason", "error", "ended_at"))
        for row in rows:
            last.setdefault(row[0], row)
    for action_id, item in wanted.items():
        _, status, reason, error, ended_at = last.get(action_id, (None, None, None, None, None))
        waiting = item.status == WorkItemStatus.WAITING
        if waiting:
            text = reason or ""
        else:
            text = error or (f"the last run ended {status}" if status else "")
        count = (item.action_counts.get(ActionStatus.WAITING if waiting else ActionStatus.FAILED, 0)
                 if item.execution_mode == "graph" else 1)
        item.attention = {
            "kind": "waiting" if waiting else "failed",
            "action_id": action_id,
            "stage_id": item.current_action["stage_id"],
            "text": " ".join(text.split())[:ATTENTION_TEXT],
            "since": ended_at,
            "count": max(1, count),
        }


@contextlib.contextmanager
def _stream_read_if(wait: bool):
    """`stream_read()`, or with `wait=False` on PostgreSQL its non-blocking form: yields whether
    the stream key is held (the read is then the same prefix `stream_read` gives)."""
    from .events import EVENT_ORDER_LOCK

    if wait or connection.vendor != "postgresql":
        with stream_read():
            yield True
        return
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [EVENT_ORDER_LOCK])
            granted = bool(cur.fetchone()[0])
        yield granted


_VALUES_CHUNK = 200  # SQLite: (id, item) pairs per statement (bound parameters are limited)
_BATCH_SQL: dict[str, dict[str, str]] = {}


def _batch_sql() -> dict[str, str]:
    """PostgreSQL: fixed statements over arrays (prepared once per connection); SQLite: `{values}`
    / `{ids}` are filled with one placeholder group per element."""
    sql = _BATCH_SQL.get(connection.vendor)
    if sql is None:
        from .services.common import ITEM_ROW, qn

        item, action, run, event = (qn(m._meta.db_table) for m in (WorkItem, Action, Run, Event))
        sums = ", ".join(f"SUM({qn(f)})" for f in COUNTER_FIELDS)
        if connection.vendor == "postgresql":
            batch = 'unnest(%s::bigint[], %s::text[]) AS b("id", "item")'
            in_ids = "= ANY(%s::text[])"
        else:
            batch = 'b'
            in_ids = "IN ({ids})"
        previous = (f'SELECT b."id", (SELECT MAX(e."id") FROM {event} e WHERE e."id" < b."id"), '
                    f'(SELECT MAX(e."id") FROM {event} e WHERE e."work_item_id" = b."item" AND e."id" < b."id") '
                    f'FROM {batch}')
        if connection.vendor != "postgresql":
            previous = 'WITH b("id", "item") AS (VALUES {values}) ' + previous
        sql = _BATCH_SQL[connection.vendor] = {
            "previous": previous,
            "items": (f'SELECT {ITEM_ROW.columns()}, a."id", a."type", a."stage_id", a."status" '
                      f'FROM {item} i LEFT JOIN {action} a ON a."id" = i."current_action_id" '
                      f'WHERE i."id" {in_ids}'),
            "counts": (f'SELECT "work_item_id", "status", COUNT(*) FROM {action} WHERE "work_item_id" {in_ids} '
                       f'GROUP BY "work_item_id", "status"'),
            "stats": f'SELECT "work_item_id", {sums} FROM {run} WHERE "work_item_id" {in_ids} GROUP BY "work_item_id"',
        }
    return sql
