"""Events: stored inside the service's transaction, published only after it commits.

`event_append` is the one way to write an Event row. After the commit the store hands the event
(and a worker's progress report, which is never stored) to the publisher registered with
`set_publisher` / `set_progress_publisher` (and that a run's log grew, `set_run_log_publisher`): the dashboard app registers its publisher
(dashboard/stream/publisher.py, the live stream) at startup; until then the store logs. This module
knows nothing of how the publisher delivers.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
from typing import Any, Callable

from django.db import connection, transaction

from . import db
from .models import Event, Run

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
            cur.execute(db.sql("event_order_lock"), [EVENT_ORDER_LOCK])
        yield


# --- after commit: the registered publisher ------------------------------------------------------

def _log_event(event: Event) -> None:
    logger.debug("event %s %s item=%s", event.id, event.type, event.work_item_id)


def _log_progress(run: Run) -> None:
    logger.debug("progress run=%s revision=%s", run.pk, run.progress_revision)


def _log_run_log(run_id: str, next_seq: int) -> None:
    logger.debug("run log run=%s next_seq=%s", run_id, next_seq)


_publish_event: Callable[[Event], None] = _log_event
_publish_progress: Callable[[Run], None] = _log_progress
_publish_run_log: Callable[[str, int], None] = _log_run_log


def set_publisher(fn: Callable[[Event], None] | None) -> None:
    """Register what receives each event after its transaction commits (None: log it)."""
    global _publish_event
    _publish_event = fn or _log_event


def set_progress_publisher(fn: Callable[[Run], None] | None) -> None:
    """Register what receives each progress report after its transaction commits (None: log it)."""
    global _publish_progress
    _publish_progress = fn or _log_progress


def set_run_log_publisher(fn: Callable[[str, int], None] | None) -> None:
    """Register what hears, after commit, that a run's log grew (run id, next chunk number)."""
    global _publish_run_log
    _publish_run_log = fn or _log_run_log


def publish_run_log_on_commit(run_id: str, next_seq: int) -> None:
    """A run's log grew (services/run_logs.py): its followers read it after the commit."""
    transaction.on_commit(lambda: _publish_run_log(run_id, next_seq), robust=True)


def publish_on_commit(event: Event) -> None:
    transaction.on_commit(lambda: _publish_event(event), robust=True)


def publish_progress_on_commit(run: Run) -> None:
    """A worker's progress report, handed over after commit as it was reported (a copy: the
    caller's object may change before the commit) and never stored as an event."""
    reported = copy.copy(run)
    transaction.on_commit(lambda: _publish_progress(reported), robust=True)


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

    One fixed INSERT (`event_insert` of the statement catalogue; the ORM's statement compilation
    costs more than the insert); on PostgreSQL the same statement takes the event-order lock
    before the id is drawn. `cur`: the caller's hot cursor (`db.hot_cursor`), if it holds one.
    `writes`: the caller's write batch (`db.Writes`): the insert joins it and the event's id is
    set when the batch is flushed, before the commit publishes it.
    """
    if writes is not None:
        cur = writes.cur
    if cur is None:
        with db.hot_cursor() as cur:
            return event_append(work_item_id=work_item_id, type=type, data=data, action_id=action_id,
                                run_id=run_id, actor=actor, now=now, cur=cur)
    conn = cur.db
    event = db.new_instance(Event, conn.alias, {
        "work_item_id": work_item_id, "type": type, "data": data or {}, "action_id": action_id, "run_id": run_id,
        "actor": actor or "system", "created_at": now})
    d = event.__dict__
    params = db.db_values(_EVENT_ADAPTERS, [d[f.attname] for f in _EVENT_FIELDS], conn.ops)
    if conn.vendor == "postgresql":
        params.append(EVENT_ORDER_LOCK)
    if writes is None and conn.vendor == "postgresql":
        batch = db.Writes(cur)
        _append_with_outbox(batch, event, params, conn)
        batch.flush()
    elif writes is None:
        event.id = db.insert_returning(cur, db.sql("event_insert", conn), params, "id")
        db.hot_execute(cur, db.sql("webhook_outbox", conn), _outbox_params(event, conn))
    else:
        _append_with_outbox(writes, event, params, conn)
    publish_on_commit(event)
    return event


def _append_with_outbox(writes, event: Event, params: list, conn) -> None:
    """The event's insert and its webhook deliveries (the outbox: one row per webhook that takes
    the event, written in the event's transaction, so a committed event is always delivered and a
    rolled-back one never is). On PostgreSQL the outbox statement reads the event's id from the
    insert before it in the batch; on SQLite it runs once the insert has run and set the id."""
    writes.add(db.sql("event_insert", conn), params, returning="id", on_result=lambda v: setattr(event, "id", v))
    outbox = db.sql("webhook_outbox", conn)
    if writes.pg:
        when = conn.ops.adapt_datetimefield_value(event.created_at)
        writes.add(outbox, [when, when, event.work_item_id, f"|{event.type}|"], expect=None)
    else:
        db.hot_execute(writes.cur, outbox, _outbox_params(event, conn))


def _outbox_params(event: Event, conn) -> list:
    when = conn.ops.adapt_datetimefield_value(event.created_at)
    return [when, when, event.id, event.work_item_id, f"|{event.type}|"]


_EVENT_FIELDS = db.INSERT_FIELDS["Event"]
_EVENT_ADAPTERS = db.adapters(_EVENT_FIELDS)
