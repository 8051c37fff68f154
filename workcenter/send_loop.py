"""A process's own event loop for channel-layer sends made from threads that have none (the live
stream's group messages, the long-poll claims' wakes), drained at exit.

One daemon thread per process ("workcenter-stream-send") runs the loop, started on first use, and
again in a forked child (the parent's thread does not run there). A Redis layer's sends and its
pooled connections (channels_redis keeps them per loop) live on this loop in every process. An
in-memory layer's asyncio queues belong to the loop its receivers await them on and are not
thread-safe: its sends are submitted to that loop instead (`submit(coro, loop)`).

What is submitted is kept until it is done (a failure is logged, never raised to the caller),
and `drain` waits, bounded, for what was handed across threads: registered at exit, it lets a
short command's last messages leave.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time

logger = logging.getLogger("workcenter.events")

DRAIN_SECONDS = 10.0


class SendLoop:
    """This process's send loop and the sends in flight on any loop (see the module doc)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._loop: tuple[int, asyncio.AbstractEventLoop] | None = None
        self.pending: set = set()  # sends in flight stay referenced until done
        self._drain_registered = False

    def loop(self) -> asyncio.AbstractEventLoop:
        """The process's own loop, started on first use."""
        with self.lock:
            if self._loop is None or self._loop[0] != os.getpid():  # none yet, or inherited through fork
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="workcenter-stream-send", daemon=True).start()
                self._loop = (os.getpid(), loop)
                if not self._drain_registered:
                    self._drain_registered = True
                    atexit.register(self.drain)
            return self._loop[1]

    def submit(self, coro, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Run `coro` on `loop` (the process's own by default) without waiting for it: from that
        loop's thread as a task, from any other thread handed across."""
        loop = loop or self.loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            future = loop.create_task(coro)
        else:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        self.pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future) -> None:
        self.pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.error("channel layer send failed", exc_info=future.exception())

    def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Wait (bounded) for the sends handed to another thread's loop to finish."""
        deadline = time.monotonic() + timeout
        for future in list(self.pending):
            if isinstance(future, concurrent.futures.Future):
                try:
                    future.result(max(0.0, deadline - time.monotonic()))
                except Exception:  # logged by _done; a timeout leaves it to the stream's cursor
                    pass

    def _after_fork_in_child(self) -> None:
        # a lock held by another thread of the parent at fork time stays held in the child forever
        self.lock = threading.Lock()
        self.pending.clear()


send_loop = SendLoop()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=send_loop._after_fork_in_child)
