"""The batching thread: committed events handed to the stream once per id, queued, and taken in
batches off the committing thread.

The way in (`offer`). Both sources of events come in here: the after-commit hook of this process
(publisher.publish) and the event pump (pump.py: what other processes committed, on the
in-memory layer). An id is handed at most once: the queue knows the last `KNOWN` ids it was
offered, and an id offered again is dropped, whichever source comes second. Knowing an id and
queueing it are one step under the queue's lock: the pump may read a commit before its hook ran
(a loaded machine deschedules the committing thread between the two), and it then hands that
event itself, in id order with what it read before it; the hook's copy that follows is dropped.
(When the two sent copies of their own, the pump's went out while the hook's earlier events
waited for their batch, and consumers saw the stream overtaken: a hole read back, then late
copies dropped.)

The rhythm. Rendering an event takes a stream read (its previous ids; on PostgreSQL the stream
key held exclusively, which also holds back every writer's next event insert) and a summary
read. The committing thread only queues the event; one daemon thread per process (a forked or
spawned child starts its own) takes what is waiting, up to RENDER_BATCH events, and renders it
with ONE stream read (`selectors.events_previous_ids`) and one summary read per batch
(`selectors.work_item_summaries`; each message carries its item's state as read then, as a
replayed event does). Under load a batch starts at most every RENDER_INTERVAL seconds after the
previous one, so the stream key is taken a bounded number of times per second whatever the
commit rate; an event arriving when the thread is idle is rendered at once. After a batch that
nobody listened to, the next one waits RENDER_INTERVAL_UNHEARD instead (a listener that joins
meanwhile gets its first live message that much later; what committed before it joined is in
its snapshot).

On PostgreSQL the batch first asks for the stream key without queueing for it
(`events_previous_ids(wait=False)`): a queued exclusive request would hold back every writer's
event insert until the writers in flight commit, a barrier no commit can share a WAL flush
across (measured: with one blocking stream read per batch in each of 4 worker processes,
bench/claims.py fell to a third). While the key is busy the thread backs off (RENDER_BACKOFF,
doubling to RENDER_BACKOFF_MAX) and the batch grows; after RENDER_PATIENCE it queues for the
key like any stream read. The previous ids are the same either way.

Order. A batch is rendered in id order and its messages go to the send path in that order, which
sends them in that order (publisher.py), so one process's messages leave in id order. Events
that commit out of id order in different threads of one process may land in different batches;
the later message then names the earlier id as its previous one and consumers read it back (then
drop the late copy). The queue is bounded (RENDER_QUEUE_MAX): past it the oldest waiting events
are dropped (logged), which consumers also repair from the previous ids of the next message.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time

from django.db import connection

logger = logging.getLogger("workcenter.events")

RENDER_BATCH = 500
RENDER_INTERVAL = 0.005
RENDER_INTERVAL_UNHEARD = 0.05  # after a batch nobody listened to (the probe is the batch's cost)
RENDER_QUEUE_MAX = 10_000
RENDER_IDLE_CLOSE = 1.0  # an idle batching thread closes its database connection after this
RENDER_PATIENCE = 0.05  # how long a batch may wait for a free stream key before queueing for it
RENDER_BACKOFF = 0.001
RENDER_BACKOFF_MAX = 0.008
KNOWN = 10_000  # ids the queue remembers having been offered


def close_connection() -> None:
    try:
        connection.close()
    except Exception:
        logger.exception("closing the batching thread's database connection failed")


class Batcher:
    """The queue and the batching thread of one process; `render_batch(batch, patience_until)`
    renders a batch of (event, layer) entries and says whether anyone listened to it."""

    def __init__(self, render_batch) -> None:
        self.render_batch = render_batch
        self.cond = threading.Condition(threading.Lock())
        self.waiting: collections.deque = collections.deque()
        self.known: set[int] = set()  # the ids offered (the last KNOWN of them)
        self.known_order: collections.deque = collections.deque()
        self.busy = False  # a batch is taken and not yet handed to the send path
        self.dropped = 0
        self.repeats = 0  # events offered again (the event pump and the commit hook both offer each id)
        self.batches = 0  # batches rendered (observability and tests)
        self.unheard = 0  # events of batches nobody listened to (rendered for no one, not sent)
        self.pid = os.getpid()
        self.thread: threading.Thread | None = None

    def offer(self, events, layer, wanted) -> list:
        """Hand events to the stream, in id order, once per id: each one not offered before is
        known from now on and, when `wanted(event)` says someone may listen, queued for a batch.
        Returns the events not offered before. Never blocks beyond the queue's lock."""
        fresh = []
        dropped = 0
        with self.cond:
            for event in events:
                if event.id in self.known:
                    self.repeats += 1
                    continue
                self.known.add(event.id)
                self.known_order.append(event.id)
                while len(self.known_order) > KNOWN:
                    self.known.discard(self.known_order.popleft())
                fresh.append(event)
                if not wanted(event):
                    continue
                if len(self.waiting) >= RENDER_QUEUE_MAX:
                    self.waiting.popleft()
                    self.dropped += 1
                    dropped = self.dropped
                self.waiting.append((event, layer))
            if self.waiting:
                self.cond.notify()
        if dropped and (dropped == 1 or dropped % 1000 == 0):
            logger.warning("publisher queue full: %s events dropped so far (consumers read them back)", dropped)
        return fresh

    def __contains__(self, event_id: int) -> bool:
        """Whether the id was offered (the last KNOWN ids)."""
        return event_id in self.known

    def start(self) -> bool:
        """Start this process's thread unless it runs; True when it was started now."""
        if self.thread is not None and self.pid == os.getpid():
            return False
        with self.cond:
            if self.thread is not None and self.pid == os.getpid():
                return False
            self.pid = os.getpid()
            thread = self.thread = threading.Thread(target=self._run, name="workcenter-stream-render", daemon=True)
        thread.start()
        return True

    def idle(self) -> bool:
        with self.cond:
            return not self.waiting and not self.busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until every queued event was rendered and handed to the send path."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.waiting or self.busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
        return True

    def take(self, limit: int = RENDER_BATCH) -> list:
        batch = []
        with self.cond:
            while self.waiting and len(batch) < limit:
                batch.append(self.waiting.popleft())
        return batch

    def _run(self) -> None:
        connected = False  # this thread holds a database connection
        last_start = 0.0
        heard = True  # the last batch had a listener
        while True:
            with self.cond:
                self.busy = False
                self.cond.notify_all()  # wait_idle
                while not self.waiting:
                    if not self.cond.wait(RENDER_IDLE_CLOSE if connected else None) and connected:
                        break
                self.busy = bool(self.waiting)
            if not self.busy:  # idle for a while: leave no connection open (a test database can be dropped)
                close_connection()
                connected = False
                continue
            delay = last_start + (RENDER_INTERVAL if heard else RENDER_INTERVAL_UNHEARD) - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # under load: let the batch grow
            last_start = time.monotonic()
            batch = self.take()
            connected = True
            heard = True
            try:
                heard = self.render_batch(batch, last_start + RENDER_PATIENCE)
                self.batches += 1
                if not heard:
                    self.unheard += len(batch)
            except BaseException:  # the thread must live on
                logger.exception("rendering %s events failed", len(batch))
                close_connection()

    def after_fork_in_child(self) -> None:
        """In a forked child: a fresh lock, nothing queued, no thread yet (the parent's does not run
        here); the ids offered in the parent stay known."""
        self.cond = threading.Condition(threading.Lock())
        self.waiting = collections.deque()
        self.busy = False
        self.thread = None
