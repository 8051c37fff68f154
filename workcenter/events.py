"""Events: stored inside the service's transaction, published only after it commits.

`event_append` is the one way to write an Event row; `publish_on_commit` is the one publisher
hook. The Channels push is attached through `set_publisher` by the dashboard; until then (and in
processes without a channel layer) the publisher logs.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import collections
import concurrent.futures
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from typing import Any, Callable

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction

from .models import Event

logger = logging.getLogger("workcenter.events")

# The stream cursor (the event id) must never skip an id that commits later. On PostgreSQL ids
# are drawn by concurrent transactions and may commit out of order, so one advisory key guards
# the stream: every event insert takes it SHARED (before its id is drawn) and holds it to its
# commit, so writers never wait for each other and their commits can share a WAL flush; every
# stream read (`stream_read`) takes it EXCLUSIVE for the length of the read, which waits until
# every id already drawn has committed or rolled back and holds back new draws meanwhile. What a
# stream read returns is therefore a prefix that can never grow from below.
EVENT_ORDER_LOCK = int.from_bytes(hashlib.blake2b(b"workcenter.events", digest_size=8).digest(), "big", signed=True)


@contextlib.contextmanager
def stream_read():
    """Read the event stream (ids, pages, maxima) as a prefix that no later commit extends below.

    PostgreSQL: a short transaction holding the stream key exclusively (see above); SQLite
    serialises writers, so ids already commit in order there."""
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [EVENT_ORDER_LOCK])
        yield


def _log_publisher(event: Event) -> None:
    logger.debug("event %s %s item=%s", event.id, event.type, event.work_item_id)


_publisher: Callable[[Event], None] = _log_publisher


def set_publisher(fn: Callable[[Event], None] | None) -> None:
    global _publisher
    _publisher = fn or _log_publisher


def publish(event: Event) -> None:
    """The after-commit publication of an event this process committed (through `_publisher`).

    The id is remembered first: from here on the event pump of this process skips it, and the
    publisher may send it later (the channel publisher renders on a thread of its own)."""
    _remember_local(event.id)
    _publisher(event)


def event_append(
    *,
    work_item_id: str,
    type: str,
    data: dict[str, Any] | None = None,
    action_id: str | None = None,
    run_id: str | None = None,
    actor: str = "system",
    now,
    cur=None,
    writes=None,
) -> Event:
    """Write one Event row in the current transaction and schedule its publication after commit.

    One fixed INSERT (the ORM's statement compilation costs more than the insert); on
    PostgreSQL the same statement takes the event-order lock before the id is drawn.
    `cur`: the caller's hot cursor (`services.common.hot_cursor`), if it holds one.
    `writes`: the caller's write batch (`services.common.Writes`): the insert joins it and the
    event's id is set when the batch is flushed, before the commit publishes it.
    """
    from .services.common import adapters, db_values, hot_cursor, hot_execute, new_instance  # services import this module

    if writes is not None:
        cur = writes.cur
    if cur is None:
        with hot_cursor() as cur:
            return event_append(work_item_id=work_item_id, type=type, data=data, action_id=action_id,
                                run_id=run_id, actor=actor, now=now, cur=cur)
    conn = cur.db
    event = new_instance(Event, conn.alias, {
        "work_item_id": work_item_id, "type": type, "data": data or {}, "action_id": action_id, "run_id": run_id,
        "actor": actor or "system", "created_at": now})
    global _EVENT_ADAPTERS
    if _EVENT_ADAPTERS is None:
        _EVENT_ADAPTERS = adapters(_EVENT_FIELDS)
    d = event.__dict__
    params = db_values(_EVENT_ADAPTERS, [d[f.attname] for f in _EVENT_FIELDS], conn.ops)
    if conn.vendor == "postgresql":
        params.append(EVENT_ORDER_LOCK)
    if writes is not None:
        writes.add(_event_insert_sql(conn), params, returning='"id"', on_result=lambda v: setattr(event, "id", v))
    else:
        hot_execute(cur, _event_insert_sql(conn) + ' RETURNING "id"', params)
        event.id = cur.fetchone()[0]
    publish_on_commit(event)
    return event


_EVENT_FIELDS = [f for f in Event._meta.concrete_fields if f.attname != "id"]
_EVENT_SQL: dict[str, str] = {}
_EVENT_ADAPTERS: list | None = None


def _event_insert_sql(conn=connection) -> str:
    sql = _EVENT_SQL.get(conn.vendor)
    if sql is None:
        qn = conn.ops.quote_name
        cols = ", ".join(qn(f.column) for f in _EVENT_FIELDS)
        table = qn(Event._meta.db_table)
        if conn.vendor == "postgresql":
            # The function scan runs before the row's id default (nextval) is evaluated, so the
            # lock is held when the id is drawn; casts because SELECT outputs carry no column type.
            casts = {"data": "::jsonb", "created_at": "::timestamptz"}
            values = ", ".join("%s" + casts.get(f.attname, "") for f in _EVENT_FIELDS)
            sql = f'INSERT INTO {table} ({cols}) SELECT {values} FROM pg_advisory_xact_lock_shared(%s)'
        else:
            sql = f'INSERT INTO {table} ({cols}) VALUES ({", ".join(["%s"] * len(_EVENT_FIELDS))})'
        _EVENT_SQL[conn.vendor] = sql
    return sql


def publish_on_commit(event: Event) -> None:
    transaction.on_commit(lambda: publish(event), robust=True)


# --- the live stream (API.md §4) ------------------------------------------------------------------
# The dashboard app registers `channel_publish` / `channel_progress_publish` at startup. Each event
# is rendered once (Event + WorkItemSummary, the REST shapes) and sent to `workcenter.items` and
# `workcenter.item.<id>`. Delivery is best effort: the group message also names the previous
# stored event ids, so a consumer that missed one re-reads the hole from the database.

ITEMS_GROUP = "workcenter.items"
PROGRESS_TAIL_CHARS = 2000
_GROUP_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def item_group(item_id: str) -> str:
    """`workcenter.item.<id>`; ids that a channel-layer group name cannot hold go by digest."""
    if _GROUP_SAFE.fullmatch(item_id):
        return f"workcenter.item.{item_id}"
    return "workcenter.item.h" + hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:40]


def event_message(event: Event, work_item=None) -> dict:
    """`{"type": "event", "event": Event, "work_item": WorkItemSummary}` as JSON-ready data."""
    from . import selectors
    from .render import render
    from .schemas import EventOut, WorkItemSummaryOut

    item = work_item if work_item is not None else selectors.work_item_summary(event.work_item_id)
    return {"type": "event", "event": render(EventOut, event), "work_item": render(WorkItemSummaryOut, item)}


# Ids this process has published after their commit (`publish`, whatever the publisher). The event pump (dashboard/pump.py) reads
# the event table for what *other* processes committed; it skips these instead of rendering and
# sending a second copy (which consumers would drop, after it had delayed the next live message).
_LOCAL_IDS_MAX = 10_000
_local_ids: set[int] = set()
_local_order: collections.deque = collections.deque()
_local_lock = threading.Lock()


def _remember_local(event_id: int) -> None:
    with _local_lock:
        if event_id in _local_ids:
            return
        _local_ids.add(event_id)
        _local_order.append(event_id)
        while len(_local_order) > _LOCAL_IDS_MAX:
            _local_ids.discard(_local_order.popleft())


def published_here(event_id: int) -> bool:
    """True when this process published the event after its own commit."""
    return event_id in _local_ids


def channel_publish(event: Event, *, previous: tuple[int, int] | None = None, work_item=None) -> bool:
    """The publisher of a process with a channel layer (runs after commit, never raises, never
    blocks on the database or the layer).

    Without `previous` (the after-commit hook): the event is queued for this process's publisher
    thread, which renders the waiting events together (one stream read for their previous ids,
    one summary read for their items) and hands the messages to the send loop in id order; the
    committing thread only checks that someone may listen and appends to a queue.
    `previous` (overall, in-item previous event ids) and `work_item` (its summary) may be given
    by a caller that already knows them (dashboard/pump.py, publishing a page of events): the
    message is then rendered in the caller's thread (a summary read only when `work_item` is
    missing) and handed to the send loop. True when the event was queued or handed to the layer."""
    try:
        layer = get_channel_layer()
        groups = [ITEMS_GROUP, item_group(event.work_item_id)]
        if layer is None or not _may_have_members(layer, groups):
            return False
        if previous is None:
            _renderer().put((event, layer, work_item))
            return True
        _group_send(layer, groups, _stream_message(event, previous, event_message(event, work_item)))
        return True
    except Exception:  # the commit already happened; a lost message is covered by the cursor
        logger.exception("publishing event %s failed", event.id)
        return False


def _stream_message(event: Event, previous: tuple[int, int], message: dict) -> dict:
    prev_id, item_prev_id = previous
    return {"type": "stream.event", "id": event.id, "prev_id": prev_id, "item_prev_id": item_prev_id,
            "message": message}


# --- the publisher thread: committed events rendered in batches, off the committing thread --------
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
# Nothing is rendered for nobody: `_listened` drops the groups nobody is in, from the in-memory
# layer's own table, or for a Redis layer from one pipelined count of the batch's groups. A group
# found empty after the commit can be skipped: a consumer joins its group before it reads its
# snapshot or backlog, so one that joins later reads this event from the database.
# The messages of a batch go to the send loop in id order, and the loop sends them in that order
# (`_send_all`), so one publisher thread's messages leave in id order. Events that commit out of id
# order in different threads of one process may land in different batches; the later message then
# names the earlier id as its previous one and consumers read it back (then drop the late copy).
# The queue is bounded (RENDER_QUEUE_MAX): past it the oldest waiting events are dropped (logged),
# which consumers also repair from the previous ids of the next message.
RENDER_BATCH = 500
RENDER_INTERVAL = 0.005
RENDER_INTERVAL_UNHEARD = 0.05  # after a batch nobody listened to (the probe is the batch's cost)
RENDER_QUEUE_MAX = 10_000
RENDER_IDLE_CLOSE = 1.0  # an idle publisher thread closes its database connection after this
RENDER_PATIENCE = 0.05  # how long a batch may wait for a free stream key before queueing for it
RENDER_BACKOFF = 0.001
RENDER_BACKOFF_MAX = 0.008


class _Renderer:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition(threading.Lock())
        self.waiting: collections.deque = collections.deque()
        self.busy = False  # a batch is taken and not yet handed to the send loop
        self.dropped = 0
        self.batches = 0  # batches rendered (observability and tests)
        self.retries = 0  # stream key found busy
        self.thread = threading.Thread(target=self._run, name="workcenter-publisher-render", daemon=True)
        self.thread.start()

    def put(self, entry: tuple) -> None:
        """Queue one (event, layer, work_item or None); never blocks beyond the queue's lock."""
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

    def _take(self, batch: list, limit: int = RENDER_BATCH) -> list:
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
            batch = self._take([])
            connected = True
            heard = True
            try:
                heard = self._render(batch, last_start + RENDER_PATIENCE)
                self.batches += 1
            except BaseException:  # the thread must live on
                logger.exception("rendering %s events failed", len(batch))
                _close_connection()

    def _render(self, batch: list, patience_until: float) -> bool:
        """Render the batch; while the stream key is busy (PostgreSQL), back off and let the batch
        grow instead of queueing for it, until `patience_until`, then wait for it. False when
        nobody listened to any of its events."""
        wanted = _listened(batch)
        heard = bool(wanted)
        backoff = RENDER_BACKOFF
        while wanted and not _publish_listened(wanted, wait=time.monotonic() >= patience_until):
            time.sleep(backoff)
            backoff = min(backoff * 2, RENDER_BACKOFF_MAX)
            more = self._take([], RENDER_BATCH - len(wanted))
            if more:
                wanted = sorted(wanted + _listened(more), key=lambda w: w[0].id)
            self.retries += 1
        return heard


_render: _Renderer | None = None
_render_lock = threading.Lock()


def _renderer() -> _Renderer:
    global _render
    r = _render
    if r is not None and r.pid == os.getpid():
        return r
    with _render_lock:
        if _render is None or _render.pid != os.getpid():  # none yet, or inherited through fork
            _register_drain()
            _render = _Renderer()
        return _render


def _close_connection() -> None:
    try:
        connection.close()
    except Exception:
        logger.exception("closing the publisher thread's database connection failed")


def _listened(batch: list[tuple]) -> list[tuple]:
    """The queued (event, layer, work_item) entries someone may listen to, by id, as
    (event, layer, groups, work_item) with only the groups that may have members: an in-memory
    layer knows its groups (`_may_have_members`); a Redis layer is asked once for the batch
    (`_redis_listened`). A group found empty after the commit may be skipped: a consumer that
    joins it later reads its snapshot or backlog after joining, so after this commit."""
    entries = []
    for event, layer, work_item in sorted(batch, key=lambda entry: entry[0].id):
        groups = [ITEMS_GROUP, item_group(event.work_item_id)]
        if _may_have_members(layer, groups):  # a listener may have left since the commit
            entries.append((event, layer, groups, work_item))
    listened: dict[int, set | None] = {}
    for layer in {id(e[1]): e[1] for e in entries}.values():
        listened[id(layer)] = _groups_listened(layer, sorted({g for e in entries if e[1] is layer for g in e[2]}))
    out = []
    for event, layer, groups, work_item in entries:
        members = listened[id(layer)]
        if members is not None:
            groups = [g for g in groups if g in members]
        if groups:
            out.append((event, layer, groups, work_item))
    return out


def _publish_listened(wanted: list[tuple], *, wait: bool = True) -> bool:
    """Render (one stream read, one summary read) and hand to the send loop, in id order, the
    messages of `_listened` entries. False, with nothing done, when `wait` is False and the
    stream key is busy."""
    from . import selectors
    from .render import render
    from .schemas import EventOut, WorkItemSummaryOut

    try:
        previous = selectors.events_previous_ids([w[0] for w in wanted], wait=wait)
        if previous is None:
            return False
        summaries = selectors.work_item_summaries({w[0].work_item_id for w in wanted if w[3] is None})
    except Exception:  # the database is unreachable: these messages are lost, the cursor covers them
        logger.exception("reading the previous ids and summaries of events %s..%s failed",
                         wanted[0][0].id, wanted[-1][0].id)
        _close_connection()
        return True
    rendered: dict[str, dict] = {}
    outgoing: dict[tuple[int, str], tuple[Any, list[dict]]] = {}  # (layer, group) -> messages, by id
    for event, layer, groups, work_item in wanted:
        try:
            if work_item is not None:
                summary = render(WorkItemSummaryOut, work_item)
            else:
                summary = rendered.get(event.work_item_id)
                if summary is None:
                    item = summaries.get(event.work_item_id)
                    if item is None:
                        logger.warning("event %s: work item %s is gone, not published", event.id, event.work_item_id)
                        continue
                    summary = rendered[event.work_item_id] = render(WorkItemSummaryOut, item)
            message = {"type": "event", "event": render(EventOut, event), "work_item": summary}
            stream = _stream_message(event, previous[event.id], message)
            for group in groups:
                outgoing.setdefault((id(layer), group), (layer, []))[1].append(stream)
        except Exception:
            logger.exception("publishing event %s failed", event.id)
    _send_batched(outgoing)
    return True


STREAM_MESSAGE_EVENTS = 100  # events in one group message at most


def _send_batched(outgoing: dict) -> None:
    """One group message per group for the batch's events, in id order (`stream.events`, read by
    the consumers as that many `stream.event` messages; a lone event goes as `stream.event`):
    a channel-layer send costs several Redis round trips, whatever the message holds."""
    for (_, group), (layer, messages) in outgoing.items():
        for start in range(0, len(messages), STREAM_MESSAGE_EVENTS):
            chunk = messages[start:start + STREAM_MESSAGE_EVENTS]
            try:
                _group_send(layer, [group], chunk[0] if len(chunk) == 1 else
                            {"type": "stream.events", "events": chunk})
            except Exception:
                logger.exception("publishing events %s..%s to %s failed", chunk[0]["id"], chunk[-1]["id"], group)


PROBE_TIMEOUT = 2.0


def _probes(layer) -> bool:
    """A channels_redis layer whose group sets can be counted (channels_redis.core)."""
    try:
        from channels_redis.core import RedisChannelLayer
    except ImportError:
        return False
    return isinstance(layer, RedisChannelLayer) and all(
        hasattr(layer, a) for a in ("_group_key", "consistent_hash", "connection", "group_expiry"))


async def _redis_listened(layer, groups: list[str]) -> set[str]:
    """The groups with a member that `group_send` would not discard as expired (one pipelined
    ZCOUNT per Redis host)."""
    by_host: dict[int, list[str]] = {}
    for g in groups:
        by_host.setdefault(layer.consistent_hash(g), []).append(g)
    floor = int(time.time()) - int(layer.group_expiry)  # group_send discards scores <= floor
    out: set[str] = set()
    for index, names in by_host.items():
        pipe = layer.connection(index).pipeline(transaction=False)
        for g in names:
            pipe.zcount(layer._group_key(g), f"({floor}", "+inf")
        for g, n in zip(names, await pipe.execute()):
            if n:
                out.add(g)
    return out


def _groups_listened(layer, groups: list[str]) -> set[str] | None:
    """Which of `groups` have members on a Redis layer (asked on the send loop, where the
    layer's connections live); None when unknown (another layer, Redis not answering)."""
    if not groups or not _probes(layer):
        return None
    future = asyncio.run_coroutine_threadsafe(_redis_listened(layer, groups), _send_loop())
    try:
        return future.result(PROBE_TIMEOUT)
    except Exception:
        future.cancel()
        logger.warning("counting the members of %s groups failed; sending to all", len(groups), exc_info=True)
        return None


def progress_message(run) -> dict:
    response = run.response or ""
    return {"type": "progress", "work_item_id": run.work_item_id, "action_id": run.action_id, "run_id": run.pk,
            "progress_revision": run.progress_revision, "response_tail": response[-PROGRESS_TAIL_CHARS:]}


def _log_progress_publisher(message: dict) -> None:
    logger.debug("progress run=%s revision=%s", message["run_id"], message["progress_revision"])


_progress_publisher: Callable[[dict], None] = _log_progress_publisher


def set_progress_publisher(fn: Callable[[dict], None] | None) -> None:
    global _progress_publisher
    _progress_publisher = fn or _log_progress_publisher


def publish_progress_on_commit(run) -> None:
    """A worker's progress report, pushed after commit and never stored as an event."""
    message = progress_message(run)
    transaction.on_commit(lambda: _progress_publisher(message), robust=True)


def channel_progress_publish(message: dict) -> None:
    try:
        layer = get_channel_layer()
        groups = [ITEMS_GROUP, item_group(message["work_item_id"])]
        if layer is not None and _may_have_members(layer, groups):
            _group_send(layer, groups, {"type": "stream.progress", "message": message})
    except Exception:
        logger.exception("publishing progress of run %s failed", message.get("run_id"))


def _may_have_members(layer, groups: list[str]) -> bool:
    """An in-memory layer knows its groups: skip rendering when nobody in this process listens."""
    known = getattr(layer, "groups", None)
    if isinstance(layer, InMemoryChannelLayer) and isinstance(known, dict):
        return any(known.get(g) for g in groups)
    return True


# Sends never block the committing code: they are handed to an event loop that runs them in
# submission order. In a web process that is the websocket server's loop, registered by the
# consumers (an in-memory layer's asyncio queues belong to it and are not thread-safe; a Redis
# layer keeps its pooled connections there). Elsewhere (workers, commands) a daemon thread runs a
# loop of its own, drained for a few seconds at exit so a short command's last events still leave.
_stream_loop: asyncio.AbstractEventLoop | None = None
_own_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_own_loop_lock = threading.Lock()
_send_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()
_pending: set = set()  # sends in flight stay referenced until done
DRAIN_SECONDS = 5.0


def set_stream_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _stream_loop
    _stream_loop = loop


def _publisher_loop() -> asyncio.AbstractEventLoop:
    global _own_loop
    with _own_loop_lock:
        if _own_loop is None or _own_loop[0] != os.getpid():  # none yet, or inherited through fork
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="workcenter-publisher", daemon=True).start()
            _register_drain()
            _own_loop = (os.getpid(), loop)
        return _own_loop[1]


_drain_registered = False


def _register_drain() -> None:
    global _drain_registered
    if not _drain_registered:
        _drain_registered = True
        atexit.register(drain_publisher)


def _after_fork_in_child() -> None:
    # a lock held by another thread of the parent at fork time stays held in the child forever
    global _render_lock, _own_loop_lock, _local_lock
    _render_lock, _own_loop_lock, _local_lock = threading.Lock(), threading.Lock(), threading.Lock()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def drain_publisher(timeout: float = DRAIN_SECONDS) -> None:
    """Wait (bounded) for the queued events to be rendered and for the sends handed to another
    thread's loop to finish."""
    deadline = time.monotonic() + timeout
    r = _render
    if r is not None and r.pid == os.getpid():
        r.wait_idle(max(0.0, deadline - time.monotonic()))
    for future in list(_pending):
        if isinstance(future, concurrent.futures.Future):
            try:
                future.result(max(0.0, deadline - time.monotonic()))
            except Exception:  # logged by _log_failure; a timeout leaves it to the cursor
                pass


async def _send_all(layer, groups: list[str], message: dict) -> None:
    # one send at a time per loop, in submission order, so one process's events leave in order
    loop = asyncio.get_running_loop()
    lock = _send_locks.get(loop)
    if lock is None:
        lock = _send_locks[loop] = asyncio.Lock()
    async with lock:
        for group in groups:
            await layer.group_send(group, message)


def _log_failure(future) -> None:
    _pending.discard(future)
    if not future.cancelled() and future.exception() is not None:
        logger.error("channel layer send failed", exc_info=future.exception())


def _send_loop() -> asyncio.AbstractEventLoop:
    loop = _stream_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        loop = _publisher_loop()
    return loop


def _group_send(layer, groups: list[str], message: dict) -> None:
    loop = _send_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        future = loop.create_task(_send_all(layer, groups, message))
    else:
        future = asyncio.run_coroutine_threadsafe(_send_all(layer, groups, message), loop)
    _pending.add(future)
    future.add_done_callback(_log_failure)
