"""The publisher: this process's one way from a commit to the live stream's groups.

The store (workcenter/events.py) knows nothing of websockets: after a commit it calls the
callables registered with `events.set_publisher` / `events.set_progress_publisher`, which the
dashboard app sets to `publisher.publish` and `publisher.publish_progress` at startup.

The one send path. Every event reaches the groups the same way, whether this process committed
it (`publish`, the after-commit hook) or the event pump read what another process committed
(`publish_stored`, pump.py): offered once per id to the batching thread (batcher.py), rendered
in batches (batches.py), and handed, in id order, to `send`. Progress reports (`publish_progress`),
overviews (live_state.OverviewPush) and the wake-ups of a run's log followers (`publish_run_log`)
go through `send` too. `send` hands each message to the
layer's loop, where the messages of the process leave one at a time in the order they were
handed over: a Redis layer's on the process's send loop (workcenter/send_loop.py), an in-memory
layer's on the loop its consumers listen on (the loop on which they joined their group through
`join`: its asyncio queues belong to that loop and are not thread-safe).

Delivery is best effort: each group message also names the previous stored event ids, so a
consumer that missed one re-reads the hole from the database. The claims' wake-ups
(workcenter/dispatch/wake.py) are requested from the same after-commit hook but keep no order
with the stream's messages.
"""
from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
import weakref

from channels.layers import InMemoryChannelLayer, get_channel_layer

from workcenter import events
from workcenter.dispatch.wake import wake
from workcenter.models import Event, Run
from workcenter.send_loop import DRAIN_SECONDS, send_loop

from . import batches
from .batcher import RENDER_BACKOFF, RENDER_BACKOFF_MAX, RENDER_BATCH, Batcher
from .live_state import ItemStates, OverviewPush
from .messages import (ITEMS_GROUP, groups_of, item_group, progress_message, run_log_group, stream_overview,
                       stream_progress, stream_run_log)
from .probe import RedisGroupProbe, may_have_members

logger = logging.getLogger("workcenter.events")


class Publisher:
    """This process's one way from a commit to the live stream's groups (see the module doc)."""

    def __init__(self) -> None:
        self.probe = RedisGroupProbe()
        self.queue = Batcher(self._render_batch)
        self.lock = threading.Lock()
        self._listen_loop: asyncio.AbstractEventLoop | None = None  # where in-memory consumers listen
        self._send_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._drain_registered = False
        self.sent = 0  # group sends done (observability and tests)
        self.states = ItemStates()
        self.overview = OverviewPush()

    def register(self) -> None:
        """Make this the store's after-commit publisher (events and progress)."""
        events.set_publisher(self.publish)
        events.set_progress_publisher(self.publish_progress)
        events.set_run_log_publisher(self.publish_run_log)

    def layer(self):
        return get_channel_layer()

    # --- the ways in -------------------------------------------------------------------------------

    def publish(self, event: Event) -> None:
        """The after-commit hook (never raises, never blocks on the database or the layer): the
        parked claims are woken if the event may have made an action claimable, then the event is
        offered to the batching thread (queued unless nobody in this process may listen; from
        now on the event pump of this process skips it)."""
        try:
            wake.after_commit(event)
            layer = self.layer()
            if layer is not None:
                self.publish_stored([event], layer)
        except Exception:  # the commit already happened; a lost message is covered by the cursor
            logger.exception("publishing event %s failed", event.id)

    def publish_stored(self, page: list[Event], layer=None) -> list[Event]:
        """Offer stored events, in id order, to the send path (the event pump's page, or one
        committed here): each id once, whichever of the two comes first. Returns the events not
        offered before."""
        layer = self.layer() if layer is None else layer
        fresh = self.queue.offer(page, layer, lambda e: may_have_members(layer, groups_of(e.work_item_id)))
        if fresh and not self.queue.idle():
            self.batcher()  # started on first use
        return fresh

    def publish_progress(self, run: Run) -> None:
        """The after-commit hook of a progress report (`run` as it was reported)."""
        try:
            layer = self.layer()
            groups = groups_of(run.work_item_id)
            if layer is not None and may_have_members(layer, groups):
                self.send(layer, groups, stream_progress(progress_message(run)))
        except Exception:
            logger.exception("publishing progress of run %s failed", getattr(run, "pk", None))

    def publish_run_log(self, run_id: str, next_seq: int) -> None:
        """The after-commit hook of a log append: wake the run's followers, if any may listen (an
        in-memory layer knows; on Redis the send to a group nobody joined costs one round trip)."""
        try:
            layer = self.layer()
            groups = [run_log_group(run_id)]
            if layer is not None and may_have_members(layer, groups):
                self.send(layer, groups, stream_run_log(run_id, next_seq))
        except Exception:
            logger.exception("waking the log followers of run %s failed", run_id)

    def published_here(self, event_id: int) -> bool:
        """True when the event was offered to this process's send path already (the last 10,000)."""
        return event_id in self.queue

    def overview_changed(self, layer) -> None:
        """Events went to the list's group: its overview follows (OverviewPush)."""
        self.overview.changed(lambda overview: self.send(layer, [ITEMS_GROUP], stream_overview(overview)))

    # --- batches -----------------------------------------------------------------------------------

    def batcher(self) -> Batcher:
        """The batching thread's queue, its thread started (again in a forked child)."""
        if self.queue.start():
            self._register_drain()
        return self.queue

    def _render_batch(self, batch: list, patience_until: float) -> bool:
        """Render the batch and hand its messages to `send`; while the stream key is busy
        (PostgreSQL), back off and let the batch grow instead of queueing for it, until
        `patience_until`, then wait for it. False when nobody listened to any of its events."""
        wanted = batches.listened(batch, self.members)
        heard = bool(wanted)
        backoff = RENDER_BACKOFF
        while wanted:
            out = batches.render(wanted, self.states, wait=time.monotonic() >= patience_until)
            if out is not None:
                self._send_batch(out)
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, RENDER_BACKOFF_MAX)
            more = self.queue.take(RENDER_BATCH - len(wanted))
            if more:
                wanted = sorted(wanted + batches.listened(more, self.members), key=lambda w: w[0].id)
        return heard

    def _send_batch(self, out: list[tuple]) -> None:
        lists = {}  # the layers whose list group got events: their overview follows
        for layer, group, message in out:
            try:
                self.send(layer, [group], message)
            except Exception:
                ids = [m["id"] for m in message.get("events", [message])]
                logger.exception("publishing events %s..%s to %s failed", ids[0], ids[-1], group)
            if group == ITEMS_GROUP:
                lists[id(layer)] = layer
        for layer in lists.values():
            self.overview_changed(layer)

    def members(self, layer, groups: list[str]) -> set[str] | None:
        """Which of `groups` have members on a Redis layer (asked on its send loop, where the
        layer's connections live); None when unknown (another layer, Redis not answering)."""
        return self.probe.members(layer, groups, self.send_loop(layer))

    def item_states(self, layer, events_: list[tuple[Event, int]]) -> dict[str, dict]:
        """{item id: state} of the items among `events_` whose own group listens (batches.item_states)."""
        return batches.item_states(self.states, layer, events_)

    # --- consumers ---------------------------------------------------------------------------------

    async def join(self, layer, channel_name: str, item_id: str | None) -> str:
        """Put a consumer in its stream's group (all items, or one item); returns the group. An
        in-memory layer's sends run on the loop its consumers listen on: this one."""
        group = ITEMS_GROUP if item_id is None else item_group(item_id)
        if isinstance(layer, InMemoryChannelLayer):
            self._listen_loop = asyncio.get_running_loop()
        await layer.group_add(group, channel_name)
        return group

    # --- the send path -----------------------------------------------------------------------------

    def send_loop(self, layer) -> asyncio.AbstractEventLoop:
        loop = self._listen_loop
        if isinstance(layer, InMemoryChannelLayer) and loop is not None and loop.is_running():
            return loop
        return self.own_loop()

    def own_loop(self) -> asyncio.AbstractEventLoop:
        loop = send_loop.loop()
        self._register_drain()
        return loop

    def send(self, layer, groups: list[str], message: dict) -> None:
        """Hand one message for `groups` to the layer's loop (never waits for the send)."""
        send_loop.submit(self._send_in_order(layer, groups, message), self.send_loop(layer))

    async def _send_in_order(self, layer, groups: list[str], message: dict) -> None:
        # one send at a time per loop, in the order handed over, so one process's events leave in order
        lock = self._send_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            for group in groups:
                await layer.group_send(group, message)
                self.sent += 1

    def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Wait (bounded) for the queued events to be rendered and for the sends handed to another
        thread's loop to finish."""
        deadline = time.monotonic() + timeout
        if self.queue.thread is not None and self.queue.pid == os.getpid():
            self.queue.wait_idle(max(0.0, deadline - time.monotonic()))
        send_loop.drain(max(0.0, deadline - time.monotonic()))

    def _register_drain(self) -> None:
        with self.lock:
            if self._drain_registered:
                return
            self._drain_registered = True
        atexit.register(self.drain)

    def _after_fork_in_child(self) -> None:
        # a lock held by another thread of the parent at fork time stays held in the child forever
        self.lock = threading.Lock()
        self.queue.after_fork_in_child()
        self._listen_loop = None
        self.states.forget()
        self.overview.forget()


publisher = Publisher()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=publisher._after_fork_in_child)
