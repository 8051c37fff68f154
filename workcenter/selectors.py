"""Reads (DOMAIN §12.10): lists, details, events, execution statistics."""
from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Count, Max, OuterRef, Q, Subquery, Sum

from . import clock, db, stage_durations
from .domain import rules
from .errors import InvalidInput, NotFound
from .events import EVENT_ORDER_LOCK, stream_read
from .models import (
    COUNTER_FIELDS,
    Action,
    ActionStatus,
    Event,
    ExecutionMode,
    Run,
    RunStatus,
    WorkItem,
    WorkItemStatus,
)
from .domain.normalize import evidence_on_read, normalize_checkpoint
from .services.common import running_in_workspace


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


# --- the work-item list (API.md "GET /work-items"): keyset pages over 10 000s of items ------------

LIST_SORTS = ("updated", "updated_asc", "created", "created_asc", "status")
# sort=status: the statuses that need someone first, then the active ones, then the finished ones
ATTENTION_ORDER = (WorkItemStatus.NEEDS_ATTENTION, WorkItemStatus.WAITING, WorkItemStatus.RUNNING,
                   WorkItemStatus.READY, WorkItemStatus.DRAFT, WorkItemStatus.DONE, WorkItemStatus.CANCELLED)
# sort ⇒ (timestamp field, newest first?). Newest first breaks ties by id ascending, oldest first
# by id descending: each is one direction of the same index (wc_item_updated, wc_item_created).
_SORT_FIELD = {"updated": ("updated_at", True), "updated_asc": ("updated_at", False),
               "created": ("created_at", True), "created_asc": ("created_at", False),
               "status": ("updated_at", True)}


def parse_statuses(value: str | None) -> list[str]:
    """`status` of the list: one status or a comma-separated list ⇒ the distinct statuses, in
    order; an unknown one ⇒ InvalidInput naming `status`."""
    if value is None or value == "":
        return []
    out: list[str] = []
    for part in value.split(","):
        if part not in WorkItemStatus.values:
            raise InvalidInput(f"status must be one of {', '.join(WorkItemStatus.values)} (or several, "
                               f"comma-separated): {part!r}", fields=["status"])
        if part not in out:
            out.append(part)
    return out


def _bad_cursor(why: str) -> InvalidInput:
    return InvalidInput(f"cursor {why}; start again without it", fields=["cursor"])


def encode_cursor(sort: str, item: WorkItem) -> str:
    """The opaque position after `item` in `sort`'s order: its sort key(s) and id."""
    field, _desc = _SORT_FIELD[sort]
    key = [sort, item.status if sort == "status" else None, getattr(item, field).isoformat(), item.pk]
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str) -> tuple[str | None, datetime, str]:
    """(status, timestamp, id) of a cursor made for `sort`; InvalidInput naming `cursor` otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, status, stamp, item_id = json.loads(raw.decode("utf-8"))
        when = datetime.fromisoformat(stamp)
    except (ValueError, TypeError, UnicodeDecodeError, binascii.Error):
        raise _bad_cursor("is malformed (not one a previous page returned)") from None
    if made_for != sort:
        raise _bad_cursor(f"was made for sort={made_for} and cannot page sort={sort}")
    if (not isinstance(item_id, str) or when.tzinfo is None
            or (sort == "status") != (status in WorkItemStatus.values)):
        raise _bad_cursor("is malformed (not one a previous page returned)")
    return status, when, item_id


def _after(qs, field: str, desc: bool, when: datetime, item_id: str):
    """Rows after (when, id) in the order (field desc, id asc) or (field asc, id desc). The bound
    on `field` alone lets the index range start at the cursor (no OFFSET, no scan before it)."""
    if desc:
        return qs.filter(Q(**{f"{field}__lte": when}), Q(**{f"{field}__lt": when}) | Q(pk__gt=item_id))
    return qs.filter(Q(**{f"{field}__gte": when}), Q(**{f"{field}__gt": when}) | Q(pk__lt=item_id))


def _ordered(qs, field: str, desc: bool):
    return qs.order_by(f"-{field}", "pk") if desc else qs.order_by(field, "-pk")


def _session_ids(qs, session_id: str) -> list[str]:
    """Ids of the items whose origin.session_id is `session_id` or whose linked_session_ids hold
    it: an exact match checked in Python (portable across SQLite and PostgreSQL); a plain id first
    narrows the rows in SQL by substring, which JSON escaping cannot hide for such ids."""
    if _PLAIN_ID.fullmatch(session_id):
        qs = qs.filter(Q(origin__session_id=session_id) | Q(linked_session_ids__icontains=session_id))
    return [pk for pk, origin, linked in qs.values_list("pk", "origin", "linked_session_ids")
            if (origin or {}).get("session_id") == session_id or session_id in (linked or [])]


def work_item_list(*, status: str | None = None, session_id: str | None = None, search: str | None = None,
                   limit=None, sort: str = "updated", cursor: str | None = None) -> dict:
    """One keyset page of items with summary fields: {items, count, counts, next_cursor}.

    `count`: every match (status filter included); `counts`: {status: n} of the matches of
    search/session_id for all seven statuses (status filter ignored), one GROUP BY. Paging
    follows the sort's order (sort key(s), then id) from `cursor`, never an OFFSET."""
    if sort not in LIST_SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(LIST_SORTS)}", fields=["sort"])
    statuses = parse_statuses(status)
    position = decode_cursor(cursor, sort) if cursor else None
    size = clamp_limit(limit)
    base = WorkItem.objects.all()
    if search:
        base = base.filter(Q(title__icontains=search) | Q(goal__icontains=search))
    if session_id:
        base = WorkItem.objects.filter(pk__in=_session_ids(base, session_id))
    counts = dict.fromkeys(WorkItemStatus.values, 0)
    for row_status, n in base.order_by().values_list("status").annotate(n=Count("pk")).values_list("status", "n"):
        counts[row_status] = int(n)
    count = sum(counts[s] for s in statuses) if statuses else sum(counts.values())
    field, desc = _SORT_FIELD[sort]
    if sort == "status":
        page = _status_page(base, statuses, position, size + 1)
    else:
        qs = base.filter(status__in=statuses) if statuses else base
        if position is not None:
            qs = _after(qs, field, desc, position[1], position[2])
        page = list(_ordered(qs, field, desc)[: size + 1])
    more = len(page) > size
    page = page[:size]
    return {"items": _with_summary_fields(page), "count": count, "counts": counts,
            "next_cursor": encode_cursor(sort, page[-1]) if more else None}


def _status_page(base, statuses: list[str], position, want: int) -> list[WorkItem]:
    """sort=status: the statuses in ATTENTION_ORDER one after another, each newest `updated_at`
    first (index wc_item_status_updated_id), from the cursor's status on, until `want` rows."""
    order = [s for s in ATTENTION_ORDER if not statuses or s in statuses]
    if position is not None:
        order = order[order.index(position[0]):] if position[0] in order else []
    page: list[WorkItem] = []
    for s in order:
        qs = base.filter(status=s)
        if position is not None and s == position[0]:
            qs = _after(qs, "updated_at", True, position[1], position[2])
        page += list(_ordered(qs, "updated_at", True)[: want - len(page)])
        if len(page) >= want:
            break
    return page


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
        raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id})
    return item


def work_item_get(item_id: str) -> WorkItem:
    item = WorkItem.objects.filter(pk=item_id).first()
    if item is None:
        raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id})
    return item


DETAIL_EVENTS = 500


def work_item_detail(item_id: str, *, events: bool = True) -> dict:
    """The item, its actions by sequence, runs newest first, newest 500 events (none when
    `events` is False), with stats."""
    conn = connections[DEFAULT_DB_ALIAS]
    reads = [("detail_item", [item_id]), ("detail_actions", [item_id]), ("detail_runs", [item_id])]
    if events:
        reads.append(("detail_events", [item_id, DETAIL_EVENTS]))
    rows = db.read_all(reads, conn)
    if not rows[0]:
        raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id})
    item = db.ITEM_ROW.build(rows[0][0])
    actions = db.ACTION_ROW.build_many(rows[1], conn)
    runs = db.RUN_ROW.build_many(rows[2], conn)
    events = db.EVENT_ROW.build_many(rows[3], conn) if events else []
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


def run_fence_reason(*, run_id: str, owner_boot_id: str, lease_epoch: int, now=None) -> str:
    """Why a worker call on this run was fenced out (DOMAIN §6.4), read without locks.

    Only used to explain a refusal the service already decided; it never decides anything.
    """
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return rules.stale_reason(None, None, None, now or clock.now(), True)
    item = WorkItem.objects.filter(pk=run.work_item_id).first()
    action = Action.objects.filter(pk=run.action_id).first()
    if run.owner_boot_id != owner_boot_id or run.lease_epoch != lease_epoch:
        if run.status == RunStatus.RUNNING:
            return "stale Run: owner boot id or lease epoch does not match (superseded or already finished)"
    return rules.stale_reason(run, action, item, now or clock.now(), True)


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
    wanted = [s for s in (stage_ids or []) if isinstance(s, str)]
    if not wanted:
        return []
    if actions is None:
        actions = Action.objects.filter(work_item_id=item_id).order_by("sequence")
    canonical = rules.canonical_actions(actions)
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
    if item.execution_mode != ExecutionMode.GRAPH:
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
    reasons: list[str] = []
    if item.execution_mode == ExecutionMode.GRAPH:
        for stage in action.depends_on_stage_ids or []:
            dep = canonical.get(stage)
            if dep is None:
                reasons.append(f"waiting for stage {stage} (missing)")
            elif dep.status != ActionStatus.COMPLETED:
                reasons.append(f"waiting for stage {stage} ({dep.status})")
    if item.workspace_key and rules.workspace_blocks(action.workspace_mode, item.pk, running):
        for h in holders():
            if rules.workspace_blocks(action.workspace_mode, item.pk, [(h["workspace_mode"], h["work_item_id"])]):
                owner = ("this work item" if h["work_item_id"] == item.pk
                         else f'work item {h["work_item_id"]} "{h["work_item__title"]}"')
                reasons.append(f'workspace held by run {h["current_run_id"]} ({h["workspace_mode"]}, '
                               f'stage {h["stage_id"] or h["type"]}) of {owner}')
    if item.execution_mode == ExecutionMode.GRAPH:
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


def graph_snapshot(item_id: str, *, detail: dict | None = None, last_event_id: int | None = None) -> dict:
    """Nodes (canonical action per stage; linear: every action), edges, leases and the reasons a
    ready node cannot be claimed now. A read: nothing is locked or written. `detail`: the item's
    `work_item_detail`, already read (its item, actions and runs are used instead of reading
    them again); `last_event_id`: the id to report instead of reading it."""
    if detail is None:
        item = work_item_get(item_id)
        actions = list(Action.objects.filter(work_item_id=item_id).order_by("sequence"))
        latest = _latest_runs(item.pk)
    else:
        item, actions = detail["item"], sorted(detail["actions"], key=lambda a: a.sequence)
        latest = {}
        for run in detail["runs"]:  # newest started_at (then highest id) of each action
            best = latest.get(run.action_id)
            if best is None or (run.started_at, run.pk) > (best.started_at, best.pk):
                latest[run.action_id] = run
    canonical = rules.canonical_actions(actions)
    graph = item.execution_mode == ExecutionMode.GRAPH
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
    usual = stage_durations.figures() if any(a.status == ActionStatus.RUNNING for a in nodes) else {}
    out_nodes = []
    for a in nodes:
        run = runs.get(a.current_run_id) if a.status == ActionStatus.RUNNING else None
        # a running stage's usual figures (workcenter/stage_durations.py), and whether its run is an
        # orphan whose renewals are refused (DOMAIN §6.1: e.g. a graph sibling of a failed stage)
        figures = usual.get((item.workflow_template, a.effective_stage_id)) if run is not None else None
        stopping = run is not None and rules.lease_check(run, a, item, run.owner_boot_id, run.lease_epoch,
                                                         clock.now(), require_live=False)[0] is None
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
            "stopping": stopping,
            "usual_duration_s": figures and figures[0],
            "overdue_after_s": figures and figures[1],
        })
    return {
        "work_item_id": item.pk,
        "execution_mode": item.execution_mode,
        "status": item.status,
        "nodes": out_nodes,
        "edges": edges,
        "last_event_id": item_last_event_id(item.pk) if last_event_id is None else last_event_id,
    }


def action_with_stats(action: Action) -> Action:
    """The action with `execution_stats` (sum over its runs) attached, as the API shows it."""
    row = Run.objects.filter(action_id=action.pk).aggregate(**{f: Sum(f) for f in COUNTER_FIELDS})
    action.execution_stats = _stats_from(row)
    return action


# --- the live stream's batch reads (dashboard/stream/ renders committed events in batches) ---

def events_previous_ids(events_: list[Event], *, wait: bool = True) -> dict[int, tuple[int, int]] | None:
    """The previous ids of several events in ONE stream read: {event id: (overall, in-item)}, the
    largest stored ids below each event's, overall and in its item (0 when none), read in one
    `stream_read` (on PostgreSQL one exclusive hold of the stream key for the whole batch).
    `wait=False` (PostgreSQL): take the stream key only if it is free right now, else return
    None at once. A waiting exclusive request holds back every writer's event insert until the
    writers in flight have committed (their commits then cannot share a WAL flush); a request
    that is granted at once costs them only the read itself."""
    pairs = sorted({(int(e.id), e.work_item_id) for e in events_})
    out: dict[int, tuple[int, int]] = {}
    if not pairs:
        return out
    with _stream_read_if(wait) as granted, db.hot_cursor() as cur:
        if not granted:
            return None
        conn = cur.db
        if conn.vendor == "postgresql":
            db.hot_execute(cur, db.sql("events_previous", conn), [[p[0] for p in pairs], [p[1] for p in pairs]])
            rows = cur.fetchall()
        else:
            rows = []
            for start in range(0, len(pairs), _VALUES_CHUNK):
                chunk = pairs[start:start + _VALUES_CHUNK]
                db.hot_execute(cur, db.sql("events_previous", conn, values=len(chunk)), [v for p in chunk for v in p])
                rows += cur.fetchall()
    for event_id, overall, in_item in rows:
        out[int(event_id)] = (int(overall or 0), int(in_item or 0))
    return out


def work_item_summaries(item_ids) -> dict[str, WorkItem]:
    """Items as WorkItemSummary shows them, in three fixed statements (the live stream renders
    them per batch right after commits): {item id: item} with `execution_stats`,
    `action_counts` and `current_action` attached; unknown ids are left out (no NotFound)."""
    ids = sorted(set(item_ids))
    out: dict[str, WorkItem] = {}
    if not ids:
        return out
    n = len(db.ITEM_ROW.fields)
    counts: dict[str, dict[str, int]] = {}
    stats: dict[str, dict[str, int]] = {}
    with db.hot_cursor() as cur:
        conn = cur.db
        postgres = conn.vendor == "postgresql"
        for start in range(0, len(ids), len(ids) if postgres else _VALUES_CHUNK * 2):
            chunk = ids[start:start + (len(ids) if postgres else _VALUES_CHUNK * 2)]
            params = [chunk] if postgres else chunk
            size = None if postgres else len(chunk)
            db.hot_execute(cur, db.sql("summary_items", conn, ids=size), params)
            for row in cur.fetchall():
                item = db.ITEM_ROW.build(row[:n])
                a_id, a_type, a_stage, a_status = row[n:]
                item.current_action = (None if a_id is None or a_id != item.current_action_id
                                       else {"id": a_id, "type": a_type, "stage_id": a_stage or a_type,
                                             "status": a_status})
                out[item.pk] = item
            db.hot_execute(cur, db.sql("summary_counts", conn, ids=size), params)
            for item_id, status, count in cur.fetchall():
                counts.setdefault(item_id, {})[status] = int(count)
            db.hot_execute(cur, db.sql("summary_stats", conn, ids=size), params)
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
                 if item.execution_mode == ExecutionMode.GRAPH else 1)
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
    if wait or connection.vendor != "postgresql":
        with stream_read():
            yield True
        return
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(db.sql("event_order_try_lock"), [EVENT_ORDER_LOCK])
            granted = bool(cur.fetchone()[0])
        yield granted


_VALUES_CHUNK = 200  # SQLite: (id, item) pairs per statement (bound parameters are limited)
