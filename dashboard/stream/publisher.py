"""The publisher: committed events and progress reports, delivered to the live stream's groups.

The store (workcenter/events.py) knows nothing of websockets: after a commit it calls the
callables registered with `events.set_publisher` / `events.set_progress_publisher`, which the
dashboard app sets to `publisher.publish` and `publisher.publish_progress` at startup. Everything
between that hook and the channel layer lives here:

* the stream's groups (`ITEMS_GROUP`, `item_group`) and the one builder of every message the
  stream carries (`hello_message`, `event_message`, `progress_message`, and the group envelopes
  `stream.event` / `stream.events` / `stream.progress` that the consumers unwrap);
* the batching thread (`_Batcher`): committed events rendered in batches, off the committing
  thread;
* the group sends, run in submission order on a send loop;
* the membership probes: nothing is rendered for a group nobody is in;
* the ids this process published itself (`published_here`), which the event pump skips.

Delivery is best effort: each group message also names the previous stored event ids, so a
consumer that missed one re-reads the hole from the database.

Send loops. The publisher runs a loop of its own on a daemon thread ("workcenter-stream-send"),
drained for a few seconds at exit so a short command's last events still leave; a Redis layer's
sends (and its pooled connections) live there in every process. An in-memory layer's asyncio
queues belong to the loop its consumers await them on and are not thread-safe, so its sends run
on that loop: the loop on which consumers joined their group through `Publisher.join`.
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import hashlib
import importlib.metadata
import logging
import os
import re
import threading
import time
import weakref
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import connection

from workcenter import events, selectors
from workcenter import render as rendering
from workcenter.models import Event, Run
from workcenter.render import render
from workcenter.schemas import EventOut, WorkItemSummaryOut

from .live_state import CLAIMS_GROUP, WAKE, ItemStates, OverviewPush, claims_layer, wakes_claims

logger = logging.getLogger("workcenter.events")
claims_logger = logging.getLogger("workcenter.claims")

# --- groups and messages (API.md §4) -------------------------------------------------------------

ITEMS_GROUP = "workcenter.items"
PROGRESS_TAIL_CHARS = 2000
STREAM_MESSAGE_EVENTS = 100  # events in one group message at most
_GROUP_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def item_group(item_id: str) -> str:
    """`workcenter.item.<id>`; ids that a channel-layer group name cannot hold go by digest."""
    if _GROUP_SAFE.fullmatch(item_id):
        return f"workcenter.item.{item_id}"
    return "workcenter.item.h" + hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:40]


def groups_of(item_id: str) -> list[str]:
    """The groups an event or progress report of this item goes to."""
    return [ITEMS_GROUP, item_group(item_id)]


def hello_message(last_event_id: int, graph: dict | None = None, *, state: dict | None = None,
                  overview: dict | None = None) -> dict:
    """`{"type": "hello", "last_event_id": int}`; the per-item stream's with `"graph": Graph` and
    the item's whole `state` (workcenter/item_state.py), the list stream's with `overview`."""
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


# --- membership probes -----------------------------------------------------------------------------

def may_have_members(layer, groups: list[str]) -> bool:
    """An in-memory layer knows its groups (`groups`, its public table): False when nobody in
    this process listens. Any other layer: True (asked per batch by `RedisGroupProbe`)."""
    if not isinstance(layer, InMemoryChannelLayer):  # first: the pub/sub layer's attributes need a running loop
        return True
    known = getattr(layer, "groups", None)
    return any(known.get(g) for g in groups) if isinstance(known, dict) else True


class RedisGroupProbe:
    """Which groups of a channels_redis layer have live members, read from the layer's own keys.

    The one place that relies on channels_redis internals (`_group_key`, `consistent_hash`,
    `connection`, `group_expiry`; a group is a sorted set of channels scored by join time, and
    `group_send` discards those scored at or below now - group_expiry). Checked against the
    channels_redis series below: with any other version the probe is off and every group counts
    as listened to (a render for nobody, never a lost message), and a warning says so once.
    tests/dashboard/test_publisher.py fails when the installed version leaves the series."""

    SERIES = "4.3"
    ATTRIBUTES = ("_group_key", "consistent_hash", "connection", "group_expiry")
    TIMEOUT = 2.0

    def __init__(self) -> None:
        try:
            self.version = importlib.metadata.version("channels_redis")
        except importlib.metadata.PackageNotFoundError:
            self.version = None
        self.pinned = self.version is not None and (self.version == self.SERIES
                                                    or self.version.startswith(self.SERIES + "."))
        self._warned = False

    def applies(self, layer) -> bool:
        if not isinstance(layer, RedisChannelLayer):
            return False
        if self.pinned and all(hasattr(layer, a) for a in self.ATTRIBUTES):
            return True
        if not self._warned:
            self._warned = True
            logger.warning("channels_redis %s is not the %s series the group probe knows: every group "
                           "counts as listened to", self.version, self.SERIES)
        return False

    async def listened(self, layer, groups: list[str]) -> set[str]:
        """The groups with a member that `group_send` would not discard as expired (one
        pipelined ZCOUNT per Redis host)."""
        by_host: dict[int, list[str]] = {}
        for g in groups:
            by_host.setdefault(layer.consistent_hash(g), []).append(g)
        floor = int(time.time()) - int(layer.group_expiry)
        out: set[str] = set()
        for index, names in by_host.items():
            pipe = layer.connection(index).pipeline(transaction=False)
            for g in names:
                pipe.zcount(layer._group_key(g), f"({floor}", "+inf")
            for g, n in zip(names, await pipe.execute()):
                if n:
                    out.add(g)
        return out


# --- ids published here ------------------------------------------------------------------------------

class LocalIds:
    """Ids this process published after their commit (the last `limit`). The event pump
    (dashboard/pump.py) reads the event table for what *other* processes committed; it skips
    these instead of rendering and sending a second copy (which consumers would drop, after it
    had delayed the next live message)."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self.ids: set[int] = set()
        self.order: collections.deque = collections.deque()
        self.lock = threading.Lock()

    def remember(self, event_id: int) -> None:
        with self.lock:
            if event_id in self.ids:
                return
            self.ids.add(event_id)
            self.order.append(event_id)
            while len(self.order) > self.limit:
                self.ids.discard(self.order.popleft())

    def __contains__(self, event_id: int) -> bool:
        return event_id in self.ids


# --- the batching thread: committed events rendered in batches, off the committing thread --------
# Rendering an event takes a stream read (its previous ids; on PostgreSQL the stream key held
# exclusively, which also holds back every writer's next event insert) and a summary read. The
# committing thread only queues the event; one daemon thread per process (a forked or spawned
# child starts its own) takes what is waiting, up to RENDER_BATCH events, and renders it with
# ONE stream read (`selectors.events_previous_ids`) and one summary read per batch
# (`selectors.work_item_summaries`; each message carries its item's state as read then, as a
# replayed event does). Under load a batch starts at most every RENDER_INTERVAL seconds after the
# previous one, so the stream key is taken a bounded number of times per second whatever the
# commit rate; an event arriving when the thread is idle is rendered at once. After a batch that
# nobody listened to, the next one waits RENDER_INTERVAL_UNHEARD instead (a listener that joins
# meanwhile gets its first live message that much later; what committed before it joined is in
# its snapshot).
# On PostgreSQL the batch first asks for the stream key without queueing for it
# (`events_previous_ids(wait=False)`): a queued exclusive request would hold back every writer's
# event insert until the writers in flight commit, a barrier no commit can share a WAL flush
# across (measured: with one blocking stream read per batch in each of 4 worker processes,
# bench/claims.py fell to a third). While the key is busy the thread backs off (RENDER_BACKOFF,
# doubling to RENDER_BACKOFF_MAX) and the batch grows; after RENDER_PATIENCE it queues for the
# key like any stream read. The previous ids are the same either way.
# Nothing is rendered for nobody: `Publisher.listened` drops the groups nobody is in, from the
# in-memory layer's own table, or for a Redis layer from one pipelined count of the batch's
# groups. A group found empty after the commit can be skipped: a consumer joins its group before
# it reads its snapshot or backlog, so one that joins later reads this event from the database.
# The messages of a batch go to the send loop in id order, and the loop sends them in that order,
# so one process's messages leave in id order. Events that commit out of id order in different
# threads of one process may land in different batches; the later message then names the earlier
# id as its previous one and consumers read it back (then drop the late copy).
# The queue is bounded (RENDER_QUEUE_MAX): past it the oldest waiting events are dropped (logged),
# which consumers also repair from the previous ids of the next message.
RENDER_BATCH = 500
RENDER_INTERVAL = 0.005
RENDER_INTERVAL_UNHEARD = 0.05  # after a batch nobody listened to (the probe is the batch's cost)
RENDER_QUEUE_MAX = 10_000
RENDER_IDLE_CLOSE = 1.0  # an idle batching thread closes its database connection after this
RENDER_PATIENCE = 0.05  # how long a batch may wait for a free stream key before queueing for it
RENDER_BACKOFF = 0.001
RENDER_BACKOFF_MAX = 0.008
DRAIN_SECONDS = 10.0


def _close_connection() -> None:
    try:
        connection.close()
    except Exception:
        logger.exception("closing the batching thread's database connection failed")


class _Batcher:
    """The batching thread of one process; `render_batch(batch, patience_until)` renders a batch."""

    def __init__(self, render_batch) -> None:
        self.pid = os.getpid()
        self.render_batch = render_batch
        self.cond = threading.Condition(threading.Lock())
        self.waiting: collections.deque = collections.deque()
        self.busy = False  # a batch is taken and not yet handed to the send loop
        self.dropped = 0
        self.batches = 0  # batches rendered (observability and tests)
        self.thread = threading.Thread(target=self._run, name="workcenter-stream-render", daemon=True)
        self.thread.start()

    def put(self, entry: tuple) -> None:
        """Queue one (event, layer); never blocks beyond the queue's lock."""
        with self.cond:
            if len(self.waiting) >= RENDER_QUEUE_MAX:
                self.waiting.popleft()
                self.dropped += 1
                dropped = self.dropped
            else:
                dropped = 0
            self.waiting.append(entry)
            self.cond.notify()
        if dropped and (dropped == 1 or dropped % 1000 == 0):
            logger.warning("publisher queue full: %s events dropped so far (consumers read them back)", dropped)

    def idle(self) -> bool:
        with self.cond:
            return not self.waiting and not self.busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until every queued event was rendered and handed to the send loop."""
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
                _close_connection()
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
            except BaseException:  # the thread must live on
                logger.exception("rendering %s events failed", len(batch))
                _close_connection()


# --- the publisher -----------------------------------------------------------------------------------

class Publisher:
    """This process's one way from a commit to the live stream's groups (see the module doc)."""

    def __init__(self) -> None:
        self.local = LocalIds()
        self.probe = RedisGroupProbe()
        self._batcher: _Batcher | None = None
        self._own_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
        self._listen_loop: asyncio.AbstractEventLoop | None = None  # where in-memory consumers listen
        self.lock = threading.Lock()
        self._send_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._pending: set = set()  # sends in flight stay referenced until done
        self._drain_registered = False
        self.states = ItemStates()
        self.overview = OverviewPush()
        self._wake_queued = False  # a claims wake waits in the send loop (wake_claims)

    def register(self) -> None:
        """Make this the store's after-commit publisher (events and progress)."""
        events.set_publisher(self.publish)
        events.set_progress_publisher(self.publish_progress)

    def layer(self):
        return get_channel_layer()

    # --- after commit ------------------------------------------------------------------------------

    def publish(self, event: Event) -> None:
        """The after-commit hook (never raises, never blocks on the database or the layer): the id
        is remembered first (the event pump of this process skips it from here on), then the event
        is queued for the batching thread, unless nobody in this process may listen."""
        self.local.remember(event.id)
        if claims_logger.isEnabledFor(logging.DEBUG):  # when what the event says became visible (tests)
            claims_logger.debug("committed event %s %.6f", event.id, time.time())
        try:
            layer = self.layer()
            if layer is not None and wakes_claims(event.type):
                self.wake_claims(claims_layer())
            if layer is not None and may_have_members(layer, groups_of(event.work_item_id)):
                self.batcher().put((event, layer))
        except Exception:  # the commit already happened; a lost message is covered by the cursor
            logger.exception("publishing event %s failed", event.id)

    def publish_page(self, page: list[tuple]) -> int:
        """Publish stored events whose previous ids and item summaries the caller read (the event
        pump, publishing a page of events), as (event, previous ids, item summary, state or
        None): rendered in the caller's thread, one group message per group for the page (the
        item's group given the state where there is one), handed to the send loop. Returns how
        many events were handed to the layer."""
        sent = 0
        try:
            layer = self.layer()
            if layer is None:
                return 0
            outgoing: dict[str, list[dict]] = {}
            for event, previous, work_item, state in page:
                groups = [g for g in groups_of(event.work_item_id) if may_have_members(layer, [g])]
                if not groups:
                    continue
                envelope = stream_event(event, previous, event_message(event, work_item))
                plain = None
                for group in groups:
                    if state is not None and group != ITEMS_GROUP:
                        message = encoded(with_state(envelope, state))
                    else:
                        message = plain = plain or encoded(envelope)
                    outgoing.setdefault(group, []).append(message)
                sent += 1
            for group, envelopes in outgoing.items():
                for start in range(0, len(envelopes), STREAM_MESSAGE_EVENTS):
                    self.send(layer, [group], stream_events(envelopes[start:start + STREAM_MESSAGE_EVENTS]))
        except Exception:
            logger.exception("publishing a page of %s events failed", len(page))
        return sent

    def publish_progress(self, run: Run) -> None:
        """The after-commit hook of a progress report (`run` as it was reported)."""
        try:
            layer = self.layer()
            groups = groups_of(run.work_item_id)
            if layer is not None and may_have_members(layer, groups):
                self.send(layer, groups, stream_progress(progress_message(run)))
        except Exception:
            logger.exception("publishing progress of run %s failed", getattr(run, "pk", None))

    def item_states(self, layer, events_: list[tuple[Event, int]]) -> dict[str, dict]:
        """{item id: state} for the items among `events_` ((event, its item's previous stored id),
        in id order) whose own group has a listener (ItemStates)."""
        firsts: dict[str, int] = {}
        lasts: dict[str, int] = {}
        for event, item_prev_id in events_:
            firsts.setdefault(event.work_item_id, item_prev_id)
            lasts[event.work_item_id] = event.id
        heard = [i for i in lasts if may_have_members(layer, [item_group(i)])]  # (a batch's are probed already)
        if not heard:
            return {}
        return self.states.states({i: firsts[i] for i in heard}, {i: lasts[i] for i in heard})

    def wake_claims(self, layer) -> None:
        """Something may have become claimable: one wake to the long-poll claims (dashboard/longpoll.py).
        A wake still waiting in the send loop stands for this one too (it leaves after this commit),
        so a burst of commits costs one channel-layer send, not one per event."""
        if not may_have_members(layer, [CLAIMS_GROUP]):
            return
        with self.lock:
            if self._wake_queued:
                return
            self._wake_queued = True
        self.send(layer, [CLAIMS_GROUP], WAKE)

    def wake_sending(self) -> None:
        """The queued wake leaves now: the next commit queues a new one."""
        with self.lock:
            self._wake_queued = False

    def overview_changed(self, layer) -> None:
        """Events went to the list's group: its overview follows (OverviewPush)."""
        self.overview.changed(lambda overview: self.send(layer, [ITEMS_GROUP], stream_overview(overview)))

    def published_here(self, event_id: int) -> bool:
        """True when this process published the event after its own commit."""
        return event_id in self.local

    # --- batches -----------------------------------------------------------------------------------

    def batcher(self) -> _Batcher:
        b = self._batcher
        if b is not None and b.pid == os.getpid():
            return b
        with self.lock:
            if self._batcher is None or self._batcher.pid != os.getpid():  # none yet, or inherited through fork
                self._register_drain()
                self._batcher = _Batcher(self._render_batch)
            return self._batcher

    def _render_batch(self, batch: list, patience_until: float) -> bool:
        """Render the batch; while the stream key is busy (PostgreSQL), back off and let the batch
        grow instead of queueing for it, until `patience_until`, then wait for it. False when
        nobody listened to any of its events."""
        wanted = self.listened(batch)
        heard = bool(wanted)
        backoff = RENDER_BACKOFF
        while wanted and not self._send_rendered(wanted, wait=time.monotonic() >= patience_until):
            time.sleep(backoff)
            backoff = min(backoff * 2, RENDER_BACKOFF_MAX)
            more = self.batcher().take(RENDER_BATCH - len(wanted))
            if more:
                wanted = sorted(wanted + self.listened(more), key=lambda w: w[0].id)
        return heard

    def listened(self, batch: list[tuple]) -> list[tuple]:
        """The queued (event, layer) entries someone may listen to, by id, as (event, layer,
        groups) with only the groups that may have members: an in-memory layer knows its groups;
        a Redis layer is asked once for the batch (`members`)."""
        entries = []
        for event, layer in sorted(batch, key=lambda entry: entry[0].id):
            groups = groups_of(event.work_item_id)
            if may_have_members(layer, groups):  # a listener may have left since the commit
                entries.append((event, layer, groups))
        listened: dict[int, set | None] = {}
        for layer in {id(e[1]): e[1] for e in entries}.values():
            listened[id(layer)] = self.members(layer, sorted({g for e in entries if e[1] is layer for g in e[2]}))
        out = []
        for event, layer, groups in entries:
            members = listened[id(layer)]
            if members is not None:
                groups = [g for g in groups if g in members]
            if groups:
                out.append((event, layer, groups))
        return out

    def members(self, layer, groups: list[str]) -> set[str] | None:
        """Which of `groups` have members on a Redis layer (asked on the send loop, where the
        layer's connections live); None when unknown (another layer, Redis not answering)."""
        if not groups or not self.probe.applies(layer):
            return None
        future = asyncio.run_coroutine_threadsafe(self.probe.listened(layer, groups), self.send_loop(layer))
        try:
            return future.result(self.probe.TIMEOUT)
        except Exception:
            future.cancel()
            logger.warning("counting the members of %s groups failed; sending to all", len(groups), exc_info=True)
            return None

    def _send_rendered(self, wanted: list[tuple], *, wait: bool = True) -> bool:
        """Render (one stream read, one summary read) and send, one group message per group in id
        order, the `listened` entries. False, with nothing done, when `wait` is False and the
        stream key is busy."""
        try:
            previous = selectors.events_previous_ids([w[0] for w in wanted], wait=wait)
            if previous is None:
                return False
            summaries = selectors.work_item_summaries({w[0].work_item_id for w in wanted})
        except Exception:  # the database is unreachable: these messages are lost, the cursor covers them
            logger.exception("reading the previous ids and summaries of events %s..%s failed",
                             wanted[0][0].id, wanted[-1][0].id)
            _close_connection()
            return True
        states: dict[int, dict] = {}
        for key, layer in {id(w[1]): w[1] for w in wanted}.items():
            try:
                states[key] = self.item_states(layer, [(w[0], previous[w[0].id][1]) for w in wanted
                                                       if w[1] is layer and item_group(w[0].work_item_id) in w[2]])
            except Exception:  # the events still leave; a page without the state reads it back later
                logger.exception("reading the item states of events %s..%s failed", wanted[0][0].id, wanted[-1][0].id)
                states[key] = {}
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
                    summary = rendered[event.work_item_id] = render(WorkItemSummaryOut, item)
                envelope = stream_event(event, previous[event.id], event_message(event, summary))
                state = states[id(layer)].get(event.work_item_id)
                plain = None
                for group in groups:
                    if state is not None and group != ITEMS_GROUP and last_of[id(layer), event.work_item_id] == event.id:
                        sent = encoded(with_state(envelope, state))  # the item's state rides on its last event here
                    else:
                        sent = plain = plain or encoded(envelope)
                    outgoing.setdefault((id(layer), group), (layer, []))[1].append(sent)
            except Exception:
                logger.exception("publishing event %s failed", event.id)
        for (_, group), (layer, envelopes) in outgoing.items():
            # one group message per group (a channel-layer send costs several Redis round trips,
            # whatever the message holds)
            for start in range(0, len(envelopes), STREAM_MESSAGE_EVENTS):
                chunk = envelopes[start:start + STREAM_MESSAGE_EVENTS]
                try:
                    self.send(layer, [group], stream_events(chunk))
                except Exception:
                    logger.exception("publishing events %s..%s to %s failed", chunk[0]["id"], chunk[-1]["id"], group)
        for key, group in outgoing:
            if group == ITEMS_GROUP:
                self.overview_changed(outgoing[key, group][0])
        return True

    # --- consumers -----------------------------------------------------------------------------------

    async def join(self, layer, channel_name: str, item_id: str | None) -> str:
        """Put a consumer in its stream's group (all items, or one item); returns the group. An
        in-memory layer's sends run on the loop its consumers listen on: this one."""
        group = ITEMS_GROUP if item_id is None else item_group(item_id)
        if isinstance(layer, InMemoryChannelLayer):
            self._listen_loop = asyncio.get_running_loop()
        await layer.group_add(group, channel_name)
        return group

    # --- sends -----------------------------------------------------------------------------------------

    def send_loop(self, layer) -> asyncio.AbstractEventLoop:
        loop = self._listen_loop
        if isinstance(layer, InMemoryChannelLayer) and loop is not None and loop.is_running():
            return loop
        return self.own_loop()

    def own_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self._own_loop is None or self._own_loop[0] != os.getpid():  # none yet, or inherited through fork
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="workcenter-stream-send", daemon=True).start()
                self._register_drain()
                self._own_loop = (os.getpid(), loop)
            return self._own_loop[1]

    def send(self, layer, groups: list[str], message: dict) -> None:
        """Hand one message for `groups` to the layer's send loop (never waits for the send)."""
        loop = self.send_loop(layer)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            future = loop.create_task(self._send_all(layer, groups, message))
        else:
            future = asyncio.run_coroutine_threadsafe(self._send_all(layer, groups, message), loop)
        self._pending.add(future)
        future.add_done_callback(self._sent)

    async def _send_all(self, layer, groups: list[str], message: dict) -> None:
        if message is WAKE:  # after its commit, like the events, but in no order with them: no queue
            self.wake_sending()
            began = time.time()
            await asyncio.gather(*(layer.group_send(group, message) for group in groups))
            if claims_logger.isEnabledFor(logging.DEBUG):  # the send's times (diagnosis)
                claims_logger.debug("claims wake sent %.6f %.6f", began, time.time())
            return
        # one send at a time per loop, in submission order, so one process's events leave in order
        lock = self._send_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            for group in groups:
                await layer.group_send(group, message)

    def _sent(self, future) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.error("channel layer send failed", exc_info=future.exception())

    def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Wait (bounded) for the queued events to be rendered and for the sends handed to another
        thread's loop to finish."""
        deadline = time.monotonic() + timeout
        b = self._batcher
        if b is not None and b.pid == os.getpid():
            b.wait_idle(max(0.0, deadline - time.monotonic()))
        for future in list(self._pending):
            if isinstance(future, concurrent.futures.Future):
                try:
                    future.result(max(0.0, deadline - time.monotonic()))
                except Exception:  # logged by _sent; a timeout leaves it to the cursor
                    pass

    def _register_drain(self) -> None:
        if not self._drain_registered:
            self._drain_registered = True
            atexit.register(self.drain)

    def _after_fork_in_child(self) -> None:
        # a lock held by another thread of the parent at fork time stays held in the child forever
        self.lock = threading.Lock()
        self.local.lock = threading.Lock()
        self._pending.clear()
        self._listen_loop = None
        self.states.forget()
        self.overview.forget()
        self._wake_queued = False


publisher = Publisher()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=publisher._after_fork_in_child)
