"""Recovery of runs left running by a dead or expired worker (DOMAIN §9.2)."""
from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from .. import db
from ..db.guards import ACTION_OF_LEASE, ITEM_OF_LEASE, RUN_RUNNING
from ..errors import InvalidInput
from ..event_types import EventType
from ..events import event_append
from ..models import ExecutionMode, Action, ActionStatus, Run, RunStatus, WorkItem, WorkItemStatus
from ..domain import rules
from . import common, graph
from .common import resolve_now, store_transaction

RECOVERY_ERROR = "Agent process or lease ended before the Run submitted a terminal outcome"
STALE_ERROR = "Run no longer owns the current WorkItem Action"


def runs_recover(*, current_boot_id: str, expired_only: bool = False, actor: str | None = None,
                 now: datetime | None = None) -> int:
    """Interrupt (current) or supersede/cancel (stale) every running run that is not owned by
    `current_boot_id` or whose lease expired. Runs whose action holds a live integration
    reservation are skipped. Returns how many runs were recovered. Items are locked in pk order.

    `expired_only` recovers only runs whose lease expired, whoever owns them: the form a worker
    uses when several workers share one store, so that it never interrupts a live peer's runs
    (DOMAIN §9.2 assumes one watcher per store; a crashed peer's runs come back at lease expiry).
    """
    if not isinstance(current_boot_id, str) or not current_boot_id:
        raise InvalidInput("current_boot_id is required", fields=["owner_boot_id"])
    actor = actor or f"recovery:{current_boot_id}"
    with store_transaction():
        now = resolve_now(now)
        if expired_only:
            cond = Q(status=RunStatus.RUNNING, expires_at__lte=now)
        else:
            cond = Q(status=RunStatus.RUNNING) & (~Q(owner_boot_id=current_boot_id) | Q(expires_at__lte=now))
        item_ids = sorted(set(Run.objects.filter(cond).values_list("work_item_id", flat=True)))
        count = 0
        for item_id in item_ids:
            item = WorkItem.objects.select_for_update().filter(pk=item_id).first()
            if item is None:
                continue
            runs = list(Run.objects.select_for_update().filter(cond, work_item_id=item_id).order_by("pk"))
            for run in runs:
                if _recover_one(item, run, now, actor):
                    count += 1
        return count


def _recover_one(item: WorkItem, run: Run, now: datetime, actor: str) -> bool:
    action = Action.objects.select_for_update().get(pk=run.action_id)
    if rules.has_live_reservation(action, now):
        return False
    in_graph = item.execution_mode == ExecutionMode.GRAPH
    owns_action = (
        action.status == ActionStatus.RUNNING and action.current_run_id == run.pk and action.lease_epoch == run.lease_epoch
    )
    current = owns_action and item.status == WorkItemStatus.RUNNING and (
        in_graph or (item.current_action_id == action.pk and item.current_run_id == run.pk)
    )
    retryable = rules.retryable_on_interrupt(action)
    a_status = ActionStatus.READY if retryable else ActionStatus.FAILED
    if not current:
        status = RunStatus.CANCELLED if item.status == WorkItemStatus.CANCELLED else RunStatus.SUPERSEDED
        db.update(RUN_RUNNING.row(run.pk), {"status": status, "ended_at": now, "error": STALE_ERROR})
        if owns_action:
            db.update(ACTION_OF_LEASE.row(action.pk, run.pk, run.lease_epoch),
                      {"status": a_status, "current_run_id": None, "updated_at": now, "claimable": False})
        if in_graph and item.status not in (WorkItemStatus.DONE, WorkItemStatus.CANCELLED):  # [DEV-3]
            graph.graph_refresh(item, now)
        graph.sync_claimable(item)
        event_append(work_item_id=item.pk, type=EventType.RUN_STALE_RECOVERED, data={"status": status},
                     action_id=action.pk, run_id=run.pk, actor=actor, now=now)
        return True
    db.update(RUN_RUNNING.row(run.pk), {"status": RunStatus.INTERRUPTED, "ended_at": now, "error": RECOVERY_ERROR})
    db.update(ACTION_OF_LEASE.row(action.pk, run.pk, run.lease_epoch),
              {"status": a_status, "current_run_id": None, "updated_at": now, "claimable": False})
    if in_graph:
        graph.graph_refresh(item, now)
    else:
        common.save_item_state(item, now, status=WorkItemStatus.READY if retryable else WorkItemStatus.NEEDS_ATTENTION,
                               current_action_id=action.pk, current_run_id=None,
                               guard=ITEM_OF_LEASE.row(item.pk, action.pk, run.pk))
    graph.sync_claimable(item)
    event_append(work_item_id=item.pk, type=EventType.RUN_INTERRUPTED, data={"retryable": retryable},
                 action_id=action.pk, run_id=run.pk, actor=actor, now=now)
    return True
