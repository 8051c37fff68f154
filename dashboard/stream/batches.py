"""A batch rendered: the queued events someone listens to, with one stream read and one summary read
for the whole batch, as one group message per group in id order.

`listened` keeps the events and groups that may have members (probe.py); `render` reads every
event's previous ids (`selectors.events_previous_ids`) and its item's summary
(`selectors.work_item_summaries`) once for the batch, and the state of each item whose own group
listens (live_state.ItemStates: it rides on the item's last event of the batch, to that group
only), and returns the group messages for the send path (publisher.py). A group gets one message
per batch (up to STREAM_MESSAGE_EVENTS events each): a channel-layer send costs several Redis
round trips, whatever the message holds.
"""
from __future__ import annotations

import logging
from typing import Any

from workcenter import selectors
from workcenter.models import Event
from workcenter.render import render as render_out
from workcenter.schemas_out import WorkItemSummaryOut

from .batcher import close_connection
from .live_state import ItemStates
from .messages import (ITEMS_GROUP, STREAM_MESSAGE_EVENTS, encoded, event_message, groups_of, item_group,
                       stream_event, stream_events, with_state)
from .probe import may_have_members

logger = logging.getLogger("workcenter.events")


def listened(batch: list[tuple], members) -> list[tuple]:
    """The queued (event, layer) entries someone may listen to, by id, as (event, layer, groups)
    with only the groups that may have members: an in-memory layer knows its groups; any other is
    asked once for the batch (`members(layer, groups)`: the set that has members, or None when
    unknown)."""
    entries = []
    for event, layer in sorted(batch, key=lambda entry: entry[0].id):
        groups = groups_of(event.work_item_id)
        if may_have_members(layer, groups):  # a listener may have left since the commit
            entries.append((event, layer, groups))
    heard: dict[int, set | None] = {}
    for layer in {id(e[1]): e[1] for e in entries}.values():
        heard[id(layer)] = members(layer, sorted({g for e in entries if e[1] is layer for g in e[2]}))
    out = []
    for event, layer, groups in entries:
        known = heard[id(layer)]
        if known is not None:
            groups = [g for g in groups if g in known]
        if groups:
            out.append((event, layer, groups))
    return out


def item_states(states: ItemStates, layer, events_: list[tuple[Event, int]]) -> dict[str, dict]:
    """{item id: state} for the items among `events_` ((event, its item's previous stored id), in id
    order) whose own group has a listener."""
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    for event, item_prev_id in events_:
        firsts.setdefault(event.work_item_id, item_prev_id)
        lasts[event.work_item_id] = event.id
    heard = [i for i in lasts if may_have_members(layer, [item_group(i)])]  # (a batch's are probed already)
    if not heard:
        return {}
    return states.states({i: firsts[i] for i in heard}, {i: lasts[i] for i in heard})


def render(wanted: list[tuple], states: ItemStates, *, wait: bool = True) -> list[tuple[Any, str, dict]] | None:
    """The group messages of the `listened` entries, as (layer, group, message) in id order within
    each group. None, with nothing read, when `wait` is False and the stream key is busy; no
    messages when the database cannot be read (the consumers read those events back later)."""
    try:
        previous = selectors.events_previous_ids([w[0] for w in wanted], wait=wait)
        if previous is None:
            return None
        summaries = selectors.work_item_summaries({w[0].work_item_id for w in wanted})
    except Exception:  # the database is unreachable: these messages are lost, the cursor covers them
        logger.exception("reading the previous ids and summaries of events %s..%s failed",
                         wanted[0][0].id, wanted[-1][0].id)
        close_connection()
        return []
    by_layer: dict[int, dict] = {}
    for key, layer in {id(w[1]): w[1] for w in wanted}.items():
        try:
            by_layer[key] = item_states(states, layer, [(w[0], previous[w[0].id][1]) for w in wanted
                                                        if w[1] is layer and item_group(w[0].work_item_id) in w[2]])
        except Exception:  # the events still leave; a page without the state reads it back later
            logger.exception("reading the item states of events %s..%s failed", wanted[0][0].id, wanted[-1][0].id)
            by_layer[key] = {}
    rendered: dict[str, dict] = {}
    outgoing: dict[tuple[int, str], tuple[Any, list[dict]]] = {}  # (layer, group) -> envelopes, by id
    last_of = {(id(w[1]), w[0].work_item_id): w[0].id for w in wanted}
    for event, layer, groups in wanted:
        try:
            summary = rendered.get(event.work_item_id)
            if summary is None:
                item = summaries.get(event.work_item_id)
                if item is None:
                    logger.warning("event %s: work item %s is gone, not published", event.id, event.work_item_id)
                    continue
                summary = rendered[event.work_item_id] = render_out(WorkItemSummaryOut, item)
            envelope = stream_event(event, previous[event.id], event_message(event, summary))
            state = by_layer[id(layer)].get(event.work_item_id)
            plain = None
            for group in groups:
                if state is not None and group != ITEMS_GROUP and last_of[id(layer), event.work_item_id] == event.id:
                    message = encoded(with_state(envelope, state))  # the item's state rides on its last event here
                else:
                    message = plain = plain or encoded(envelope)
                outgoing.setdefault((id(layer), group), (layer, []))[1].append(message)
        except Exception:
            logger.exception("publishing event %s failed", event.id)
    out = []
    for (_, group), (layer, envelopes) in outgoing.items():
        for start in range(0, len(envelopes), STREAM_MESSAGE_EVENTS):
            out.append((layer, group, stream_events(envelopes[start:start + STREAM_MESSAGE_EVENTS])))
    return out
