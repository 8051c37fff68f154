"""The catalogue of stored event types (DOMAIN §11.1, §11.3) and the payload (`data`) of each.

`EventType` is a `StrEnum`: a member equals the string stored in `Event.type`, so it can be
passed to `event_append(type=...)` and compared with rows already stored. `PAYLOADS` maps every
type to the pydantic model of its `data`; the models forbid unknown keys, so a payload that grows
a field without the catalogue saying so fails `validate_payload`. A field is optional only where
a service legitimately leaves it out (e.g. the linear `work_item.retried {}`); a field the service
always writes but whose value may be null is required and nullable.

This module sits low in the import graph: stdlib, pydantic and the vocabulary (`choices`) only.
"""
from __future__ import annotations

import enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, model_validator

from .choices import ActionStatus, RunStatus, WorkItemStatus


class EventType(enum.StrEnum):
    # DOMAIN §11.1
    WORK_ITEM_CREATED = "work_item.created"
    WORK_ITEM_STARTED = "work_item.started"
    WORK_ITEM_UPDATED = "work_item.updated"
    WORKFLOW_RETRIAGED = "workflow.retriaged"
    WORK_ITEM_CANCELLED = "work_item.cancelled"
    ACTION_GUIDANCE_ADDED = "action.guidance_added"
    WORK_ITEM_RETRIED = "work_item.retried"
    RUN_CLAIMED = "run.claimed"
    ACTION_WAITING = "action.waiting"
    ACTION_RETRY_SCHEDULED = "action.retry_scheduled"
    ACTION_RETRY_EXHAUSTED = "action.retry_exhausted"
    ACTION_FAILED = "action.failed"
    ACTION_COMPLETED = "action.completed"
    WORK_ITEM_COMPLETED = "work_item.completed"
    REVIEW_CHANGES_REQUESTED = "review.changes_requested"
    RUN_INTERRUPTED = "run.interrupted"
    RUN_STALE_RECOVERED = "run.stale_recovered"
    # DOMAIN §11.3: admin repairs
    RUN_RELEASED = "run.released"
    ACTION_RESET = "action.reset"
    ACTION_MARKED_FAILED = "action.marked_failed"
    ACTION_EDITED = "action.edited"


class Payload(BaseModel):
    """Base of every payload model: unknown keys and loose types (a "1" for an int) are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


ReviewDecision = Optional[Literal["approved", "changes_requested"]]
# the statuses an admin repair can start from (DOMAIN §11.3)
ResettableStatus = Literal[ActionStatus.FAILED.value, ActionStatus.WAITING.value, ActionStatus.RUNNING.value]
FailableStatus = Literal[ActionStatus.READY.value, ActionStatus.RUNNING.value, ActionStatus.WAITING.value]
EditableField = Literal["instruction", "brief", "max_attempts", "workspace_mode"]
ContractField = Literal["title", "goal", "acceptance_criteria", "work_dir"]


class Empty(Payload):
    """`{}`: the event's refs say everything."""


class WorkItemCreated(Payload):
    status: Literal[WorkItemStatus.DRAFT.value, WorkItemStatus.READY.value]


class RevisionChange(Payload):
    """`work_item.updated` and `workflow.retriaged`: the item's revision after the change."""

    revision: int
    changed_fields: list[ContractField]


class GuidanceAdded(Payload):
    guidance: str  # the text, or the attachment summary when only attachments were given


class WorkItemRetried(Payload):
    target_stage_id: str | None = None  # graph only; a linear retry writes `{}`
    reason: str | None = None  # a bulk retry's reason (services/bulk.py); a single retry writes none


class WorkItemCancelled(Payload):
    reason: str | None = None  # a bulk cancel's reason (services/bulk.py); a single cancel writes `{}`


class RunClaimed(Payload):
    owner_boot_id: str
    lease_epoch: int


class ActionWaiting(Payload):
    reason: str | None


class RetryOutcome(Payload):
    """`action.retry_scheduled` (attempts left) and `action.retry_exhausted` (none left)."""

    attempt: int
    max_attempts: int
    error: str | None


class ActionFailed(Payload):
    error: str | None


class ActionCompleted(Payload):
    """Linear: `{next_action_type, review_decision}`; graph: `{next_action_count, review_decision}`."""

    next_action_type: str | None = None
    next_action_count: int | None = None
    review_decision: ReviewDecision

    @model_validator(mode="after")
    def _one_shape(self) -> "ActionCompleted":
        shapes = {"next_action_type", "next_action_count"} & self.model_fields_set
        if len(shapes) != 1:
            raise ValueError("action.completed carries exactly one of next_action_type (linear) "
                             "and next_action_count (graph)")
        if "next_action_count" in shapes and self.next_action_count is None:
            raise ValueError("next_action_count is a number")
        return self


class WorkItemCompleted(Payload):
    summary: str


class ChangesRequested(Payload):
    target_stage_id: str


class RunInterrupted(Payload):
    retryable: bool
    reason: str | None = None  # a worker's interrupt says why; recovery writes `{retryable}` only


class RunStaleRecovered(Payload):
    status: Literal[RunStatus.SUPERSEDED.value, RunStatus.CANCELLED.value]


class RunReleased(Payload):
    reason: str
    retryable: bool


class ActionResetPayload(Payload):
    reason: str
    previous_status: ResettableStatus


class ActionMarkedFailed(Payload):
    reason: str
    previous_status: FailableStatus


class ActionEdited(Payload):
    reason: str
    changed_fields: list[EditableField]


PAYLOADS: dict[EventType, type[BaseModel]] = {
    EventType.WORK_ITEM_CREATED: WorkItemCreated,
    EventType.WORK_ITEM_STARTED: Empty,
    EventType.WORK_ITEM_UPDATED: RevisionChange,
    EventType.WORKFLOW_RETRIAGED: RevisionChange,
    EventType.WORK_ITEM_CANCELLED: WorkItemCancelled,
    EventType.ACTION_GUIDANCE_ADDED: GuidanceAdded,
    EventType.WORK_ITEM_RETRIED: WorkItemRetried,
    EventType.RUN_CLAIMED: RunClaimed,
    EventType.ACTION_WAITING: ActionWaiting,
    EventType.ACTION_RETRY_SCHEDULED: RetryOutcome,
    EventType.ACTION_RETRY_EXHAUSTED: RetryOutcome,
    EventType.ACTION_FAILED: ActionFailed,
    EventType.ACTION_COMPLETED: ActionCompleted,
    EventType.WORK_ITEM_COMPLETED: WorkItemCompleted,
    EventType.REVIEW_CHANGES_REQUESTED: ChangesRequested,
    EventType.RUN_INTERRUPTED: RunInterrupted,
    EventType.RUN_STALE_RECOVERED: RunStaleRecovered,
    EventType.RUN_RELEASED: RunReleased,
    EventType.ACTION_RESET: ActionResetPayload,
    EventType.ACTION_MARKED_FAILED: ActionMarkedFailed,
    EventType.ACTION_EDITED: ActionEdited,
}


# The references each type carries (DOMAIN §11.1 "Refs"): (action_id, run_id), each True (always
# set), False (always null) or None (either).
_A, _AR, _NONE = (True, False), (True, True), (False, False)
REFS: dict[EventType, tuple[bool | None, bool | None]] = {
    EventType.WORK_ITEM_CREATED: (None, False),  # the initial action when created started
    EventType.WORK_ITEM_STARTED: _A,
    EventType.WORK_ITEM_UPDATED: _NONE,
    EventType.WORKFLOW_RETRIAGED: _A,
    EventType.WORK_ITEM_CANCELLED: _NONE,
    EventType.ACTION_GUIDANCE_ADDED: _A,
    EventType.WORK_ITEM_RETRIED: _A,
    EventType.RUN_CLAIMED: _AR,
    EventType.ACTION_WAITING: _AR,
    EventType.ACTION_RETRY_SCHEDULED: _AR,
    EventType.ACTION_RETRY_EXHAUSTED: _AR,
    EventType.ACTION_FAILED: _AR,
    EventType.ACTION_COMPLETED: _AR,
    EventType.WORK_ITEM_COMPLETED: _AR,
    EventType.REVIEW_CHANGES_REQUESTED: _AR,
    EventType.RUN_INTERRUPTED: _AR,
    EventType.RUN_STALE_RECOVERED: _AR,
    EventType.RUN_RELEASED: _AR,
    EventType.ACTION_RESET: _A,
    EventType.ACTION_MARKED_FAILED: _A,
    EventType.ACTION_EDITED: _A,
}


def payload_fields() -> set[str]:
    """Every key some event's `data` may carry."""
    return {name for model in PAYLOADS.values() for name in model.model_fields}


def validate_payload(type: str, data: Any) -> BaseModel:
    """The payload model of `data` for an event of `type`.

    ValueError for a type the catalogue does not know; pydantic's ValidationError (a ValueError)
    for a payload that misses a required key, has an unknown one or a value of the wrong type."""
    try:
        event_type = EventType(type)
    except ValueError:
        raise ValueError(f"unknown event type: {type!r}") from None
    return PAYLOADS[event_type].model_validate(data)
