"""The live stream (API.md §4): every stored event, in id order, after its transaction commits.

Connect: authenticate, join the group, accept, *then* read the snapshot (Zulip's "register for
events, then fetch state"): an event that commits while we connect is either in what we read or
queued in the group, usually both, and the id cursor drops the copy. Channels dispatches one
message at a time, so group messages that arrive during the backfill wait in the channel layer
until `connect` returns — that queue is the buffer.

Live: a group message carries the event's id and the ids of the stored events just before it
(overall and in its item). `id <= last sent` is a duplicate and is dropped; a previous id beyond
the last sent one means a message was lost or overtaken (channel layer full, publishes from
several processes crossing): the consumer re-reads that hole from the database and sends it
first. Only then does it touch the database; normally it forwards the message it was given.

Close codes after accepting (the client can read them; a refused handshake is a bare HTTP 403):
4401 no or unusable credentials, 4403 no `workcenter.view_workitem`, 4404 unknown work item on
the per-item route, 4400 `after_id` that is not a non-negative integer.
"""
from __future__ import annotations

import asyncio
import json
import re
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from workcenter import events, selectors
from workcenter.auth import VIEW
from workcenter.errors import NotFound
from workcenter.schemas import MAX_INT64, GraphOut

from .pump import pump

CLOSE_BAD_REQUEST = 4400
CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_PERMISSION_DENIED = 4403
CLOSE_NOT_FOUND = 4404
BACKFILL_PAGE = 1000
_DIGITS = re.compile(r"[0-9]{1,20}")


def _after_id(scope) -> int | None | bool:
    """`?after_id=N` ⇒ N; absent ⇒ None; malformed ⇒ False."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after_id")
    if not values:
        return None
    raw = values[-1].strip()
    if not _DIGITS.fullmatch(raw) or int(raw) > MAX_INT64:
        return False
    return int(raw)


def _summaries(batch: list, cache: dict) -> list[dict]:
    out = []
    for event in batch:
        if event.work_item_id not in cache:
            cache[event.work_item_id] = selectors.work_item_summary(event.work_item_id)
        out.append(events.event_message(event, cache[event.work_item_id]))
    return out


def _events_page(*, after_id: int, before_id: int | None, item_id: str | None) -> tuple[list[dict], bool]:
    """One page of stored events with after_id < id (< before_id), in id order, as stream
    messages, and whether more may follow. Item summaries are read once per item and page: a
    replayed event carries its item's current state."""
    batch = selectors.events_after(after_id=after_id, item_id=item_id, limit=BACKFILL_PAGE)
    more = len(batch) == BACKFILL_PAGE
    if before_id is not None and batch and batch[-1].id >= before_id:
        batch, more = [e for e in batch if e.id < before_id], False
    return _summaries(batch, {}), more


class WorkItemStreamConsumer(AsyncWebsocketConsumer):
    """`/ws/work-items/` (all items) and `/ws/work-items/<item_id>/` (one item)."""

    item_id: str | None = None
    last_id: int = 0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self._refuse(CLOSE_NOT_AUTHENTICATED)
        if not await database_sync_to_async(user.has_perm)(VIEW):
            return await self._refuse(CLOSE_PERMISSION_DENIED)
        after_id = _after_id(self.scope)
        if after_id is False:
            return await self._refuse(CLOSE_BAD_REQUEST)
        self.item_id = self.scope["url_route"]["kwargs"].get("item_id")
        group = events.ITEMS_GROUP if self.item_id is None else events.item_group(self.item_id)
        self.groups = [group]  # websocket_disconnect leaves it
        events.set_stream_loop(asyncio.get_running_loop())
        await self.channel_layer.group_add(group, self.channel_name)  # join first, then read
        await pump.consumer_joined(self.channel_name)  # other processes' events (in-memory layer)
        await self.accept()
        try:
            hello = await database_sync_to_async(self._snapshot)()
        except NotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json(hello)
        if after_id is None:
            self.last_id = hello["last_event_id"]
        else:
            self.last_id = after_id
            await self._send_stored(before_id=None)

    async def disconnect(self, code) -> None:
        pump.consumer_left(self.channel_name)

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    def _snapshot(self) -> dict:
        if self.item_id is None:
            hello = {"type": "hello", "last_event_id": selectors.event_last_id()}
        else:
            selectors.work_item_get(self.item_id)  # NotFound ⇒ 4404
            # the id is read before the graph: an event committing in between is then replayed
            # on a graph that may already show it (harmless), never skipped
            last = selectors.item_last_event_id(self.item_id)
            graph = GraphOut.model_validate(selectors.graph_snapshot(self.item_id)).model_dump(mode="json")
            graph["last_event_id"] = last
            hello = {"type": "hello", "last_event_id": last, "graph": graph}
        return hello

    async def _send_stored(self, *, before_id: int | None) -> None:
        """Send the stored events after the last sent one (and before `before_id`), page by page."""
        more = True
        while more:
            page, more = await database_sync_to_async(_events_page)(
                after_id=self.last_id, before_id=before_id, item_id=self.item_id)
            for message in page:
                await self._forward(message["event"]["id"], message)

    async def _forward(self, event_id: int, message: dict) -> None:
        if event_id > self.last_id:
            await self.send_json(message)
            self.last_id = event_id

    async def stream_event(self, message: dict) -> None:
        event_id = message["id"]
        if event_id <= self.last_id:
            return  # already sent (backfill, or a hole filled from the database)
        previous = message["prev_id"] if self.item_id is None else message["item_prev_id"]
        if previous > self.last_id:
            await self._send_stored(before_id=event_id)
        await self._forward(event_id, message["message"])

    async def stream_events(self, message: dict) -> None:
        """Several `stream.event` messages of one publisher batch, in id order."""
        for event_message in message["events"]:
            await self.stream_event(event_message)

    async def stream_progress(self, message: dict) -> None:
        await self.send_json(message["message"])

    async def send_json(self, message: dict) -> None:
        await self.send(text_data=json.dumps(message, separators=(",", ":")))

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The stream is one-way: what a client sends is ignored (never parsed)."""
