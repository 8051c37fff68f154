"""Response shapes of the HTTP API (API.md §2-§3): every `XxxOut` a route renders.

The request shapes (`XxxIn`, `XxxQuery` and their text and integer types) are
workcenter.schemas_in. Timestamps render as `clock.iso_ms` (API.md §0).
"""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Optional

from ninja import Field, Schema
from pydantic import PlainSerializer, WithJsonSchema

from .clock import iso_ms
from .constants import COUNTER_FIELDS
from .choices import ActionStatus, ExecutionMode

ExecutionModeName = Literal[tuple(ExecutionMode.values)]
# what an item's attention names: a stage waiting for an answer, or a failed one waiting for a retry
AttentionKind = Literal[ActionStatus.WAITING.value, ActionStatus.FAILED.value]

Timestamp = Annotated[
    datetime,
    PlainSerializer(iso_ms, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time", "example": "2026-12-02T12:00:00.123Z"}),
]


def _snapshot(obj: Any) -> dict:
    snap = getattr(obj, "workflow_snapshot", None)
    return snap if isinstance(snap, dict) else {}


def _zero_stats() -> dict:
    return {f: 0 for f in COUNTER_FIELDS}


# --- errors --------------------------------------------------------------------------------------

class ErrorOut(Schema):
    code: str = Field(..., description="bad_request, not_authenticated, permission_denied, not_found, "
                                       "stale_run, invalid_state, revision_conflict, state_changed, "
                                       "reservation_active, invalid_input")
    message: str
    extra: dict[str, Any] = Field(default_factory=dict)


# the errors any signed-in route may answer (API.md §0), in a route's `response=`; routes add theirs
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 422: ErrorOut}


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
        return ExecutionMode.of(_snapshot(obj)).value

    @staticmethod
    def resolve_execution_stats(obj) -> dict:
        return getattr(obj, "execution_stats", None) or _zero_stats()


class AttentionOut(Schema):
    kind: AttentionKind = Field(..., description="waiting: for an answer; failed: for a retry")
    action_id: str = Field(..., description="the item's current action: its first blocked stage by sequence")
    stage_id: str
    text: str = Field(..., description="the start (200 characters, blanks collapsed) of that stage's question "
                                       "(the waiting run's waiting_reason) or of its last run's error")
    since: Optional[Timestamp] = Field(None, description="when that run ended")
    count: int = Field(..., description="how many stages are in that state (graph items; 1 for linear)")


class WorkItemSummaryOut(_WorkItemHead):
    current_action: Optional[CurrentActionOut] = None
    attention: Optional[AttentionOut] = Field(None, description="what a waiting or needs_attention item waits "
                                                                "for; null otherwise")
    action_counts: dict[str, int]
    work_dir: str = ""
    workspace_key: str = ""


class StatusCountsOut(Schema):
    draft: int
    ready: int
    running: int
    waiting: int
    needs_attention: int
    done: int
    cancelled: int


class WorkItemListOut(Schema):
    items: list[WorkItemSummaryOut]
    count: int = Field(..., description="every item matching the filters (status included), not just this page")
    counts: StatusCountsOut = Field(..., description="items matching search and session_id by status, the status "
                                                     "filter ignored")
    next_cursor: Optional[str] = Field(None, description="`cursor` of the next page; null on the last page")


# --- overview and bulk operations ---------------------------------------------------------------

IsoTimestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time",
                                              "example": "2026-12-02T12:00:00.123Z"})]


class ItemRefOut(Schema):
    id: str
    title: str


class OverviewOut(Schema):
    running: int = Field(..., description="actions with status running")
    waiting: int = Field(..., description="work items with status waiting")
    oldest_wait_since: Optional[IsoTimestamp] = Field(
        None, description="since when the longest-waiting item waits: its latest action.waiting event "
                          "(its updated_at when it has none)")
    oldest_wait_item: Optional[ItemRefOut] = None
    needs_attention: int
    finished_24h: int = Field(..., description="work items that reached done in the last 24 hours")
    actions_finished_per_hour: list[int] = Field(
        ..., min_length=24, max_length=24,
        description="action.completed events per hour, oldest first from hours_from; the last is the current hour")
    hours_from: IsoTimestamp
    counts: StatusCountsOut
    generated_at: IsoTimestamp


class RunStopOut(Schema):
    run_id: str
    action_id: str
    stage_id: str
    owner_boot_id: str
    lease_epoch: int


class BulkPreviewRowOut(Schema):
    id: str
    title: Optional[str] = None
    status: Optional[str] = None
    revision: Optional[int] = Field(None, description="send it back in expected_revisions")
    state_token: Optional[int] = Field(None, description="the item's state token (the id of its newest event; "
                                                         "null when not found): send it back in "
                                                         "expected_state_tokens")
    allowed: bool
    code: Optional[str] = Field(None, description="why not allowed: not_found, invalid_state, reservation_active, …")
    message: Optional[str] = Field(None, description="in words: what the operation would do, or why not")
    reset_stage_ids: list[str]
    reset_action_ids: list[str]
    new_action: bool
    stops: list[RunStopOut] = Field(..., description="the running runs the operation would stop or supersede")
    waiting_stages: list["WaitingStageOut"] = Field(
        default_factory=list, description="retry: the stages that wait for an answer, with their questions (as "
                                          "the item's retry-preview has them); answer each in the bulk's `answers`")


class BulkPreviewOut(Schema):
    operation: str
    rows: list[BulkPreviewRowOut]


class BulkResultOut(Schema):
    id: str
    ok: bool
    code: Optional[str] = None
    message: Optional[str] = None
    work_item: Optional[WorkItemSummaryOut] = None


class BulkOut(Schema):
    operation: str
    results: list[BulkResultOut]


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


class WaitingStageOut(Schema):
    action_id: str
    stage_id: str
    run_id: Optional[str] = Field(None, description="the run that asked")
    waiting_reason: str = Field(..., description="its question")
    waiting_since: Optional[Timestamp] = Field(None, description="when that run ended")
    reset_action_ids: list[str] = Field(..., description="what answering this stage alone resets (graph; by "
                                                         "sequence; empty for a linear item)")


class RetryPreviewOut(Schema):
    target_action_id: Optional[str] = None
    target_stage_id: Optional[str] = None
    mode: ExecutionModeName
    reset_action_ids: list[str]
    superseded_run_ids: list[str]
    new_action: bool
    waiting_stages: list[WaitingStageOut] = Field(
        default_factory=list, description="every stage that waits for an answer, by sequence")
    state_token: int = Field(..., description="the item's state token (the id of its newest event), read with "
                                              "this preview: send it as the retry's or cancel's "
                                              "expected_state_token")


class LeaseOut(Schema):
    run_id: str
    owner_boot_id: str
    lease_epoch: int
    expires_at: Timestamp
    renewed_at: Timestamp


class NodeRunOut(Schema):
    id: str
    status: str
    started_at: Timestamp
    ended_at: Optional[Timestamp] = None


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
    run: Optional[NodeRunOut] = None
    blocked_by: list[str]
    # additions (docs/api.md): a running stage whose run can no longer renew (its item went to
    # needs_attention, …) and its stage's usual duration (workcenter/stage_durations.py)
    stopping: bool = False
    usual_duration_s: Optional[int] = None
    overdue_after_s: Optional[int] = None


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


STATE_TEXT_CHARS = 300  # a run's summary and error in the item's state: their start (the panel reads the rest)


def _start(text: Optional[str]) -> Optional[str]:
    if text is None or len(text) <= STATE_TEXT_CHARS:
        return text
    return text[:STATE_TEXT_CHARS - 1] + "…"


class StateActionOut(Schema):
    """An action as the work-item page's state carries it: ActionOut without its texts
    (`instruction`, `brief`, `context`: GET …/actions/{action_id}/instruction) nor what the
    page does not draw (policies, workspace, role, execution stats)."""
    id: str
    sequence: int
    type: str
    stage_id: str
    depends_on_stage_ids: list[str]
    workspace_mode: str
    changes_requested_stage_id: Optional[str] = None
    status: str
    attempt: int
    max_attempts: int
    current_run_id: Optional[str] = None
    lease_epoch: int
    updated_at: Timestamp

    @staticmethod
    def resolve_stage_id(obj) -> str:
        return obj.stage_id or obj.type


class StateRunOut(Schema):
    """A run as the work-item page's state carries it: its outcome, times, worker and reason
    (summary and error cut to their first 300 characters), without the response, evidence,
    snapshots, checkpoint and acceptance checks (the full run is in WorkItemDetail)."""
    id: str
    action_id: str
    owner_boot_id: str
    lease_epoch: int
    status: str
    started_at: Timestamp
    ended_at: Optional[Timestamp] = None
    summary: str
    waiting_reason: Optional[str] = None
    error: Optional[str] = None
    review_decision: Optional[str] = None
    loop_count: int
    tool_count: int
    llm_request_count: int
    total_tokens: int
    progress_revision: int

    @staticmethod
    def resolve_summary(obj) -> str:
        return _start(obj.summary) or ""

    @staticmethod
    def resolve_error(obj) -> Optional[str]:
        return _start(obj.error)


class ItemStateOut(Schema):
    """What the work-item page shows of an item, with the revision the per-item stream's diffs
    name (workcenter/item_page_state.py)."""
    rev: str = Field(..., description="names this state by its content: a stream diff whose base_rev is this "
                                      "applies to it")
    base_rev: Optional[str] = Field(None, description="always null here (a whole state)")
    item: dict[str, Any] = Field(..., description="the fields of WorkItemDetail but actions, runs and events")
    graph: GraphOut
    actions: list[StateActionOut] = Field(..., description="all actions, by sequence, without their long texts")
    runs: list[StateRunOut] = Field(..., description="all runs, newest started_at first, without their long texts")


class ActionInstructionOut(Schema):
    """GET …/actions/{action_id}/instruction: the texts the item's state leaves out of an action."""
    action_id: str
    instruction: str
    brief: Optional[dict[str, Any]] = None
    context: list[Any]


class StageRunsOut(Schema):
    """GET …/stages/{stage_id}/runs: every run of one stage, whole, oldest first."""
    stage_id: str
    runs: list[RunOut]


class HeldRunOut(Schema):
    run_id: str
    work_item_id: str
    title: str
    stage_id: str
    lease_epoch: int
    renewed_at: Timestamp = Field(..., description="when the lease was taken or last renewed")
    expires_at: Timestamp
    lease_ms: int = Field(..., description="the lease's length at its last renewal")


class WorkerOut(Schema):
    boot_id: str
    held: list[HeldRunOut] = Field(..., description="the runs it holds now, least recently renewed first")
    finished_1h: int = Field(..., description="runs it completed in the last hour")
    failed_1h: int = Field(..., description="runs of it that failed, asked for a retry or were interrupted in the "
                                            "last hour")
    last_seen: Timestamp = Field(..., description="its latest claim, renewal or submission")
    renewing: bool = Field(..., description="false when a run it holds has gone more than half its lease without "
                                            "a renewal")


class WorkersOut(Schema):
    now: Timestamp
    workers: list[WorkerOut] = Field(..., description="every worker seen in the last hour, most recently seen first")


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
    next: Optional[ClaimOut] = Field(None, description="with `claim_next`: the worker's next claim, or null when "
                                                       "nothing was claimable (always null without it)")


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


# --- a run's log ----------------------------------------------------------------------------------

class LogChunkOut(Schema):
    seq: int = Field(..., description="the chunk's number in its run's log: 1, 2, … in the order appended")
    stream: str = Field(..., description="stdout, stderr or worker")
    at: Timestamp
    text: str


class RunLogAppendOut(Schema):
    next_seq: int = Field(..., description="the number the next chunk will get")
    kept_bytes: int
    dropped_bytes: int = Field(..., description="bytes of the oldest chunks dropped past the per-run cap, in all")
    dropped_chunks: int


class RunLogOut(RunLogAppendOut):
    run_id: str
    work_item_id: str
    action_id: str
    run_status: str
    chunks: list[LogChunkOut]
    older: bool = Field(..., description="older chunks are kept: read them with before = the first chunk's seq")


class LogMatchOut(Schema):
    seq: int = Field(..., description="the chunk that holds the line (read it with GET /runs/{id}/log?after=seq-1)")
    stream: str
    at: Timestamp
    line: str = Field(..., description="the matching line (cut at 500 characters)")
    before: list[str] = Field(..., description="the lines before it in its chunk, at most two")
    after: list[str] = Field(..., description="the lines after it in its chunk, at most two")


class LogSearchItemOut(Schema):
    id: str
    title: str
    status: str


class LogSearchRunOut(Schema):
    run_id: str
    run_status: str
    started_at: Timestamp
    action_id: str
    stage_id: Optional[str]
    work_item: LogSearchItemOut
    matches: list[LogMatchOut]


class LogSearchOut(Schema):
    q: str
    runs: list[LogSearchRunOut] = Field(..., description="newest match first")
    truncated: bool = Field(..., description="more runs or matches hold the text than the answer shows")
