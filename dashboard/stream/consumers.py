"""The live stream (API.md §4): every stored event, in id order, after its transaction commits.

Connect: authenticate, join the group, accept, *then* read the snapshot (Zulip's "register for
events, then fetch state"): an event that commits while we connect is either in what we read or
queued in the group, usually both, and the id cursor drops the copy. The hello goes out as soon
as the snapshot is read; a resume (`?after_id=`) then replays the stored events as a task of its
own, so the handshake never waits for the replay.

Replay: pages of `REPLAY_PAGE` events, each one short read (events by primary key, then the
page's item summaries in one batch read) rendered on the replay thread (`REPLAY_THREADS`, not
the database thread that every consumer's handshake and dispatch share), which rests after each
page (`REPLAY_REST`); the task yields between pages. Group messages that arrive meanwhile are
buffered (at most `PENDING_MAX`; past that they are dropped and read back from the database
instead) and sent after the replay, minus what it already sent (the id cursor); of the
progress messages (transient, API.md §4) only the latest of each run is kept and sent after
the events. A client that leaves cancels its replay at once: no page is read or sent for it
afterwards.

Live: a group message carries the event's id and the ids of the stored events just before it
(overall and in its item). `id <= last sent` is a duplicate and is dropped; a previous id beyond
the last sent one means a message was lost or overtaken (channel layer full, publishes from
several processes crossing): the consumer re-reads that hole from the database (a replay task
as above, the message waiting in the buffer) and sends it first. Only then does it touch the
database; normally it forwards the message it was given.

Close codes after accepting (the client can read them; a refused handshake is a bare HTTP 403):
4401 no or unusable credentials, 4403 no `workcenter.view_workitem`, 4404 unknown work item on
the per-item route, 4400 `after_id` that is not a non-negative integer; 1011 when a replay read
fails (the client resumes with the last id it received).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from workcenter import item_page_state as item_state
from workcenter import render, selectors
from workcenter.auth import VIEW
from workcenter.errors import NotFound
from workcenter.instruments import WEBSOCKET_CLIENTS

from .heartbeat import heartbeat
from .live_state import MAX_HELLO_BYTES, overview_now
from .messages import event_message, hello_message
from .publisher import publisher
from .run_log_follow import LogFollow, parse_follow
from .pump import pump

CLOSE_BAD_REQUEST = 4400
CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_PERMISSION_DENIED = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_INTERNAL_ERROR = 1011


async def viewer_refusal(scope) -> int | None:
    """The close code for a stream's caller who may not watch (4401 no credentials, 4403 no
    `workcenter.view_workitem`), or None for a viewer."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return CLOSE_NOT_AUTHENTICATED
    if not await database_sync_to_async(user.has_perm)(VIEW):
        return CLOSE_PERMISSION_DENIED
    return None
REPLAY_PAGE = 200  # events per replay read
# Replay threads per process. One: replays take turns page by page, and a page's CPU work (rows,
# rendering) never runs in more than one thread beside the event loop; every further busy thread
# lengthens the loop's and the database thread's waits for the GIL, i.e. everyone's handshake
# (measured with three full replays of 10,000 events: a hello took 0.13-0.44 s with two replay
# threads, 0.02-0.07 s with one).
REPLAY_THREADS = 1
# After each page the replay thread rests this many times as long as the page took (measured as
# above on a loaded machine: hellos within 0.02-0.22 s without the rest, 0.01-0.08 s with it; a
# replay of 10,000 events takes about 3 s instead of 1.5 s).
REPLAY_REST = 1.0
PENDING_MAX = 1000  # live messages a consumer buffers during its replay
MAX_CLIENT_MESSAGE = 1024  # characters of a message a client sends (a log follow); longer ones are ignored
_DIGITS = re.compile(r"[0-9]{1,20}")
MAX_EVENT_ID = 2**63 - 1  # event ids are 64-bit

logger = logging.getLogger("workcenter.events.stream")


def _after_id(scope) -> int | None | bool:
    """`?after_id=N` ⇒ N; absent ⇒ None; malformed ⇒ False."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after_id")
    if not values:
        return None
    raw = values[-1].strip()
    if not _DIGITS.fullmatch(raw) or int(raw) > MAX_EVENT_ID:
        return False
    return int(raw)


def _payload(envelope: dict) -> dict | str:
    """What a group envelope carries for the client: its encoded `text`, or its `message`."""
    text = envelope.get("text")
    return envelope["message"] if text is None else text


def _events_page(*, after_id: int, before_id: int | None,
                 item_id: str | None) -> tuple[list[tuple[int, dict]], int, bool]:
    """One replay page: the stored events with after_id < id (< before_id), in id order, as
    (id, stream message); the last id read; whether more may follow. Two short reads: the page
    of events (primary key order, a `stream_read`), then its items' summaries together (a
    replayed event carries its item's current state; an item deleted in between is skipped)."""
    limit = REPLAY_PAGE
    batch = selectors.events_after(after_id=after_id, item_id=item_id, limit=limit)
    more = len(batch) == limit
    if before_id is not None and batch and batch[-1].id >= before_id:
        batch, more = [e for e in batch if e.id < before_id], False
    cursor = batch[-1].id if batch else after_id
    summaries = selectors.work_item_summaries({e.work_item_id for e in batch})
    page = [(e.id, event_message(e, summaries[e.work_item_id])) for e in batch if e.work_item_id in summaries]
    return page, cursor, more


def _paced_page(**kwargs):
    """`_events_page`, then a rest as long as it took (`REPLAY_REST`): the replays of a process use
    at most about half of one core, and the GIL is free the other half for the event loop and the
    database thread (the handshakes)."""
    started = time.perf_counter()
    page = _events_page(**kwargs)
    time.sleep((time.perf_counter() - started) * REPLAY_REST)
    return page


_replay_executor: ThreadPoolExecutor | None = None


def _replay_read(**kwargs):
    """A replay page, read on the replay threads (each with its own database connection)."""
    global _replay_executor
    if _replay_executor is None:
        _replay_executor = ThreadPoolExecutor(max_workers=REPLAY_THREADS, thread_name_prefix="workcenter-replay")
    return database_sync_to_async(_paced_page, thread_sensitive=False, executor=_replay_executor)(**kwargs)


class WorkItemStreamConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/work-items/` (all items) and `/ws/work-items/<item_id>/` (one item). Messages leave
    as compact UTF-8 JSON through workcenter/render.py, as the HTTP API's responses do."""

    item_id: str | None = None
    last_id: int = 0  # the id of the last event sent (or known to the client)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._replay: asyncio.Task | None = None
        self._pending: collections.deque = collections.deque()  # group messages held during a replay
        self._read_to = 0  # a buffered message above this id was dropped: the replay reads up to it
        self._progress: dict = {}  # during a replay: the latest progress message of each run
        self._counted = False  # in workcenter_websocket_clients (after its hello)
        self.log = LogFollow(self)  # the run log this page's panel follows, if any (run_log_follow.py)

    async def connect(self) -> None:
        refusal = await viewer_refusal(self.scope)
        if refusal is not None:
            return await self._refuse(refusal)
        after_id = _after_id(self.scope)
        if after_id is False:
            return await self._refuse(CLOSE_BAD_REQUEST)
        self.item_id = self.scope["url_route"]["kwargs"].get("item_id")
        group = await publisher.join(self.channel_layer, self.channel_name, self.item_id)  # join first, then read
        self.groups = [group]  # websocket_disconnect leaves it
        await pump.consumer_joined(self.channel_name)  # other processes' events (in-memory layer)
        await self.accept()
        try:
            hello = await database_sync_to_async(self._snapshot)()
        except NotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json(hello)
        self._counted = True
        WEBSOCKET_CLIENTS.inc()
        heartbeat.add(self)
        if after_id is None:
            self.last_id = hello["last_event_id"]
        else:
            self.last_id = after_id
            self._start_replay(read_all=True)

    async def websocket_disconnect(self, message) -> None:
        self._stop_replay()  # first: nothing more is read or sent for a client that left
        await self.log.stop()
        await super().websocket_disconnect(message)

    async def disconnect(self, code) -> None:
        heartbeat.discard(self)
        pump.consumer_left(self.channel_name)
        if self._counted:
            self._counted = False
            WEBSOCKET_CLIENTS.dec()

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    def _snapshot(self) -> dict:
        hello = self._hello()
        if heartbeat.interval() is not None:  # dashboard/stream/heartbeat.py
            hello["heartbeat_s"] = heartbeat.interval()
        return hello

    def _hello(self) -> dict:
        if self.item_id is None:
            return hello_message(selectors.event_last_id(), overview=overview_now())
        selectors.work_item_get(self.item_id)  # NotFound ⇒ 4404
        # the id is read before the state: an event committing in between is then replayed on a
        # state that may already show it (harmless), never skipped
        last = selectors.item_last_event_id(self.item_id)
        snapshot = item_state.read(self.item_id)
        publisher.states.seed(self.item_id, last, snapshot)  # the next event: a diff on this state
        state = snapshot.hello(last)  # without the earlier attempts (item_page_state.py)
        graph = state.pop("graph")  # the hello's state has no graph of its own: it is the hello's
        hello = hello_message(last, graph, state=state)
        if len(render.dumps(hello)) > MAX_HELLO_BYTES:  # the page reads the state back instead
            del hello["state"]
        return hello

    # --- replay --------------------------------------------------------------------------------

    def _start_replay(self, *, read_all: bool) -> None:
        if self._replay is None:
            self._replay = asyncio.get_running_loop().create_task(
                self._run_replay(read_all), name=f"workcenter-replay-{self.channel_name}")

    def _stop_replay(self) -> None:
        task, self._replay = self._replay, None
        if task is not None:
            task.cancel()
        self._pending.clear()
        self._progress.clear()

    async def _run_replay(self, read_all: bool) -> None:
        """Send the stored events after the last sent one, then the buffered group messages (a
        hole before one of them read from the database first); the stream is live again when
        nothing is left to send."""
        try:
            if read_all:
                await self._send_stored(before_id=None)
            while self._pending or self._read_to > self.last_id or self._progress:
                if not self._pending and self._read_to <= self.last_id:  # the events are sent
                    progress, self._progress = list(self._progress.values()), {}
                    for message in progress:
                        await self._send_message(message)
                    continue
                if not self._pending:  # buffered messages were dropped: read them back
                    dropped_to = self._read_to
                    await self._send_stored(before_id=None)
                    if self._read_to == dropped_to:  # none dropped meanwhile: all stored was read
                        self._read_to = 0
                    continue
                message = self._pending.popleft()
                event_id = message["id"]
                if event_id <= self.last_id:
                    continue  # already sent (replayed, or a hole filled from the database)
                if self._previous(message) > self.last_id:
                    await self._send_stored(before_id=event_id)
                await self._forward(event_id, _payload(message))
        except Exception:  # the client resumes from the last id it received
            logger.exception("replay after event %s failed", self.last_id)
            self._pending.clear()
            self._progress.clear()
            await self.close(code=CLOSE_INTERNAL_ERROR)  # what is sent after it is dropped
        finally:
            if self._replay is asyncio.current_task():
                self._replay = None  # no await since the last check: the next message goes live

    async def _send_stored(self, *, before_id: int | None) -> None:
        """Send the stored events after the last sent one (and before `before_id`), page by page."""
        more = True
        while more:
            page, cursor, more = await _replay_read(after_id=self.last_id, before_id=before_id, item_id=self.item_id)
            for event_id, message in page:
                await self._forward(event_id, message)
            self.last_id = max(self.last_id, cursor)
            await asyncio.sleep(0)  # between pages: the other clients' turn

    async def _forward(self, event_id: int, message: dict | str) -> None:
        if event_id > self.last_id:
            await self._send_message(message)
            self.last_id = event_id

    async def _send_message(self, message: dict | str) -> None:
        """A message as a dict (replayed), or as the JSON text the publisher encoded once."""
        if isinstance(message, str):
            await self.send(text_data=message)
        else:
            await self.send_json(message)

    def _previous(self, message: dict) -> int:
        return message["prev_id"] if self.item_id is None else message["item_prev_id"]

    def _buffer(self, message: dict) -> None:
        if len(self._pending) < PENDING_MAX:
            self._pending.append(message)
        else:
            self._read_to = max(self._read_to, message["id"])

    # --- live ----------------------------------------------------------------------------------

    async def stream_event(self, message: dict) -> None:
        if self._replay is not None:
            return self._buffer(message)  # sent by the replay, after what it reads
        event_id = message["id"]
        if event_id <= self.last_id:
            return  # already sent
        if self._previous(message) > self.last_id:
            self._buffer(message)  # a hole before it: read from the database, then sent
            return self._start_replay(read_all=False)
        await self._forward(event_id, _payload(message))

    async def stream_events(self, message: dict) -> None:
        """Several `stream.event` messages of one publisher batch, in id order."""
        for envelope in message["events"]:
            await self.stream_event(envelope)

    async def stream_overview(self, message: dict) -> None:
        """The list's overview (dashboard/live_state.py); during a replay only the latest is kept,
        sent after the events."""
        if self._replay is not None:
            self._progress[("overview",)] = _payload(message)  # (a run id is text)
            return
        await self._send_message(_payload(message))

    async def stream_progress(self, message: dict) -> None:
        if self._replay is not None:  # transient: only the latest of each run is worth sending late
            self._progress[message["message"].get("run_id")] = message["message"]
            return
        await self.send_json(message["message"])

    async def stream_run_log(self, message: dict) -> None:
        """A run's log grew: the follower reads it (it joined the run's group, run_log_follow.py)."""
        self.log.woken(message["run_id"])

    async def dispatch(self, message) -> None:
        """The stream's group messages go straight to their handlers: channels' dispatch first runs
        `aclose_old_connections` in a worker thread for every message, a thread hop per message
        and socket (at 500 sockets, a quarter of the web process's time), for handlers that use
        no database connection of their own (a replay reads through database_sync_to_async,
        which closes old connections itself). Everything else goes through channels' dispatch."""
        kind = message.get("type", "")
        if kind.startswith("stream."):
            handler = getattr(self, get_handler_name(message), None)
            if handler is not None:
                return await handler(message)
        await super().dispatch(message)

    @classmethod
    async def encode_json(cls, content) -> str:
        return render.dumps(content).decode("utf-8")

    @classmethod
    async def decode_json(cls, text_data):
        return render.loads(text_data)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """The stream is one-way but for the per-item stream's log follow (run_log_follow.py):
        anything else a client sends, or a text over MAX_CLIENT_MESSAGE, is ignored unparsed."""
        if self.item_id is None or not text_data or len(text_data) > MAX_CLIENT_MESSAGE or not self._counted:
            return
        try:
            message = render.loads(text_data)
        except ValueError:
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "log.unfollow":
            await self.log.stop()
        elif kind == "log.follow" and (follow := parse_follow(message)) is not None:
            await self.log.follow(*follow)
