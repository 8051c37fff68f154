"""Claiming work (DOMAIN §5): at most one action per call, never conflicting with a running one."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections

from ..errors import InvalidInput
from ..event_types import EventType
from ..events import event_append
from ..models import Action, ActionStatus, ExecutionMode, Run, RunStatus, WorkItem, WorkItemStatus, new_id
from .. import db
from ..db.guards import ACTION_CLAIMABLE, ITEM_CLAIMABLE_GRAPH, ITEM_CLAIMABLE_LINEAR
from ..domain import rules
from . import common
from .common import resolve_now, running_in_workspace, store_transaction
from .hooks import fault_point


@dataclass
class Claim:
    work_item: WorkItem
    action: Action
    run: Run
    more: bool = False  # another action was claimable beside this one when it was claimed


def action_claim(
    *,
    owner_boot_id: str,
    lease_ms: int = 60_000,
    actor: str | None = None,
    now: datetime | None = None,
) -> Claim | None:
    """ready → running for the first allowed candidate by (updated_at, sequence); a new run holds
    the lease (epoch + 1). Returns None when nothing is claimable.

    On PostgreSQL the candidate's action and item rows are taken with SKIP LOCKED and its
    workspace with an advisory try-lock, so claimers never wait on each other and claims in
    different workspaces never serialise; on SQLite the IMMEDIATE transaction serialises the
    whole claim. The hot path is a few fixed SQL statements (db.RowSpec): one candidate
    read over the partial index of claimable actions, then one batch (`db.Writes`: a single
    statement on PostgreSQL) of two guarded updates (`db.guards`), the run and the event.
    """
    return claim_attempt(owner_boot_id=owner_boot_id, lease_ms=lease_ms, actor=actor, now=now)[0]


def claim_attempt(*, owner_boot_id: str, lease_ms: int = 60_000, actor: str | None = None,
                  now: datetime | None = None) -> tuple[Claim | None, bool]:
    """`action_claim`, and whether a claim that found nothing skipped a candidate another
    transaction held at that moment (PostgreSQL; always False on SQLite).

    On PostgreSQL a claim skips the rows other transactions hold (SKIP LOCKED) and the workspaces
    other claims hold (advisory try-lock), so claimers never queue behind each other. The price: a
    candidate held for those few milliseconds is invisible — the second ready branch of a graph
    item while another worker claims the first (they share the item row), an action whose item
    row a progress report or renewal holds, a second reader of a workspace another claim holds.
    "Nothing claimable" is then not the whole truth, and the holders that commit no event
    (claims, progress reports, renewals) wake no waiting claim when they end: the caller should
    try again shortly (the long-poll claim does, without holding a thread meanwhile).

    A claim that got an action says whether another was claimable beside it (`Claim.more`, read
    in the same statement as its writes): one commit can make several claimable, and a waiting
    claim woken by it should not be the only one to try."""
    if not isinstance(owner_boot_id, str) or not owner_boot_id.strip():
        raise InvalidInput("owner_boot_id is required", fields=["owner_boot_id"])
    common.check_duration(lease_ms, "lease_ms")
    return _claim_once(owner_boot_id, lease_ms, actor or f"worker:{owner_boot_id}", now)


def _claim_once(owner_boot_id: str, lease_ms: int, actor: str, now: datetime | None) -> tuple[Claim | None, bool]:
    """One pass over the candidates: (the claim, False), or (None, whether it skipped one that
    another transaction held)."""
    n_action = len(db.ACTION_ROW.fields)
    with store_transaction():
        conn = connections[DEFAULT_DB_ALIAS]  # resolved once: the proxy costs a lookup per attribute
        with db.hot_cursor(conn) as cur:
            cur.execute(db.sql("claim_first", conn))
            seen: set[str] = set()  # the candidates this pass read (and could not claim)
            busy_workspace = False
            while True:
                row = cur.fetchone()
                if row is None:
                    break
                action = db.ACTION_ROW.build_many([row[:n_action]], conn)[0]
                item = db.ITEM_ROW.build_many([row[n_action:]], conn)[0]
                claim = _try_claim(cur, action, item, owner_boot_id, lease_ms, actor, now)
                if isinstance(claim, Claim):
                    return claim, False
                busy_workspace = busy_workspace or claim is BUSY_WORKSPACE
                seen.add(action.pk)
                # the next candidate after this one in claim order
                u = conn.ops.adapt_datetimefield_value(action.updated_at)
                c = conn.ops.adapt_datetimefield_value(action.created_at)
                db.hot_execute(cur, db.sql("claim_after", conn), [u, u, action.sequence, action.sequence, c])
            if conn.vendor != "postgresql":
                return None, False  # SQLite: the IMMEDIATE transaction saw every candidate
            # the claimable actions in claim order, read without locks: one this pass never read
            # was skipped because another transaction held its action or item row
            db.hot_execute(cur, db.sql("claim_peek", conn), [len(seen) + 1])
            skipped = any(r[0] not in seen for r in cur.fetchall())
    return None, skipped or busy_workspace


BUSY_WORKSPACE = object()  # _try_claim: the candidate's workspace is held by another claim


def _try_claim(cur, action: Action, item: WorkItem, owner_boot_id: str, lease_ms: int, actor: str,
               now: datetime | None) -> Claim | object | None:
    fault_point("claim_candidate_read")
    if action.status != ActionStatus.READY or action.current_run_id:
        return None
    in_graph = item.execution_mode == ExecutionMode.GRAPH
    if in_graph:
        if item.status not in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            return None
    elif not (item.status == WorkItemStatus.READY and item.current_action_id == action.pk and not item.current_run_id):
        return None
    key = item.workspace_key
    if key:
        if not common.try_workspace_lock(key):
            return BUSY_WORKSPACE
        if rules.workspace_blocks(action.workspace_mode, item.pk, running_in_workspace(key)):
            return None

    # The clock is read once the claim has its candidate and its workspace, not when the
    # transaction began: the run's lease then starts when the claim really commits (a claim that
    # waited for the CPU or scanned past taken candidates does not lose that time from its
    # lease), and it is never stamped before a run it saw end in the same workspace.
    now = resolve_now(now)
    run_id = new_id()
    epoch, attempt = action.lease_epoch + 1, action.attempt + 1
    # The write set goes as one batch (one statement on PostgreSQL). The candidate read locked the
    # action and item rows (PostgreSQL) or the transaction holds the write lock (SQLite), so the
    # guards below cannot fail unless the store is inconsistent: a miss rolls the claim back.
    w = db.Writes(cur)
    w.update(ACTION_CLAIMABLE.row(action.pk, action.lease_epoch),
             {"status": ActionStatus.RUNNING, "attempt": attempt, "lease_epoch": epoch, "current_run_id": run_id,
              "updated_at": now, "claimable": False})
    if in_graph:
        w.update(ITEM_CLAIMABLE_GRAPH.row(item.pk),
                 {"status": WorkItemStatus.RUNNING, "current_action_id": action.pk, "current_run_id": None, "updated_at": now})
        item.current_run_id = None
    else:
        w.update(ITEM_CLAIMABLE_LINEAR.row(item.pk, action.pk),
                 {"status": WorkItemStatus.RUNNING, "current_run_id": run_id, "updated_at": now})
        item.current_run_id = run_id
    item.status = WorkItemStatus.RUNNING
    item.current_action_id = action.pk
    item.updated_at = now
    run = _insert_run(w, run_id, action, item, owner_boot_id, epoch, now, common.lease_expiry(now, lease_ms))
    action.status, action.attempt, action.lease_epoch = ActionStatus.RUNNING, attempt, epoch
    action.current_run_id, action.updated_at, action.claimable = run_id, now, False
    event_append(work_item_id=item.pk, type=EventType.RUN_CLAIMED,
                 data={"owner_boot_id": owner_boot_id, "lease_epoch": epoch},
                 action_id=action.pk, run_id=run_id, actor=actor, now=now, writes=w)
    # the batch's tail: whether another action is claimable beside this one (no extra round trip)
    more = bool(w.flush(tail=db.sql("claim_more", cur.db), tail_params=[action.pk]))
    fault_point("after_claim_update")
    return Claim(work_item=item, action=action, run=run, more=more)


def _insert_run(writes: db.Writes, run_id: str, action: Action, item: WorkItem, owner_boot_id: str, epoch: int,
                now: datetime, expires: datetime) -> Run:
    """The new run (DOMAIN §5.6 step 3), added to `writes`; progress_revision continues from the
    action's earlier runs (set when the batch is flushed)."""
    conn = writes.cur.db
    run = db.new_instance(Run, conn.alias, {
        "id": run_id, "action_id": action.pk, "work_item_id": item.pk, "owner_boot_id": owner_boot_id,
        "lease_epoch": epoch, "status": RunStatus.RUNNING, "started_at": now, "expires_at": expires, "renewed_at": now,
        "evidence": []})
    d = run.__dict__
    params = db.db_values(_RUN_INSERT_ADAPTERS, [d[f.attname] for f in db.INSERT_FIELDS["Run"]], conn.ops)
    params.append(action.pk)
    writes.add(db.sql("run_insert", conn), params, returning="progress_revision",
               on_result=lambda v: setattr(run, "progress_revision", v))
    return run


_RUN_INSERT_ADAPTERS = db.adapters(db.INSERT_FIELDS["Run"])
