"""The live stream's groups and the one builder of every message it carries (API.md §4).

The client messages (`hello_message`, `event_message`, `progress_message`) and the group
envelopes the consumers unwrap (`stream.event`, `stream.events`, `stream.progress`,
`stream.overview`, and `stream.run_log`, which wakes the followers of a run's log): a `stream.event` names the event's id and the previous stored ids (overall
and in its item), so that a consumer that missed one reads the hole back from the database. An
envelope leaves `encoded`: its client message as the JSON text the consumers send, encoded once
per process, not once per listening socket.
"""
from __future__ import annotations

import hashlib
import re

from workcenter import render as rendering
from workcenter import selectors
from workcenter.models import Event, Run
from workcenter.render import render
from workcenter.schemas_out import EventOut, WorkItemSummaryOut

ITEMS_GROUP = "workcenter.items"
PROGRESS_TAIL_CHARS = 2000
STREAM_MESSAGE_EVENTS = 100  # events in one group message at most
_GROUP_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def item_group(item_id: str) -> str:
    """`workcenter.item.<id>`; ids that a channel-layer group name cannot hold go by digest."""
    if _GROUP_SAFE.fullmatch(item_id):
        return f"workcenter.item.{item_id}"
    return "workcenter.item.h" + hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:40]


def run_log_group(run_id: str) -> str:
    """`workcenter.runlog.<digest>`: the pages that follow one run's log (run ids may be long)."""
    return "workcenter.runlog." + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40]


def stream_run_log(run_id: str, next_seq: int) -> dict:
    """The group envelope that wakes a run's log followers: chunks up to `next_seq` are stored."""
    return {"type": "stream.run_log", "run_id": run_id, "next_seq": next_seq}


def groups_of(item_id: str) -> list[str]:
    """The groups an event or progress report of this item goes to."""
    return [ITEMS_GROUP, item_group(item_id)]


def hello_message(last_event_id: int, graph: dict | None = None, *, state: dict | None = None,
                  overview: dict | None = None) -> dict:
    """`{"type": "hello", "last_event_id": int}`; the per-item stream's with `"graph": Graph` and
    the item's whole `state` (workcenter/item_page_state.py: its actions and runs without their
    long texts), the list stream's with `overview`."""
    hello = {"type": "hello", "last_event_id": last_event_id}
    if graph is not None:
        hello["graph"] = graph
    if state is not None:
        hello["state"] = state
    if overview is not None:
        hello["overview"] = overview
    return hello


def with_state(envelope: dict, state: dict) -> dict:
    """A copy of a `stream.event` envelope whose message carries the item's `state`."""
    return {**envelope, "message": {**envelope["message"], "state": state}}


def encoded(envelope: dict) -> dict:
    """The envelope with its client message as the JSON text the consumers send (`text`, in place
    of `message`): encoded once per process, not once per listening socket, and a string that a
    layer copies or packs whole."""
    out = {k: v for k, v in envelope.items() if k != "message"}
    out["text"] = rendering.dumps(envelope["message"]).decode("utf-8")
    return out


def event_message(event: Event, work_item=None) -> dict:
    """`{"type": "event", "event": Event, "work_item": WorkItemSummary}`, JSON-ready. `work_item`:
    the item's summary (`selectors.work_item_summaries`), or its rendered dict, or None to read it."""
    if work_item is None:
        work_item = selectors.work_item_summary(event.work_item_id)
    summary = work_item if isinstance(work_item, dict) else render(WorkItemSummaryOut, work_item)
    return {"type": "event", "event": render(EventOut, event), "work_item": summary}


def progress_message(run: Run) -> dict:
    """`{"type": "progress", ...}`: a worker's running output, transient (never stored)."""
    response = run.response or ""
    return {"type": "progress", "work_item_id": run.work_item_id, "action_id": run.action_id, "run_id": run.pk,
            "progress_revision": run.progress_revision, "response_tail": response[-PROGRESS_TAIL_CHARS:]}


def stream_event(event: Event, previous: tuple[int, int], message: dict) -> dict:
    """The group envelope of one event: its id and previous stored ids (overall, in its item)."""
    prev_id, item_prev_id = previous
    return {"type": "stream.event", "id": event.id, "prev_id": prev_id, "item_prev_id": item_prev_id,
            "message": message}


def stream_events(envelopes: list[dict]) -> dict:
    """Several `stream.event` envelopes of one batch in one group message (a lone one as itself)."""
    return envelopes[0] if len(envelopes) == 1 else {"type": "stream.events", "events": envelopes}


def stream_progress(message: dict) -> dict:
    return {"type": "stream.progress", "message": message}


def stream_overview(overview: dict) -> dict:
    """The list stream's `{"type": "overview", "overview": Overview}` in its group envelope."""
    return encoded({"type": "stream.overview", "message": {"type": "overview", "overview": overview}})
