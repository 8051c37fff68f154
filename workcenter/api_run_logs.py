"""A run's log: the worker's append (POST /runs/{id}/log, a fenced worker call), its reads
(GET /runs/{id}/log by page, /runs/{id}/log.txt whole) and the search across runs (GET /logs/search); with the answer of every worker call
that its fence refused (`stale_run`, used by the worker routes of api.py too)."""
from __future__ import annotations

from django.http import HttpResponse
from ninja import Query, Router

from . import run_logs, selectors
from .auth import RUN_ACTIONS, VIEW, api_auth
from .errors import StaleRun
from .schemas_in import LogSearchQuery, PathId, RunLogIn, RunLogQuery
from .schemas_out import ERRORS, ErrorOut, LogSearchOut, RunLogAppendOut, RunLogOut
from .services import run_logs as run_log_services

router = Router(tags=["run logs"])

WORKER_ERRORS = {**ERRORS, 409: ErrorOut, 413: ErrorOut}


def stale_run(run_id: str, payload, *, integration: bool = False) -> StaleRun:
    """The 409 for a worker call the service fenced out (it returned None), with the likely cause."""
    reason = selectors.run_fence_reason(run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                        lease_epoch=payload.lease_epoch)
    if integration:
        reason = ("stale integration: the Run lost its Run lease or its action is not a prepared "
                  f"integration with this reservation ({reason})")
    return StaleRun(reason, extra={"run_id": run_id})


@router.post("/runs/{run_id}/log", response={200: RunLogAppendOut, **WORKER_ERRORS}, auth=api_auth(RUN_ACTIONS),
             tags=["worker protocol"])
def run_log_append(request, run_id: PathId, payload: RunLogIn):
    """Append chunks of the run's output to its log, in order (live lease required; a stale
    fence writes nothing). Past the per-run cap the oldest chunks are dropped, and counted."""
    log = run_log_services.run_log_append(run_id=run_id, owner_boot_id=payload.owner_boot_id,
                                          lease_epoch=payload.lease_epoch,
                                          chunks=[c.model_dump() for c in payload.chunks])
    if log is None:
        raise stale_run(run_id, payload)
    return log


@router.get("/runs/{run_id}/log", response={200: RunLogOut, **ERRORS, 404: ErrorOut}, auth=api_auth(VIEW))
def run_log(request, run_id: PathId, query: Query[RunLogQuery]):
    """A page of the run's log: the chunks after `after` (follow it; with `before` too, those in
    between), the last ones before `before` (older output), or, with neither, the last ones (where a
    finished run's log opens)."""
    return run_logs.run_log_page(run_id, after=query.after, before=query.before, limit=query.limit)


@router.get("/runs/{run_id}/log.txt", response={200: None, **ERRORS, 404: ErrorOut}, auth=api_auth(VIEW))
def run_log_text(request, run_id: PathId):
    """The whole log kept, as text (a download): what was dropped, if anything, first."""
    # at most the per-run cap (WORKCENTER_RUN_LOG_MAX_BYTES): read whole, in the request's thread
    response = HttpResponse("".join(run_logs.run_log_text(run_id)), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run_id[:40]}.log"'
    return response


@router.get("/logs/search", response={200: LogSearchOut, **ERRORS}, auth=api_auth(VIEW))
def log_search(request, query: Query[LogSearchQuery]):
    """The runs whose logs hold a text (case-insensitive), newest match first: each with its item,
    stage and the matching lines with the lines around them; filtered like the list (status,
    workflow) and by when the text was printed."""
    return run_logs.search(query.q, statuses=selectors.parse_statuses(query.status), workflow=query.workflow,
                           since=query.since, until=query.until, limit=query.limit)
