"""Heartbeats: every `WORKCENTER_STREAM_HEARTBEAT_S` seconds each open stream socket (the list, item
and Workers streams) receives `{"type": "heartbeat"}`, so a page can tell a quiet server from a
silent one (a stopped or hung process, a connection that died without a close): it says "No word
from the server" once nothing at all has arrived for about 2.5 heartbeats (static/dashboard/common.js).

One timer per event loop, not one per socket: a task that sleeps the interval, then hands the one
encoded text to every socket registered on its loop (a consumer registers once its hello is sent
and leaves when it disconnects). The task ends with the loop's last socket; the next one starts a
new task. An idle server with 100 sockets wakes once per interval.
"""
from __future__ import annotations

import asyncio
import logging

from django.conf import settings

logger = logging.getLogger("workcenter.events.stream")

HEARTBEAT = '{"type":"heartbeat"}'


class Heartbeat:
    """The sockets of each event loop and the loop's beating task (see the module doc)."""

    def __init__(self) -> None:
        self._sockets: dict[asyncio.AbstractEventLoop, set] = {}
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}
        self.beats = 0  # heartbeat rounds sent (observability and tests)

    def add(self, consumer) -> None:
        """Beat to `consumer` (its `send(text_data=…)`) from now on; call it on the consumer's loop."""
        interval = float(settings.WORKCENTER_STREAM_HEARTBEAT_S or 0)
        if interval <= 0:
            return
        loop = asyncio.get_running_loop()
        self._sockets.setdefault(loop, set()).add(consumer)
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._beat(loop, interval), name="workcenter-heartbeat")

    def discard(self, consumer) -> None:
        for sockets in self._sockets.values():
            sockets.discard(consumer)

    def interval(self) -> float | None:
        """The interval the hello announces (`heartbeat_s`), None when heartbeats are off."""
        interval = float(settings.WORKCENTER_STREAM_HEARTBEAT_S or 0)
        return interval if interval > 0 else None

    async def _beat(self, loop, interval: float) -> None:
        try:
            while True:
                await asyncio.sleep(interval)
                sockets = self._sockets.get(loop)
                if not sockets:
                    return
                self.beats += 1
                for consumer in list(sockets):
                    try:
                        await consumer.send(text_data=HEARTBEAT)
                    except Exception:  # a socket closing meanwhile: its disconnect discards it
                        logger.debug("heartbeat to %s failed", getattr(consumer, "channel_name", "?"), exc_info=True)
        finally:
            if self._tasks.get(loop) is asyncio.current_task():
                del self._tasks[loop]
                if not self._sockets.get(loop):
                    self._sockets.pop(loop, None)


heartbeat = Heartbeat()
