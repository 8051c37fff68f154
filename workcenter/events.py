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
_EVENT_ORDER_LOCK = int.from_bytes(hashlib.blake2b(b"workcenter.events", digest_size=8).digest(), "big", signed=True)


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
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_EVENT_ORDER_LOCK])
        yield


def _log_publisher(event: Event) -> None:
    logger.debug("event %s %s item=%s", event.id, event.type, event.work_item_id)


_publisher: Callable[[Event], None] = _log_publisher


def set_publisher(fn: Callable[[Event], None] | None) -> None:
    global _publisher
    _publisher = fn or _log_publisher


def publish(event: Event) -> None:
    """The after-commit publication of an event this process committed (through `_publisher`)."""
    _publisher(event)
    _remember_local(event.id)


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
        params.append(_EVENT_ORDER_LOCK)
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
    from .schemas import EventOut, WorkItemSummaryOut

    item = work_item if work_item is not None else selectors.work_item_summary(event.work_item_id)
    return {"type": "event", "event": EventOut.from_orm(event).model_dump(mode="json"),
            "work_item": WorkItemSummaryOut.from_orm(item).model_dump(mode="json")}


# Ids this process has published after their commit (`publish`, whatever the publisher). The event pump (dashboard/pump.py) reads
# the event table for what *other* processes committed; it skips these instead of rendering and
# sending a second copy (which consumers would drop, after it had delayed the next live message).
_LOCAL_IDS_MAX = 10_000
_local_ids: set[int] = set()
_local_order: collections.deque = collections.deque()
_local_lock = threading.Lock()


def _remember_local(event_id: int) -> None:
    with _local_lock:
        _local_ids.add(event_id)
        _local_order.append(event_id)
        while len(_local_order) > _LOCAL_IDS_MAX:
            _local_ids.discard(_local_order.popleft())


def published_here(event_id: int) -> bool:
    """True when this process published the event after its own commit."""
    return event_id in _local_ids


def channel_publish(event: Event, *, previous: tuple[int, int] | None = None, work_item=None) -> bool:
    """The publisher of a process with a channel layer (runs after commit, never raises).

    `previous` (overall, in-item previous event ids) and `work_item` (its summary) may be given
    by a caller that already knows them (dashboard/pump.py, publishing a page of events); they
    are read otherwise. True when a message was handed to the layer."""
    from . import selectors

    try:
        layer = get_channel_layer()
        groups = [ITEMS_GROUP, item_group(event.work_item_id)]
        if layer is None or not _may_have_members(layer, groups):
            return False
        prev_id, item_prev_id = previous if previous is not None else selectors.event_previous_ids(event)
        _group_send(layer, groups, {"type": "stream.event", "id": event.id, "prev_id": prev_id,
                                    "item_prev_id": item_prev_id, "message": event_message(event, work_item)})
        return True
    except Exception:  # the commit already happened; a lost message is covered by the cursor
        logger.exception("publishing event %s failed", event.id)
        return False


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
            if _own_loop is None:
                atexit.register(drain_publisher)
            _own_loop = (os.getpid(), loop)
        return _own_loop[1]


def drain_publisher(timeout: float = DRAIN_SECONDS) -> None:
    """Wait (bounded) for the sends handed to another thread's loop to finish."""
    deadline = time.monotonic() + timeout
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


def _group_send(layer, groups: list[str], message: dict) -> None:
    loop = _stream_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        loop = _publisher_loop()
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
