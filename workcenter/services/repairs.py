"""Admin repairs of stuck work (DOMAIN §11.3): release a run, reset, fail or edit an action.

Each public function is one transaction that locks the work item first, re-checks what it read
with guarded updates, and appends one event carrying the admin's `reason` (required, ≤ 2 000)
with actor `admin:<username>`. A repair that takes an action away from its running run
supersedes the run and bumps the action's lease epoch, so the old worker's renew, progress and
submit are fenced out (DOMAIN §6). Nothing repairs an action whose integration reservation is
live (invariant 12), and nothing touches a done or cancelled item.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import db
from ..db.guards import ACTION_AS_READ, ITEM_AS_READ, ITEM_WITH_CURRENT
from ..errors import InvalidInput, InvalidState, NotFound
from ..event_types import EventType
from ..events import event_append
from ..models import (
    ExecutionMode,
    OPEN_ACTION_STATUSES,
    TERMINAL_ITEM_STATUSES,
    Action,
    ActionStatus,
    Run,
    RunStatus,
    WorkItem,
    WorkItemStatus,
    WorkspaceMode,
)
from ..domain import workflows
from ..domain.normalize import BRIEF_FIELD_MAX, BRIEF_FIELDS, normalize_brief, storable_text
from . import common, graph
from .common import resolve_now, store_transaction
from .runs import interrupt_locked

MAX_REASON = 2_000
MAX_INSTRUCTION = 200_000
MAX_ATTEMPTS_LIMIT = 100
RESETTABLE = (ActionStatus.FAILED, ActionStatus.WAITING, ActionStatus.RUNNING)
EDITABLE = (ActionStatus.READY, ActionStatus.RUNNING, ActionStatus.WAITING, ActionStatus.FAILED)


# --- input checks (before any transaction: bad input writes nothing) ----------------------------

def _clean_reason(reason: Any) -> str:
    text = reason.strip() if isinstance(reason, str) else ""
    if not text:
        raise InvalidInput("reason is required for an admin repair", fields=["reason"])
    if len(text) > MAX_REASON:
        raise InvalidInput(f"reason must be at most {MAX_REASON} characters", fields=["reason"])
    if not storable_text(text):
        raise InvalidInput("reason must not contain NUL (0x00) characters or invalid Unicode", fields=["reason"])
    return text


def _clean_actor(actor: Any) -> str:
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput("actor is required (admin:<username>)", fields=["actor"])
    return actor.strip()


def _clean_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{field} is required", fields=[field])
    return value.strip()


def _clean_instruction(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("instruction must be a non-blank string", fields=["instruction"])
    if len(value) > MAX_INSTRUCTION:
        raise InvalidInput(f"instruction must be at most {MAX_INSTRUCTION} characters", fields=["instruction"])
    if not storable_text(value):
        raise InvalidInput("instruction must not contain NUL (0x00) characters or invalid Unicode",
                           fields=["instruction"])
    return value


def _clean_brief(value: Any) -> dict:
    """A partial brief: known keys only, each a string of at most 2 000 characters."""
    if not isinstance(value, dict):
        raise InvalidInput("brief must be an object with objective, approach and expected_outcome",
                           fields=["brief"])
    unknown = sorted(str(k) for k in value if k not in BRIEF_FIELDS)
    if unknown:
        raise InvalidInput(f"brief has unknown keys: {', '.join(unknown)} (allowed: {', '.join(BRIEF_FIELDS)})",
                           fields=["brief"])
    out = {}
    for key, text in value.items():
        if not isinstance(text, str):
            raise InvalidInput(f"brief.{key} must be a string", fields=["brief"])
        if len(text.strip()) > BRIEF_FIELD_MAX:
            raise InvalidInput(f"brief.{key} must be at most {BRIEF_FIELD_MAX} characters", fields=["brief"])
        if not storable_text(text):
            raise InvalidInput(f"brief.{key} must not contain NUL (0x00) characters or invalid Unicode",
                               fields=["brief"])
        out[key] = text
    return out


def _clean_max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidInput(f"max_attempts must be an integer between 1 and {MAX_ATTEMPTS_LIMIT}",
                           fields=["max_attempts"])
    return value


def _clean_workspace_mode(value: Any) -> str:
    if value not in WorkspaceMode.values:
        raise InvalidInput(f"workspace_mode must be one of {', '.join(WorkspaceMode.values)}",
                           fields=["workspace_mode"])
    return value


# --- shared steps inside the transaction ---------------------------------------------------------

def _lock_action(action_id: str) -> tuple[WorkItem, Action]:
    """Lock the action's item, then the action (the locking order of common.py)."""
    item_id = Action.objects.filter(pk=action_id).values_list("work_item_id", flat=True).first()
    if item_id is None:
        raise NotFound(f"Action not found: {action_id}", extra={"id": action_id})
    item = common.lock_item(item_id)
    action = Action.objects.select_for_update().get(pk=action_id)
    return item, action


def _refuse_terminal(item: WorkItem, what: str) -> None:
    if item.status in TERMINAL_ITEM_STATUSES:
        raise InvalidState(f"Cannot {what} an Action of a WorkItem in {item.status}",
                           extra={"work_item_id": item.pk, "status": item.status})


def _refuse_not_current_linear(item: WorkItem, action: Action, what: str) -> None:
    # Linear items run only their current action: repairing another one would leave two open
    # actions competing for the item's single pointer.
    if item.execution_mode != ExecutionMode.GRAPH and item.current_action_id != action.pk:
        raise InvalidState(f"Cannot {what} Action {action.pk}: it is not the current Action of its linear WorkItem",
                           extra={"current_action_id": item.current_action_id})


def _release_action(item: WorkItem, action: Action, *, status: str, run_error: str, now: datetime,
                    extra: dict | None = None) -> None:
    """Guarded action update to `status`; a running action loses its run (superseded, epoch + 1)."""
    values: dict[str, Any] = {"status": status, "current_run_id": None, "updated_at": now, "claimable": False}
    if action.status == ActionStatus.RUNNING:
        common.supersede_runs(item, [action.pk], RunStatus.SUPERSEDED, run_error, now)
        values["lease_epoch"] = action.lease_epoch + 1
    values.update(extra or {})
    db.update(ACTION_AS_READ.of(action), values)
    for key, value in values.items():
        setattr(action, key, value)


def _refuse_linear_status(item: WorkItem, allowed: tuple[str, ...], what: str) -> None:
    if item.execution_mode != ExecutionMode.GRAPH and item.status not in allowed:
        raise InvalidState(f"Cannot {what} the current Action of a linear WorkItem in {item.status}",
                           extra={"status": item.status})


def _item_after(item: WorkItem, action: Action, now: datetime, *, linear_status: str) -> None:
    """Graph items are refreshed (DOMAIN §7.6); a linear item takes `linear_status` with the action current."""
    if item.execution_mode == ExecutionMode.GRAPH:
        graph.graph_refresh(item, now, guard=ITEM_AS_READ.of(item))
    else:
        common.save_item_state(item, now, status=linear_status, current_action_id=action.pk, current_run_id=None,
                               guard=ITEM_WITH_CURRENT.row(item.pk, item.status, action.pk))
    graph.sync_claimable(item)


def _run_error(actor: str, reason: str) -> str:
    return f"Superseded by admin repair ({actor}): {reason}"


# --- public services ---------------------------------------------------------------------------

def run_release(*, run_id: str, reason: str, actor: str, now: datetime | None = None) -> Run:
    """running → interrupted now, as a worker stop (DOMAIN §9.1) but ignoring expiry; the action
    goes back to ready when retryable, else failed. Fence: the run is still its action's current
    running run. Refused while the action's integration reservation is live. Event `run.released`."""
    run_id = _clean_id(run_id, "run_id")
    reason = _clean_reason(reason)
    actor = _clean_actor(actor)
    with store_transaction():
        now = resolve_now(now)
        item_id = Run.objects.filter(pk=run_id).values_list("work_item_id", flat=True).first()
        if item_id is None:
            raise NotFound(f"Run not found: {run_id}", extra={"id": run_id})
        common.lock_item(item_id)
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status != RunStatus.RUNNING:
            raise InvalidState(f"Run {run_id} is {run.status}, not running: there is nothing to release",
                               extra={"status": run.status})
        # The run's own triple: the fence is that it still owns its action, whoever its worker is.
        lease, why = common.load_lease(run.pk, run.owner_boot_id, run.lease_epoch, now, require_live=False)
        if lease is None:
            raise InvalidState(
                f"Run {run_id} cannot be released ({why}); reset or mark its Action failed instead",
                extra={"run_id": run_id})
        interrupt_locked(lease, now, reason=f"Released by {actor}: {reason}", final_progress=None,
                         event_type=EventType.RUN_RELEASED, data_extra={"reason": reason}, actor=actor)
        return Run.objects.get(pk=run_id)


def action_reset(*, action_id: str, reason: str, actor: str, now: datetime | None = None) -> Action:
    """failed/waiting/running → ready with `attempt = 0`; a running action loses its run (superseded,
    epoch + 1). Graph items are refreshed; a linear item (only its current action) becomes ready.
    Event `action.reset {reason, previous_status}`."""
    return _status_repair(
        action_id=action_id, reason=reason, actor=actor, now=now, verb="reset", terminal_verb="reset",
        past="reset", event_type=EventType.ACTION_RESET,
        allowed=RESETTABLE, refusal="only failed, waiting or running Actions can",
        linear_from=(WorkItemStatus.RUNNING, WorkItemStatus.NEEDS_ATTENTION),
        target=ActionStatus.READY, extra={"attempt": 0}, linear_to=WorkItemStatus.READY)


def action_mark_failed(*, action_id: str, reason: str, actor: str, now: datetime | None = None) -> Action:
    """ready/running/waiting → failed; a running action loses its run (superseded, epoch + 1). Graph
    items are refreshed; a linear item (only its current action) needs attention.
    Event `action.marked_failed {reason, previous_status}`."""
    return _status_repair(
        action_id=action_id, reason=reason, actor=actor, now=now, verb="mark failed", terminal_verb="fail",
        past="marked failed", event_type=EventType.ACTION_MARKED_FAILED,
        allowed=OPEN_ACTION_STATUSES, refusal="only ready, running or waiting Actions can",
        linear_from=(WorkItemStatus.READY, WorkItemStatus.RUNNING),
        target=ActionStatus.FAILED, extra=None, linear_to=WorkItemStatus.NEEDS_ATTENTION)


def _status_repair(*, action_id, reason, actor, now, verb: str, terminal_verb: str, past: str, event_type: str,
                   allowed, refusal: str, linear_from, target: str, extra: dict | None, linear_to: str) -> Action:
    """The shared body of reset and mark-failed: validate, lock item then action, refuse what the
    repair may not touch, take the action from its run (if any), move it to `target`, refresh the
    item, append the event."""
    action_id = _clean_id(action_id, "action_id")
    reason = _clean_reason(reason)
    actor = _clean_actor(actor)
    with store_transaction():
        now = resolve_now(now)
        item, action = _lock_action(action_id)
        _refuse_terminal(item, terminal_verb)
        if action.status not in allowed:
            raise InvalidState(f"Action in {action.status} cannot be {past}: {refusal}", extra={"status": action.status})
        _refuse_not_current_linear(item, action, verb)
        _refuse_linear_status(item, linear_from, verb)
        common.refuse_if_reserved([action], now)
        previous = action.status
        _release_action(item, action, status=target, run_error=_run_error(actor, reason), now=now,
                        **({"extra": extra} if extra else {}))
        _item_after(item, action, now, linear_status=linear_to)
        event_append(work_item_id=item.pk, type=event_type, data={"reason": reason, "previous_status": previous},
                     action_id=action.pk, actor=actor, now=now)
        return action


def action_edit(
    *,
    action_id: str,
    reason: str,
    actor: str,
    instruction: str | None = None,
    brief: dict | None = None,
    max_attempts: int | None = None,
    workspace_mode: str | None = None,
    now: datetime | None = None,
) -> Action:
    """Edit instruction, brief (merged over the current one), max_attempts or workspace_mode of a
    ready/running/waiting/failed action. A running action first loses its run (superseded,
    epoch + 1) and goes back to ready as in `action_reset`. Only fields whose value changes are
    written; no change is an error. Event `action.edited {reason, changed_fields}`."""
    action_id = _clean_id(action_id, "action_id")
    reason = _clean_reason(reason)
    actor = _clean_actor(actor)
    given: dict[str, Any] = {}
    if instruction is not None:
        given["instruction"] = _clean_instruction(instruction)
    if brief is not None:
        given["brief"] = _clean_brief(brief)
    if max_attempts is not None:
        given["max_attempts"] = _clean_max_attempts(max_attempts)
    if workspace_mode is not None:
        given["workspace_mode"] = _clean_workspace_mode(workspace_mode)
    if not given:
        raise InvalidInput("nothing to edit: give instruction, brief, max_attempts or workspace_mode",
                           fields=["instruction", "brief", "max_attempts", "workspace_mode"])
    with store_transaction():
        now = resolve_now(now)
        item, action = _lock_action(action_id)
        _refuse_terminal(item, "edit")
        if action.status not in EDITABLE:
            raise InvalidState(f"Action in {action.status} cannot be edited: only ready, running, waiting or failed "
                               "Actions can", extra={"status": action.status})
        changes: dict[str, Any] = {}
        if "brief" in given:
            current = action.brief if isinstance(action.brief, dict) else workflows.default_brief(action.type)
            merged = normalize_brief({**current, **given["brief"]}, workflows.default_brief(action.type))
            if merged != action.brief:
                changes["brief"] = merged
        for key in ("instruction", "max_attempts", "workspace_mode"):
            if key in given and given[key] != getattr(action, key):
                changes[key] = given[key]
        if not changes:
            raise InvalidInput("no change: the given values equal the Action's current ones",
                               fields=sorted(given))
        running = action.status == ActionStatus.RUNNING
        if running:
            _refuse_not_current_linear(item, action, "edit")
            _refuse_linear_status(item, (WorkItemStatus.RUNNING,), "edit")
        common.refuse_if_reserved([action], now)
        attempt_after = 0 if running else action.attempt
        limit = changes.get("max_attempts", action.max_attempts)
        # Invariant 14: attempt <= max_attempts; a ready action must still have a claim left.
        ready_after = running or action.status == ActionStatus.READY
        if "max_attempts" in changes and (limit < attempt_after or (ready_after and limit <= attempt_after)):
            raise InvalidInput(
                f"max_attempts must be greater than the {attempt_after} attempt(s) already made"
                if ready_after else f"max_attempts must be at least the {attempt_after} attempt(s) already made",
                fields=["max_attempts"])
        if running:
            _release_action(item, action, status=ActionStatus.READY, run_error=_run_error(actor, reason), now=now,
                            extra={"attempt": 0, **changes})
            _item_after(item, action, now, linear_status=WorkItemStatus.READY)
        else:
            db.update(ACTION_AS_READ.of(action), {"updated_at": now, **changes})
            for key, value in {"updated_at": now, **changes}.items():
                setattr(action, key, value)
        changed_fields = [f for f in ("instruction", "brief", "max_attempts", "workspace_mode") if f in changes]
        event_append(work_item_id=item.pk, type=EventType.ACTION_EDITED,
                     data={"reason": reason, "changed_fields": changed_fields}, action_id=action.pk, actor=actor, now=now)
        return action
