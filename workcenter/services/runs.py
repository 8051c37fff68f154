"""Worker calls on a run (DOMAIN §6, §7, §9.1): renew, progress, snapshots, submit, interrupt.

Every call proves ownership with (run_id, owner_boot_id, lease_epoch); a failed fence changes
nothing. Submit raises StaleRun; the others return None/False.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from ..errors import InvalidInput, InvalidState, PlanError, ReservationActive, StaleRun
from ..event_types import EventType
from ..events import event_append, publish_progress_on_commit
from ..models import ExecutionMode, Action, ActionStatus, Run, RunStatus, WorkItem, WorkItemStatus
from .. import db, rules
from . import common, graph, normalize, planning, workflows
from .common import resolve_now, store_transaction
from .hooks import fault_point

SNAPSHOT_FIELDS = ("role_snapshot", "vp_snapshot", "model_snapshot", "tool_policy_snapshot")


def _check_triple(run_id: Any, owner_boot_id: Any, lease_epoch: Any) -> None:
    errors = []
    if not isinstance(run_id, str) or not run_id:
        errors.append("run_id")
    if not isinstance(owner_boot_id, str) or not owner_boot_id:
        errors.append("owner_boot_id")
    if isinstance(lease_epoch, bool) or not isinstance(lease_epoch, int):
        errors.append("lease_epoch")
    if errors:
        raise InvalidInput("run_id, owner_boot_id and an integer lease_epoch are required", fields=errors)


def run_renew(*, run_id: str, owner_boot_id: str, lease_epoch: int, lease_ms: int = 60_000,
              now: datetime | None = None) -> Run | None:
    """Move the lease expiry to now + lease_ms; None when the fence (live lease) fails."""
    _check_triple(run_id, owner_boot_id, lease_epoch)
    common.check_duration(lease_ms, "lease_ms")
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return None
        expires = common.lease_expiry(now, lease_ms)
        n = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_epoch=lease_epoch,
                               owner_boot_id=owner_boot_id).update(expires_at=expires, renewed_at=now)
        if n != 1:
            return None
        lease.run.expires_at, lease.run.renewed_at = expires, now
        return lease.run


def run_progress(*, run_id: str, owner_boot_id: str, lease_epoch: int, progress: dict,
                 now: datetime | None = None) -> Run | None:
    """Overwrite response, counters and checkpoint; progress_revision + 1. None when fenced out."""
    _check_triple(run_id, owner_boot_id, lease_epoch)
    if not isinstance(progress, dict):
        raise InvalidInput("progress must be an object", fields=["progress"])
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return None
        run = lease.run
        values = common.apply_progress_fields(progress)
        values["progress_revision"] = run.progress_revision + 1
        n = Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, lease_epoch=lease_epoch).update(**values)
        if n != 1:
            return None
        for k, v in values.items():
            setattr(run, k, v)
        publish_progress_on_commit(run)
        return run


def run_set_snapshots(*, run_id: str, owner_boot_id: str, lease_epoch: int, snapshots: dict,
                      now: datetime | None = None) -> bool:
    """Write the four execution snapshots once, while all are still null."""
    _check_triple(run_id, owner_boot_id, lease_epoch)
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return False
        values = {f: (snapshots or {}).get(f) if isinstance((snapshots or {}).get(f), dict) else None for f in SNAPSHOT_FIELDS}
        n = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, **{f"{f}__isnull": True for f in SNAPSHOT_FIELDS}).update(**values)
        return n == 1


def _retry_state(action: Action) -> bool:
    return action.attempt < action.max_attempts


def run_submit(*, run_id: str, owner_boot_id: str, lease_epoch: int, result: dict,
               actor: str | None = None, now: datetime | None = None) -> tuple[Run, Action, WorkItem]:
    """Terminal submission (DOMAIN §7): run → outcome, action and item transition, follow-up
    actions and one event, atomically. A failed fence raises StaleRun and changes nothing."""
    _check_triple(run_id, owner_boot_id, lease_epoch)
    if not isinstance(result, dict):
        raise InvalidInput("result must be an object", fields=["result"])
    actor = actor or f"worker:{owner_boot_id}"
    with store_transaction(), db.hot_cursor() as cur:
        now = resolve_now(now)
        # 1. run, action and item in one read (the item locked first), then the fence (§7.1)
        run, action, item = common.lease_rows(run_id, cur)
        if run is None:
            raise StaleRun(rules.stale_reason(None, None, None, now, True), extra={"run_id": run_id})
        sub = normalize.normalize_submission(result, action_type=action.type,
                                             criteria=list(item.acceptance_criteria or []))
        lease, reason = rules.lease_check(run, action, item, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            raise StaleRun(reason, extra={"run_id": run_id})
        mode_before = item.execution_mode
        snapshot = item.workflow_snapshot or {}
        new_snapshot = None
        if sub["outcome"] == "completed" and action.type == "triage" and snapshot.get("planning_mode") == "ai":
            try:
                new_snapshot = planning.apply_triage_plan(snapshot, sub["plan"])
            except PlanError as exc:
                sub["outcome"], sub["error"] = "failed", str(exc)
        outcome = sub["outcome"]
        patch = sub["contract_patch"] if (outcome == "completed" and action.type == "triage") else None

        # 2. the run records the final outcome and every submitted field (overwritten)
        run_values = {
            "status": outcome, "ended_at": now, "response": sub["response"], "summary": sub["summary"],
            "evidence": sub["evidence"], "waiting_reason": sub["waiting_reason"], "error": sub["error"],
            "review_decision": sub["review_decision"], "contract_patch": sub["contract_patch"],
            "checkpoint": sub["checkpoint"], "acceptance_checks": sub["acceptance_checks"],
            "progress_revision": run.progress_revision + 1,
        }
        run_values.update({f: sub[f] for f in normalize.COUNTER_FIELDS})
        w = db.Writes(cur)  # one statement per batch on PostgreSQL
        w.update(Run, run.pk, run_values, '"status" = %s AND "lease_epoch" = %s', [RunStatus.RUNNING, lease_epoch])
        for k, v in run_values.items():
            setattr(run, k, v)

        # 4-5. contract patch and new snapshot
        item_fields = []
        if patch:
            if "goal" in patch:
                item.goal = patch["goal"]
                item_fields.append("goal")
            if "acceptance_criteria" in patch:
                item.acceptance_criteria = patch["acceptance_criteria"]
                item_fields.append("acceptance_criteria")
            item.revision += 1
            item_fields.append("revision")
        if new_snapshot is not None:
            item.workflow_snapshot = new_snapshot
            item.workflow_template = new_snapshot.get("id") or item.workflow_template
            item_fields += ["workflow_snapshot", "workflow_template"]
        if item_fields:
            item.save(update_fields=item_fields)
        mode_after = item.execution_mode

        # 3. the action's new status
        if outcome == "completed":
            a_status = ActionStatus.COMPLETED
        elif outcome == "waiting":
            a_status = ActionStatus.WAITING if mode_after == ExecutionMode.GRAPH else ActionStatus.COMPLETED
        elif outcome == "retryable":
            a_status = ActionStatus.READY if _retry_state(action) else ActionStatus.FAILED
        else:
            a_status = ActionStatus.FAILED
        w.update(Action, action.pk, {"status": a_status, "current_run_id": None, "updated_at": now, "claimable": False},
                 '"status" = %s AND "current_run_id" = %s', [ActionStatus.RUNNING, run.pk])
        action.status, action.current_run_id, action.updated_at, action.claimable = a_status, None, now, False

        event_type, data = _event_for(outcome, action, run, sub, mode_after)
        # 6-7. follow-up actions and the item's status; the guard follows the mode it ran under [DEV-6]
        if mode_before == ExecutionMode.GRAPH:
            guard_sql, guard_params = '"status" IN (%s, %s, %s)', list(rules.RUNNING_ITEM_OK)
        else:
            guard_sql = '"status" = %s AND "current_action_id" = %s AND "current_run_id" = %s'
            guard_params = [WorkItemStatus.RUNNING, action.pk, run.pk]
        followups = event_type == EventType.ACTION_COMPLETED and (
            new_snapshot is not None or (action.type == "review" and sub["review_decision"] == "changes_requested"))
        if mode_after == ExecutionMode.GRAPH:
            if followups:  # new actions (a plan) or a reset (changes requested) first
                w.flush()
                fault_point("after_run_update")
                event_type, data = _graph_followups(item, action, run, sub, new_snapshot, event_type, data, now)
                actions = graph.graph_actions(cur, item.pk)
            else:
                # the common case: the batch also reads the item's actions (on PostgreSQL as they
                # were before it, so the submitted one is patched), and the item, flag and event
                # writes go as a second batch
                actions = graph.flush_reading_graph(w, item.pk)
                fault_point("after_run_update")
                for a in actions:
                    if a.pk == action.pk:
                        a.status, a.current_run_id, a.claimable = a_status, None, False
                event_type, data = _graph_followups(item, action, run, sub, new_snapshot, event_type, data, now)
            # one read of the actions for the status and the claimable flags
            graph.graph_refresh_locked(w, item, actions, now, where=guard_sql, params=guard_params)
        else:
            w.flush()
            fault_point("after_run_update")
            if mode_before == ExecutionMode.GRAPH:
                item_guard = WorkItem.objects.filter(pk=item.pk, status__in=rules.RUNNING_ITEM_OK)
            else:
                item_guard = WorkItem.objects.filter(pk=item.pk, status=WorkItemStatus.RUNNING,
                                                     current_action_id=action.pk, current_run_id=run.pk)
            _linear_followups(item, action, run, sub, outcome, now, item_guard)
            if outcome == "completed" and item.status == WorkItemStatus.DONE:
                event_type, data = EventType.WORK_ITEM_COMPLETED, {"summary": sub["summary"]}
            elif outcome == "completed":
                nxt = Action.objects.filter(pk=item.current_action_id).values_list("type", flat=True).first()
                data = {"next_action_type": nxt, "review_decision": sub["review_decision"]}
            graph.sync_claimable(item)
        fault_point("before_event")
        event_append(work_item_id=item.pk, type=event_type, data=data, action_id=action.pk, run_id=run.pk,
                     actor=actor, now=now, writes=w)
        w.flush()
        return run, action, item


def _event_for(outcome: str, action: Action, run: Run, sub: dict, mode: str) -> tuple[str, dict]:
    if outcome == "waiting":
        return EventType.ACTION_WAITING, {"reason": sub["waiting_reason"]}
    if outcome == "retryable":
        kind = EventType.ACTION_RETRY_SCHEDULED if action.status == ActionStatus.READY else EventType.ACTION_RETRY_EXHAUSTED
        return kind, {"attempt": action.attempt, "max_attempts": action.max_attempts, "error": sub["error"]}
    if outcome == "failed":
        return EventType.ACTION_FAILED, {"error": sub["error"]}
    return EventType.ACTION_COMPLETED, {}


def _linear_followups(item: WorkItem, action: Action, run: Run, sub: dict, outcome: str, now: datetime, guard) -> None:
    if outcome == "waiting":
        common.save_item_state(item, now, status=WorkItemStatus.WAITING, current_action_id=action.pk, guard=guard)
    elif outcome in ("retryable", "failed"):
        status = WorkItemStatus.READY if action.status == ActionStatus.READY else WorkItemStatus.NEEDS_ATTENTION
        common.save_item_state(item, now, status=status, current_action_id=action.pk, guard=guard)
    else:
        next_id = workflows.next_stage_id(item.workflow_snapshot, action.effective_stage_id, action.type,
                                          sub["review_decision"])
        if next_id is None:
            common.save_item_state(item, now, status=WorkItemStatus.DONE, current_action_id=None, guard=guard)
            return
        stage = workflows.find_stage(item.workflow_snapshot, next_id)
        context = list(action.context or []) + [
            common.run_context_entry(run, action, review_decision=sub["review_decision"])]
        new = common.insert_action(item, rules.action_fields(item, stage=stage, context=context), now)
        common.save_item_state(item, now, status=WorkItemStatus.READY, current_action_id=new.pk, guard=guard)


def _graph_followups(item, action, run, sub, new_snapshot, event_type, data, now):
    if event_type != EventType.ACTION_COMPLETED:
        return event_type, data
    entry = common.run_context_entry(run, action, review_decision=sub["review_decision"])
    if action.type == "review" and sub["review_decision"] == "changes_requested":
        target_stage = action.changes_requested_stage_id
        stage = workflows.find_stage(item.workflow_snapshot, target_stage) if target_stage else None
        if stage is None or (stage.get("id") or stage.get("type")) != target_stage:
            raise InvalidState(f"review return stage is missing from the workflow: {target_stage}")
        context = list(action.context or []) + [entry]
        replacement = rules.action_fields(item, stage=stage, context=context)
        graph.graph_reset(item, target_stage, replacement, reason=rules.RESET_REASON_CHANGES, now=now)
        return EventType.REVIEW_CHANGES_REQUESTED, {"target_stage_id": target_stage}
    count = 0
    if new_snapshot is not None:
        context = list(action.context or []) + [entry]
        seq = common.next_sequence(item)
        for stage in new_snapshot.get("stages", []):
            if stage.get("id") == action.effective_stage_id or stage.get("type") == "triage":
                continue
            common.insert_action(item, rules.action_fields(item, stage=stage, context=context), now, sequence=seq)
            seq += 1
            count += 1
    return EventType.ACTION_COMPLETED, {"next_action_count": count, "review_decision": sub["review_decision"]}


def run_interrupt(*, run_id: str, owner_boot_id: str, lease_epoch: int,
                  reason: str = "Work Center watcher stopped", final_progress: dict | None = None,
                  actor: str | None = None, now: datetime | None = None) -> bool:
    """running → interrupted (DOMAIN §9.1), expiry ignored; the action goes back to ready when
    retryable, else failed. False when the fence fails; a live reservation refuses."""
    _check_triple(run_id, owner_boot_id, lease_epoch)
    actor = actor or f"worker:{owner_boot_id}"
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=False)
        if lease is None:
            return False
        interrupt_locked(lease, now, reason=str(reason or "Work Center watcher stopped"),
                         final_progress=final_progress, event_type=EventType.RUN_INTERRUPTED,
                         data_extra={"reason": str(reason or "Work Center watcher stopped")}, actor=actor)
        return True


def interrupt_locked(lease: rules.Lease, now: datetime, *, reason: str, final_progress: dict | None,
                     event_type: str, data_extra: dict, actor: str) -> bool:
    """Steps 2-7 of DOMAIN §9.1 for a run whose fence holds; shared by interrupt and admin release."""
    run, action, item = lease.run, lease.action, lease.item
    if rules.has_live_reservation(action, now):
        raise ReservationActive(extra={"action_id": action.pk})
    retryable = rules.retryable_on_interrupt(action)
    values: dict = {"status": RunStatus.INTERRUPTED, "ended_at": now, "error": reason}
    if isinstance(final_progress, dict):
        values.update(common.apply_progress_fields(final_progress))
        values["progress_revision"] = run.progress_revision + 1
    common.guarded_update(Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING), **values)
    fault_point("after_interrupt_run_update")
    a_status = ActionStatus.READY if retryable else ActionStatus.FAILED
    common.guarded_update(
        Action.objects.filter(pk=action.pk, status=ActionStatus.RUNNING, current_run_id=run.pk),
        status=a_status, current_run_id=None, updated_at=now, claimable=False,
    )
    action.status = a_status
    if item.execution_mode == ExecutionMode.GRAPH:
        graph.graph_refresh(item, now)
    else:
        common.guarded_update(
            WorkItem.objects.filter(pk=item.pk, status=WorkItemStatus.RUNNING, current_action_id=action.pk,
                                    current_run_id=run.pk),
            status=WorkItemStatus.READY if retryable else WorkItemStatus.NEEDS_ATTENTION,
            current_run_id=None, updated_at=now,
        )
        item.status = WorkItemStatus.READY if retryable else WorkItemStatus.NEEDS_ATTENTION
        item.current_run_id = None
    graph.sync_claimable(item)
    event_append(work_item_id=item.pk, type=event_type, data={"retryable": retryable, **data_extra},
                 action_id=action.pk, run_id=run.pk, actor=actor, now=now)
    return retryable
