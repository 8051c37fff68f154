"""The event pump: events committed by *other* processes reach this web server's websocket
clients when the channel layer is the in-memory one.

Why: every process publishes its own events after commit (publisher.py), but an
`InMemoryChannelLayer` lives inside one process. On the embedded default (no `REDIS_URL`) a
worker (`workcenter_worker`), a command (`recover_runs`, `demo`'s simulated workers) or a second
web process commits events that no websocket client of this server would ever see live.

How: the Event table is the stream (the event id is its cursor; every read of it is an
`events.stream_read`, a prefix that no later commit extends below: SQLite serialises writers, on
PostgreSQL the read holds the stream key exclusively), so the web server reads it. One pump per process, started lazily by the first websocket consumer that
connects, as a task on the server's event loop:

* it starts from the highest stored id, read when the first consumer connects and *before*
  that consumer reads its snapshot: what committed earlier is the consumer's own backfill or
  snapshot, what commits later the pump sees;
* every `WORKCENTER_EVENT_POLL_MS` (default 50; 0 disables the pump) it runs one indexed query
  (`id > cursor ORDER BY id`, primary key) in the consumers' database thread, page by page
  (`PAGE` rows; a full page is followed at once by the next one);
* the page goes to the stream by the one send path of the committing process's own events
  (`publisher.publish_stored`: offered once per id to the batching thread, batcher.py), so the
  message shape, the groups, the previous-id hints, the items' states and the list's overview
  are the same, and the page's events leave in id order with this process's own; events nobody
  in this process listens to are not rendered;
* what the page brings that may make an action claimable wakes the parked long-poll claims of
  this process (workcenter/dispatch/wake.py), as a commit here does;
* it polls only while at least one consumer is connected (a websocket consumer, or a waiting
  long-poll claim): the last one to leave wakes it and it ends (no idle database load); the next
  first consumer starts it again from the new max.

Events committed in this process are offered by their after-commit hook: each id is offered
once, so the pump's copy of those is dropped (or, when the pump read the commit before its hook
ran, the hook's copy is), and only what other processes committed is rendered for it. Consumers
drop every id they already sent besides, so each client receives each event once, in id order.
(Measured with `bench/ws.py --layer memory`: re-sending local events put the pump's rendering in
front of live messages every 200 ms, p99 17-20 ms; skipping them, p99 3-7 ms.)

With a Redis channel layer the pump is off: every process publishes to Redis itself.

Limitation: transient `progress` messages (a worker's running output, API.md §4) are never
stored, so the pump cannot carry them: on the in-memory layer a client sees the progress of
runs reported to *this* process only (a worker talking to it over HTTP), not of a local-store
worker in another process. With `REDIS_URL` set progress reaches every client.
"""
from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from workcenter import events, selectors
from workcenter.dispatch.wake import wake, wakes_claims
from workcenter.models import Event

from .publisher import publisher

logger = logging.getLogger("workcenter.events.pump")

DEFAULT_POLL_MS = 50
PAGE = 500


def poll_seconds() -> float:
    """The pump's period from `WORKCENTER_EVENT_POLL_MS`; 0 when it is off."""
    return max(0, int(getattr(settings, "WORKCENTER_EVENT_POLL_MS", DEFAULT_POLL_MS))) / 1000


def _last_event_id() -> int:
    # the pump's own read (not selectors.event_last_id, which is the consumers' snapshot read)
    with events.stream_read():
        return Event.objects.order_by("-id").values_list("id", flat=True).first() or 0


def pump_wanted(layer) -> bool:
    return isinstance(layer, InMemoryChannelLayer) and poll_seconds() > 0


class EventPump:
    """The per-process poller; its state belongs to the event loop it runs on."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.consumers: set[str] = set()
        self.cursor = 0
        self.polls = 0  # queries run (observability and tests)
        self.published = 0  # events offered to the stream (those no hook of this process offered)
        self._wake: asyncio.Event | None = None
        self._starting: asyncio.Lock | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def consumer_joined(self, channel_name: str) -> None:
        """Count a connected consumer; the first one starts the pump (after its max-id read)."""
        if not pump_wanted(get_channel_layer()):
            return
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # first use, or the previous loop is gone (tests run one per scenario)
            self.loop, self.task, self.consumers = loop, None, set()
            self._wake, self._starting = asyncio.Event(), asyncio.Lock()
        self.consumers.add(channel_name)
        async with self._starting:
            if self.running:
                return
            self.cursor = await database_sync_to_async(_last_event_id)()
            if self.consumers:  # the consumer may have left during the read
                self._wake.clear()
                self.task = loop.create_task(self._run(), name="workcenter-event-pump")

    def consumer_left(self, channel_name: str) -> None:
        if self.loop is not None and channel_name in self.consumers:
            self.consumers.discard(channel_name)
            if not self.consumers and self._wake is not None:
                self._wake.set()  # the pump ends now instead of after one more poll

    async def _run(self) -> None:
        period = poll_seconds()
        while self.consumers:
            try:
                # on a thread of its own: a poll never queues behind the consumers' reads
                more = await database_sync_to_async(self._publish_page, thread_sensitive=False)()
            except Exception:  # a database hiccup must not end the stream; try again next period
                logger.exception("event pump: reading events after %s failed", self.cursor)
                more = False
            if more:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), period)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()  # woken by a leaving consumer: the loop condition decides

    def _publish_page(self) -> bool:
        """Offer the stored events after the cursor (one page) to the stream; True when more may follow."""
        page = selectors.events_after(after_id=self.cursor, limit=PAGE)
        self.polls += 1
        if not page:
            return False
        self.cursor = page[-1].id
        fresh = publisher.publish_stored(page, get_channel_layer())  # what this process had not offered yet
        self.published += len(fresh)
        if any(wakes_claims(event.type) for event in fresh):  # another process committed it
            wake.request()
        return len(page) == PAGE


pump = EventPump()
