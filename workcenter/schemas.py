"""Request and response shapes of the HTTP API (API.md §2-§3): `XxxIn` parse, `XxxOut` render.

Input schemas check types and ranges only; the domain rules (blank title, workDir, outcomes,
waiting reasons, …) stay in the services so every caller gets the same answers. Fields whose
value the domain normalises instead of refusing (the submission's evidence, plan, counters, …)
are typed `Any` on purpose: DOMAIN §7.2 turns bad values into defaults or failed runs, not 422s.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Optional

from ninja import Field, Schema
from pydantic import PlainSerializer, WithJsonSchema, field_validator

from .models import COUNTER_FIELDS


def iso_ms(value: datetime | None) -> str | None:
    """ISO 8601, UTC, millisecond precision, `Z` (API.md §0)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    elif value.utcoffset():
        value = value.astimezone(timezone.utc)
    # isoformat is C code (strftime and an f-string cost 3x more per call); the offset is +00:00
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"


Timestamp = Annotated[
    datetime,
    PlainSerializer(iso_ms, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time", "example": "2026-12-02T12:00:00.123Z"}),
]

# Integers that reach the database or a datetime stay inside what both can hold: a huge epoch,
# revision, event id or duration is refused with 422 instead of overflowing into a 500.
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
Int32 = Annotated[int, Field(ge=0, le=MAX_INT32)]
DurationMs = Annotated[int, Field(gt=0, le=MAX_INT32, description="milliseconds (at most 2^31-1, ~24.8 days)")]

WorkItemStatusName = Literal["draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"]


def _snapshot(obj: Any) -> dict:
    snap = getattr(obj, "workflow_snapshot", None)
    return snap if isinstance(snap, dict) else {}


def _zero_stats() -> dict:
    return {f: 0 for f in COUNTER_FIELDS}


# --- errors --------------------------------------------------------------------------------------

class ErrorOut(Schema):
    code: str = Field(..., description="bad_request, not_authenticated, permission_denied, not_found, "
                                       "stale_run, invalid_state, revision_conflict, reservation_active, "
                                       "invalid_input")
    message: str
    extra: dict[str, Any] = Field(default_factory=dict)


# --- output --------------------------------------------------------------------------------------

class ExecutionStatsOut(Schema):
    llm_request_count: int = 0
    loop_count: int = 0
    tool_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0


class EventOut(Schema):
    id: int
    type: str
    work_item_id: str
    action_id: Optional[str] = None
    run_id: Optional[str] = None
    actor: str
    data: dict[str, Any]
    created_at: Timestamp


class RunOut(Schema):
    id: str
    action_id: str
    work_item_id: str
    owner_boot_id: str
    lease_epoch: int
    status: str
    started_at: Timestamp
    expires_at: Timestamp
    ended_at: Optional[Timestamp] = None
    role_snapshot: Optional[dict[str, Any]] = None
    vp_snapshot: Optional[dict[str, Any]] = None
    model_snapshot: Optional[dict[str, Any]] = None
    tool_policy_snapshot: Optional[dict[str, Any]] = None
    response: str
    summary: str
    evidence: list[Any]
    waiting_reason: Optional[str] = None
    error: Optional[str] = None
    review_decision: Optional[str] = None
    contract_patch: Optional[dict[str, Any]] = None
    acceptance_checks: list[Any]
    loop_count: int
    tool_count: int
    llm_request_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    progress_revision: int
    checkpoint: Optional[dict[str, Any]] = None


class ActionOut(Schema):
    id: str
    work_item_id: str
    sequence: int
    type: str
    stage_id: str = Field(..., description="the stage this action executes (its type when not set)")
    assignment_policy: Optional[dict[str, Any]] = None
    model_policy: Optional[dict[str, Any]] = None
    depends_on_stage_ids: list[str]
    workspace_mode: str
    changes_requested_stage_id: Optional[str] = None
    workspace: Optional[dict[str, Any]] = None
    required_role: str
    instruction: str
    brief: Optional[dict[str, Any]] = None
    context: list[Any]
    contract_revision: int
    status: str
    attempt: int
    max_attempts: int
    current_run_id: Optional[str] = None
    lease_epoch: int
    created_at: Timestamp
    updated_at: Timestamp
    execution_stats: ExecutionStatsOut = Field(..., description="sum over all runs of this action")

    @staticmethod
    def resolve_stage_id(obj) -> str:
        return obj.stage_id or obj.type

    @staticmethod
    def resolve_execution_stats(obj) -> dict:
        return getattr(obj, "execution_stats", None) or _zero_stats()


class CurrentActionOut(Schema):
    id: str
    type: str
    stage_id: str
    status: str


class _WorkItemHead(Schema):
    id: str
    revision: int
    title: str
    goal: str
    status: str
    workflow_template: str
    work_item_type: Optional[str] = None
    planning_mode: str
    execution_mode: str
    execution_stats: ExecutionStatsOut
    created_at: Timestamp
    updated_at: Timestamp

    @staticmethod
    def resolve_work_item_type(obj) -> Optional[str]:
        return _snapshot(obj).get("work_item_type") or None

    @staticmethod
    def resolve_planning_mode(obj) -> str:
        return "ai" if _snapshot(obj).get("planning_mode") == "ai" else "static"

    @staticmethod
    def resolve_execution_mode(obj) -> str:
        return "graph" if _snapshot(obj).get("execution_mode") == "graph" else "linear"

    @staticmethod
    def resolve_execution_stats(obj) -> dict:
        return getattr(obj, "execution_stats", None) or _zero_stats()


class WorkItemSummaryOut(_WorkItemHead):
    current_action: Optional[CurrentActionOut] = None
    action_counts: dict[str, int]
    work_dir: str = ""
    workspace_key: str = ""


class WorkItemListOut(Schema):
    items: list[WorkItemSummaryOut]
    count: int


class WorkItemDetailOut(_WorkItemHead):
    acceptance_criteria: list[str]
    workflow_snapshot: Optional[dict[str, Any]] = None
    current_action_id: Optional[str] = None
    current_run_id: Optional[str] = None
    work_dir: str
    workspace_key: str
    reuse_memory: bool
    origin: Optional[dict[str, Any]] = None
    linked_session_ids: list[str]
    session_context: list[Any]
    attachments: list[Any]
    actions: list[ActionOut] = Field(..., description="all actions, by sequence")
    runs: list[RunOut] = Field(..., description="all runs, newest started_at first")
    events: list[EventOut] = Field(..., description="the newest 500 events, highest id first")


class DetailView:
    """Adapts `selectors.work_item_detail` to WorkItemDetailOut: the item's fields plus the lists
    (the item's own `actions`/`runs`/`events` attributes are unordered related managers)."""

    def __init__(self, detail: dict):
        self._item = detail["item"]
        self.actions = detail["actions"]
        self.runs = detail["runs"]
        self.events = detail["events"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._item, name)

    def action(self, action_id: str):
        return next(a for a in self.actions if a.pk == action_id)


class DependencyOut(Schema):
    action_id: str
    stage_id: str
    type: str
    status: str
    summary: str
    evidence: list[Any]
    vp_id: Optional[str] = None


class ClaimOut(Schema):
    work_item: WorkItemDetailOut
    action: ActionOut
    run: RunOut
    dependencies: list[DependencyOut]


class RetryPreviewOut(Schema):
    target_action_id: Optional[str] = None
    target_stage_id: Optional[str] = None
    mode: Literal["linear", "graph"]
    reset_action_ids: list[str]
    superseded_run_ids: list[str]
    new_action: bool


class LeaseOut(Schema):
    run_id: str
    owner_boot_id: str
    lease_epoch: int
    expires_at: Timestamp


class GraphNodeOut(Schema):
    id: str
    stage_id: str
    type: str
    name: str
    status: str
    attempt: int
    max_attempts: int
    workspace_mode: str
    sequence: int
    lease: Optional[LeaseOut] = None
    blocked_by: list[str]


class GraphEdgeOut(Schema):
    source: str
    target: str
    source_action_id: str
    target_action_id: str


class GraphOut(Schema):
    work_item_id: str
    execution_mode: str
    status: str
    nodes: list[GraphNodeOut]
    edges: list[GraphEdgeOut]
    last_event_id: int


class EventPageOut(Schema):
    events: list[EventOut]
    last_id: int


class RenewOut(Schema):
    expires_at: Timestamp


class RunResultOut(Schema):
    run: RunOut


class SubmitOut(Schema):
    run: RunOut
    action: ActionOut
    work_item: WorkItemDetailOut


class InterruptOut(Schema):
    interrupted: bool


class RecoveryOut(Schema):
    recovered: int


class ActionResultOut(Schema):
    action: ActionOut


class ReservationOut(Schema):
    token: str
    expires_at: Timestamp
    action: ActionOut


# --- input ---------------------------------------------------------------------------------------

class WorkDirInput(Schema):
    """Inputs carrying `work_dir`: anything but text is refused before the service resolves it."""

    @field_validator("work_dir", mode="before", check_fields=False)
    @classmethod
    def _work_dir_is_text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValueError("workDir must be a string naming an existing directory")
        return value


class CreateWorkItemIn(WorkDirInput):
    title: str
    goal: str
    acceptance_criteria: list[str] = Field(default_factory=list)
    work_dir: Optional[str] = Field(None, description="an existing directory on the server host; absent ⇒ "
                                                      "WORKCENTER_DEFAULT_WORK_DIR")
    start: bool = True
    work_item_type: Optional[str] = None
    reuse_memory: bool = True
    origin: Optional[dict[str, Any]] = None
    linked_session_ids: Optional[list[str]] = None
    id: Optional[str] = Field(None, description="caller-chosen id; a duplicate is 409 invalid_state")
    workflow: Optional[dict[str, Any]] = Field(None, description="explicit workflow definition, honoured only "
                                                                 "with workcenter.define_workflows")


class UpdateWorkItemIn(WorkDirInput):
    title: Optional[str] = None
    goal: Optional[str] = None
    acceptance_criteria: Optional[list[str]] = None
    work_dir: Optional[str] = None
    expected_revision: Optional[Int32] = Field(None, description="refuse with 409 revision_conflict when the "
                                                               "item's revision differs")


class RetryIn(Schema):
    answer: Optional[str] = Field(None, description="required when the item is waiting")


class GuidanceIn(Schema):
    action_id: str
    revision: Int32
    guidance: str


class WorkItemListQuery(Schema):
    status: Optional[WorkItemStatusName] = None
    search: Optional[str] = None
    session_id: Optional[str] = None
    limit: int = Field(100, ge=1, le=500)


class EventsQuery(Schema):
    after_id: int = Field(0, ge=0, le=MAX_INT64)
    limit: int = Field(200, ge=1, le=1000)


class _Fence(Schema):
    owner_boot_id: str = Field(..., min_length=1)
    lease_epoch: Int32


class ClaimIn(Schema):
    owner_boot_id: str = Field(..., min_length=1)
    lease_ms: DurationMs = 60_000


class RenewIn(_Fence):
    lease_ms: DurationMs = 60_000


_COUNTER_DOC = "execution counter; non-numeric or negative values are stored as 0"


def _counter_too_large(value: Any) -> bool:
    """Would DOMAIN §12.1 normalisation keep a number the 64-bit counter columns cannot store?"""
    if value is None or isinstance(value, bool):
        return False
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return False
    return isinstance(number, (int, float)) and math.isfinite(number) and number > MAX_INT64


def _check_counters(values: Any) -> Any:
    if isinstance(values, dict):
        counters = {f.replace("_", "") for f in COUNTER_FIELDS}
        for key, value in values.items():
            if isinstance(key, str) and key.replace("_", "").lower() in counters and _counter_too_large(value):
                raise ValueError(f"{key} is larger than {MAX_INT64}")
    return values


class _Counters(Schema):
    loop_count: Any = Field(None, description=_COUNTER_DOC)
    tool_count: Any = Field(None, description=_COUNTER_DOC)
    llm_request_count: Any = Field(None, description=_COUNTER_DOC)
    input_tokens: Any = Field(None, description=_COUNTER_DOC)
    output_tokens: Any = Field(None, description=_COUNTER_DOC)
    cache_read_tokens: Any = Field(None, description=_COUNTER_DOC)
    cache_write_tokens: Any = Field(None, description=_COUNTER_DOC)
    total_tokens: Any = Field(None, description=_COUNTER_DOC)

    @field_validator(*COUNTER_FIELDS, mode="before")
    @classmethod
    def _counter_fits(cls, value: Any) -> Any:
        if _counter_too_large(value):
            raise ValueError(f"a counter must be at most {MAX_INT64}")
        return value


class ProgressIn(_Fence, _Counters):
    response: Any = Field(None, description="progress text (stringified, capped at 65 536 characters)")
    checkpoint: Any = Field(None, description="tool journal object")


class SubmitIn(_Fence, _Counters):
    outcome: str = Field(..., description="completed, waiting, retryable or failed")
    response: Any = None
    summary: Any = None
    evidence: Any = Field(None, description="list of strings or {kind, label, …} objects")
    waiting_reason: Any = Field(None, description="required with outcome waiting")
    error: Any = None
    review_decision: Any = Field(None, description="approved or changes_requested")
    contract_patch: Any = Field(None, description="triage only: {goal?, acceptance_criteria?}")
    plan: Any = Field(None, description="planning triage only: {work_item_type, actions: [...]}")
    acceptance_checks: Any = Field(None, description="one {criterion, status, evidence} per criterion, in order")
    checkpoint: Any = None


class InterruptIn(_Fence):
    reason: Optional[str] = None
    final_progress: Optional[dict[str, Any]] = Field(None, description="last progress: response, counters, checkpoint")

    @field_validator("final_progress")
    @classmethod
    def _counters_fit(cls, value: Any) -> Any:
        return _check_counters(value)


class RecoveryIn(Schema):
    owner_boot_id: str = Field(..., min_length=1)
    # Workers that share a store pass true: only expired leases are recovered, never a live peer's.
    expired_only: bool = False


class IntegrationWorkspaceIn(_Fence):
    workspace: dict[str, Any]


class ReservationIn(_Fence):
    reservation_ms: Optional[DurationMs] = Field(None, description="at least 10 000; default 300 000")


class IntegrationFinishIn(_Fence):
    token: str
    workspace: dict[str, Any]


class IntegrationRollbackIn(_Fence):
    token: str
