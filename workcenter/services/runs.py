"""Worker calls on a run (DOMAIN §6, §7, §9.1): renew, progress, snapshots, submit, interrupt.

Every call proves ownership with (run_id, owner_boot_id, lease_epoch); a failed fence changes
nothing. Submit raises StaleRun (or, when its own fence's submission was applied already,
answers as applied); the others return None/False.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F

from ..errors import InvalidInput, InvalidState, PlanError, ReservationActive, StaleRun
from ..event_types import EventType
from ..events import event_append, publish_progress_on_commit
from ..models import Action, ActionStatus, ActionType, ExecutionMode, Run, RunStatus, WorkItem, WorkItemStatus
from .. import db
from ..db.guards import (ACTION_OF_LEASE, ITEM_HELD, ITEM_LIVE, ITEM_OF_LEASE, RUN_OF_LEASE, RUN_WITHOUT_SNAPSHOTS,
                         Fence)
from ..domain import normalize, planning, rules, workflows
from . import common, graph
from .claims import Claim
from .common import resolve_now, store_transaction
from .hooks import fault_point

SNAPSHOT_FIELDS = ("role_snapshot", "vp_snapshot", "model_snapshot", "tool_policy_snapshot")


def check_triple(run_id: Any, owner_boot_id: Any, lease_epoch: Any) -> None:
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
    check_triple(run_id, owner_boot_id, lease_epoch)
    common.check_duration(lease_ms, "lease_ms")
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return None
        expires = common.lease_expiry(now, lease_ms)
        if not db.update_if(RUN_OF_LEASE.row(run_id, owner_boot_id, lease_epoch),
                            {"expires_at": expires, "renewed_at": now}):
            return None
        lease.run.expires_at, lease.run.renewed_at = expires, now
        return lease.run


def run_progress(*, run_id: str, owner_boot_id: str, lease_epoch: int, progress: dict,
                 now: datetime | None = None) -> Run | None:
    """Overwrite response, counters and checkpoint; progress_revision + 1. None when fenced out."""
    check_triple(run_id, owner_boot_id, lease_epoch)
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
        if not db.update_if(RUN_OF_LEASE.row(run.pk, owner_boot_id, lease_epoch), values):
            return None
        for k, v in values.items():
            setattr(run, k, v)
        publish_progress_on_commit(run)
        return run


def run_set_snapshots(*, run_id: str, owner_boot_id: str, lease_epoch: int, snapshots: dict,
                      now: datetime | None = None) -> bool:
    """Write the four execution snapshots once, while all are still null."""
    check_triple(run_id, owner_boot_id, lease_epoch)
    with store_transaction():
        now = resolve_now(now)
        lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return False
        values = {f: (snapshots or {}).get(f) if isinstance((snapshots or {}).get(f), dict) else None for f in SNAPSHOT_FIELDS}
        return db.update_if(RUN_WITHOUT_SNAPSHOTS.row(run_id), values)


def _retry_state(action: Action) -> bool:
    return action.attempt < action.max_attempts


def run_submit(*, run_id: str, owner_boot_id: str, lease_epoch: int, result: dict,
               actor: str | None = None, now: datetime | None = None) -> tuple[Run, Action, WorkItem]:
    """Terminal submission (DOMAIN §7): run → outcome, action and item transition, follow-up
    actions and one event, atomically. A failed fence raises StaleRun and changes nothing.

    Idempotent: when the fence fails because a submission with this same fence already finished
    the run (the worker lost the answer and sends it again), the run, its action and its item are
    returned as they are now, as if applied, and nothing is written (no event). What the stored
    run says wins: a resubmission with another outcome gets the applied one back. A run ended
    by recovery, an interrupt or a cancel (interrupted, superseded, cancelled) stays StaleRun.

    In steps, each handing the next what it needs: the fence (§7.1), the outcome recorded on
    the run (§7.2), the contract patch and planned snapshot (§7.4-§7.5), the action's new status
    (§7.3), then the graph or linear advance (§7.6-§7.7) and the event. Every write is a guarded
    write of one `db.Writes` batch (one statement per batch on PostgreSQL)."""
    check_triple(run_id, owner_boot_id, lease_epoch)
    if not isinstance(result, dict):
        raise InvalidInput("result must be an object", fields=["result"])
    actor = actor or f"worker:{owner_boot_id}"
    with store_transaction(), db.hot_cursor() as cur:
        now = resolve_now(now)
        try:
            lease, sub, new_snapshot = _fenced_submission(cur, run_id, owner_boot_id, lease_epoch, result, now)
        except _Applied as applied:  # this fence's submission committed before: nothing is written
            return AppliedSubmission(applied.rows)
        run, action, item = lease.run, lease.action, lease.item
        mode_before = item.execution_mode
        w = db.Writes(cur)
        _record_outcome(w, run, sub, now)
        _apply_contract(w, item, action, sub, new_snapshot)
        a_status = _finish_action(w, action, run, sub["outcome"], item.execution_mode, now)
        guard = _item_guard(mode_before, item, action, run)
        if item.execution_mode == ExecutionMode.GRAPH:
            event_type, data = _advance_graph(w, cur, lease, sub, new_snapshot, a_status, guard, now)
        else:
            event_type, data = _advance_linear(w, lease, sub, guard, now)
        fault_point("before_event")
        event_append(work_item_id=item.pk, type=event_type, data=data, action_id=action.pk, run_id=run.pk,
                     actor=actor, now=now, writes=w)
        w.flush()
        return run, action, item


class AppliedSubmission(tuple):
    """What `run_submit` returns for a submission applied before with the same fence: (run, action,
    item) as they are now; a fresh submission returns a plain tuple."""


def run_unseen_claim(*, run: Run, owner_boot_id: str) -> Claim | None:
    """The claim a submission's `claim_next` most likely made for `owner_boot_id` although its
    answer was lost with the submission's: the earliest run of that owner started since `run`
    ended, still running and never renewed (its worker has not seen it). None when there is
    none. The worker ignores a claim it holds already, so a wrong guess is harmless."""
    following = (Run.objects.filter(owner_boot_id=owner_boot_id, status=RunStatus.RUNNING,
                                    started_at__gte=run.ended_at, renewed_at=F("started_at"))
                 .select_related("action", "work_item").order_by("started_at", "pk").first())
    if following is None:
        return None
    return Claim(work_item=following.work_item, action=following.action, run=following)


class _Applied(Exception):
    """The fence failed because this very fence's submission already finished the run (its answer
    was lost, the worker sends it again): the run, its action and its item as they are now."""

    def __init__(self, run: Run, action: Action, item: WorkItem):
        super().__init__(run.pk)
        self.rows = (run, action, item)


def _fenced_submission(cur, run_id: str, owner_boot_id: str, lease_epoch: int, result: dict, now: datetime):
    """Run, action and item in one read (the item locked first), the normalised submission and
    the fence (§7.1); a completed AI triage's plan as the item's new snapshot (a plan the store
    refuses turns the outcome into failed). Returns (lease, submission, new snapshot | None)."""
    run, action, item = common.lease_rows(run_id, cur)
    if run is None:
        raise StaleRun(rules.stale_reason(None, None, None, now, True), extra={"run_id": run_id})
    sub = normalize.normalize_submission(result, action_type=action.type, criteria=list(item.acceptance_criteria or []))
    lease, reason = rules.lease_check(run, action, item, owner_boot_id, lease_epoch, now, require_live=True)
    if lease is None:
        if run.status in normalize.OUTCOMES and run.owner_boot_id == owner_boot_id and run.lease_epoch == lease_epoch:
            raise _Applied(run, action, item)
        raise StaleRun(reason, extra={"run_id": run_id})
    new_snapshot = None
    snapshot = item.workflow_snapshot or {}
    if sub["outcome"] == RunStatus.COMPLETED and action.type == ActionType.TRIAGE and snapshot.get("planning_mode") == "ai":
        try:
            new_snapshot = planning.apply_triage_plan(snapshot, sub["plan"])
        except PlanError as exc:
            sub["outcome"], sub["error"] = RunStatus.FAILED, str(exc)
    return lease, sub, new_snapshot


def _record_outcome(w: db.Writes, run: Run, sub: dict, now: datetime) -> None:
    """The run records the final outcome and every submitted field, overwritten (§7.2)."""
    values = {
        "status": sub["outcome"], "ended_at": now, "response": sub["response"], "summary": sub["summary"],
        "evidence": sub["evidence"], "waiting_reason": sub["waiting_reason"], "error": sub["error"],
        "review_decision": sub["review_decision"], "contract_patch": sub["contract_patch"],
        "checkpoint": sub["checkpoint"], "acceptance_checks": sub["acceptance_checks"],
        "progress_revision": run.progress_revision + 1,
    }
    values.update({f: sub[f] for f in normalize.COUNTER_FIELDS})
    w.update(RUN_OF_LEASE.row(run.pk, run.owner_boot_id, run.lease_epoch), values)
    for k, v in values.items():
        setattr(run, k, v)


def _apply_contract(w: db.Writes, item: WorkItem, action: Action, sub: dict, new_snapshot: dict | None) -> None:
    """A completed triage's contract patch (a new revision) and planned snapshot (§7.4-§7.5)."""
    values: dict = {}
    patch = sub["contract_patch"] if (sub["outcome"] == RunStatus.COMPLETED and action.type == ActionType.TRIAGE) else None
    if patch:
        for name in ("goal", "acceptance_criteria"):
            if name in patch:
                values[name] = patch[name]
        values["revision"] = item.revision + 1
    if new_snapshot is not None:
        values["workflow_snapshot"] = new_snapshot
        values["workflow_template"] = new_snapshot.get("id") or item.workflow_template
    if values:
        # the item is locked and its later write (status) goes in another batch: no row twice in one
        w.update(ITEM_HELD.row(item.pk), values)
        w.flush()
        for k, v in values.items():
            setattr(item, k, v)


def _finish_action(w: db.Writes, action: Action, run: Run, outcome: str, mode: str, now: datetime) -> str:
    """The action's new status (§7.3), written guarded on its running run; returns it."""
    if outcome == RunStatus.COMPLETED:
        status = ActionStatus.COMPLETED
    elif outcome == RunStatus.WAITING:
        status = ActionStatus.WAITING if mode == ExecutionMode.GRAPH else ActionStatus.COMPLETED
    elif outcome == RunStatus.RETRYABLE:
        status = ActionStatus.READY if _retry_state(action) else ActionStatus.FAILED
    else:
        status = ActionStatus.FAILED
    w.update(ACTION_OF_LEASE.row(action.pk, run.pk, run.lease_epoch),
             {"status": status, "current_run_id": None, "updated_at": now, "claimable": False})
    action.status, action.current_run_id, action.updated_at, action.claimable = status, None, now, False
    return status


def _item_guard(mode_before: str, item: WorkItem, action: Action, run: Run) -> Fence:
    """The item's guard: it follows the mode the run ran under [DEV-6]."""
    if mode_before == ExecutionMode.GRAPH:
        return ITEM_LIVE.row(item.pk)
    return ITEM_OF_LEASE.row(item.pk, action.pk, run.pk)


def _advance_graph(w: db.Writes, cur, lease: rules.Lease, sub: dict, new_snapshot: dict | None, a_status: str,
                   guard: Fence, now: datetime) -> tuple[str, dict]:
    """Graph follow-ups (new planned actions or a review's reset) and graph refresh with the
    claimable flags (§7.6); returns the event."""
    run, action, item = lease.run, lease.action, lease.item
    event_type, data = _event_for(sub["outcome"], action, run, sub, ExecutionMode.GRAPH)
    followups = event_type == EventType.ACTION_COMPLETED and (
        new_snapshot is not None
        or (action.type == ActionType.REVIEW and sub["review_decision"] == "changes_requested"))
    if followups:  # new actions (a plan) or a reset (changes requested) first
        w.flush()
        fault_point("after_run_update")
        event_type, data = _graph_followups(item, action, run, sub, new_snapshot, event_type, data, now)
        actions = graph.graph_actions(cur, item.pk)
    else:
        # the common case: the batch also reads the item's actions (on PostgreSQL as they were
        # before it, so the submitted one is patched); the item, flag and event writes go as a
        # second batch
        actions = graph.flush_reading_graph(w, item.pk)
        fault_point("after_run_update")
        for a in actions:
            if a.pk == action.pk:
                a.status, a.current_run_id, a.claimable = a_status, None, False
        event_type, data = _graph_followups(item, action, run, sub, new_snapshot, event_type, data, now)
    graph.graph_refresh_locked(w, item, actions, now, guard=guard)
    return event_type, data


def _advance_linear(w: db.Writes, lease: rules.Lease, sub: dict, guard: Fence, now: datetime) -> tuple[str, dict]:
    """The linear next step (§7.7): the item's status and current action, a new action for the
    next stage, the claimable flags; returns the event."""
    run, action, item = lease.run, lease.action, lease.item
    outcome = sub["outcome"]
    w.flush()
    fault_point("after_run_update")
    event_type, data = _event_for(outcome, action, run, sub, ExecutionMode.LINEAR)
    status, current = _linear_next(item, action, run, sub, now)
    values = {"status": status, "current_action_id": current, "current_run_id": None, "updated_at": now}
    w.update(guard, values)
    for k, v in values.items():
        setattr(item, k, v)
    if outcome == RunStatus.COMPLETED and status == WorkItemStatus.DONE:
        event_type, data = EventType.WORK_ITEM_COMPLETED, {"summary": sub["summary"]}
    elif outcome == RunStatus.COMPLETED:
        nxt = Action.objects.filter(pk=current).values_list("type", flat=True).first()
        data = {"next_action_type": nxt, "review_decision": sub["review_decision"]}
    graph.sync_claimable(item, writes=w)
    return event_type, data


def _event_for(outcome: str, action: Action, run: Run, sub: dict, mode: str) -> tuple[str, dict]:
    if outcome == RunStatus.WAITING:
        return EventType.ACTION_WAITING, {"reason": sub["waiting_reason"]}
    if outcome == RunStatus.RETRYABLE:
        kind = EventType.ACTION_RETRY_SCHEDULED if action.status == ActionStatus.READY else EventType.ACTION_RETRY_EXHAUSTED
        return kind, {"attempt": action.attempt, "max_attempts": action.max_attempts, "error": sub["error"]}
    if outcome == RunStatus.FAILED:
        return EventType.ACTION_FAILED, {"error": sub["error"]}
    return EventType.ACTION_COMPLETED, {}


def _linear_next(item: WorkItem, action: Action, run: Run, sub: dict, now: datetime) -> tuple[str, str | None]:
    """The item's next (status, current action id) after a linear submission; a completed
    stage with a next stage inserts that stage's action."""
    outcome = sub["outcome"]
    if outcome == RunStatus.WAITING:
        return WorkItemStatus.WAITING, action.pk
    if outcome in (RunStatus.RETRYABLE, RunStatus.FAILED):
        return (WorkItemStatus.READY if action.status == ActionStatus.READY else WorkItemStatus.NEEDS_ATTENTION), action.pk
    next_id = workflows.next_stage_id(item.workflow_snapshot, action.effective_stage_id, action.type,
                                      sub["review_decision"])
    if next_id is None:
        return WorkItemStatus.DONE, None
    stage = workflows.find_stage(item.workflow_snapshot, next_id)
    context = list(action.context or []) + [
        common.run_context_entry(run, action, review_decision=sub["review_decision"])]
    new = common.insert_action(item, rules.action_fields(item, stage=stage, context=context), now)
    return WorkItemStatus.READY, new.pk


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
    check_triple(run_id, owner_boot_id, lease_epoch)
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
    db.update(RUN_OF_LEASE.row(run.pk, run.owner_boot_id, run.lease_epoch), values)
    fault_point("after_interrupt_run_update")
    a_status = ActionStatus.READY if retryable else ActionStatus.FAILED
    db.update(ACTION_OF_LEASE.row(action.pk, run.pk, run.lease_epoch),
              {"status": a_status, "current_run_id": None, "updated_at": now, "claimable": False})
    action.status = a_status
    if item.execution_mode == ExecutionMode.GRAPH:
        graph.graph_refresh(item, now)
    else:
        db.update(ITEM_OF_LEASE.row(item.pk, action.pk, run.pk),
                  {"status": WorkItemStatus.READY if retryable else WorkItemStatus.NEEDS_ATTENTION,
                   "current_run_id": None, "updated_at": now})
        item.status = WorkItemStatus.READY if retryable else WorkItemStatus.NEEDS_ATTENTION
        item.current_run_id = None
    graph.sync_claimable(item)
    event_append(work_item_id=item.pk, type=event_type, data={"retryable": retryable, **data_extra},
                 action_id=action.pk, run_id=run.pk, actor=actor, now=now)
    return retryable
