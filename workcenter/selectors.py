"""Reads (DOMAIN §12.10): lists, details, events, execution statistics."""
from __future__ import annotations

from django.db.models import Count, Q, Sum

from .models import COUNTER_FIELDS, Action, Event, Run, WorkItem
from .errors import NotFound


def clamp_limit(limit, default: int = 100, maximum: int = 500) -> int:
    try:
        value = int(limit)
    except (TypeError, ValueError):
        return default
    if value <= 0:
        return default
    return max(1, min(maximum, value))


def _stats_from(row: dict, prefix: str = "") -> dict:
    return {f: int(row.get(prefix + f) or 0) for f in COUNTER_FIELDS}


def stats_by_item(item_ids: list[str]) -> dict[str, dict]:
    rows = Run.objects.filter(work_item_id__in=item_ids).values("work_item_id").annotate(
        **{f: Sum(f) for f in COUNTER_FIELDS})
    out = {i: {f: 0 for f in COUNTER_FIELDS} for i in item_ids}
    for r in rows:
        out[r["work_item_id"]] = _stats_from(r)
    return out


def stats_by_action(item_id: str) -> dict[str, dict]:
    rows = Run.objects.filter(work_item_id=item_id).values("action_id").annotate(**{f: Sum(f) for f in COUNTER_FIELDS})
    return {r["action_id"]: _stats_from(r) for r in rows}


def action_counts_by_item(item_ids: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {i: {} for i in item_ids}
    for r in Action.objects.filter(work_item_id__in=item_ids).values("work_item_id", "status").annotate(n=Count("id")):
        out[r["work_item_id"]][r["status"]] = r["n"]
    return out


def work_item_list(*, status: str | None = None, session_id: str | None = None, search: str | None = None,
                   limit=None) -> tuple[list[WorkItem], int]:
    """Items newest `updated_at` first with execution stats; returns (page, total matching)."""
    qs = WorkItem.objects.all()
    if status:
        qs = qs.filter(status=status)
    if search:
        qs = qs.filter(Q(title__icontains=search) | Q(goal__icontains=search))
    items = qs.order_by("-updated_at", "pk")
    if session_id:
        # exact match on origin.session_id or an element of linked_session_ids (JSON, portable check)
        matched = [i for i in items if (i.origin or {}).get("session_id") == session_id
                   or session_id in (i.linked_session_ids or [])]
        total = len(matched)
        page = matched[: clamp_limit(limit)]
    else:
        total = items.count()
        page = list(items[: clamp_limit(limit)])
    ids = [i.pk for i in page]
    stats = stats_by_item(ids)
    counts = action_counts_by_item(ids)
    for i in page:
        i.execution_stats = stats[i.pk]
        i.action_counts = counts[i.pk]
    return page, total


def work_item_get(item_id: str) -> WorkItem:
    item = WorkItem.objects.filter(pk=item_id).first()
    if item is None:
        raise NotFound(f"WorkItem not found: {item_id}", extra={"id": item_id})
    return item


def work_item_detail(item_id: str) -> dict:
    """The item, its actions by sequence, runs newest first, newest 500 events, with stats."""
    item = work_item_get(item_id)
    actions = list(Action.objects.filter(work_item_id=item_id).order_by("sequence"))
    runs = list(Run.objects.filter(work_item_id=item_id).order_by("-started_at", "-pk"))
    events = list(Event.objects.filter(work_item_id=item_id).order_by("-id")[:500])
    per_action = stats_by_action(item_id)
    zero = {f: 0 for f in COUNTER_FIELDS}
    for a in actions:
        a.execution_stats = per_action.get(a.pk, dict(zero))
    item.execution_stats = {f: sum(s[f] for s in per_action.values()) for f in COUNTER_FIELDS}
    return {"item": item, "actions": actions, "runs": runs, "events": events}


def events_after(*, after_id: int = 0, item_id: str | None = None, limit=None) -> list[Event]:
    qs = Event.objects.filter(id__gt=int(after_id or 0))
    if item_id is not None:
        qs = qs.filter(work_item_id=item_id)
    return list(qs.order_by("id")[: clamp_limit(limit, default=200, maximum=1000)])


def completed_runs(item_id: str) -> list[Run]:
    return list(Run.objects.filter(work_item_id=item_id).exclude(status="running")
                .select_related("action").order_by("ended_at", "started_at"))


def action_resume_context(action_id: str, exclude_run_id: str | None = None) -> dict | None:
    """DOMAIN §9.3: bounded resume data from the action's interrupted/retryable runs."""
    from .services.normalize import normalize_checkpoint

    runs = list(Run.objects.filter(action_id=action_id, status__in=("interrupted", "retryable"))
                .exclude(pk=exclude_run_id or "").order_by("-ended_at", "-started_at"))
    if not runs:
        return None
    newest = runs[0]
    response = next((r.response for r in runs if r.response), "")
    tool_events = []
    for r in reversed(runs):
        tool_events += list(((r.checkpoint or {}).get("tool_events") or []))
    if not response and not newest.error and not tool_events:
        return None
    return {"status": newest.status, "error": newest.error, "response": response,
            "checkpoint": normalize_checkpoint({"tool_events": tool_events})}
