"""The Workers stream (`/ws/workers/`): the Workers page's figures, pushed (workcenter/worker_figures.py).

Messages: `{"type": "hello", "now", "workers": [Worker]}` (what `GET /api/v1/workers` answers),
then `{"type": "workers", "now", "workers": [Worker], "gone": [boot id]}` whenever some workers'
figures changed: the rows of those workers, whole, and the boot ids that left the window. A client
replaces those rows and drops those ids; it never reads anything over HTTP per update.

Lease renewals append no event, and a worker may renew straight into the database from another
process, so the figures are read, not published: one `WorkersFeed` per process, a daemon thread
("workcenter-workers") that refreshes one `Tracker` while at least one client is connected and
sends the diff, encoded once, to every client of the process, however many. When to refresh
(`Waiter`): on SQLite every `TICK` (a refresh with nothing committed since is two `stat` calls, see
workcenter/worker_figures.py); on PostgreSQL when a renewal commits (LISTEN; migration 0007's trigger
notifies) and every `PG_TICK` (claims, ends, the window's minute), a refresh with nothing changed
being one indexed read that finds no row. The thread ends with the last client, and the next
first client starts a new tracker (one load).

Order: a client is registered before it reads its hello, so no change made after that read is
missed; a diff at or below the hello's version (already in it) is dropped, one above it that comes
before the hello is sent is held and sent after it.
"""
from __future__ import annotations

import asyncio
import logging
import select
import threading
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import connection

from workcenter import render
from workcenter.clock import iso_ms
from workcenter.instruments import WEBSOCKET_CLIENTS
from workcenter.schemas_out import WorkerOut, WorkersOut
from workcenter.worker_figures import Tracker

from .stream.consumers import viewer_refusal
from .stream.heartbeat import heartbeat

logger = logging.getLogger("workcenter.workers")

TICK = 0.5  # seconds between two refreshes (SQLite): a renewal reaches the page within about this
PG_TICK = 2.0  # seconds between two refreshes on PostgreSQL, where a renewal wakes the refresh
LISTEN = "LISTEN workcenter_run_renewed"  # the channel migration 0007's trigger notifies


def diff_message(diff: dict) -> str:
    return render.dumps({"type": "workers", "now": iso_ms(diff["now"]),
                         "workers": [render.render(WorkerOut, row) for row in diff["workers"]],
                         "gone": diff["gone"]}).decode("utf-8")


def hello_message(snapshot: dict) -> str:
    beat = heartbeat.interval()  # dashboard/stream/heartbeat.py
    return render.dumps({"type": "hello", **render.render(WorkersOut, snapshot),
                         **({"heartbeat_s": beat} if beat is not None else {})}).decode("utf-8")


class WorkersFeed:
    """The per-process ticker (see the module doc)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clients: dict[str, tuple] = {}  # channel name -> (consumer, its event loop)
        self.tracker: Tracker | None = None
        self.thread: threading.Thread | None = None
        self.ticks = 0  # refreshes run (observability and tests)
        self.pushes = 0  # diffs sent
        self.notified = 0  # PostgreSQL: refreshes a renewal's notification woke

    def join(self, consumer, loop) -> tuple[str, int]:
        """Register a client and answer its hello (text, version). Blocking: call it off the loop."""
        with self.lock:
            self.clients[consumer.channel_name] = (consumer, loop)
            tracker = self.tracker
            if tracker is None:
                tracker = self.tracker = Tracker()
        try:
            if tracker.mark is None:
                tracker.load()
            snapshot = tracker.snapshot()
        except Exception:
            self.leave(consumer.channel_name)
            raise
        with self.lock:
            if self.thread is None and self.clients:
                self.thread = threading.Thread(target=self._run, args=(tracker,), name="workcenter-workers",
                                               daemon=True)
                self.thread.start()
        return hello_message(snapshot), snapshot["version"]

    def leave(self, channel_name: str) -> None:
        with self.lock:
            self.clients.pop(channel_name, None)  # the last one gone: the thread ends at its next tick

    def _run(self, tracker: Tracker) -> None:
        waiter = None
        try:
            waiter = Waiter(self)
            while True:
                with self.lock:
                    if not self.clients:
                        self.thread = self.tracker = None
                        return
                started = time.monotonic()
                try:
                    diff = tracker.refresh()
                except Exception:  # a database hiccup must not end the page's updates: next tick
                    logger.exception("refreshing the workers failed")
                    connection.close()
                    diff = None
                self.ticks += 1
                if diff is not None:
                    self._send(diff_message(diff), diff["version"])
                waiter.wait(started)
        finally:
            if waiter is not None:
                waiter.close()
            connection.close()  # the thread's own connection ends with it
            with self.lock:
                if self.thread is threading.current_thread():
                    self.thread = self.tracker = None

    def _send(self, text: str, version: int) -> None:
        with self.lock:
            clients = list(self.clients.values())
        self.pushes += 1
        for consumer, loop in clients:
            try:
                asyncio.run_coroutine_threadsafe(consumer.push(text, version), loop)
            except RuntimeError:  # its loop is closed: the client is gone
                pass


class Waiter:
    """Between two refreshes. SQLite: `TICK`. PostgreSQL: until a lease renewal commits (`LISTEN`,
    a trigger of migration 0007 notifies it) or `PG_TICK` has passed (claims and ends, the window's
    minute, the refresh's margin); should the listening connection fail, `TICK` from then on."""

    def __init__(self, feed: WorkersFeed) -> None:
        self.feed = feed
        self.listener = None
        if connection.vendor == "postgresql":
            try:
                self.listener = connection.get_new_connection(connection.get_connection_params())
                self.listener.autocommit = True
                self.listener.execute(LISTEN)
            except Exception:
                logger.exception("listening for lease renewals failed: the Workers stream polls")
                self.close()

    def wait(self, started: float) -> None:
        if self.listener is None:  # a plain sleep: cheaper than an Event's wait with a timeout
            time.sleep(max(0.0, TICK - (time.monotonic() - started)))
            return
        # the socket itself, not psycopg's notifies(), which wakes every 0.1 s while it waits
        # (60 ms of CPU a minute here)
        try:
            ready, _, _ = select.select([self.listener.fileno()], [], [],
                                        max(0.0, PG_TICK - (time.monotonic() - started)))
            if ready:
                pgconn = self.listener.pgconn
                pgconn.consume_input()
                while pgconn.notifies() is not None:  # a burst of renewals: one refresh
                    self.feed.notified += 1
        except Exception:
            logger.exception("listening for lease renewals failed: the Workers stream polls")
            self.close()

    def close(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:  # closing a broken connection
                pass


feed = WorkersFeed()


class WorkersStreamConsumer(AsyncWebsocketConsumer):
    """`/ws/workers/`: the hello, then the diffs (see the module doc). Close codes: 4401 no or
    unusable credentials, 4403 no `workcenter.view_workitem`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.version: int | None = None  # the hello's, once sent
        self.early: list[tuple[str, int]] = []  # diffs that came before the hello was sent
        self.joined = False

    async def connect(self) -> None:
        refusal = await viewer_refusal(self.scope)
        if refusal is not None:
            return await self._refuse(refusal)
        await self.accept()
        self.joined = True
        hello, version = await database_sync_to_async(feed.join, thread_sensitive=False)(
            self, asyncio.get_running_loop())
        await self.send(text_data=hello)
        WEBSOCKET_CLIENTS.inc()
        heartbeat.add(self)
        self.version = version
        early, self.early = self.early, []
        for text, v in early:
            await self.push(text, v)

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def push(self, text: str, version: int) -> None:
        if self.version is None:
            self.early.append((text, version))
        elif version > self.version:
            self.version = version
            await self.send(text_data=text)

    async def disconnect(self, code) -> None:
        heartbeat.discard(self)
        if self.joined:
            self.joined = False
            feed.leave(self.channel_name)
            if self.version is not None:
                WEBSOCKET_CLIENTS.dec()

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """One-way: what a client sends is ignored."""
