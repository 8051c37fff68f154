"""State tokens: what a preview showed of an item, so that the change it leads to can be fenced by it.

An item's revision (DOMAIN §2.1) is its contract's: a claim, a submit, a failure, a retry or a
cancel leave it alone. The state token is the id of the item's newest event (0 for an item with
none). Every transition of the item, its actions or its runs appends an event in the transaction
that makes it, under the item's row lock (claims, submits, interrupts, recoveries, retries,
cancels, edits, guidance, admin repairs); renewals and progress reports append none and leave it.
Event ids only grow, and the events of one item are written one transaction at a time (its row
lock), so an event of the item committed after a token was read has a greater id: the item moved
since the token exactly when it has an event after it.

`check_state_token` is the fence: called under the item's row lock, in the transaction that then
writes, it refuses (StateChanged) an item with events after the expected token and says in words
what happened since.
"""
from __future__ import annotations

from django.db.models import Max

from ..errors import StateChanged
from ..event_types import EventType
from ..models import Action, Event, WorkItem

# what each event says happened, in words: (with its stage, without one, whether it names its actor)
_PHRASES = {
    EventType.RUN_CLAIMED: ("stage {s} was claimed", "a stage was claimed", False),
    EventType.ACTION_COMPLETED: ("stage {s} completed", "a stage completed", False),
    EventType.WORK_ITEM_COMPLETED: ("it completed", "it completed", False),
    EventType.REVIEW_CHANGES_REQUESTED: ("a review asked for changes", "a review asked for changes", False),
    EventType.ACTION_WAITING: ("stage {s} asked for an answer", "a stage asked for an answer", False),
    EventType.ACTION_FAILED: ("a run of stage {s} failed", "a run failed", False),
    EventType.ACTION_RETRY_EXHAUSTED: ("a run of stage {s} failed", "a run failed", False),
    EventType.ACTION_RETRY_SCHEDULED: ("a run of stage {s} asked to be retried", "a run asked to be retried", False),
    EventType.RUN_INTERRUPTED: ("a run of stage {s} was interrupted", "a run was interrupted", False),
    EventType.RUN_STALE_RECOVERED: ("a stale run of stage {s} was recovered", "a stale run was recovered", False),
    EventType.WORK_ITEM_RETRIED: ("retried", "retried", True),
    EventType.WORK_ITEM_CANCELLED: ("cancelled", "cancelled", True),
    EventType.WORK_ITEM_STARTED: ("started", "started", True),
    EventType.WORK_ITEM_UPDATED: ("its contract was edited", "its contract was edited", True),
    EventType.WORKFLOW_RETRIAGED: ("its contract was edited", "its contract was edited", True),
    EventType.ACTION_GUIDANCE_ADDED: ("guidance was added", "guidance was added", True),
    EventType.RUN_RELEASED: ("a run of stage {s} was released", "a run was released", True),
    EventType.ACTION_RESET: ("stage {s} was reset", "a stage was reset", True),
    EventType.ACTION_MARKED_FAILED: ("stage {s} was marked failed", "a stage was marked failed", True),
    EventType.ACTION_EDITED: ("stage {s} was edited", "a stage was edited", True),
}


def state_token(item_id: str) -> int:
    """The item's state token now: the id of its newest event (0 if it has none)."""
    return Event.objects.filter(work_item_id=item_id).aggregate(m=Max("id"))["m"] or 0


def state_tokens(item_ids: list[str]) -> dict[str, int]:
    """{id: state token} of several items in one read (an id with no event: 0; unknown ids too).
    Read it before what it fences is read: a change in between then shows as an event after it."""
    found = dict(Event.objects.filter(work_item_id__in=item_ids).values("work_item_id")
                 .annotate(m=Max("id")).values_list("work_item_id", "m"))
    return {i: found.get(i) or 0 for i in item_ids}


MAX_DESCRIBED = 200  # the events after the token a refusal reads to say what happened (the oldest)


def check_state_token(item: WorkItem, expected: int | None) -> None:
    """The state fence of a caller that previewed the item at token `expected` (None: no fence).
    Call it with the item's row locked, in the transaction that then writes."""
    if expected is None:
        return
    events = list(Event.objects.filter(work_item_id=item.pk, id__gt=expected).order_by("id")
                  .only("id", "type", "actor", "action_id")[:MAX_DESCRIBED])
    if not events:
        return
    current = events[-1].id if len(events) < MAX_DESCRIBED else state_token(item.pk)
    raise StateChanged(f"{describe(events)} since the preview",
                       extra={"state_token": current, "expected_state_token": expected,
                              "events": [e.type for e in events[:20]]})


def describe(events: list[Event]) -> str:
    """What the events say happened, in words, in their order, each phrase once: "stage build
    was claimed, a run of stage build failed and retried by user:bob"."""
    action_ids = {e.action_id for e in events if e.action_id}
    stages = ({pk: stage or kind for pk, stage, kind in
               Action.objects.filter(pk__in=action_ids).values_list("pk", "stage_id", "type")}
              if action_ids else {})
    phrases: list[str] = []
    for event in events:
        with_stage, without, named = _PHRASES.get(event.type, (event.type, event.type, False))
        stage = stages.get(event.action_id)
        text = with_stage.format(s=stage) if stage else without
        if named:
            text = f"{text} by {event.actor or 'system'}"
        if text not in phrases:
            phrases.append(text)
    if len(phrases) > 6:
        phrases = phrases[:5] + [f"{len(phrases) - 5} more changes"]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
