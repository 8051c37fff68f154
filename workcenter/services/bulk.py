"""Retry or cancel many work items at once: a preview that writes nothing, then the operation.

The preview answers one row per id with what the single operation would do now (retry: the
same planning code as `work_item_retry_preview`; cancel: the running runs it stops). Applying
runs each row as its own transaction through the single services (`work_item_retry`,
`work_item_cancel`), fenced by what the preview showed: its revision (the contract) and its state
token (services/state_tokens.py: the item's newest event, moved by a claim, a failure, a retry…).
The checks and the change happen under the item's row lock in one transaction, so a row that
changed meanwhile is refused alone (revision_conflict, or state_changed saying what happened since)
and the others still apply. The reason is kept in each row's event (`reason` in its data).

A waiting item's retry needs an answer: its preview row is allowed, lists the stages that wait
with their questions (`waiting_stages`, as the single retry-preview has them), and its message
says so. The apply gives it the request's `answers` for that item (one per waiting stage, the
single retry's `answers` form) or the request's one `answer`; without either the row is refused.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import DatabaseError

from ..choices import OPEN_ACTION_STATUSES
from ..errors import InvalidInput, RevisionConflict, WorkcenterError
from ..models import Action, Run, RunStatus, WorkItem, WorkItemStatus
from ..domain import rules
from ..domain.work_item_input import clean_answers
from .common import resolve_now
from .state_tokens import state_tokens
from .work_items import not_retryable_message, work_item_cancel, work_item_retry, work_item_retry_preview

OPERATIONS = ("retry", "cancel")
MAX_IDS = 200
RETRYABLE = (WorkItemStatus.WAITING, WorkItemStatus.NEEDS_ATTENTION)


def check_request(operation: Any, ids: Any) -> list[str]:
    """The ids of a bulk request, refused as a whole (InvalidInput, nothing read or written)
    unless the operation is known and the ids are 1 to 200 distinct non-empty strings."""
    if operation not in OPERATIONS:
        raise InvalidInput(f"operation must be one of {', '.join(OPERATIONS)}", fields=["operation"])
    if not isinstance(ids, list) or not ids or len(ids) > MAX_IDS:
        raise InvalidInput(f"ids must list 1 to {MAX_IDS} work item ids", fields=["ids"])
    seen: set[str] = set()
    for item_id in ids:
        if not isinstance(item_id, str) or not item_id:
            raise InvalidInput("each of ids must be a non-empty string", fields=["ids"])
        if item_id in seen:
            raise InvalidInput(f"ids must be distinct: {item_id} is listed twice", fields=["ids"])
        seen.add(item_id)
    return list(ids)


def _row(item_id: str, item: WorkItem | None, *, allowed: bool = False, code: str | None = None,
         message: str | None = None) -> dict:
    return {"id": item_id, "title": item.title if item else None, "status": item.status if item else None,
            "revision": item.revision if item else None, "state_token": None, "allowed": allowed, "code": code, "message": message,
            "reset_stage_ids": [], "reset_action_ids": [], "new_action": False, "stops": [], "waiting_stages": []}


def _stops(runs: list[Run]) -> list[dict]:
    return [{"run_id": r.pk, "action_id": r.action_id, "stage_id": r.action.effective_stage_id,
             "owner_boot_id": r.owner_boot_id, "lease_epoch": r.lease_epoch} for r in runs]


def _running_runs(**filters) -> list[Run]:
    return list(Run.objects.filter(status=RunStatus.RUNNING, **filters).select_related("action")
                .order_by("started_at", "pk"))


def _retry_row(item: WorkItem, now: datetime) -> dict:
    if item.status not in RETRYABLE:
        return _row(item.pk, item, code="invalid_state", message=not_retryable_message(item.status))
    try:
        preview = work_item_retry_preview(item_id=item.pk, now=now)
    except WorkcenterError as exc:
        return _row(item.pk, item, code=exc.code, message=exc.message)
    row = _row(item.pk, item, allowed=True)
    reset = preview["reset_action_ids"]
    stages = {pk: stage or kind for pk, stage, kind in
              Action.objects.filter(pk__in=reset).values_list("pk", "stage_id", "type")} if reset else {}
    row["reset_action_ids"] = list(reset)
    row["reset_stage_ids"] = [stages.get(a) for a in reset]
    row["new_action"] = bool(preview["new_action"])
    superseded = preview["superseded_run_ids"]
    runs = {r.pk: r for r in _running_runs(pk__in=superseded)} if superseded else {}
    row["stops"] = _stops([runs[r] for r in superseded if r in runs])
    stage = preview["target_stage_id"]
    row["waiting_stages"] = [{k: w[k] for k in ("action_id", "stage_id", "run_id", "waiting_reason", "waiting_since",
                                                "reset_action_ids")} for w in preview["waiting_stages"]]
    if item.status == WorkItemStatus.WAITING:
        waiting = len(preview["waiting_stages"])
        row["message"] = (f"{waiting} stages wait for an answer: each is given its own" if waiting > 1
                          else f"stage {stage} waits for an answer: the retry gives it yours")
    else:
        dependents = len(reset) - 1
        row["message"] = (f"starts stage {stage} again as a new attempt" if row["new_action"]
                          else f"starts stage {stage} again" + (f" with {dependents} stage(s) after it" if dependents
                                                                else ""))
    return row


def _cancel_rows(items: list[WorkItem], now: datetime) -> dict[str, dict]:
    """Cancel rows of several items in two reads: their open actions (reservations) and their
    running runs (what the cancel stops)."""
    open_ids = [i.pk for i in items if i.status not in (WorkItemStatus.DONE, WorkItemStatus.CANCELLED)]
    reserved = {a.work_item_id for a in Action.objects.filter(work_item_id__in=open_ids,
                                                              status__in=OPEN_ACTION_STATUSES)
                if rules.has_live_reservation(a, now)}
    runs: dict[str, list[Run]] = {}
    for run in _running_runs(work_item_id__in=open_ids):
        runs.setdefault(run.work_item_id, []).append(run)
    out = {}
    for item in items:
        if item.status == WorkItemStatus.DONE:
            out[item.pk] = _row(item.pk, item, code="invalid_state", message="it is done: a completed item cannot "
                                                                                 "be cancelled")
        elif item.status == WorkItemStatus.CANCELLED:
            out[item.pk] = _row(item.pk, item, code="invalid_state", message="it is already cancelled")
        elif item.pk in reserved:
            out[item.pk] = _row(item.pk, item, code="reservation_active",
                                message="an integration is being finalized (its reservation is live); try later")
        else:
            row = out[item.pk] = _row(item.pk, item, allowed=True)
            row["stops"] = _stops(runs.get(item.pk, []))
            n = len(row["stops"])
            row["message"] = f"cancels it and stops {n} running run(s)" if n else "cancels it"
    return out


def work_items_bulk_preview(*, operation: Any, ids: Any, now: datetime | None = None) -> dict:
    """{operation, rows}: what `work_items_bulk_apply` would do to each id now, in the order of `ids`.
    Nothing is written (each retry row is its item's `work_item_retry_preview`). Each row's
    `state_token` is read first: whatever changes the item while the rest is read moves it."""
    ids = check_request(operation, ids)
    now = resolve_now(now)
    tokens = state_tokens(ids)
    items = {i.pk: i for i in WorkItem.objects.filter(pk__in=ids)}
    cancel = _cancel_rows(list(items.values()), now) if operation == "cancel" else {}
    rows = []
    for item_id in ids:
        item = items.get(item_id)
        if item is None:
            rows.append(_row(item_id, None, code="not_found", message=f"no work item has the id {item_id}"))
        elif operation == "retry":
            rows.append(_retry_row(item, now))
        else:
            rows.append(cancel[item_id])
        if item is not None:
            rows[-1]["state_token"] = tokens[item_id]
    return {"operation": operation, "rows": rows}


MAX_TOKEN = 2**63 - 1  # event ids are 64-bit


def _check_map(ids: list[str], value: Any, field: str, what: str, top: int) -> None:
    """`value` maps every id, and nothing else, to an integer in [0, top] (what the preview showed)."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must map every id to the {what} the preview showed", fields=[field])
    missing = [i for i in ids if i not in value]
    if missing:
        raise InvalidInput(f"{field} must give the {what} the preview showed for every id; missing: "
                           + ", ".join(missing[:10]) + (" …" if len(missing) > 10 else ""), fields=[field])
    extra = [k for k in value if k not in set(ids)]
    if extra:
        raise InvalidInput(f"{field} names ids that are not in ids: " + ", ".join(map(str, extra[:10])), fields=[field])
    for item_id in ids:
        v = value[item_id]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise InvalidInput(f"{field}[{item_id}] must be an integer from 0 to {top}", fields=[field])


def _check_answers(operation: str, ids: list[str], answer: Any, answers: Any) -> None:
    if answers is None:
        return
    if answer is not None:
        raise InvalidInput("give either answer or answers, not both", fields=["answer", "answers"])
    if operation != "retry":
        raise InvalidInput("answers go with a retry only", fields=["answers"])
    if not isinstance(answers, dict):
        raise InvalidInput("answers must map work item ids to their [{action_id, answer}]", fields=["answers"])
    extra = [k for k in answers if k not in set(ids)]
    if extra:
        raise InvalidInput("answers names ids that are not in ids: " + ", ".join(map(str, extra[:10])), fields=["answers"])
    for entries in answers.values():
        clean_answers(entries)  # each item's list as the single retry takes it (422 otherwise)


def _check_apply(ids: list[str], reason: Any, expected_revisions: Any, expected_state_tokens: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason is required: say why these items are retried or cancelled", fields=["reason"])
    _check_map(ids, expected_revisions, "expected_revisions", "revision", 2**31 - 1)
    if expected_state_tokens is not None:
        _check_map(ids, expected_state_tokens, "expected_state_tokens", "state token", MAX_TOKEN)
    return reason.strip()


def work_items_bulk_apply(*, operation: Any, ids: Any, reason: Any, expected_revisions: Any, answer: str | None = None,
                          answers: dict[str, list[dict]] | None = None, expected_state_tokens: Any = None,
                          actor: str = "system", now: datetime | None = None) -> dict:
    """{operation, results}: each row applied in its own transaction, in the order of `ids`;
    each result {id, ok, code, message}. A bad request is refused as a whole before any row.
    `expected_state_tokens` ({id: the row's state_token}; None: no state fence) refuses a row
    whose item moved since the preview (state_changed), its message saying what happened.
    `answers` ({id: [{action_id, answer}]}, instead of `answer`): retry: each item it names is
    retried with its own answers, one per waiting stage, as the single retry's `answers` form."""
    ids = check_request(operation, ids)
    reason = _check_apply(ids, reason, expected_revisions, expected_state_tokens)
    _check_answers(operation, ids, answer, answers)
    results = []
    for item_id in ids:
        expected = expected_revisions[item_id]
        token = expected_state_tokens[item_id] if expected_state_tokens is not None else None
        try:
            if operation == "retry" and answers and item_id in answers:
                work_item_retry(item_id=item_id, answers=answers[item_id], expected_revision=expected,
                                expected_state_token=token, reason=reason, actor=actor, now=now)
            elif operation == "retry":
                work_item_retry(item_id=item_id, answer=answer, answer_for_waiting_only=True,
                                expected_revision=expected, expected_state_token=token, reason=reason,
                                actor=actor, now=now)
            else:
                work_item_cancel(item_id=item_id, expected_revision=expected, expected_state_token=token,
                                 reason=reason, refuse_cancelled=True, actor=actor, now=now)
        except RevisionConflict as exc:
            current = exc.extra.get("revision")
            results.append(_result(item_id, "revision_conflict",
                                   f"changed since the preview (revision {expected} → {current}); "
                                   "nothing was done to it"))
        except WorkcenterError as exc:
            results.append(_result(item_id, exc.code, f"{exc.message}; nothing was done to it"))
        except DatabaseError as exc:  # its transaction rolled back; the other rows stand
            results.append(_result(item_id, "internal_error",
                                   f"the store refused the change ({type(exc).__name__}); nothing was done to it"))
        else:
            results.append({"id": item_id, "ok": True, "code": None, "message": None})
    return {"operation": operation, "results": results}


def _result(item_id: str, code: str, message: str) -> dict:
    return {"id": item_id, "ok": False, "code": code, "message": message}
