"""Claiming work (DOMAIN §5): at most one action per call, never conflicting with a running one."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max

from ..errors import InvalidInput
from ..events import event_append
from ..models import Action, ActionStatus, Run, RunStatus, WorkItem, WorkItemStatus, new_id
from . import common
from .common import resolve_now, store_transaction
from .hooks import fault_point

CANDIDATE_BATCH = 32


@dataclass
class Claim:
    work_item: WorkItem
    action: Action
    run: Run


def workspace_blocks(candidate_mode: str, candidate_item_id: str, running: list[tuple[str, str]]) -> bool:
    """The exclusivity rule of DOMAIN §5.4 against the running (mode, item id) pairs of one workspace."""
    for r_mode, r_item in running:
        if candidate_mode in ("shared", "integrate") or r_mode in ("shared", "integrate"):
            return True
        if r_item != candidate_item_id and candidate_mode != "read" and r_mode != "read":
            return True
    return False


def running_in_workspace(workspace_key: str) -> list[tuple[str, str]]:
    return list(
        Action.objects.filter(status=ActionStatus.RUNNING, work_item__workspace_key=workspace_key)
        .values_list("workspace_mode", "work_item_id")
    )


def action_claim(
    *,
    owner_boot_id: str,
    lease_ms: int = 60_000,
    actor: str | None = None,
    now: datetime | None = None,
) -> Claim | None:
    """ready → running for the first allowed candidate by (updated_at, sequence); a new run holds
    the lease (epoch + 1). Returns None when nothing is claimable.

    On PostgreSQL the candidate's item row is taken with SKIP LOCKED and its workspace with an
    advisory try-lock, so claimers never wait on each other and claims in different workspaces
    never serialise; on SQLite the IMMEDIATE transaction serialises the whole claim.
    """
    if not isinstance(owner_boot_id, str) or not owner_boot_id.strip():
        raise InvalidInput("owner_boot_id is required", fields=["owner_boot_id"])
    common.check_duration(lease_ms, "lease_ms")
    actor = actor or f"worker:{owner_boot_id}"
    with store_transaction():
        now = resolve_now(now)
        seen: set[str] = set()
        last_key = None
        while True:
            qs = Action.objects.filter(claimable=True).order_by("updated_at", "sequence", "created_at")
            if last_key is not None:
                # keyset pagination over the partial index: no OFFSET scans
                u, s, c = last_key
                from django.db.models import Q

                qs = qs.filter(Q(updated_at__gt=u) | Q(updated_at=u, sequence__gt=s) | Q(updated_at=u, sequence=s, created_at__gt=c))
            batch = list(qs.values_list("id", "work_item_id", "updated_at", "sequence", "created_at")[:CANDIDATE_BATCH])
            if not batch:
                return None
            for action_id, item_id, u, s, c in batch:
                last_key = (u, s, c)
                if action_id in seen:
                    continue
                seen.add(action_id)
                claim = _try_claim(action_id, item_id, owner_boot_id, lease_ms, actor, now)
                if claim is not None:
                    return claim


def _try_claim(action_id: str, item_id: str, owner_boot_id: str, lease_ms: int, actor: str, now: datetime) -> Claim | None:
    item = WorkItem.objects.select_for_update(skip_locked=True).filter(pk=item_id).first()
    if item is None:
        return None
    action = Action.objects.select_for_update(skip_locked=True).filter(pk=action_id, claimable=True).first()
    if action is None or action.status != ActionStatus.READY or action.current_run_id:
        return None
    graph = item.execution_mode == "graph"
    if graph:
        if item.status not in (WorkItemStatus.READY, WorkItemStatus.RUNNING):
            return None
    elif not (item.status == WorkItemStatus.READY and item.current_action_id == action.pk and not item.current_run_id):
        return None
    key = item.workspace_key
    if key:
        if not common.try_workspace_lock(key):
            return None
        if workspace_blocks(action.workspace_mode, item.pk, running_in_workspace(key)):
            return None

    run_id = new_id()
    epoch = action.lease_epoch + 1
    common.guarded_update(
        Action.objects.filter(pk=action.pk, status=ActionStatus.READY, current_run_id__isnull=True),
        status=ActionStatus.RUNNING, attempt=action.attempt + 1, lease_epoch=epoch,
        current_run_id=run_id, updated_at=now, claimable=False,
    )
    fault_point("after_claim_update")
    if graph:
        common.guarded_update(
            WorkItem.objects.filter(pk=item.pk, status__in=(WorkItemStatus.READY, WorkItemStatus.RUNNING)),
            status=WorkItemStatus.RUNNING, current_action_id=action.pk, current_run_id=None, updated_at=now,
        )
        item.current_run_id = None
    else:
        common.guarded_update(
            WorkItem.objects.filter(pk=item.pk, status=WorkItemStatus.READY, current_action_id=action.pk,
                                    current_run_id__isnull=True),
            status=WorkItemStatus.RUNNING, current_run_id=run_id, updated_at=now,
        )
        item.current_run_id = run_id
    item.status = WorkItemStatus.RUNNING
    item.current_action_id = action.pk
    item.updated_at = now
    prior = Run.objects.filter(action_id=action.pk).aggregate(m=Max("progress_revision"))["m"] or 0
    run = Run.objects.create(
        id=run_id, action_id=action.pk, work_item_id=item.pk, owner_boot_id=owner_boot_id,
        lease_epoch=epoch, status=RunStatus.RUNNING, started_at=now,
        expires_at=common.lease_expiry(now, lease_ms), evidence=[], progress_revision=prior + 1,
    )
    action.status, action.attempt, action.lease_epoch = ActionStatus.RUNNING, action.attempt + 1, epoch
    action.current_run_id, action.updated_at, action.claimable = run_id, now, False
    event_append(work_item_id=item.pk, type="run.claimed",
                 data={"owner_boot_id": owner_boot_id, "lease_epoch": epoch},
                 action_id=action.pk, run_id=run_id, actor=actor, now=now)
    return Claim(work_item=item, action=action, run=run)
