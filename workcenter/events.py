"""Events: stored inside the service's transaction, published only after it commits.

`event_append` is the one way to write an Event row; `publish_on_commit` is the one publisher
hook. The Channels push is attached through `set_publisher` by the dashboard; until then (and in
processes without a channel layer) the publisher logs.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any, Callable

from django.db import connection, transaction

from .models import Event

logger = logging.getLogger("workcenter.events")

# A constant advisory-lock key: on PostgreSQL the event insert takes it so that event ids
# commit in id order (the stream cursor must never skip an id that commits later). It is held
# only from the event insert to the commit, the last step of every service.
_EVENT_ORDER_LOCK = int.from_bytes(hashlib.blake2b(b"workcenter.events", digest_size=8).digest(), "big", signed=True)


def _log_publisher(event: Event) -> None:
    logger.debug("event %s %s item=%s", event.id, event.type, event.work_item_id)


_publisher: Callable[[Event], None] = _log_publisher


def set_publisher(fn: Callable[[Event], None] | None) -> None:
    global _publisher
    _publisher = fn or _log_publisher


def publish(event: Event) -> None:
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
) -> Event:
    """Write one Event row in the current transaction and schedule its publication after commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_EVENT_ORDER_LOCK])
    event = Event.objects.create(
        work_item_id=work_item_id,
        type=type,
        data=data or {},
        action_id=action_id,
        run_id=run_id,
        actor=actor or "system",
        created_at=now,
    )
    publish_on_commit(event)
    return event


def publish_on_commit(event: Event) -> None:
    transaction.on_commit(lambda: publish(event), robust=True)
