"""What the live stream pushes besides the events, so that an open page never pulls per event:

* `ItemStates`: the per-item stream's `state` (workcenter/item_page_state.py). For each item with a
  listener in a batch (batches.py), the item's state is read once and attached to the message of
  its last event there: a diff on the state this process sent with the item's previous event (what
  changed or is new: a progress report's diff is a node or two, an action and a run, about 1.5 KB;
  a retry's adds the new action, node and edge), or the whole state: without a stage's earlier,
  ended attempts (`Snapshot.hello`, as in the hello) when this process did not send that one
  (another process published it, nobody listened then, it fell out of the cache), all of it when
  something is gone from the item (a node, an edge, an action or a run).
  Per process, the last state sent of the `LIMIT` most recently published items is kept. A state
  over `MAX_STATE_BYTES` is not pushed: the message only says that the page should read it back.
* `OverviewPush`: the list stream's overview (workcenter/overview.py), sent as a message of its
  own (`{"type": "overview", "overview": Overview}`) after the events that changed it, at most
  once per `INTERVAL`: a burst of events costs one overview now and one at the end of the
  interval (so the last change is always reflected), not one per event. Every process that
  publishes to the list's group sends its own (with Redis, each web and worker process).
  `WORKCENTER_STREAM_OVERVIEW=0` turns the pushes off.
"""
from __future__ import annotations

import collections
import logging
import threading
import time

from django.conf import settings
from django.db import connection

from workcenter import item_page_state as item_state
from workcenter import overview as overview_figures
from workcenter.render import dumps as render_dumps
from workcenter.render import render
from workcenter.schemas_out import OverviewOut

logger = logging.getLogger("workcenter.events")

INTERVAL = 1.0  # seconds between two overviews at most
# A state larger than this (a retry of a graph of a thousand stages) is not pushed: the message says
# `{"rev", "base_rev": null, "read": true}` and the page reads the state back (GET …/state) once.
# daphne refuses to send a websocket message over 1 MiB, and it would hold up every smaller one.
MAX_STATE_BYTES = 512 * 1024
# What a hello may weigh at most: over it, the per-item hello goes without its state (the page reads
# it back), so that a large graph's hello still reaches the page.
MAX_HELLO_BYTES = 1_000_000


def overview_now() -> dict:
    """The overview, JSON-ready."""
    return render(OverviewOut, overview_figures.overview())


class ItemStates:
    """The last state this process sent of each recently published item (see the module doc)."""

    LIMIT = 2000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: collections.OrderedDict = collections.OrderedDict()  # item id -> (event id, Snapshot)
        self.full = 0  # full states sent (observability and tests)
        self.diffs = 0
        self.too_large = 0

    def states(self, firsts: dict[str, int], lasts: dict[str, int]) -> dict[str, dict]:
        """{item id: state} for the items of one batch: `lasts` the id of the item's last event
        there (which carries the state), `firsts` the previous stored id of its first one (a
        diff applies only when this process sent that event's state). Items that are gone are
        left out."""
        snapshots = item_state.read_many(lasts)
        out = {}
        with self.lock:
            for item_id, snapshot in snapshots.items():
                at_id = lasts[item_id]
                before = self.sent.pop(item_id, None)
                if before is not None and before[0] == firsts[item_id]:
                    out[item_id] = snapshot.diff(before[1], at_id)
                else:  # whole, without a stage's earlier attempts (as a hello: item_page_state.py)
                    out[item_id] = snapshot.hello(at_id)
                if len(render_dumps(out[item_id])) > MAX_STATE_BYTES:
                    out[item_id] = {"rev": snapshot.rev, "base_rev": None, "read": True}
                    self.too_large += 1
                elif out[item_id]["base_rev"] is None:
                    self.full += 1
                else:
                    self.diffs += 1
                self.sent[item_id] = (at_id, snapshot)
            while len(self.sent) > self.LIMIT:
                self.sent.popitem(last=False)
        return out

    def seed(self, item_id: str, at_id: int, snapshot) -> None:
        """A hello sent `snapshot` as the item's state after event `at_id`: unless this process
        sent a state as recent, the item's next event is a diff on it (not a whole state)."""
        with self.lock:
            before = self.sent.get(item_id)
            if before is None or before[0] < at_id:
                self.sent[item_id] = (at_id, snapshot)
                self.sent.move_to_end(item_id)
                while len(self.sent) > self.LIMIT:
                    self.sent.popitem(last=False)

    def forget(self) -> None:
        """After a fork: a fresh lock, nothing sent yet."""
        self.lock = threading.Lock()
        self.sent = collections.OrderedDict()


class OverviewPush:
    """At most one overview per `INTERVAL` to the list's group, the last change never left out
    (see the module doc). `send(message)` hands the group envelope to the layer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = float("-inf")
        self.timer: threading.Timer | None = None
        self.pushed = 0

    def changed(self, send) -> None:
        """Events that may change the overview were sent: push one now or at the interval's end."""
        if not settings.WORKCENTER_STREAM_OVERVIEW:
            return
        with self.lock:
            if self.timer is not None:
                return  # one is due at the interval's end already
            wait = self.last + INTERVAL - time.monotonic()
            if wait > 0:
                self.timer = threading.Timer(wait, self._push_later, (send,))
                self.timer.daemon = True
                self.timer.start()
                return
            self.last = time.monotonic()
        self._push(send)

    def _push_later(self, send) -> None:
        with self.lock:
            self.timer = None
            self.last = time.monotonic()
        if not settings.WORKCENTER_STREAM_OVERVIEW:
            return
        try:
            self._push(send)
        finally:
            connection.close()  # a timer thread's connection ends with it

    def _push(self, send) -> None:
        try:
            send(overview_now())
            self.pushed += 1
        except Exception:  # the next change pushes again; the page keeps its figures meanwhile
            logger.exception("pushing the overview failed")

    def cancel(self) -> None:
        """Drop the overview due at the interval's end, if any."""
        with self.lock:
            timer, self.timer = self.timer, None
            self.last = float("-inf")
        if timer is not None:
            timer.cancel()

    def forget(self) -> None:
        """After a fork: a fresh lock, no timer (the parent's does not run in the child)."""
        self.lock = threading.Lock()
        self.timer = None
        self.last = float("-inf")
