"""Request shapes of the HTTP API (API.md §2-§3): every `XxxIn` body and `XxxQuery` query a route
parses, and the text and integer types they are made of.

Input schemas refuse what is not the API's (unknown fields, wrong JSON types, blank text, out of
range integers) and describe in the OpenAPI document every rule the server enforces, including
those the services check (workDir, outcomes, waiting reasons): the services keep those checks so
every caller gets the same answers. Fields whose value the domain normalises instead of refusing
(the submission's evidence, plan, counters, …) take any storable JSON value on purpose: DOMAIN
§7.2 turns bad values into defaults or failed runs, not 422s. The response shapes are
workcenter.schemas_out.
"""
from __future__ import annotations

import re
from datetime import timezone
from typing import Annotated, Any, Literal, Optional, Union

from ninja import Field, Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    Strict,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema
from typing_extensions import TypeAliasType

from .constants import COUNTER_FIELDS, MAX_INT32, MAX_INT64
from .choices import RunStatus, WorkItemStatus
from .selectors import LIST_SORTS
from .domain.normalize import COUNTER_KEYS, OUTCOMES

# Every input rule below is written twice, once for the server and once for the OpenAPI document,
# from the same constants, so that the document states exactly what the server refuses: unknown
# fields (a misspelt `expected_revision` must not silently skip the revision check), booleans or
# strings where an integer or a boolean is expected, blank strings where text is required, and
# text no database can store. The request parser (api.StrictTextParser) refuses NUL and unpaired
# surrogates anywhere in a body or query; the document says so with `pattern` on every string and
# `propertyNames` on every object (an unpaired surrogate cannot be written in a JSON Schema
# pattern, so the descriptions say it). Integers accept a JSON number with no fractional part
# (`5.0`, an integer to JSON Schema) and nothing else.

# The characters str.strip() removes (str.isspace), spelt out so that every regex engine reading
# the document (ECMA 262, Python, Rust) agrees with the server on what "blank" means.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
              "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
WS_CLASS = r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NO_NUL_PATTERN = r"^[^\u0000]*$"
NON_BLANK_PATTERN = rf"^[^\u0000]*[^\u0000{WS_CLASS}][^\u0000]*$"
# an absolute path without a `..` segment: each segment is empty, `.`, or neither `..` nor NUL/`/`
_SEGMENT = r"(?:[^/.\u0000][^/\u0000]*|\.[^/.\u0000][^/\u0000]*|\.\.[^/\u0000]+|\.?)"
WORK_DIR_PATTERN = rf"^(?:/{_SEGMENT})+$"
# caller-chosen item ids appear in URL paths: no `/`, and neither `.` nor `..`
ITEM_ID_PATTERN = rf"^[^/\u0000]*[^/\u0000{WS_CLASS}][^/\u0000]*$"
MAX_ITEM_ID = 200
_TEXT_DOC = "no NUL (U+0000) and no unpaired surrogate (both refused with 422)"


def _integral(value: Any) -> Any:
    """A JSON number without a fractional part (`5.0`) is the integer it names; nothing else is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _not_blank(value: str) -> str:
    if not value.strip(WHITESPACE):
        raise ValueError("must not be blank")
    return value


def _integer(ge: int, le: int, *, gt: bool = False) -> Any:
    """A strict JSON integer in [ge, le] (or (ge, le] with gt): booleans and strings are refused."""
    bound = {"gt": ge} if gt else {"ge": ge}
    return Annotated[int, Strict(), Field(le=le, **bound), BeforeValidator(_integral)]


Int32 = _integer(0, MAX_INT32)
DurationMs = Annotated[_integer(0, MAX_INT32, gt=True), Field(description="milliseconds (at most 2^31-1, ~24.8 days)")]
# an item's state token (workcenter/services/state_tokens.py): the id of its newest event
StateToken = Annotated[_integer(0, 2**63 - 1), Field(
    description="the state_token a preview showed (the id of the item's newest event): refused with 409 "
                "state_changed, nothing done, if the item moved since (a claim, a failure, a retry, …)")]
StrictBool = Annotated[bool, Strict()]
Text = Annotated[str, Strict(), Field(pattern=NO_NUL_PATTERN, description=_TEXT_DOC)]
NonBlankText = Annotated[str, Strict(), AfterValidator(_not_blank), WithJsonSchema(
    {"type": "string", "minLength": 1, "pattern": NON_BLANK_PATTERN, "description": f"not blank; {_TEXT_DOC}"})]
NonEmptyText = Annotated[str, Strict(), Field(min_length=1, pattern=NO_NUL_PATTERN)]
# Path parameters: text a database can compare (the document states what the parser enforces).
PathId = Annotated[str, WithJsonSchema({"type": "string", "pattern": NO_NUL_PATTERN,
                                        "description": "no NUL (U+0000) and no unpaired surrogate"})]


class _KeysWithoutNul:
    """Object keys, like strings, carry no NUL: `propertyNames` in the document."""

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)
        schema["propertyNames"] = {"pattern": NO_NUL_PATTERN}
        return schema


_JsonText = Annotated[str, WithJsonSchema({"type": "string", "pattern": NO_NUL_PATTERN, "description": _TEXT_DOC})]
_JsonNumber = Annotated[float, WithJsonSchema({"type": "number"})]
# Any JSON value whose strings and keys a database can store. Described, not validated here:
# the request parser walks every body once and refuses the rest with 422 (pydantic would walk
# evidence, checkpoints and plans a second time on the claim/submit path).
StorableJson = TypeAliasType(
    "StorableJson",
    Union[None, bool, _JsonNumber, _JsonText, list["StorableJson"],
          Annotated[dict[str, "StorableJson"], _KeysWithoutNul()]],
)


class _Unchecked:
    """Validated and serialised as any value, documented as the annotated type: pydantic's
    SkipValidation, except that it serialises the value as it is instead of through the type
    (which walks the whole value and warns at each union member it does not match)."""

    def __get_pydantic_core_schema__(self, source, handler):
        documented = handler(source)
        return core_schema.any_schema(
            metadata={"pydantic_js_annotation_functions": [lambda _c, h: h(documented)]},
            # the serializer keeps the documented schema's definitions in the model's core schema
            serialization=core_schema.wrap_serializer_function_ser_schema(lambda value, _h: value, schema=documented),
        )


JsonValue = Annotated[StorableJson, _Unchecked()]
JsonObject = Annotated[dict[str, JsonValue], _KeysWithoutNul()]


class InputSchema(Schema):
    """A request body: unknown fields are refused (422), so a misspelt field never goes unnoticed."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _run_root_validator(cls, values: Any, handler, info) -> Any:
        """Replaces ninja's validator of the same name (same name, so only this one runs).
        ninja's Schema validates a model that forbids extra fields twice: the value itself, then
        again through its DjangoGetter (which reads ORM objects and `resolve_*` methods, none of
        which a request body has). A body (a JSON object) is validated once, with the same result
        and the same errors; anything else is handed to ninja's own."""
        if type(values) is dict:
            return handler(values)
        return super()._run_root_validator(values, handler, info)


WORK_DIR_DOC = ("an absolute path (no `..` segment) naming an existing directory on the server host, inside "
                "WORKCENTER_WORK_DIR_ROOTS when that is set; the same message refuses a path that does not "
                "exist and one the server does not allow")


def _work_dir_schema(*, nullable: bool) -> dict:
    schema = {"type": "string", "pattern": WORK_DIR_PATTERN, "description": WORK_DIR_DOC}
    return {"anyOf": [schema, {"type": "null"}], "description": WORK_DIR_DOC} if nullable else schema


def _workflow_schema(schema: dict) -> None:
    """Optional[JsonObject] plus the structure a definition needs: a non-empty list of stages."""
    obj = next(s for s in schema["anyOf"] if s.get("type") == "object")
    obj["required"] = ["stages"]
    obj["properties"] = {"stages": {"type": "array", "minItems": 1, "items": obj["additionalProperties"]}}


class CreateWorkItemIn(InputSchema):
    title: NonBlankText
    goal: NonBlankText
    acceptance_criteria: list[Text] = Field(default_factory=list)
    work_dir: Annotated[str, WithJsonSchema(_work_dir_schema(nullable=False))] = Field(
        None, description=f"{WORK_DIR_DOC}; absent ⇒ WORKCENTER_DEFAULT_WORK_DIR",
        json_schema_extra=lambda schema: schema.pop("default", None))
    start: StrictBool = True
    work_item_type: Optional[Text] = None
    reuse_memory: StrictBool = True
    origin: Optional[JsonObject] = None
    linked_session_ids: Optional[list[Text]] = None
    id: Optional[Annotated[str, Strict(), Field(max_length=MAX_ITEM_ID), WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_ID, "pattern": ITEM_ID_PATTERN,
         "not": {"enum": [".", ".."]}})]] = Field(
        None, description="caller-chosen id (not blank, no `/`, neither `.` nor `..`: it appears in URLs); "
                          "a duplicate is 409 invalid_state")
    workflow: Optional[JsonObject] = Field(
        None, description="explicit workflow definition (DOMAIN §4.1), honoured only with workcenter.define_workflows "
                          "(ignored otherwise); for those callers an invalid definition is refused with 422: no "
                          "stages, stage ids that are not unique once normalised, a review returning to a later "
                          "or non-editable stage, or action templates (a list) that are not definitions themselves",
        json_schema_extra=_workflow_schema)

    @field_validator("work_dir", mode="before")
    @classmethod
    def _work_dir_is_text(cls, value: Any) -> Any:
        if not isinstance(value, str):  # null included: an absent work_dir means the default
            raise ValueError("workDir must be a string naming an existing directory")
        return value


class UpdateWorkItemIn(InputSchema):
    title: Optional[NonBlankText] = Field(None, description="null or absent keeps the title")
    goal: Optional[NonBlankText] = None
    acceptance_criteria: Optional[list[Text]] = None
    work_dir: Annotated[Optional[str], WithJsonSchema(_work_dir_schema(nullable=True))] = None
    expected_revision: Optional[Int32] = Field(None, description="refuse with 409 revision_conflict when the "
                                                               "item's revision differs")

    @field_validator("work_dir", mode="before")
    @classmethod
    def _work_dir_is_text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValueError("workDir must be a string naming an existing directory")
        return value


MAX_ANSWER = 8000
AnswerText = Annotated[str, Strict(), Field(max_length=MAX_ANSWER), AfterValidator(_not_blank), WithJsonSchema(
    {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER, "pattern": NON_BLANK_PATTERN,
     "description": f"not blank, at most {MAX_ANSWER} characters (trimmed); {_TEXT_DOC}"})]


class RetryAnswerIn(InputSchema):
    action_id: NonEmptyText = Field(..., description="a stage that waits for an answer: a waiting canonical action "
                                                     "of a graph item, or a linear item's current action")
    answer: AnswerText


def _retry_rules(schema: dict) -> None:
    """`answer` and `answers` are two forms of one request: never both."""
    schema["not"] = {"required": ["answer", "answers"]}


class RetryIn(InputSchema):
    model_config = ConfigDict(json_schema_extra=_retry_rules)

    answer: Optional[Text] = Field(None, description="required (not blank) when the item is waiting")
    answers: Optional[list[RetryAnswerIn]] = Field(
        None, min_length=1, max_length=500,
        description="instead of `answer`: one answer per waiting stage, each reset in place with its own answer "
                    "in one transaction (one work_item.retried event per stage); each action_id at most once; a "
                    "waiting item's current action must be named; a linear item names its current action only")
    expected_state_token: Optional[StateToken] = None  # the retry-preview's state_token

    @model_validator(mode="after")
    def _one_form(self):
        if {"answer", "answers"} <= self.model_fields_set:
            raise ValueError("give either answer or answers, not both")
        return self


class GuidanceIn(InputSchema):
    action_id: NonEmptyText
    revision: Int32
    guidance: NonBlankText


# Query strings are text on the wire: their integers are parsed from it (`?limit=true` is 422).
_STATUS_NAMES = "|".join(WorkItemStatus.values)
STATUS_LIST_PATTERN = rf"^(?:{_STATUS_NAMES})(?:,(?:{_STATUS_NAMES}))*$"
MAX_CURSOR = 1000
CursorText = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_CURSOR, pattern=r"^[A-Za-z0-9_-]+$")]


def _status_list(value: Any) -> Any:
    if isinstance(value, str) and any(part not in WorkItemStatus.values for part in value.split(",")):
        raise ValueError(f"must be one of {', '.join(WorkItemStatus.values)}, or several of them comma-separated")
    return value


StatusList = Annotated[str, Strict(), AfterValidator(_status_list), WithJsonSchema(
    {"type": "string", "pattern": STATUS_LIST_PATTERN,
     "description": "one status, or several comma-separated (e.g. `waiting,needs_attention`)"})]


class WorkItemListQuery(Schema):
    status: Optional[StatusList] = None
    search: Optional[Text] = None
    session_id: Optional[Text] = None
    limit: int = Field(100, ge=1, le=500)
    sort: Literal[LIST_SORTS] = Field("updated", description=(
        "updated: updated_at newest first (ties: id ascending); updated_asc: the reverse; created: created_at "
        "newest first; created_asc: oldest first (by age); status: needs_attention, waiting, running, ready, "
        "draft, done, cancelled, each newest updated_at first"))
    cursor: Optional[CursorText] = Field(None, description=(
        "next_cursor of the previous page (same sort and filters); a malformed cursor or one made for another sort "
        "is refused with 422 naming cursor"))


class EventsQuery(Schema):
    after_id: int = Field(0, ge=0, le=MAX_INT64)
    limit: int = Field(200, ge=1, le=1000)


_ISO_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")


def _iso_time(value: Any) -> Any:
    """A time is ISO 8601 text (the lax mode of a datetime would also take a number of seconds)."""
    if not isinstance(value, str) or not _ISO_TIME.match(value):
        raise ValueError("must be an ISO 8601 time with its zone, e.g. 2026-12-07T10:00:00Z")
    return value


def _in_utc(value):
    """In UTC, as stored: PostgreSQL refuses an offset past ±15:59, which ISO 8601 text may carry."""
    try:
        return value.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise ValueError("is out of range") from None


IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_time), AfterValidator(_in_utc)]


class LogSearchQuery(Schema):
    q: Annotated[str, Strict(), Field(min_length=3, max_length=200, pattern=NO_NUL_PATTERN)] = Field(
        ..., description="the text to find in the runs' logs, case-insensitive, 3 to 200 characters")
    status: Optional[StatusList] = Field(None, description="only runs of items in this status (or these)")
    workflow: Optional[Annotated[str, Strict(), Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)]] = Field(
        None, description="only runs of items of this workflow (its id, as in workflow_template)")
    since: Optional[IsoTime] = Field(None, description="only text printed at or after this time")
    until: Optional[IsoTime] = Field(None, description="only text printed before this time")
    limit: int = Field(20, ge=1, le=100, description="runs in the answer, newest match first")


class RunLogQuery(Schema):
    after: Optional[int] = Field(None, ge=0, le=MAX_INT32, description="the chunks numbered above this (following "
                                                                        "the log as it grows)")
    before: Optional[int] = Field(None, ge=1, le=MAX_INT32, description="the last chunks numbered below this "
                                                                        "(older output)")
    limit: int = Field(200, ge=1, le=1000)


MAX_PREVIEW_IDS = 16  # a request line stays well inside what the server reads (16 KiB)
QueryActionId = Annotated[str, Strict(), Field(min_length=1, max_length=64, pattern=NO_NUL_PATTERN,
                                               description=_TEXT_DOC)]


class RetryPreviewQuery(Schema):
    action_id: list[QueryActionId] = Field(default_factory=list, max_length=MAX_PREVIEW_IDS, description=(
        f"repeatable, at most {MAX_PREVIEW_IDS}: the stages an `answers` retry would name; the preview's "
        "reset_action_ids and superseded_run_ids are then that retry's"))


class _Fence(InputSchema):
    owner_boot_id: NonBlankText
    lease_epoch: Int32


class ClaimIn(InputSchema):
    owner_boot_id: NonBlankText
    lease_ms: DurationMs = 60_000
    wait_ms: _integer(0, 30_000) = Field(0, description=(
        "long poll: when nothing is claimable, wait up to this many ms for an action to become claimable "
        "(the server holds no thread or database connection meanwhile), then answer 204; 0 answers at once. "
        "Served by the ASGI server (workcenter/dispatch/longpoll.py)"))


class RenewIn(_Fence):
    lease_ms: DurationMs = 60_000


_COUNTER_DOC = ("execution counter; a number above 2^63-1 is refused, any other non-numeric or negative value "
                "is stored as 0")


def _too_large(value: Any) -> bool:
    """A JSON number that no 64-bit counter column can store (DOMAIN §12.1 turns every other
    invalid counter, numeric strings included, into 0)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > MAX_INT64


Counter = Annotated[JsonValue, Field(description=_COUNTER_DOC, json_schema_extra={"maximum": MAX_INT64})]


class _Counters(InputSchema):
    loop_count: Counter = None
    tool_count: Counter = None
    llm_request_count: Counter = None
    input_tokens: Counter = None
    output_tokens: Counter = None
    cache_read_tokens: Counter = None
    cache_write_tokens: Counter = None
    total_tokens: Counter = None

    @field_validator(*COUNTER_FIELDS, mode="before")
    @classmethod
    def _counter_fits(cls, value: Any) -> Any:
        if _too_large(value):
            raise ValueError(f"a counter must be at most {MAX_INT64}")
        return value


class ProgressIn(_Fence, _Counters):
    response: JsonValue = Field(None, description="progress text (stringified, capped at 65 536 characters)")
    checkpoint: JsonValue = Field(None, description="tool journal object")


class LogChunkIn(InputSchema):
    stream: Literal["stdout", "stderr", "worker"] = Field(description="where the text came from: the command's "
                                                          "stdout or stderr, or the worker's own lines")
    text: Annotated[str, Strict(), Field(min_length=1, max_length=65_536, pattern=NO_NUL_PATTERN)] = Field(
        description="the text as printed (several lines, or part of a long one), at most 65,536 characters")
    at: Optional[IsoTime] = Field(None, description="when it was printed (the worker's clock); "
                                                          "default: when the server stores it")


class RunLogIn(_Fence):
    chunks: list[LogChunkIn] = Field(..., min_length=1, max_length=500,
                                     description="appended in this order, numbered after the log's last chunk")


_NOT_BLANK_JSON = {"anyOf": [{"type": "string", "pattern": NON_BLANK_PATTERN},
                             {"type": ["boolean", "number", "array", "object"]}]}


def _submit_rules(schema: dict) -> None:
    """The two submission rules that tie fields together (DOMAIN §7.2): `waiting` needs a
    waiting reason that is not blank once stringified, and a contract patch's criteria, when
    present (snake_case first, then camelCase), are a list."""
    schema["allOf"] = [
        {"if": {"properties": {"outcome": {"const": RunStatus.WAITING.value}}, "required": ["outcome"]},
         "then": {"required": ["waiting_reason"], "properties": {"waiting_reason": _NOT_BLANK_JSON}}},
        {"properties": {"contract_patch": {
            "if": {"type": "object", "required": ["acceptance_criteria"]},
            "then": {"properties": {"acceptance_criteria": {"type": "array"}}},
            "else": {"properties": {"acceptanceCriteria": {"type": "array"}}}}}},
    ]


class SubmitIn(_Fence, _Counters):
    model_config = ConfigDict(json_schema_extra=_submit_rules)

    outcome: Annotated[str, Strict(), WithJsonSchema({"type": "string", "enum": list(OUTCOMES)})]
    response: JsonValue = None
    summary: JsonValue = None
    evidence: JsonValue = Field(None, description="list of strings or {kind, label, …} objects")
    waiting_reason: JsonValue = Field(None, description="required with outcome waiting (not blank)")
    error: JsonValue = None
    review_decision: JsonValue = Field(None, description="approved or changes_requested; anything else is "
                                                         "stored as null")
    contract_patch: JsonValue = Field(None, description="triage only: {goal?, acceptance_criteria?}; "
                                                        "acceptance_criteria, when present, is a list")
    plan: JsonValue = Field(None, description="planning triage only: {work_item_type, actions: [...]}")
    acceptance_checks: JsonValue = Field(None, description="one {criterion, status, evidence} per criterion, "
                                                           "in order")
    checkpoint: JsonValue = None
    claim_next: Optional[ClaimIn] = Field(None, description=(
        "claim the worker's next action in the same request, after the submission has committed (a "
        "claim request's body): the answer's `next` is that claim (a claim response) or null when nothing "
        "is claimable; a submission refused (stale fence) claims nothing"))


def _final_progress_schema(schema: dict) -> None:
    """Optional[JsonObject] plus the counters' bound, under both spellings normalisation reads."""
    obj = next(s for s in schema["anyOf"] if s.get("type") == "object")
    counter = {**obj["additionalProperties"], "maximum": MAX_INT64, "description": _COUNTER_DOC}
    obj["properties"] = {key: counter for key in COUNTER_KEYS}


class InterruptIn(_Fence):
    reason: Optional[Text] = None
    final_progress: Optional[JsonObject] = Field(
        None, description="last progress: response, counters (snake_case or camelCase), checkpoint",
        json_schema_extra=_final_progress_schema)

    @field_validator("final_progress")
    @classmethod
    def _counters_fit(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in COUNTER_KEYS:
                if _too_large(value.get(key)):
                    raise ValueError(f"{key} is larger than {MAX_INT64}")
        return value


class RecoveryIn(InputSchema):
    owner_boot_id: NonBlankText
    # Workers that share a store pass true: only expired leases are recovered, never a live peer's.
    expired_only: StrictBool = False


class IntegrationWorkspaceIn(_Fence):
    workspace: JsonObject


class ReservationIn(_Fence):
    reservation_ms: Optional[DurationMs] = Field(None, description="at least 10 000 (shorter is raised to it); "
                                                                   "default 300 000")


class IntegrationFinishIn(_Fence):
    token: Text
    workspace: JsonObject


class IntegrationRollbackIn(_Fence):
    token: Text


# --- bulk retry / cancel (API.md "bulk") ---------------------------------------------------------

MAX_BULK_IDS = 200
BulkOperation = Literal["retry", "cancel"]
BulkId = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_ITEM_ID, pattern=NO_NUL_PATTERN,
                                        description=_TEXT_DOC)]
BulkIds = Annotated[list[BulkId], Field(min_length=1, max_length=MAX_BULK_IDS, json_schema_extra={"uniqueItems": True},
                                        description=f"1 to {MAX_BULK_IDS} distinct work item ids; rows answer in "
                                                    "this order")]


class CancelIn(InputSchema):
    expected_state_token: Optional[StateToken] = None  # the state_token the dialog showed


class BulkPreviewIn(InputSchema):
    operation: BulkOperation
    ids: BulkIds


class BulkIn(InputSchema):
    model_config = ConfigDict(json_schema_extra=_retry_rules)  # `answer` or `answers`, never both

    operation: BulkOperation
    ids: BulkIds
    reason: NonBlankText = Field(..., description="why: recorded with each row's event (`reason` in its data)")
    expected_revisions: Annotated[dict[Text, Int32], _KeysWithoutNul()] = Field(
        ..., description="{id: revision} for every id: the revision the preview showed; a row whose item has "
                         "another revision now is refused alone (revision_conflict) and nothing is done to it")
    expected_state_tokens: Optional[Annotated[dict[Text, StateToken], _KeysWithoutNul()]] = Field(
        None, description="{id: state_token} for every id, as the preview showed (optional; the dashboard always "
                          "sends it): a row whose item moved since (a claim, a failure, a retry, …) is refused "
                          "alone (state_changed, its message saying what happened) and nothing is done to it")
    answer: Optional[AnswerText] = Field(None, description="retry: the answer given to every waiting item "
                                                           "(required to resume one); ignored for the others")
    answers: Optional[Annotated[dict[Text, Annotated[list[RetryAnswerIn], Field(min_length=1, max_length=500)]],
                                _KeysWithoutNul()]] = Field(
        None, description="retry, instead of `answer`: {id: [{action_id, answer}]}, one answer per waiting stage of "
                          "each item named (the single retry's `answers` form, each item's list as it takes it); "
                          "an item it does not name is retried without an answer")

    @model_validator(mode="after")
    def _one_answer_form(self):
        if {"answer", "answers"} <= self.model_fields_set:
            raise ValueError("give either answer or answers, not both")
        return self
