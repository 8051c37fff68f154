"""Building blocks shared by the public services. Nothing here opens a transaction.

Locking order (PostgreSQL): a service locks the work item row first, then the rows of that
item it changes. Claims never wait on a lock (SKIP LOCKED, try-locks), so they cannot take part
in a deadlock; multi-item work (recovery) locks items in primary-key order.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from django.db import connection, transaction

from .. import clock, db
from ..constants import MAX_INT32
from ..db.guards import ITEM_AS_READ, RUN_RUNNING, Fence
from ..errors import InvalidInput, NotFound, ReservationActive
from ..models import Action, ActionStatus, Run, RunStatus, WorkItem, WorkItemStatus, new_id
from ..work_dirs import canonicalize_dir
from ..domain import normalize, rules, workflows


def store_transaction():
    """Every public store operation is one durable transaction (DOMAIN §2.7)."""
    return transaction.atomic(durable=True)


def resolve_now(now: datetime | None) -> datetime:
    return now if now is not None else clock.now()


def try_workspace_lock(workspace_key: str) -> bool:
    """Transaction-scoped advisory try-lock on a workspace key (PostgreSQL); SQLite serialises anyway."""
    if not workspace_key or not db.is_postgres():
        return True
    with connection.cursor() as cur:
        cur.execute(db.sql("workspace_try_lock"), [db.lock_key("ws:" + workspace_key)])
        return bool(cur.fetchone()[0])


def running_in_workspace(workspace_key: str) -> list[tuple[str, str]]:
    """The (workspace mode, item id) of every running action in one workspace (DOMAIN §5.4):
    what a claim holds against `rules.workspace_blocks` inside its transaction, and what the
    graph read shows as the workspace's holders."""
    with connection.cursor() as cur:
        cur.execute(db.sql("running_in_workspace"), [ActionStatus.RUNNING, workspace_key])
        return [tuple(row) for row in cur.fetchall()]


def lock_item(item_id: str) -> WorkItem:
    try:
        return WorkItem.objects.select_for_update().get(pk=item_id)
    except WorkItem.DoesNotExist:
        raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id}) from None


def item_actions(item: WorkItem, *, lock: bool = False) -> list[Action]:
    qs = Action.objects.filter(work_item_id=item.pk).order_by("sequence")
    if lock:
        qs = qs.select_for_update()
    return list(qs)


def refuse_if_reserved(actions: Iterable[Action], now: datetime) -> None:
    for a in actions:
        if rules.has_live_reservation(a, now):
            raise ReservationActive(extra={"action_id": a.pk})


# --- fencing (DOMAIN §6) ---------------------------------------------------------------------

def load_lease(run_id: str, owner_boot_id: str, lease_epoch: int, now: datetime, *, require_live: bool):
    """Lock the run's item and check the active-run predicate (DOMAIN §6.1).

    Returns (lease | None, reason). Nothing is written here.
    """
    run, action, item = lease_rows(run_id)
    return rules.lease_check(run, action, item, owner_boot_id, lease_epoch, now, require_live=require_live)


def lease_rows(run_id: str, cur=None) -> tuple[Run | None, Action | None, WorkItem | None]:
    """The run, its action and its item (full rows) in one joined read.

    SQLite: the IMMEDIATE transaction already serialises writers. PostgreSQL: the read locks the
    three rows, the item first (the locking order of every service); rows that changed while a
    lock was awaited are returned as committed (see the "lease_all" statement).
    `cur`: the caller's hot cursor, if it has one.
    """
    if cur is None:
        with db.hot_cursor() as cur:
            return lease_rows(run_id, cur)
    conn = cur.db
    db.hot_execute(cur, db.sql("lease_all", conn), [run_id])
    row = cur.fetchone()
    if row is None:
        return None, None, None
    n, m = len(db.RUN_ROW.fields), len(db.RUN_ROW.fields) + len(db.ACTION_ROW.fields)
    return (db.RUN_ROW.build_many([row[:n]], conn)[0], db.ACTION_ROW.build_many([row[n:m]], conn)[0],
            db.ITEM_ROW.build_many([row[m:]], conn)[0])


def save_item_state(item: WorkItem, now: datetime, *, status: str, current_action_id, current_run_id=None,
                    guard: Fence | None = None, **extra) -> None:
    """Write the item's status and pointers as a guarded update: `guard` (a bound guard of
    `db.guards`), or by default the item's row as the caller holds it under its lock (same status)."""
    if guard is None:
        guard = ITEM_AS_READ.of(item)
    item.status = status
    item.current_action_id = current_action_id
    item.current_run_id = current_run_id
    item.updated_at = now
    for k, v in extra.items():
        setattr(item, k, v)
    values = dict(status=status, current_action_id=current_action_id, current_run_id=current_run_id, updated_at=now, **extra)
    db.update(guard, values)


# --- actions from stages (DOMAIN §4.5, §12.9) ------------------------------------------------

def next_sequence(item: WorkItem) -> int:
    last = Action.objects.filter(work_item_id=item.pk).order_by("-sequence").values_list("sequence", flat=True).first()
    return (last or 0) + 1


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
    db.update(RUN_RUNNING.rows(ids), {"status": status, "ended_at": now, "error": reason})
    return ids


def apply_progress_fields(values: dict) -> dict:
    """The progress fields a report overwrites: response (capped), counters, checkpoint."""
    out = {"response": normalize.cap_response(values.get("response", ""))}
    out.update(normalize.normalize_counters(values))
    out["checkpoint"] = normalize.normalize_checkpoint(values.get("checkpoint"))
    return out


MAX_DURATION_MS = MAX_INT32  # about 24.8 days: longer leases are input errors, not overflows


def check_duration(value, field: str, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DURATION_MS:
        raise InvalidInput(f"{field} must be a positive integer of at most {MAX_DURATION_MS} ms", fields=[field])


def lease_expiry(now: datetime, lease_ms: int) -> datetime:
    return now + timedelta(milliseconds=int(lease_ms))
