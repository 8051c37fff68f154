"""The HTTP API (API.md §0-§3), mounted at /api/v1/.

Every operation parses its input, calls one service or selector and shapes the result; state
changes live in `workcenter.services`. Errors of every kind leave through one handler that maps
the domain's stable codes to HTTP statuses (API.md §0).
"""
from __future__ import annotations

import json
import logging
import re

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Query, Router
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from . import overview as overview_figures
from . import worker_figures
from . import item_page_state, render, selectors, services
from .auth import CHANGE, DEFINE_WORKFLOWS, RUN_ACTIONS, VIEW, actor_of, api_auth
from .constants import CLAIM_HINTS
from .errors import BadRequest, InvalidInput, WorkcenterError
from .instruments import CLAIM_SECONDS, SUBMIT_SECONDS
from .services import bulk
from .api_inbox import router as inbox_router
from .api_webhooks import webhooks as webhooks_router
from .api_run_logs import WORKER_ERRORS, stale_run
from .api_run_logs import router as run_logs_router
from .domain.normalize import UNSTORABLE
from .services.runs import AppliedSubmission
from .schemas_out import (
    ActionInstructionOut,
    ActionResultOut,
    BulkOut,
    BulkPreviewOut,
    ClaimOut,
    DetailView,
    ERRORS,
    ErrorOut,
    EventPageOut,
    GraphOut,
    InterruptOut,
    ItemStateOut,
    OverviewOut,
    RecoveryOut,
    RenewOut,
    ReservationOut,
    RetryPreviewOut,
    RunResultOut,
    StageRunsOut,
    SubmitOut,
    WorkItemDetailOut,
    WorkItemListOut,
    WorkersOut,
)
from .schemas_in import (
    BulkIn,
    BulkPreviewIn,
    CancelIn,
    ClaimIn,
    CreateWorkItemIn,
    EventsQuery,
    GuidanceIn,
    IntegrationFinishIn,
    IntegrationRollbackIn,
    IntegrationWorkspaceIn,
    InterruptIn,
    PathId,
    ProgressIn,
    RecoveryIn,
    RenewIn,
    ReservationIn,
    RetryIn,
    RetryPreviewQuery,
    SubmitIn,
    UpdateWorkItemIn,
    WorkItemListQuery,
)

logger = logging.getLogger("workcenter.api")

STATUS_BY_CODE = {
    "bad_request": 400,
    "not_authenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "stale_run": 409,
    "invalid_state": 409,
    "revision_conflict": 409,
    "state_changed": 409,
    "reservation_active": 409,
    "invalid_input": 422,
    # beyond API.md §0's table, same body: a request no route takes (workcenter/middleware.py)
    "method_not_allowed": 405,
    "request_too_large": 413,
    "internal_error": 500,
}
CODE_BY_STATUS = {400: "bad_request", 401: "not_authenticated", 403: "permission_denied", 404: "not_found",
                  405: "method_not_allowed", 409: "invalid_state", 413: "request_too_large", 422: "invalid_input",
                  500: "internal_error"}

# documented error bodies (every route can answer 401/403 and 422; a route with a body, 413)
ITEM_ERRORS = {**ERRORS, 404: ErrorOut, 409: ErrorOut}
ITEM_BODY_ERRORS = {**ITEM_ERRORS, 413: ErrorOut}


# --- parsing -------------------------------------------------------------------------------------

# Deeper nesting is refused (400) before any field sees it; the deepest body the API takes, a
# workflow definition with action templates, is under 10 levels deep.
MAX_JSON_DEPTH = 64
# NUL, and surrogates: json.loads joins escaped pairs, so any left are lone (not UTF-8 encodable)
# In a JSON text decoded from UTF-8 both can only come from escapes (the decoder refuses encoded
# surrogates, json.loads raw control characters): a body without such an escape and with at most
# MAX_JSON_DEPTH brackets needs no walk (the claim/submit hot path).
_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _unstorable_text(value, path: str = "") -> str | None:
    """The path of the first string no database can store (NUL, lone surrogates), else None.

    Raises BadRequest for containers nested deeper than MAX_JSON_DEPTH. Iterative, in document
    order: a field is named by its top-level key.
    """
    stack = [(value, path, 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if UNSTORABLE.search(value):
                return path or "body"
        elif isinstance(value, dict):
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
            for key in value:
                if isinstance(key, str) and UNSTORABLE.search(key):
                    return path or key
            stack.extend((item, path or str(key), depth + 1) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
            stack.extend((item, path, depth + 1) for item in reversed(value))
    return None


def _too_deep() -> BadRequest:
    return BadRequest(f"malformed JSON body: nested deeper than {MAX_JSON_DEPTH} levels",
                      extra={"max_depth": MAX_JSON_DEPTH})


def _refuse_unstorable(field: str) -> InvalidInput:
    return InvalidInput("text must not contain NUL (0x00) characters or invalid Unicode", fields=[field])


class StrictTextParser(Parser):
    """Bodies: JSON objects only, sent as `application/json` in UTF-8 (RFC 8259), refused with 400
    otherwise (a JSON value that is not an object: 422); refuses text PostgreSQL cannot store (422,
    not a driver error), in bodies and query strings.

    Requiring the content type also keeps a cross-site form (text/plain needs no CORS preflight)
    from posting JSON with a victim's session.
    """

    def parse_body(self, request: HttpRequest):
        content_type = (request.content_type or "").lower()
        if content_type != "application/json":
            raise BadRequest(f"the body must be sent as Content-Type: application/json, not {content_type or 'none'}",
                             extra={"content_type": content_type})
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the body is not UTF-8 (invalid byte at position {exc.start})",
                             extra={"position": exc.start}) from None
        try:
            data = json.loads(text)
        except RecursionError:
            raise _too_deep() from None
        except ValueError as exc:
            raise BadRequest(f"malformed JSON body: {exc}") from None
        suspect = (text.count("{") + text.count("[") > MAX_JSON_DEPTH) or _UNSTORABLE_ESCAPE.search(text)
        # first: it refuses nesting too deep, whatever the top level is
        field = _unstorable_text(data) if suspect else None
        if not isinstance(data, dict):
            raise InvalidInput(f"the body must be a JSON object, not {_json_kind(data)}", fields=["body"])
        if field:
            raise _refuse_unstorable(field)
        return data

    def parse_querydict(self, data, list_fields, request: HttpRequest):
        for key, values in data.lists():
            field = _unstorable_text(values, key)
            if field:
                raise _refuse_unstorable(field)
        return super().parse_querydict(data, list_fields, request)


api = NinjaAPI(
    title="Work Center API",
    version="1",
    description="Durable work orchestration: work items, their actions and runs, and the worker protocol. "
                "Authenticate with `Authorization: Bearer <token>` (see `manage.py create_api_token`) "
                "or a signed-in browser session (unsafe methods need the CSRF token).",
    urls_namespace="api",
    parser=StrictTextParser(),
)


# --- errors (API.md §0) --------------------------------------------------------------------------

def _json_kind(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "an array"}.get(type(value), "a number")


def error_body(code: str, message: str, extra: dict | None = None) -> dict:
    return {"code": code, "message": message, "extra": extra or {}}


def body_too_large(limit: int) -> tuple[int, dict]:
    return 413, error_body("request_too_large", f"the request body is larger than the limit of {limit} bytes",
                           {"limit_bytes": limit})


def _validation_errors(errors: list[dict]) -> list[dict]:
    """ninja's `loc` (source, parameter, field, …) ⇒ `{field, message, loc}` with snake_case names."""
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        source, path = (loc[0], loc[1:]) if loc else ("body", [])
        if source == "body" and path and path[0] == "payload":
            path = path[1:]
        field = path[0] if path else source
        out.append({"field": field, "message": err.get("msg", "invalid"), "loc": [source, *path]})
    return out


def _error_of(exc: Exception) -> tuple[int, dict]:
    if isinstance(exc, HttpError) and isinstance(exc.__cause__, WorkcenterError):
        exc = exc.__cause__  # ninja wraps every body-parser error in a 400; ours carry their own code
    if isinstance(exc, WorkcenterError):
        return STATUS_BY_CODE.get(exc.code, 400), error_body(exc.code, exc.message, exc.extra)
    if isinstance(exc, ValidationError):
        errors = _validation_errors(exc.errors)
        detail = "; ".join(f'{e["field"]}: {e["message"]}' for e in errors)
        return 422, error_body("invalid_input", f"Invalid input: {detail}", {"errors": errors})
    if isinstance(exc, AuthenticationError):
        return 401, error_body("not_authenticated", "authentication required: send 'Authorization: Bearer "
                                                     "<token>' or sign in")
    if isinstance(exc, HttpError):
        code = CODE_BY_STATUS.get(exc.status_code, "bad_request")
        message = str(exc)
        if exc.status_code == 400 and "parse" in message.lower():
            message = f"malformed JSON body: {message}"
        return exc.status_code, error_body(code, message)
    if isinstance(exc, Http404):
        return 404, error_body("not_found", str(exc) or "not found")
    if isinstance(exc, RequestDataTooBig):  # Django's own check, when its limit is the lower one
        return body_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, (ValueError, DataError)) and ("NUL" in str(exc) or isinstance(exc, UnicodeError)):
        # a path parameter the database cannot compare (bodies and queries are checked earlier)
        return 422, error_body("invalid_input", "text must not contain NUL (0x00) characters or invalid Unicode")
    raise exc  # to Django: logged with its traceback, answered as a JSON 500 (workcenter/middleware.py)


def api_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The one exception handler: every failure leaves as `{"code", "message", "extra"}`."""
    status, body = _error_of(exc)
    return api.create_response(request, body, status=status)


# Exception replaces ninja's default, which answers with the traceback as text when DEBUG is on
for _exc in (WorkcenterError, ValidationError, HttpError, Http404, RequestDataTooBig, ValueError, DataError,
             Exception):
    api.add_exception_handler(_exc, api_error)


@csrf_exempt  # a 404 for any method: no CSRF 403 for a path that does not exist
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Unknown paths below /api/v1/ answer like the API, not with Django's HTML page."""
    return JsonResponse(error_body("not_found", f"no API route {request.path}"), status=404)


# --- work items (API.md §2) ----------------------------------------------------------------------

items = Router(tags=["work items"])


def _detail(item_id: str) -> DetailView:
    return DetailView(selectors.work_item_detail(item_id))


def _detail_response(item_id: str, status: int = 200) -> HttpResponse:
    """WorkItemDetail rendered from the store's rows (workcenter/render.py: no re-validation)."""
    return render.response(WorkItemDetailOut, _detail(item_id), status)


@items.get("/work-items", response={200: WorkItemListOut, **ERRORS}, auth=api_auth(VIEW))
def work_item_list(request, filters: Query[WorkItemListQuery]):
    """One page of items in `sort` order (default newest `updated_at` first), from `cursor`;
    `count` counts every match, `counts` the matches by status (status filter ignored),
    `next_cursor` pages on (null on the last page)."""
    return selectors.work_item_list(status=filters.status, session_id=filters.session_id, search=filters.search,
                                    limit=filters.limit, sort=filters.sort, cursor=filters.cursor)


@items.get("/overview", response={200: OverviewOut, **ERRORS}, auth=api_auth(VIEW))
def overview(request):
    """Running actions, waiting items and the longest wait, items needing attention, what finished
    in the last 24 hours (per hour for actions) and the items by status."""
    return overview_figures.overview()


@items.get("/workers", response={200: WorkersOut, **ERRORS}, auth=api_auth(VIEW))
def workers(request):
    """Every worker seen in the last hour (by the boot id of its runs): the runs it holds, what it
    finished and failed in the hour, when it was last seen, whether it renews its leases."""
    return render.response(WorkersOut, worker_figures.workers_seen())


@items.post("/work-items/bulk-preview", response={200: BulkPreviewOut, **ERRORS, 413: ErrorOut},
            auth=api_auth(CHANGE))
def work_items_bulk_preview(request, payload: BulkPreviewIn):
    """What a bulk retry or cancel would do to each item now, one row per id in their order.
    Writes nothing."""
    return bulk.work_items_bulk_preview(operation=payload.operation, ids=payload.ids)


def _bulk_answers(answers) -> dict | None:
    if answers is None:
        return None
    return {item_id: [{"action_id": a.action_id, "answer": a.answer} for a in entries]
            for item_id, entries in answers.items()}


@items.post("/work-items/bulk", response={200: BulkOut, **ERRORS, 413: ErrorOut}, auth=api_auth(CHANGE))
def work_items_bulk(request, payload: BulkIn):
    """Retry or cancel each item in its own transaction, fenced by the revision and the state token
    the preview showed: a row that changed meanwhile is refused alone (revision_conflict, or
    state_changed saying what happened since). The reason is kept in each row's event."""
    out = bulk.work_items_bulk_apply(operation=payload.operation, ids=payload.ids, reason=payload.reason,
                                     expected_revisions=payload.expected_revisions,
                                     expected_state_tokens=payload.expected_state_tokens, answer=payload.answer,
                                     answers=_bulk_answers(payload.answers), actor=actor_of(request))
    summaries = selectors.work_item_summaries([r["id"] for r in out["results"] if r["ok"]])
    for result in out["results"]:
        result["work_item"] = summaries.get(result["id"]) if result["ok"] else None
    return out


@items.post("/work-items", response={201: WorkItemDetailOut, **ITEM_BODY_ERRORS}, auth=api_auth(CHANGE))
def work_item_create(request, payload: CreateWorkItemIn):
    """Create (and by default start) a work item (DOMAIN §8.1)."""
    data = payload.model_dump(exclude_unset=True)
    kwargs = {k: data[k] for k in ("acceptance_criteria", "work_dir", "work_item_type", "origin",
                                   "linked_session_ids", "id", "workflow") if k in data}
    item = services.work_item_create(
        title=payload.title, goal=payload.goal, start=payload.start, reuse_memory=payload.reuse_memory,
        trusted=request.auth.has_perm(DEFINE_WORKFLOWS), actor=actor_of(request), **kwargs,
    )
    return _detail_response(item.pk, 201)


@items.get("/work-items/{item_id}", response={200: WorkItemDetailOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_get(request, item_id: PathId):
    return _detail_response(item_id)


@items.patch("/work-items/{item_id}", response={200: WorkItemDetailOut, **ITEM_BODY_ERRORS},
             auth=api_auth(CHANGE))
def work_item_update(request, item_id: PathId, payload: UpdateWorkItemIn):
    """Edit title/goal/criteria/work_dir (DOMAIN §8.3); a contract change restarts from triage."""
    patch = payload.model_dump(exclude_unset=True)
    expected = patch.pop("expected_revision", None)
    item = services.work_item_update(item_id=item_id, patch=patch, expected_revision=expected,
                                     actor=actor_of(request))
    return _detail_response(item.pk)


@items.post("/work-items/{item_id}/start", response={200: WorkItemDetailOut, **ITEM_ERRORS}, auth=api_auth(CHANGE))
def work_item_start(request, item_id: PathId):
    item = services.work_item_start(item_id=item_id, actor=actor_of(request))
    return _detail_response(item.pk)


# The body is optional (absent ⇒ no state fence); when sent it is an object, as for retry below.
@items.post("/work-items/{item_id}/cancel", response={200: WorkItemDetailOut, **ITEM_BODY_ERRORS},
            auth=api_auth(CHANGE),
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}})
def work_item_cancel(request, item_id: PathId, payload: CancelIn = None):
    """Cancel the item (DOMAIN §8.4); with `expected_state_token` (the state_token a preview
    showed), refused with 409 state_changed, nothing done, if the item moved since."""
    item = services.work_item_cancel(item_id=item_id, actor=actor_of(request),
                                     expected_state_token=payload.expected_state_token if payload else None)
    return _detail_response(item.pk)


# The body is optional (absent ⇒ no answer), but when sent it is an object: ninja documents an
# optional body as "RetryIn or null", and the parser refuses null (`type` narrows the anyOf).
@items.post("/work-items/{item_id}/retry", response={200: WorkItemDetailOut, **ITEM_BODY_ERRORS},
            auth=api_auth(CHANGE),
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}})
def work_item_retry(request, item_id: PathId, payload: RetryIn = None):
    """Resume a waiting (with `answer`, or `answers`: one per waiting stage) or needs_attention item
    (DOMAIN §8.6); with `expected_state_token` (the retry-preview's state_token), refused with
    409 state_changed, nothing done, if the item moved since."""
    answers = None
    if payload is not None and payload.answers is not None:
        answers = [{"action_id": a.action_id, "answer": a.answer} for a in payload.answers]
    item = services.work_item_retry(item_id=item_id, answer=payload.answer if payload else None,
                                    answers=answers, actor=actor_of(request),
                                    expected_state_token=payload.expected_state_token if payload else None)
    return _detail_response(item.pk)


@items.get("/work-items/{item_id}/retry-preview", response={200: RetryPreviewOut, **ITEM_ERRORS},
           auth=api_auth(VIEW))
def work_item_retry_preview(request, item_id: PathId, params: Query[RetryPreviewQuery]):
    """What a retry would do, computed by the retry's own code path without writing; with
    `action_id` (repeatable), what an `answers` retry naming those stages would do."""
    return services.work_item_retry_preview(item_id=item_id, action_ids=params.action_id or None)


@items.post("/work-items/{item_id}/guidance", response={200: WorkItemDetailOut, **ITEM_BODY_ERRORS},
            auth=api_auth(CHANGE))
def work_item_guide(request, item_id: PathId, payload: GuidanceIn):
    """Restart the current action with the user's guidance (DOMAIN §8.5)."""
    item = services.work_item_guide(item_id=item_id, guidance=payload.guidance, action_id=payload.action_id,
                                    revision=payload.revision, actor=actor_of(request))
    return _detail_response(item.pk)


@items.get("/work-items/{item_id}/graph", response={200: GraphOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_graph(request, item_id: PathId):
    """Canonical node per stage, dependency edges, leases and why ready nodes wait."""
    return selectors.graph_snapshot(item_id)


@items.get("/work-items/{item_id}/state", response={200: ItemStateOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_state(request, item_id: PathId):
    """The item's whole state as the per-item stream pushes it (graph, item fields, actions, runs)
    and its `rev`: what a page reads back after a gap in the stream's diffs."""
    last = selectors.item_last_event_id(item_id)  # before the state: an event in between is replayed, never lost
    return HttpResponse(render.dumps(item_page_state.read(item_id).full(last)), content_type="application/json")


@items.get("/work-items/{item_id}/actions/{action_id}/instruction",
           response={200: ActionInstructionOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_action_instruction(request, item_id: PathId, action_id: PathId):
    """An action's instruction, brief and context: the texts the item's state leaves out, read
    when the work-item page's side panel opens the stage."""
    return item_page_state.instruction(item_id, action_id)


@items.get("/work-items/{item_id}/stages/{stage_id}/runs",
           response={200: StageRunsOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_stage_runs(request, item_id: PathId, stage_id: PathId):
    """Every run of one stage, whole (response, evidence, uncut summary and error): what the
    work-item page's side panel reads when it shows the stage, the item's state leaving them out."""
    return item_page_state.stage_runs(item_id, stage_id)


def _event_page(events: list, after_id: int) -> dict:
    return {"events": events, "last_id": events[-1].id if events else after_id}


@items.get("/work-items/{item_id}/events", response={200: EventPageOut, **ITEM_ERRORS}, auth=api_auth(VIEW))
def work_item_events(request, item_id: PathId, params: Query[EventsQuery]):
    """Events of one item with id > after_id, oldest first: the catch-up path of live clients."""
    events = selectors.work_item_events(item_id=item_id, after_id=params.after_id, limit=params.limit)
    return _event_page(events, params.after_id)


@items.get("/events", response={200: EventPageOut, **ERRORS}, auth=api_auth(VIEW))
def events_list(request, params: Query[EventsQuery]):
    """Events of every item with id > after_id, oldest first."""
    events = selectors.events_after(after_id=params.after_id, limit=params.limit)
    return _event_page(events, params.after_id)


# --- worker protocol (API.md §3) -----------------------------------------------------------------

worker = Router(tags=["worker protocol"], auth=api_auth(RUN_ACTIONS))


@worker.post("/claims", response={201: ClaimOut, 204: None, **WORKER_ERRORS})
def action_claim(request, payload: ClaimIn):
    """Claim at most one ready action: 201 with the run holding the lease, 204 when nothing is claimable."""
    with CLAIM_SECONDS.time():
        claim, hints = _claim_out(payload)
        waiting = getattr(request, "scope", {}).get(CLAIM_HINTS)  # a long-poll claim runs this attempt
        if waiting is not None:
            waiting.update(hints)
        return HttpResponse(status=204) if claim is None else render.response(ClaimOut, claim, 201)


def _claim_out(payload: ClaimIn) -> tuple[dict | None, dict]:
    """Claim at most one ready action: what ClaimOut renders, or None when nothing is claimable;
    and the hints for a long-poll claim (CLAIM_HINTS, services.claim_attempt): `contended` when
    nothing was claimed but a candidate another transaction held was skipped, `more` when another
    action was claimable beside the one claimed."""
    claim, contended = services.claim_attempt(owner_boot_id=payload.owner_boot_id, lease_ms=payload.lease_ms)
    if claim is None:
        return None, {"contended": bool(contended), "more": False}
    detail = _detail(claim.work_item.pk)
    return {
        "work_item": detail,
        "action": detail.action(claim.action.pk),
        "run": claim.run,
        "dependencies": selectors.claim_dependencies(claim.action, claim.work_item, actions=detail.actions,
                                                     runs=detail.runs),
    }, {"contended": False, "more": bool(claim.more)}


@worker.post("/runs/{run_id}/renew", response={200: RenewOut, **WORKER_ERRORS})
def run_renew(request, run_id: PathId, payload: RenewIn):
    run = services.run_renew(run_id=run_id, owner_boot_id=payload.owner_boot_id, lease_epoch=payload.lease_epoch,
                             lease_ms=payload.lease_ms)
    if run is None:
        raise stale_run(run_id, payload)
    return {"expires_at": run.expires_at}


@worker.post("/runs/{run_id}/progress", response={200: RunResultOut, **WORKER_ERRORS})
def run_progress(request, run_id: PathId, payload: ProgressIn):
    """Overwrite the run's response, counters and checkpoint (live lease required)."""
    progress = payload.model_dump(exclude_unset=True, exclude={"owner_boot_id", "lease_epoch"})
    run = services.run_progress(run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                lease_epoch=payload.lease_epoch, progress=progress)
    if run is None:
        raise stale_run(run_id, payload)
    return {"run": run}


@worker.post("/runs/{run_id}/submit", response={200: SubmitOut, **WORKER_ERRORS})
def run_submit(request, run_id: PathId, payload: SubmitIn):
    """Terminal submission (DOMAIN §7). Validation failures become a failed run, not an HTTP error.
    With `claim_next`, the worker's next claim follows in the same request once the submission
    has committed (`next`); a claim that fails for any reason leaves the submission as it is and
    answers `next: null`. Sent again with the fence of a submission already applied (its answer
    was lost), it answers 200 as applied with the stored run (whatever this body says) and writes
    nothing; `next` is then the claim the lost answer carried (services.run_unseen_claim), else
    a claim made now."""
    with SUBMIT_SECONDS.time():
        return _submit(run_id, payload)


def _submit(run_id: str, payload: SubmitIn) -> HttpResponse:
    result = payload.model_dump(exclude_unset=True, exclude={"owner_boot_id", "lease_epoch", "claim_next"})
    submission = services.run_submit(run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                     lease_epoch=payload.lease_epoch, result=result)
    run, action, item = submission
    detail = _detail(item.pk)
    following = None
    if payload.claim_next is not None:
        try:
            if isinstance(submission, AppliedSubmission):  # the lost answer's claim, else a new one
                following = _unseen_claim_out(run, payload.claim_next) or _claim_out(payload.claim_next)[0]
            else:
                following = _claim_out(payload.claim_next)[0]  # nothing, or contended: the worker long-polls
        except Exception:  # committed already: the worker claims again on its own
            logger.exception("claim_next after run %s failed", run_id)
    return render.response(SubmitOut, {"run": run, "action": detail.action(action.pk), "work_item": detail,
                                       "next": following})


def _unseen_claim_out(run, claim_next) -> dict | None:
    """What ClaimOut renders for services.run_unseen_claim (a submission sent again)."""
    claim = services.run_unseen_claim(run=run, owner_boot_id=claim_next.owner_boot_id)
    if claim is None:
        return None
    detail = _detail(claim.work_item.pk)
    return {"work_item": detail, "action": detail.action(claim.action.pk), "run": claim.run,
            "dependencies": selectors.claim_dependencies(claim.action, claim.work_item, actions=detail.actions,
                                                         runs=detail.runs)}


@worker.post("/runs/{run_id}/interrupt", response={200: InterruptOut, **WORKER_ERRORS})
def run_interrupt(request, run_id: PathId, payload: InterruptIn):
    """Stop a run (expiry ignored); `interrupted: false` when the run no longer holds the action."""
    kwargs = {"reason": payload.reason} if payload.reason is not None else {}
    interrupted = services.run_interrupt(run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                         lease_epoch=payload.lease_epoch, final_progress=payload.final_progress,
                                         **kwargs)
    return {"interrupted": interrupted}


@worker.post("/recoveries", response={200: RecoveryOut, **WORKER_ERRORS})
def runs_recover(request, payload: RecoveryIn):
    """One recovery pass (DOMAIN §9.2) on behalf of the worker with this boot id."""
    return {"recovered": services.runs_recover(current_boot_id=payload.owner_boot_id,
                                               expired_only=payload.expired_only)}


@worker.post("/runs/{run_id}/integration", response={200: ActionResultOut, **WORKER_ERRORS})
def integration_set_workspace(request, run_id: PathId, payload: IntegrationWorkspaceIn):
    action = services.integration_set_workspace(action_id=None, run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                                lease_epoch=payload.lease_epoch, workspace=payload.workspace)
    if action is None:
        raise stale_run(run_id, payload, integration=True)
    return {"action": selectors.action_with_stats(action)}


@worker.post("/runs/{run_id}/integration/reservation", response={200: ReservationOut, **WORKER_ERRORS})
def integration_acquire(request, run_id: PathId, payload: ReservationIn):
    """Reserve a prepared integration for finalization; the run's lease moves to the same expiry."""
    reservation = services.integration_acquire(action_id=None, run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                               lease_epoch=payload.lease_epoch,
                                               reservation_ms=payload.reservation_ms)
    if reservation is None:
        raise stale_run(run_id, payload, integration=True)
    return {"token": reservation.token, "expires_at": reservation.expires_at,
            "action": selectors.action_with_stats(reservation.action)}


@worker.post("/runs/{run_id}/integration/finish", response={200: ActionResultOut, **WORKER_ERRORS})
def integration_finish(request, run_id: PathId, payload: IntegrationFinishIn):
    action = services.integration_finish(action_id=None, run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                         lease_epoch=payload.lease_epoch, token=payload.token,
                                         workspace=payload.workspace)
    if action is None:
        raise stale_run(run_id, payload, integration=True)
    return {"action": selectors.action_with_stats(action)}


@worker.post("/runs/{run_id}/integration/rollback", response={200: ActionResultOut, **WORKER_ERRORS})
def integration_rollback(request, run_id: PathId, payload: IntegrationRollbackIn):
    action = services.integration_rollback(action_id=None, run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                           lease_epoch=payload.lease_epoch, token=payload.token)
    if action is None:
        raise stale_run(run_id, payload, integration=True)
    return {"action": selectors.action_with_stats(action)}


api.add_router("", items)
api.add_router("", worker)
api.add_router("", inbox_router)
api.add_router("", webhooks_router)
api.add_router("", run_logs_router)
