"""Graph refresh, the claimable flags and the graph reset (DOMAIN §5.3, §7.6, §7.8).

The rules themselves are pure (`workcenter.domain.rules`); this module reads the rows they need and
writes what they decide, every write guarded. Callers hold the item's lock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from .. import db
from ..domain import rules
from ..db.guards import ACTION_AS_READ, ACTION_HELD, RUN_RUNNING, Fence
from ..errors import InvalidState
from ..models import Action, ActionStatus, Run, RunStatus, WorkItem
from .common import item_actions, refuse_if_reserved, save_item_state


def graph_actions(cur, item_id: str) -> list[Action]:
    """The item's actions as graph refresh and `sync_claimable` read them, by sequence."""
    db.hot_execute(cur, db.sql("graph_actions", cur.db), [item_id])
    return db.GRAPH_ACTION_ROW.build_many(cur.fetchall(), cur.db)


def flush_reading_graph(writes: db.Writes, item_id: str) -> list[Action]:
    """`writes.flush()` that also reads the item's actions as `graph_actions` does (one round trip
    on PostgreSQL). On PostgreSQL the read sees the actions as they were before the batch's
    writes, on SQLite after them: callers patch the rows they wrote."""
    conn = writes.cur.db
    rows = writes.flush(db.sql("graph_actions", conn), [item_id])
    actions = db.GRAPH_ACTION_ROW.build_many(rows, conn)
    actions.sort(key=lambda a: a.sequence)
    return actions


def sync_claimable(item: WorkItem, actions: list[Action] | None = None, writes: db.Writes | None = None) -> None:
    """Recompute the derived `claimable` flag of the item's actions (DOMAIN §5.1-§5.3).

    `writes`: the caller's batch to add the flag updates to; without one they run now."""
    if actions is None:
        with connection.cursor() as cur:
            actions = graph_actions(cur, item.pk)
    want = rules.claimable_ids(item, actions)
    have = {a.pk for a in actions if a.claimable}
    on, off = want - have, have - want
    if (on or off) and writes is None:
        with db.hot_cursor() as cur:
            writes = db.Writes(cur)
            _add_flag_writes(writes, on, off)
            writes.flush()
    elif on or off:
        _add_flag_writes(writes, on, off)
    for a in actions:
        a.claimable = a.pk in want


def _add_flag_writes(writes: db.Writes, on: set, off: set) -> None:
    for ids, flag in ((on, True), (off, False)):
        if ids:  # primary-key order: the row locks of PostgreSQL are taken in one order
            writes.update(ACTION_HELD.rows(sorted(ids)), {"claimable": flag})


def graph_refresh(item: WorkItem, now: datetime, actions: list[Action] | None = None,
                  guard: Fence | None = None) -> list[Action]:
    """Graph refresh (DOMAIN §7.6) as a guarded update of the item (`guard`, or its row as held)."""
    if actions is None:
        actions = item_actions(item)
    status, current = rules.graph_status(actions)
    save_item_state(item, now, status=status, current_action_id=current, current_run_id=None, guard=guard)
    return actions


def graph_refresh_locked(writes: db.Writes, item: WorkItem, actions: list[Action], now: datetime, *,
                         guard: Fence) -> list[Action]:
    """Graph refresh and the claimable flags from one read of the item's actions, added to
    `writes`: the item's write is guarded by `guard` (the item's row); flags are written only for
    actions whose flag changes."""
    status, current = rules.graph_status(actions)
    values = {"status": status, "current_action_id": current, "current_run_id": None, "updated_at": now}
    writes.update(guard, values)
    for k, v in values.items():
        setattr(item, k, v)
    sync_claimable(item, actions, writes)
    return actions


# --- the graph reset (DOMAIN §7.8) -----------------------------------------------------------

@dataclass
class ResetPlan:
    target: Action
    affected: list[Action]
    running_runs: list[Run]
    preserved_workspace: dict | None
    superseded_run_ids: list[str] = field(default_factory=list)


def plan_graph_reset(item: WorkItem, actions: list[Action], target_stage: str, replacement: dict | None,
                     now: datetime) -> ResetPlan:
    """Steps 1-4 of DOMAIN §7.8, without writing. The retry preview reads the same plan."""
    target, affected = rules.reset_scope(actions, target_stage)
    if target is None:
        raise InvalidState(f"graph reset target is missing: {target_stage}")
    refuse_if_reserved(affected, now)
    runs = list(Run.objects.filter(action_id__in=[a.pk for a in affected], status=RunStatus.RUNNING).order_by("pk"))
    return ResetPlan(target=target, affected=affected, running_runs=runs,
                     preserved_workspace=rules.preserved_workspace(target, replacement),
                     superseded_run_ids=[r.pk for r in runs])


def apply_graph_reset(plan: ResetPlan, replacement: dict | None, reason: str, now: datetime) -> Action:
    """Steps 5-8 of DOMAIN §7.8: the plan's running runs superseded, its actions back to ready
    (the target rewritten by `replacement`), each write guarded on the row as the plan read it."""
    db.update(RUN_RUNNING.rows([r.pk for r in plan.running_runs]),
              {"status": RunStatus.SUPERSEDED, "ended_at": now, "error": reason})
    for a in plan.affected:
        guard = ACTION_AS_READ.of(a)
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
            for name in rules.RESET_FIELDS:
                setattr(a, name, replacement[name])
            fields += rules.RESET_FIELDS
        db.update(guard, {f: getattr(a, f) for f in fields})
    return plan.target


def graph_reset(item: WorkItem, target_stage: str, replacement: dict | None, *, reason: str, now: datetime,
                actions: list[Action] | None = None, plan: ResetPlan | None = None) -> Action:
    """Reset the graph from `target_stage` in place (DOMAIN §7.8) and return the target action.

    `actions`: the item's actions as the caller locked them (read and locked here otherwise);
    `plan`: a plan the caller already made of them (the retry shares its plan with its checks)."""
    if plan is None:
        if actions is None:
            actions = item_actions(item, lock=True)
        plan = plan_graph_reset(item, actions, target_stage, replacement, now)
    return apply_graph_reset(plan, replacement, reason, now)
