"""The overview figures (API.md "GET /overview"): what runs, what waits, what finished lately.

`overview(now)` is a read of a handful of indexed statements; the live stream's publisher may call it
once a second. Every figure comes from stored rows:

* `counts`, `waiting`, `needs_attention`: work items by status (one GROUP BY over
  wc_item_status_updated_id);
* `running`: actions with status running (wc_action_queue);
* `oldest_wait_since` / `oldest_wait_item`: among the waiting items, the one that has waited
  longest. A waiting item waits since the earliest question still open: over its stages that
  wait now (a graph item's actions in status `waiting`; a linear item's current action, which
  asked and stays `completed`), the latest `action.waiting` event of each (a stage reset in place
  and asked again counts from its new question), and of those the earliest. An item without
  such an event (a repair or an import made it waiting) waits since its `updated_at`;
* `actions_finished_per_hour`: actions that completed — a run submitted `completed` — per hour,
  from their events: `action.completed`, plus `work_item.completed` and
  `review.changes_requested`, which a completed last linear stage and a completed review asking
  for changes record instead. 24 buckets, oldest first from `hours_from` (an hour boundary, 23
  hours before the current hour's start); the last is the current hour up to `now`;
* `finished_24h`: work items that reached done in (now − 24 h, now], by their finishing event: a
  linear item's `work_item.completed`, a graph item's `action.completed` written as it became
  done. A done item's `updated_at` is that event's time (both come from the finishing
  transaction's clock, and a done item is never written again), which finds the event through
  wc_event_item.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db.models import Count, Exists, OuterRef, Q

from . import clock
from .event_types import EventType
from .models import Action, ActionStatus, Event, WorkItem, WorkItemStatus

HOURS = 24
# the events of a run that completed its action (see the module's docstring)
ACTION_DONE = (EventType.ACTION_COMPLETED, EventType.WORK_ITEM_COMPLETED, EventType.REVIEW_CHANGES_REQUESTED)


def status_counts() -> dict[str, int]:
    """{status: n} of every work item, all seven statuses, in one GROUP BY."""
    counts = dict.fromkeys(WorkItemStatus.values, 0)
    for status, n in WorkItem.objects.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n"):
        counts[status] = int(n)
    return counts


def oldest_wait() -> tuple[datetime, str, str] | None:
    """(since, id, title) of the waiting item that has waited longest (see the module's
    docstring), in three reads that each touch only the waiting items' rows."""
    items = {pk: (title, current, updated) for pk, title, current, updated in
             WorkItem.objects.filter(status=WorkItemStatus.WAITING)
             .values_list("pk", "title", "current_action_id", "updated_at")}
    if not items:
        return None
    asking = {current: pk for pk, (_t, current, _u) in items.items() if current}
    asking.update(Action.objects.filter(status=ActionStatus.WAITING, work_item__status=WorkItemStatus.WAITING)
                  .values_list("pk", "work_item_id"))
    asked: dict[str, datetime] = {}  # action id ⇒ its latest question
    for action_id, created in (Event.objects.filter(type=EventType.ACTION_WAITING,
                                                    work_item__status=WorkItemStatus.WAITING)
                               .values_list("action_id", "created_at")):
        if action_id in asking and (action_id not in asked or created > asked[action_id]):
            asked[action_id] = created
    since = {pk: updated for pk, (_t, _c, updated) in items.items()}
    first: dict[str, datetime] = {}
    for action_id, created in asked.items():
        pk = asking[action_id]
        first[pk] = min(created, first.get(pk, created))
    since.update(first)
    pk = min(since, key=lambda k: (since[k], k))
    return since[pk], pk, items[pk][0]


def hour_start(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0)


def actions_per_hour(now: datetime) -> tuple[datetime, list[int]]:
    """(hours_from, actions finished per hour) in one statement over wc_event_type_created."""
    hours_from = hour_start(now) - timedelta(hours=HOURS - 1)
    bounds = [hours_from + timedelta(hours=h) for h in range(HOURS + 1)]
    sums = {f"h{h}": Count("pk", filter=Q(created_at__gte=bounds[h], created_at__lt=bounds[h + 1]))
            for h in range(HOURS)}
    row = Event.objects.filter(type__in=ACTION_DONE, created_at__gte=hours_from, created_at__lte=now).aggregate(**sums)
    return hours_from, [int(row[f"h{h}"] or 0) for h in range(HOURS)]


def finished_items(now: datetime) -> int:
    """Work items that reached done in (now − 24 h, now]: done items whose finishing event (a
    `work_item.completed`, or a graph's last `action.completed`, written with the item's
    `updated_at`) lies in that window. One statement: the done items of the window by
    wc_item_status_updated_id, each with an indexed look-up of its event (wc_event_item)."""
    finishing = Event.objects.filter(work_item_id=OuterRef("pk"), created_at=OuterRef("updated_at"),
                                     type__in=(EventType.WORK_ITEM_COMPLETED, EventType.ACTION_COMPLETED))
    return (WorkItem.objects.filter(status=WorkItemStatus.DONE, updated_at__gt=now - timedelta(hours=24),
                                    updated_at__lte=now)
            .filter(Exists(finishing)).count())


def overview(now: datetime | None = None) -> dict:
    """The overview as the API answers it (timestamps as `clock.iso_ms`), JSON-ready."""
    now = (now or clock.now()).astimezone(timezone.utc)  # hours are UTC hours
    counts = status_counts()
    running = Action.objects.filter(status=ActionStatus.RUNNING).count()
    oldest = oldest_wait() if counts[WorkItemStatus.WAITING] else None
    hours_from, per_hour = actions_per_hour(now)
    finished = finished_items(now)
    return {
        "running": running,
        "waiting": counts[WorkItemStatus.WAITING],
        "oldest_wait_since": clock.iso_ms(oldest[0]) if oldest else None,
        "oldest_wait_item": {"id": oldest[1], "title": oldest[2]} if oldest else None,
        "needs_attention": counts[WorkItemStatus.NEEDS_ATTENTION],
        "finished_24h": finished,
        "actions_finished_per_hour": per_hour,
        "hours_from": clock.iso_ms(hours_from),
        "counts": counts,
        "generated_at": clock.iso_ms(now),
    }
