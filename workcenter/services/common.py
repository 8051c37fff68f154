"""Building blocks shared by the public services. Nothing here opens a transaction.

Locking order (PostgreSQL): a service locks the work item row first, then the rows of that
item it changes. Claims never wait on a lock (SKIP LOCKED, try-locks), so they cannot take part
in a deadlock; multi-item work (recovery) locks items in primary-key order.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

import orjson

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models.base import ModelState
from django.utils.dateparse import parse_datetime

from .. import clock
from ..errors import FenceLost, InvalidState, NotFound, ReservationActive
from ..models import (
    Action,
    ActionStatus,
    Run,
    RunStatus,
    WorkItem,
    WorkItemStatus,
    new_id,
)
from . import normalize, workflows

RUNNING_ITEM_OK = (WorkItemStatus.READY, WorkItemStatus.RUNNING, WorkItemStatus.WAITING)
RESET_REASON_CHANGES = "Superseded by review changes request"
RESET_REASON_RETRY = "Superseded by manual graph retry"
REASON_GUIDANCE = "Action restarted after user guidance"
REASON_CONTRACT = "WorkItem contract changed while this Run was active"
REASON_CANCELLED = "WorkItem was cancelled"


def store_transaction():
    """Every public store operation is one durable transaction (DOMAIN §2.7)."""
    return transaction.atomic(durable=True)


def resolve_now(now: datetime | None) -> datetime:
    return now if now is not None else clock.now()


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def lock_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def try_workspace_lock(workspace_key: str) -> bool:
    """Transaction-scoped advisory try-lock on a workspace key (PostgreSQL); SQLite serialises anyway."""
    if not workspace_key or not is_postgres():
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_key("ws:" + workspace_key)])
        return bool(cur.fetchone()[0])


def workspace_lock(workspace_key: str) -> None:
    if not workspace_key or not is_postgres():
        return
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key("ws:" + workspace_key)])


def lock_item(item_id: str) -> WorkItem:
    try:
        return WorkItem.objects.select_for_update().get(pk=item_id)
    except WorkItem.DoesNotExist:
        raise NotFound(f"WorkItem not found: {item_id}", extra={"id": item_id}) from None


def item_actions(item: WorkItem, *, lock: bool = False) -> list[Action]:
    qs = Action.objects.filter(work_item_id=item.pk).order_by("sequence")
    if lock:
        qs = qs.select_for_update()
    return list(qs)


def canonicalize_dir(path: Any) -> str:
    """Canonical absolute path with symlinks resolved, or "" if blank or missing (DOMAIN §2.1)."""
    if not isinstance(path, str) or not path.strip():
        return ""
    try:
        real = os.path.realpath(path.strip())
    except (OSError, ValueError):
        return ""
    return real if os.path.isdir(real) else ""


# --- reservations (DOMAIN §10.2) -------------------------------------------------------------

def reservation_of(action: Action) -> dict | None:
    ws = action.workspace if isinstance(action.workspace, dict) else None
    integ = ws.get("integration") if ws else None
    res = integ.get("reservation") if isinstance(integ, dict) else None
    return res if isinstance(res, dict) else None


def _as_dt(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return parse_datetime(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # reservations imported from reference databases keep integer milliseconds
        from datetime import timezone as _tz
        return datetime.fromtimestamp(value / 1000, tz=_tz.utc)
    return None


def has_live_reservation(action: Action, now: datetime) -> bool:
    res = reservation_of(action)
    if not res:
        return False
    exp = _as_dt(res.get("expires_at"))
    return exp is not None and exp > now


def refuse_if_reserved(actions: Iterable[Action], now: datetime) -> None:
    for a in actions:
        if has_live_reservation(a, now):
            raise ReservationActive(extra={"action_id": a.pk})


# --- fencing (DOMAIN §6) ---------------------------------------------------------------------

@dataclass
class Lease:
    run: Run
    action: Action
    item: WorkItem


def stale_reason(run: Run | None, action: Action | None, item: WorkItem | None, now: datetime, require_live: bool) -> str:
    if run is None:
        return "stale Run: it does not exist or has already finished"
    if (item and item.status == WorkItemStatus.CANCELLED) or run.status == RunStatus.CANCELLED:
        return "stale Run: the WorkItem was cancelled"
    if run.status != RunStatus.RUNNING:
        return f"stale Run: it has already finished ({run.status})"
    if require_live and run.expires_at <= now:
        return "stale Run: its lease expired"
    return "stale Run: it no longer owns the Action lease (superseded, reset or already finished)"


def load_lease(run_id: str, owner_boot_id: str, lease_epoch: int, now: datetime, *, require_live: bool):
    """Lock the run's item and check the active-run predicate (DOMAIN §6.1).

    Returns (lease | None, reason). Nothing is written here.
    """
    run, action, item = lease_rows(run_id)
    return lease_check(run, action, item, owner_boot_id, lease_epoch, now, require_live=require_live)


def lease_rows(run_id: str, cur=None) -> tuple[Run | None, Action | None, WorkItem | None]:
    """The run, its action and its item (full rows) in one joined read.

    SQLite: the IMMEDIATE transaction already serialises writers. PostgreSQL: the read locks the
    three rows, the item first (the locking order of every service); rows that changed while a
    lock was awaited are returned as committed (see the "lease_all" statement).
    `cur`: the caller's hot cursor, if it has one.
    """
    if cur is None:
        with hot_cursor() as cur:
            return lease_rows(run_id, cur)
    conn = cur.db
    hot_execute(cur, _sql("lease_all", conn), [run_id])
    row = cur.fetchone()
    if row is None:
        return None, None, None
    n, m = len(RUN_ROW.fields), len(RUN_ROW.fields) + len(ACTION_ROW.fields)
    return (RUN_ROW.build_many([row[:n]], conn)[0], ACTION_ROW.build_many([row[n:m]], conn)[0],
            ITEM_ROW.build_many([row[m:]], conn)[0])


def lease_check(run: Run | None, action: Action | None, item: WorkItem | None, owner_boot_id: str,
                lease_epoch: int, now: datetime, *, require_live: bool):
    """The active-run predicate (DOMAIN §6.1) over rows read by `lease_rows`: (lease | None, reason)."""
    ok = (
        run is not None
        and action is not None
        and item is not None
        and run.owner_boot_id == owner_boot_id
        and run.lease_epoch == lease_epoch
        and run.status == RunStatus.RUNNING
        and action.status == ActionStatus.RUNNING
        and action.current_run_id == run.pk
        and action.lease_epoch == run.lease_epoch
        and item.status in RUNNING_ITEM_OK
        and (
            item.execution_mode == "graph"
            or (
                item.status == WorkItemStatus.RUNNING
                and item.current_action_id == action.pk
                and item.current_run_id == run.pk
            )
        )
        and (not require_live or run.expires_at > now)
    )
    if ok:
        return Lease(run=run, action=action, item=item), ""
    return None, stale_reason(run, action, item, now, require_live)


def guarded_update(qs, **values) -> None:
    """An update that must hit exactly one row; otherwise the transaction rolls back (DOMAIN §2.7)."""
    if qs.update(**values) != 1:
        raise FenceLost("stale Run: a guarded update lost its fence; nothing was changed")


# --- graph rules (DOMAIN §5.3, §7.6, §7.8) ---------------------------------------------------

def canonical_actions(actions: Iterable[Action]) -> dict[str, Action]:
    """Canonical action per stage: highest sequence among non-superseded, non-cancelled [DEV-1]."""
    out: dict[str, Action] = {}
    for a in actions:
        if a.status in (ActionStatus.SUPERSEDED, ActionStatus.CANCELLED):
            continue
        cur = out.get(a.effective_stage_id)
        if cur is None or a.sequence > cur.sequence:
            out[a.effective_stage_id] = a
    return out


def deps_satisfied(action: Action, canonical: dict[str, Action]) -> bool:
    for stage in action.depends_on_stage_ids or []:
        c = canonical.get(stage)
        if c is None or c.status != ActionStatus.COMPLETED:
            return False
    return True


def graph_status(actions: list[Action]) -> tuple[str, str | None]:
    """Graph refresh (DOMAIN §7.6): the item status and current action id."""
    open_ = [a for a in sorted(actions, key=lambda a: a.sequence) if a.status in ("ready", "running", "waiting", "failed")]
    blocked = next((a for a in open_ if a.status in ("waiting", "failed")), None)
    runnable = next((a for a in open_ if a.status in ("ready", "running")), None)
    if blocked is not None:
        status = WorkItemStatus.WAITING if blocked.status == ActionStatus.WAITING else WorkItemStatus.NEEDS_ATTENTION
        return status, blocked.pk
    if runnable is not None:
        running = any(a.status == ActionStatus.RUNNING for a in open_)
        return (WorkItemStatus.RUNNING if running else WorkItemStatus.READY), runnable.pk
    return WorkItemStatus.DONE, None


def sync_claimable(item: WorkItem, actions: list[Action] | None = None, writes: "Writes | None" = None) -> None:
    """Recompute the derived `claimable` flag of the item's actions (DOMAIN §5.1-§5.3).

    `writes`: the caller's batch (`Writes`) to add the flag updates to; without one they run now."""
    if actions is None:
        with connection.cursor() as cur:
            actions = graph_actions(cur, item.pk)
    want: set[str] = set()
    if item.execution_mode == "graph":
        if item.status in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            canon = canonical_actions(actions)
            for a in actions:
                if a.status == ActionStatus.READY and not a.current_run_id and deps_satisfied(a, canon):
                    want.add(a.pk)
    elif item.status == WorkItemStatus.READY and not item.current_run_id:
        for a in actions:
            if a.pk == item.current_action_id and a.status == ActionStatus.READY and not a.current_run_id:
                want.add(a.pk)
    have = {a.pk for a in actions if a.claimable}
    on, off = want - have, have - want
    if (on or off) and writes is None:
        with hot_cursor() as cur:
            writes = Writes(cur)
            _add_flag_writes(writes, on, off)
            writes.flush()
    elif on or off:
        _add_flag_writes(writes, on, off)
    for a in actions:
        a.claimable = a.pk in want


def _add_flag_writes(writes: "Writes", on: set, off: set) -> None:
    table = writes.cur.db.ops.quote_name(Action._meta.db_table)
    for ids, flag in ((on, True), (off, False)):
        if ids:  # primary-key order: the row locks of PostgreSQL are taken in one order
            writes.add(f'UPDATE {table} SET "claimable" = %s WHERE "id" IN ({", ".join(["%s"] * len(ids))})',
                       [flag, *sorted(ids)], expect=len(ids))


def save_item_state(item: WorkItem, now: datetime, *, status: str, current_action_id, current_run_id=None,
                    guard=None, **extra) -> None:
    """Write the item's status and pointers as a guarded update: `guard` (a queryset), or by
    default the item's row as the caller holds it under its lock (same status)."""
    if guard is None:
        guard = WorkItem.objects.filter(pk=item.pk, status=item.status)
    item.status = status
    item.current_action_id = current_action_id
    item.current_run_id = current_run_id
    item.updated_at = now
    for k, v in extra.items():
        setattr(item, k, v)
    values = dict(status=status, current_action_id=current_action_id, current_run_id=current_run_id, updated_at=now, **extra)
    guarded_update(guard, **values)


def graph_refresh(item: WorkItem, now: datetime, actions: list[Action] | None = None, guard=None) -> list[Action]:
    if actions is None:
        actions = item_actions(item)
    status, current = graph_status(actions)
    save_item_state(item, now, status=status, current_action_id=current, current_run_id=None, guard=guard)
    return actions


def retryable_on_interrupt(action: Action) -> bool:
    return action.type != "deliver" and action.attempt < action.max_attempts


@dataclass
class ResetPlan:
    target: Action
    affected: list[Action]
    running_runs: list[Run]
    preserved_workspace: dict | None
    superseded_run_ids: list[str] = field(default_factory=list)


def plan_graph_reset(item: WorkItem, actions: list[Action], target_stage: str, replacement: dict | None, now: datetime) -> ResetPlan:
    """Steps 1-4 of DOMAIN §7.8, without writing. The retry preview reads the same plan."""
    live = [a for a in actions if a.status not in (ActionStatus.SUPERSEDED, ActionStatus.CANCELLED)]
    target = canonical_actions(live).get(target_stage)
    if target is None:
        raise InvalidState(f"graph reset target is missing: {target_stage}")
    affected_stages = {target_stage} | {a.effective_stage_id for a in live if a.status == ActionStatus.RUNNING}
    changed = True
    while changed:
        changed = False
        for a in live:
            s = a.effective_stage_id
            if s not in affected_stages and any(d in affected_stages for d in (a.depends_on_stage_ids or [])):
                affected_stages.add(s)
                changed = True
    affected = [a for a in live if a.effective_stage_id in affected_stages]
    refuse_if_reserved(affected, now)
    preserved = None
    ws = target.workspace if isinstance(target.workspace, dict) else None
    integ = ws.get("integration") if ws else None
    if (
        target.workspace_mode == "integrate"
        and isinstance(integ, dict)
        and integ.get("status") in ("prepared", "finalized")
        and (replacement is None or replacement.get("workspace_mode") == "integrate")
    ):
        preserved = ws
    affected_ids = [a.pk for a in affected]
    runs = list(Run.objects.filter(action_id__in=affected_ids, status=RunStatus.RUNNING).order_by("pk"))
    return ResetPlan(target=target, affected=affected, running_runs=runs, preserved_workspace=preserved,
                     superseded_run_ids=[r.pk for r in runs])


def apply_graph_reset(plan: ResetPlan, replacement: dict | None, reason: str, now: datetime) -> Action:
    """Steps 5-8 of DOMAIN §7.8."""
    if plan.running_runs:
        n = Run.objects.filter(pk__in=[r.pk for r in plan.running_runs], status=RunStatus.RUNNING).update(
            status=RunStatus.SUPERSEDED, ended_at=now, error=reason)
        if n != len(plan.running_runs):
            raise FenceLost("stale Run: a run to supersede was no longer running; nothing was changed")
    for a in plan.affected:
        # each action's write is guarded on the row as the plan read it (under the item lock)
        guard = Action.objects.filter(pk=a.pk, status=a.status, lease_epoch=a.lease_epoch,
                                      current_run_id=a.current_run_id)
        bump = a.status == ActionStatus.RUNNING and bool(a.current_run_id)
        a.status = ActionStatus.READY
        a.attempt = 0
        a.current_run_id = None
        a.workspace = plan.preserved_workspace if a.pk == plan.target.pk else None
        if bump:
            a.lease_epoch += 1
        a.updated_at = now
        fields = ["status", "attempt", "current_run_id", "workspace", "lease_epoch", "updated_at"]
        if a.pk == plan.target.pk and replacement is not None:
            a.type = replacement.get("type") or a.type
            a.required_role = replacement.get("required_role", "") or ""
            a.assignment_policy = replacement.get("assignment_policy")
            a.model_policy = replacement.get("model_policy")
            a.depends_on_stage_ids = list(replacement.get("depends_on_stage_ids") or [])
            a.workspace_mode = replacement.get("workspace_mode") or "shared"
            a.changes_requested_stage_id = replacement.get("changes_requested_stage_id")
            a.instruction = replacement.get("instruction", "")
            a.brief = replacement.get("brief")
            a.context = list(replacement.get("context") or [])
            a.max_attempts = replacement.get("max_attempts") or 2
            fields += ["type", "required_role", "assignment_policy", "model_policy", "depends_on_stage_ids",
                       "workspace_mode", "changes_requested_stage_id", "instruction", "brief", "context", "max_attempts"]
        guarded_update(guard, **{f: getattr(a, f) for f in fields})
    return plan.target


# --- actions from stages (DOMAIN §4.5, §12.9) ------------------------------------------------

def next_sequence(item: WorkItem) -> int:
    last = Action.objects.filter(work_item_id=item.pk).order_by("-sequence").values_list("sequence", flat=True).first()
    return (last or 0) + 1


def render_for(item: WorkItem, *, action_type: str, brief: dict | None, context: list, policy_text: str) -> str:
    return normalize.render_instruction(
        title=item.title,
        goal=item.goal,
        criteria=list(item.acceptance_criteria or []),
        session_context=list(item.session_context or []),
        context=context,
        policy_text=policy_text,
        action_type=action_type,
        brief=brief,
    )


def stage_fields(item: WorkItem, stage: dict, context: list, *, policy_text: str | None = None) -> dict:
    """The action fields a stage materialises into (DOMAIN §4.5)."""
    atype = stage.get("type") or "custom"
    brief = normalize.normalize_brief(
        {k: stage.get(k) for k in ("objective", "approach", "expected_outcome") if stage.get(k)},
        workflows.default_brief(atype),
    )
    policy = policy_text if policy_text is not None else (stage.get("instruction") or workflows.default_policy_text(atype))
    return {
        "type": atype,
        "stage_id": stage.get("id") or atype,
        "assignment_policy": stage.get("assignment_policy"),
        "model_policy": stage.get("model_policy"),
        "depends_on_stage_ids": list(stage.get("depends_on_stage_ids") or []),
        "workspace_mode": stage.get("workspace_mode") or "shared",
        "changes_requested_stage_id": stage.get("changes_requested_stage_id") if atype == "review" else None,
        "max_attempts": stage.get("max_attempts") or 2,
        "required_role": workflows.required_role_for(stage),
        "brief": brief,
        "context": list(context),
        "instruction": render_for(item, action_type=atype, brief=brief, context=context, policy_text=policy),
    }


def rebuilt_fields(item: WorkItem, previous: Action, context: list) -> dict:
    """Replacement for retry/guidance: the previous action's definition with the type's default policy text."""
    brief = previous.brief
    return {
        "type": previous.type,
        "stage_id": previous.effective_stage_id,
        "assignment_policy": previous.assignment_policy,
        "model_policy": previous.model_policy,
        "depends_on_stage_ids": list(previous.depends_on_stage_ids or []),
        "workspace_mode": previous.workspace_mode or "shared",
        "changes_requested_stage_id": previous.changes_requested_stage_id,
        "max_attempts": previous.max_attempts or 2,
        "required_role": previous.required_role or "",
        "brief": brief,
        "context": list(context),
        "instruction": render_for(item, action_type=previous.type, brief=brief, context=context,
                                  policy_text=workflows.default_policy_text(previous.type)),
    }


def insert_action(item: WorkItem, fields: dict, now: datetime, *, sequence: int | None = None) -> Action:
    return Action.objects.create(
        id=new_id(),
        work_item=item,
        sequence=sequence if sequence is not None else next_sequence(item),
        contract_revision=item.revision,
        status=ActionStatus.READY,
        created_at=now,
        updated_at=now,
        **fields,
    )


def initial_stage(item: WorkItem) -> dict:
    stages = workflows.effective_stages(item.workflow_snapshot)
    return stages[0]


def run_context_entry(run: Run | None, action: Action, **extra) -> dict:
    vp = (run.vp_snapshot or {}).get("id") if run and isinstance(run.vp_snapshot, dict) else None
    role = (run.role_snapshot or {}).get("id") if run and isinstance(run.role_snapshot, dict) else None
    entry = {
        "type": action.type,
        "stage_id": action.effective_stage_id,
        "vp_id": vp or action.required_role or None,
        "role": role or action.required_role or None,
        "summary": run.summary if run else "",
        "evidence": normalize.normalize_evidence(run.evidence if run else []),
    }
    entry.update(extra)
    return entry


def reusable_context(work_dir: str, exclude_item_id: str | None) -> list[dict]:
    """DOMAIN §12.6: newest 12 completed runs with a summary in done items of the same workspace."""
    key = canonicalize_dir(work_dir)
    if not key:
        return []
    runs = (
        Run.objects.filter(
            status=RunStatus.COMPLETED,
            work_item__workspace_key=key,
            work_item__reuse_memory=True,
            work_item__status=WorkItemStatus.DONE,
        )
        .exclude(summary="")
        .exclude(work_item_id=exclude_item_id or "")
        .select_related("action", "work_item")
        .order_by("-ended_at", "-started_at")[:50]
    )
    picked = [r for r in runs if (r.summary or "").strip()][:12]
    return [
        {
            "type": r.action.type,
            "role": r.action.required_role,
            "summary": r.summary,
            "evidence": normalize.normalize_evidence(r.evidence),
            "review_decision": r.review_decision,
            "source_title": r.work_item.title,
        }
        for r in reversed(picked)
    ]


def supersede_runs(item: WorkItem, action_ids: list[str], status: str, reason: str, now: datetime) -> list[str]:
    """End every running run of the given actions (DOMAIN [DEV-2])."""
    ids = list(Run.objects.filter(work_item_id=item.pk, action_id__in=action_ids, status=RunStatus.RUNNING)
               .order_by("pk").values_list("pk", flat=True))
    if ids and Run.objects.filter(pk__in=ids, status=RunStatus.RUNNING).update(
            status=status, ended_at=now, error=reason) != len(ids):
        raise FenceLost("stale Run: a run to end was no longer running; nothing was changed")
    return ids


def apply_progress_fields(values: dict) -> dict:
    """The progress fields a report overwrites: response (capped), counters, checkpoint."""
    out = {"response": normalize.cap_response(values.get("response", ""))}
    out.update(normalize.normalize_counters(values))
    out["checkpoint"] = normalize.normalize_checkpoint(values.get("checkpoint"))
    return out


MAX_DURATION_MS = 2**31 - 1  # about 24.8 days: longer leases are input errors, not overflows


def check_duration(value, field: str, *, allow_none: bool = False) -> None:
    from ..errors import InvalidInput

    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DURATION_MS:
        raise InvalidInput(f"{field} must be a positive integer of at most {MAX_DURATION_MS} ms", fields=[field])


def lease_expiry(now: datetime, lease_ms: int) -> datetime:
    return now + timedelta(milliseconds=int(lease_ms))


# --- raw SQL for the claim → submit hot path -------------------------------------------------
# The ORM compiles every statement anew (≈0.4 ms each on the benchmark machine, 30× the
# statement itself). The hot path issues a few fixed statements instead, built once per
# database vendor. Values pass through the fields' own adapters (`get_db_prep_save`) and rows
# through the converters the ORM applies, so what is read and written is exactly what the ORM
# would read and write.

def qn(name: str) -> str:
    return connection.ops.quote_name(name)


def hot_cursor(conn=None):
    """The cursor of the hot path. On PostgreSQL it binds parameters server-side, so psycopg
    prepares each fixed statement after a few executions on a connection: parsed and planned
    once instead of per call (the ORM's default cursor interpolates parameters client-side).

    `conn`: the connection wrapper (`connections[DEFAULT_DB_ALIAS]`) if the caller resolved it;
    each attribute read through the `connection` proxy costs a thread-local lookup. The cursor's
    `db` is that wrapper, so code holding the cursor needs no proxy at all.
    """
    if conn is None:
        conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor != "postgresql":
        return conn.cursor()
    conn.close_if_health_check_failed()  # what connection.cursor() does first
    conn.ensure_connection()
    return conn._prepare_cursor(_hot_cursor_class()(conn.connection))


_HOT_CURSOR = None
_DOLLAR: dict[str, str] = {}
_PLACEHOLDER = re.compile(r"%[s%]|%")


def _dollar_query(query: str) -> str:
    """`%s` placeholders as PostgreSQL's `$1, $2, …` (`%%` as `%`); any other `%` is refused."""
    n = 0

    def repl(m):
        nonlocal n
        if m.group(0) == "%%":
            return "%"
        if m.group(0) == "%s":
            n += 1
            return f"${n}"
        raise ValueError(f"unsupported placeholder in hot statement: {query[:80]!r}")
    return _PLACEHOLDER.sub(repl, query)


def _hot_cursor_class():
    """psycopg's RawCursor (native `$n` placeholders: no client-side parsing of the query) that
    accepts the `%s` statements of the hot path, converted once per statement text. psycopg's
    own %s cursor re-parses statements longer than 4,096 characters or with more than 50
    parameters on every call (it caches only smaller ones) — the claim and submit batches and
    the full-row reads are all of that size."""
    global _HOT_CURSOR
    if _HOT_CURSOR is None:
        import psycopg

        class HotCursor(psycopg.RawCursor):
            def execute(self, query, params=None, **kwargs):
                q = _DOLLAR.get(query)
                if q is None:
                    q = _DOLLAR[query] = _dollar_query(query)
                return super().execute(q, params, **kwargs)

        _HOT_CURSOR = HotCursor
    return _HOT_CURSOR


_QMARK: dict[str, str] = {}


def hot_execute(cur, sql: str, params=None):
    """`cur.execute(sql, params)` for the fixed statements of the hot path (positional `%s`).

    On SQLite, when nothing observes the statements (no debug cursor logging queries, no
    execute wrappers), the statement goes to the sqlite3 cursor with its placeholders converted
    once per statement text instead of by a regex per call. Everything else `CursorWrapper`
    does is kept: the broken-transaction check and the mapping of database errors to Django's.
    """
    conn = cur.db
    if type(cur) is not CursorWrapper or conn.vendor != "sqlite" or conn.execute_wrappers or params is None:
        return cur.execute(sql, params)
    raw = cur.cursor
    q = _QMARK.get(sql)
    if q is None:
        q = _QMARK[sql] = raw.convert_query(sql)
    conn.validate_no_broken_transaction()
    with conn.wrap_database_errors:
        return _sqlite_execute(raw, q, params)


_sqlite_execute = sqlite3.Cursor.execute


_JSON_LITERALS = {"[]": list, "{}": dict}


def _json_from_db(value, expression, conn, _loads=orjson.loads, _literals=_JSON_LITERALS):
    """`JSONField.from_db_value` for a plain column of a field without a custom decoder; the
    empty list and object, the most common values of these rows, are built without the parser.
    orjson parses what json.loads parses, several times faster; the non-standard literals
    json.loads also accepts (NaN, Infinity) fall back to it."""
    if value is None:
        return None
    make = _literals.get(value)
    if make is not None:
        return make()
    try:
        return _loads(value)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _chain(convs):
    """One callable applying the converters in order (None when there are none)."""
    if not convs:
        return None
    if len(convs) == 1:
        return convs[0]

    def chained(value, expression, conn):
        for conv in convs:
            value = conv(value, expression, conn)
        return value
    return chained


class RowSpec:
    """A column list of one model under a table alias, and the rows it reads as instances."""

    def __init__(self, model, alias: str, names: Iterable[str] | None = None):
        self.model = model
        self.alias = alias
        meta = model._meta
        # in model field order: Model.from_db maps a partial row by that order
        wanted = None if names is None else {meta.get_field(n).attname for n in names}
        self.fields = [f for f in meta.concrete_fields if wanted is None or f.attname in wanted]
        self.attnames = [f.attname for f in self.fields]
        self._converters: dict = {}

    def columns(self) -> str:
        return ", ".join(f"{self.alias}.{qn(f.column)}" for f in self.fields)

    def converters(self, conn=None) -> list:
        """(index, attname, converter, column) for the columns that need converting, in the order
        the ORM applies them (backend first, then the field's)."""
        if conn is None:
            conn = connections[DEFAULT_DB_ALIAS]
        ops = conn.ops  # converters are bound to a connection's operations (one per thread)
        out = self._converters.get(ops)
        if out is None:
            out = []
            for i, f in enumerate(self.fields):
                col = f.get_col(self.alias)
                convs = ops.get_db_converters(col) + col.get_db_converters(conn)
                # the field's own from_db_value, unless a subclass or custom decoder changes it
                convs = [_json_from_db if (type(f) is models.JSONField and f.decoder is None
                                           and getattr(c, "__func__", None) is models.JSONField.from_db_value)
                         else c for c in convs]
                fn = _chain(convs)
                if fn is not None:
                    out.append((i, f.attname, fn, col))
            self._converters[ops] = out
        return out

    def build(self, values):
        """A model instance as `Model.from_db` loads it (columns outside the spec are deferred).

        The attributes are set directly rather than through `Model.__init__` (4× cheaper); the
        only thing skipped is the pre_init/post_init signals, which no receiver uses for these
        models.
        """
        return self.build_many([values])[0]

    def build_many(self, rows, conn=None) -> list:
        """`build` for several rows, resolving the connection's converters and alias once."""
        if conn is None:
            conn = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: one proxy lookup, not one per value
        converters, alias, model, attnames = self.converters(conn), conn.alias, self.model, self.attnames
        new = model.__new__
        out = []
        for values in rows:
            obj = new(model)
            state = ModelState()
            state.adding, state.db = False, alias
            d = obj.__dict__
            d["_state"] = state
            d.update(zip(attnames, values))
            for i, name, conv, col in converters:
                d[name] = conv(values[i], col, conn)
            out.append(obj)
        return out


_DEFAULTS: dict = {}


def new_instance(model, alias: str, values: dict):
    """`model(**values)` for a row this process is inserting, built as `RowSpec.build` builds
    loaded rows: every concrete field gets its default unless given, `_state.db` is `alias` and
    `_state.adding` False (the caller inserts it). Values are attribute names (`action_id`).
    Skipped: `Model.__init__`'s generic keyword handling and its pre/post_init signals, which
    no receiver uses for these models."""
    spec = _DEFAULTS.get(model)
    if spec is None:
        fixed, called = {}, []
        for f in model._meta.concrete_fields:
            if f.has_default() and callable(f.default):
                called.append((f.attname, f.get_default))  # a fresh value per instance (list, dict)
            else:
                fixed[f.attname] = f.get_default()
        spec = _DEFAULTS[model] = (fixed, called)
    fixed, called = spec
    obj = model.__new__(model)
    state = ModelState()
    state.adding, state.db = False, alias
    d = obj.__dict__
    d["_state"] = state
    d.update(fixed)
    for name, default in called:
        if name not in values:
            d[name] = default()
    d.update(values)
    return obj


ITEM_ROW = RowSpec(WorkItem, "i")
ACTION_ROW = RowSpec(Action, "a")
RUN_ROW = RowSpec(Run, "r")
# what graph refresh and the claimable flags read (DOMAIN §5.3, §7.6)
GRAPH_ACTION_ROW = RowSpec(Action, "a", ["id", "status", "current_run_id", "depends_on_stage_ids", "stage_id",
                                         "type", "sequence", "claimable"])


def _statements() -> dict[str, str]:
    item, action, run = (qn(m._meta.db_table) for m in (WorkItem, Action, Run))
    i_cols, a_cols, r_cols = ITEM_ROW.columns(), ACTION_ROW.columns(), RUN_ROW.columns()
    claim_order = 'ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1'
    # SKIP LOCKED: a claimer never waits for another; the item row is locked too, so a claim
    # and a service holding the item (submit, cancel, ...) never interleave.
    lock = " FOR UPDATE OF a, i SKIP LOCKED" if is_postgres() else ""
    claim_from = f'SELECT {a_cols}, {i_cols} FROM {action} a JOIN {item} i ON i."id" = a."work_item_id" WHERE a."claimable"'
    return {
        "claim_first": f"{claim_from} {claim_order}{lock}",
        # keyset pagination over the partial index `wc_action_claimable`: no OFFSET scans
        "claim_after": (f'{claim_from} AND (a."updated_at" > %s OR (a."updated_at" = %s AND (a."sequence" > %s '
                        f'OR (a."sequence" = %s AND a."created_at" > %s)))) {claim_order}{lock}'),
        "running_in_workspace": (f'SELECT a."workspace_mode", a."work_item_id" FROM {action} a JOIN {item} i '
                                 f'ON i."id" = a."work_item_id" WHERE a."status" = %s AND i."workspace_key" = %s'),
        # PostgreSQL locks the rows in the order the OF list names them: the item first, the
        # locking order of every service. A row that changed while the lock was awaited is
        # returned as committed (the lock re-reads every locked row), so all three are current.
        "lease_all": (f'SELECT {r_cols}, {a_cols}, {i_cols} FROM {item} i JOIN {run} r ON r."work_item_id" = i."id" '
                      f'JOIN {action} a ON a."id" = r."action_id" WHERE r."id" = %s'
                      + (" FOR UPDATE OF i, r, a" if is_postgres() else "")),
        "graph_actions": (f'SELECT {GRAPH_ACTION_ROW.columns()} FROM {action} a WHERE a."work_item_id" = %s '
                          f'ORDER BY a."sequence"'),
    }


_SQL: dict = {}


def _sql(name: str, conn=None) -> str:
    vendor = (conn or connection).vendor
    key = (vendor, name)
    text = _SQL.get(key)
    if text is None:
        _SQL.update({(vendor, k): v for k, v in _statements().items()})
        text = _SQL[key]
    return text


def adapters(fields) -> list:
    """Per field, how the services adapt its values for the database (what
    `field.get_db_prep_save` would do, without its per-call work): ("json", encoder), ("dt", None),
    ("bool", None) or None (passed as is); `db_values` applies them."""
    out = []
    for f in fields:
        kind = f.get_internal_type()
        out.append(("json", f.encoder) if kind == "JSONField" else ("dt", None) if kind == "DateTimeField"
                   else ("bool", None) if kind == "BooleanField" else None)
    return out


def db_values(adapts: list, values: Iterable, ops) -> list:
    """A row's values adapted by the `adapters` of their fields."""
    out = []
    for adapt, value in zip(adapts, values):
        if value is None or adapt is None:
            out.append(value)
        elif adapt[0] == "json":
            out.append(ops.adapt_json_value(value, adapt[1]))
        elif adapt[0] == "dt":
            out.append(ops.adapt_datetimefield_value(value))
        else:
            out.append(bool(value))
    return out


def update_sql(conn, model, pk: str, values: dict, where: str = "", params: Iterable = ()) -> tuple[str, list]:
    """`UPDATE … SET values WHERE pk = … [AND where]` and its arguments.

    `values` maps attribute names to Python values (adapted by their fields); `where` is SQL over
    quoted column names with `%s` placeholders for `params`.
    """
    key = (conn.vendor, model, tuple(values), where)
    cached = _SQL.get(key)
    if cached is None:
        meta, qn_ = model._meta, conn.ops.quote_name
        fields = [meta.get_field(k) for k in values]
        sets = ", ".join(f"{qn_(f.column)} = %s" for f in fields)
        sql = f"UPDATE {qn_(meta.db_table)} SET {sets} WHERE {qn_(meta.pk.column)} = %s" + (f" AND {where}" if where else "")
        cached = _SQL[key] = (sql, adapters(fields))
    sql, adapts = cached
    args = db_values(adapts, values.values(), conn.ops)
    args.append(pk)
    args.extend(params)
    return sql, args


class Writes:
    """The writes of one step of a service, each with the row count it must have.

    SQLite runs each write when it is added. PostgreSQL sends them all at `flush()` as one
    statement of data-modifying CTEs (one round trip instead of one per write) and checks every
    row count from its result. Either way a write that misses its count raises FenceLost, which
    rolls the whole transaction back: a fence is a guarded write with a row-count check
    (DOMAIN §2.7, §6). The writes of one batch must touch different rows: in one PostgreSQL
    statement they all see the rows as they were before it.

    `flush(tail=...)` may end with one read (SQL without placeholders after its FROM, or with
    `tail_params`): on PostgreSQL it runs in the same statement and therefore sees the rows
    *before* the batch's writes; the caller patches what it wrote.
    """

    __slots__ = ("cur", "pg", "pending")

    def __init__(self, cur):
        self.cur = cur
        self.pg = cur.db.vendor == "postgresql"
        self.pending: list = []

    def update(self, model, pk: str, values: dict, where: str = "", params: Iterable = ()) -> None:
        """A guarded update of one row (`update_sql`): it must hit exactly that row."""
        sql, args = update_sql(self.cur.db, model, pk, values, where, params)
        self.add(sql, args)

    def add(self, sql: str, params: list, *, expect: int = 1, returning: str | None = None, on_result=None) -> None:
        """`sql` (an UPDATE or INSERT without RETURNING) must hit `expect` rows; with `returning`
        (a column) `on_result` receives its value from the one row written."""
        if not self.pg:
            if returning is not None:
                hot_execute(self.cur, f"{sql} RETURNING {returning}", params)
                row = self.cur.fetchone()
                if row is None:
                    raise FenceLost("stale Run: a guarded write lost its fence; nothing was changed")
                on_result(row[0])
            else:
                hot_execute(self.cur, sql, params)
                if self.cur.rowcount != expect:
                    raise FenceLost("stale Run: a guarded update lost its fence; nothing was changed")
            return
        self.pending.append((sql, params, expect, returning, on_result))

    def flush(self, tail: str | None = None, tail_params: Iterable = ()) -> list[tuple]:
        """Send what is pending (PostgreSQL) and run `tail`; returns the tail's rows."""
        cur, pending = self.cur, self.pending
        if not pending:
            if tail is None:
                return []
            hot_execute(cur, tail, list(tail_params))
            return cur.fetchall()
        self.pending = []
        key = ("writes", tuple((p[0], p[3]) for p in pending), tail)
        sql = _SQL.get(key)
        if sql is None:
            ctes = ", ".join(f"w{i} AS ({p[0]} RETURNING {p[3] or 1})" for i, p in enumerate(pending))
            cols = ", ".join(f"(SELECT count(*) FROM w{i})" + (f", (SELECT {p[3]} FROM w{i} LIMIT 1)" if p[3] else "")
                             for i, p in enumerate(pending))
            sql = f"WITH {ctes} SELECT {cols}"
            if tail is not None:
                sql += f", t.* FROM (SELECT 1) AS one LEFT JOIN ({tail}) AS t ON true"
            _SQL[key] = sql
        args: list = []
        for p in pending:
            args.extend(p[1])
        args.extend(tail_params)
        hot_execute(cur, sql, args)
        rows = cur.fetchall()
        head, k = rows[0], 0
        for _sql, _params, expect, returning, on_result in pending:
            if head[k] != expect:
                raise FenceLost("stale Run: a guarded write lost its fence; nothing was changed")
            k += 1
            if returning:
                on_result(head[k])
                k += 1
        if tail is None:
            return []
        return [row[k:] for row in rows if row[k] is not None]


def graph_actions(cur, item_id: str) -> list[Action]:
    """The item's actions as graph refresh and `sync_claimable` read them, by sequence."""
    hot_execute(cur, _sql("graph_actions", cur.db), [item_id])
    return GRAPH_ACTION_ROW.build_many(cur.fetchall(), cur.db)


def flush_reading_graph(writes: Writes, item_id: str) -> list[Action]:
    """`writes.flush()` that also reads the item's actions as `graph_actions` does (one round trip
    on PostgreSQL). On PostgreSQL the read sees the actions as they were before the batch's
    writes, on SQLite after them: callers patch the rows they wrote."""
    conn = writes.cur.db
    rows = writes.flush(_sql("graph_actions", conn), [item_id])
    actions = GRAPH_ACTION_ROW.build_many(rows, conn)
    actions.sort(key=lambda a: a.sequence)
    return actions


def graph_refresh_locked(writes: Writes, item: WorkItem, actions: list[Action], now: datetime, *, where: str,
                         params: Iterable) -> list[Action]:
    """Graph refresh (DOMAIN §7.6) and the claimable flags from one read of the item's actions,
    added to `writes`.

    The item's write is a guarded update (`where` over the item row); flags are written only for
    actions whose flag changes.
    """
    status, current = graph_status(actions)
    values = {"status": status, "current_action_id": current, "current_run_id": None, "updated_at": now}
    writes.update(WorkItem, item.pk, values, where, params)
    for k, v in values.items():
        setattr(item, k, v)
    sync_claimable(item, actions, writes)
    return actions
