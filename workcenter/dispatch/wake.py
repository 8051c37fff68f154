"""The wake of the parked long-poll claims: sent after a commit that may make an action claimable,
received by the one listener of each web process, which releases one parked claim per wake.

Sending (`ClaimsWake`, `wake`). Every process that commits an event that may make an action
claimable (any event but `run.claimed`: an item created or started, an action completed — its
dependants may now run —, a run that ended and freed its workspace, a retry, a reset, a
recovery, an interrupt, an ended integration reservation …) sends one `claims.wake` message to
the channel-layer group `workcenter.claims` after the commit (the live stream's publisher calls
`wake.after_commit` from the store's after-commit hook), on the claims layer (`claims_layer`:
with Redis its pub/sub layer beside the Redis layer, one PUBLISH per wake; else the default
layer, where the event pump does the same for what other processes committed). A wake still
waiting to leave stands for the next ones too (it leaves after their commits), so a burst of
commits costs one send, not one per event. The wakes keep no order with the stream's messages.
An in-memory layer lives in this process only: its wake goes to the loop the listener receives
on, and only while a listener runs; any other layer's goes out on the process's send loop
(workcenter/send_loop.py).

Receiving (`Parked`, `parked`). Each web process listens to that group with one channel,
started by its first long-poll claim (longpoll.py), and per wake wakes **one** of its parked
claims, oldest first.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from workcenter.redis_layer import CLAIMS_LAYER
from workcenter.send_loop import send_loop

logger = logging.getLogger("workcenter.claims")

CLAIMS_GROUP = "workcenter.claims"
WAKE = {"type": "claims.wake"}
REJOIN_SECONDS = 600.0  # the listener renews its group membership (layers expire them after a day)


def claims_layer():
    """The channel layer of the claims' wake-ups: the `claims` alias where the settings give one
    (Redis pub/sub beside the Redis layer: workcenter/redis_layer.py), else the default layer."""
    if CLAIMS_LAYER in getattr(settings, "CHANNEL_LAYERS", {}):
        return get_channel_layer(CLAIMS_LAYER)
    return get_channel_layer()


def wakes_claims(event_type: str) -> bool:
    """Whether a committed event of this type may have made an action claimable (every event but
    a claim: a new or started item, a completed action's dependants, a run that ended and freed
    its workspace, a retry, a reset, a recovery, an ended reservation …)."""
    return event_type != "run.claimed"


class Parked:
    """This process's parked long-poll claims, and the one channel that wakes them."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queue: collections.deque = collections.deque()  # futures, oldest first
        self.listener: asyncio.Task | None = None
        self.wakes = 0
        self.waiting: collections.Counter = collections.Counter()  # claims admitted to wait, per token
        self.waiting_total = 0

    async def listen(self, layer) -> None:
        """Start the listener on this loop (once); returns when it has joined the group."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # first use, or a new loop (tests run one per scenario)
            self.loop, self.queue, self.listener = loop, collections.deque(), None
            self.waiting, self.waiting_total = collections.Counter(), 0
        if self.listener is None or self.listener.done():
            joined = loop.create_future()
            self.listener = loop.create_task(self._listen(layer, joined), name="workcenter-claims-listener")
            await joined

    async def _listen(self, layer, joined: asyncio.Future) -> None:
        # On the default Redis layer (a deployment without the claims alias) the channel takes
        # the layer's default prefix, as every consumer's: channels_redis receives all of a
        # process's channels through ONE key (the name up to "!") and one receive lock, taken
        # by whichever receive runs; a channel of another prefix has a key of its own, and its
        # blocking receive held that lock, so the websocket consumers of the process got one
        # message per wake and their key filled to capacity (group sends then dropped).
        channel = await layer.new_channel()
        try:
            await layer.group_add(CLAIMS_GROUP, channel)
        finally:
            if not joined.done():
                joined.set_result(None)
        receiving = None
        try:
            while True:
                # one receive stays open across the renewals: the pub/sub layer drops a channel
                # whose receive is cancelled
                receiving = receiving or asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=REJOIN_SECONDS)
                if not done:
                    await layer.group_add(CLAIMS_GROUP, channel)
                    continue
                task, receiving = receiving, None
                try:
                    task.result()
                except Exception:  # the layer hiccupped: parked requests still retry on their own
                    logger.exception("the claims listener failed to receive; listening again")
                    await asyncio.sleep(1.0)
                    continue
                self.wakes += 1
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("claims wake received %.6f (%s parked)", time.time(), len(self.queue))
                self.wake_one()
        finally:
            if receiving is not None:
                receiving.cancel()

    def admit(self, token: bytes) -> str | None:
        """Count one more waiting claim of `token`; None when admitted, else the bound it would pass
        ("token" or "process")."""
        if self.waiting_total >= settings.WORKCENTER_LONG_POLL_MAX_PER_PROCESS:
            return "process"
        if self.waiting[token] >= settings.WORKCENTER_LONG_POLL_MAX_PER_TOKEN:
            return "token"
        self.waiting[token] += 1
        self.waiting_total += 1
        return None

    def release(self, token: bytes) -> None:
        self.waiting[token] -= 1
        if self.waiting[token] <= 0:  # (below 0 only for a claim counted on a loop since replaced)
            del self.waiting[token]
        self.waiting_total = max(0, self.waiting_total - 1)

    def park(self) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.queue.append(future)
        return future

    def wake_one(self) -> None:
        while self.queue:
            future = self.queue.popleft()
            if not future.done():
                future.set_result(True)
                return

    def leave(self, future: asyncio.Future) -> None:
        """A request stops waiting: a wake it holds goes to the next one."""
        if future.done() and not future.cancelled():
            self.wake_one()
        else:
            future.cancel()
            try:
                self.queue.remove(future)
            except ValueError:
                pass


parked = Parked()


class ClaimsWake:
    """This process's wakes for the parked claims: one waiting to leave at a time (see the module doc)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting_on: asyncio.AbstractEventLoop | None = None  # the loop a wake waits to leave on
        self.sent = 0

    def after_commit(self, event) -> None:
        """This process committed `event` (its after-commit hook)."""
        if logger.isEnabledFor(logging.DEBUG):  # when what the event says became visible (tests)
            logger.debug("committed event %s %.6f", event.id, time.time())
        if wakes_claims(event.type):
            self.request()

    def request(self, layer=None) -> None:
        """Something may have become claimable: one wake to the parked claims, unless one waits to
        leave already (it leaves after this commit, so it stands for this one too). Never raises."""
        try:
            layer = claims_layer() if layer is None else layer
            loop = None if layer is None else self.loop_for(layer)  # (no channel layer configured)
            if loop is None:
                return
            with self.lock:
                if self.waiting_on is loop and loop.is_running():  # (a stopped loop never sends it)
                    return
                self.waiting_on = loop
            try:
                send_loop.submit(self._send(layer), loop)
            except BaseException:
                with self.lock:
                    self.waiting_on = None
                raise
        except Exception:  # a parked claim that misses it asks again at its deadline
            logger.exception("waking the parked claims failed")

    def loop_for(self, layer) -> asyncio.AbstractEventLoop | None:
        """Where the wake is sent from: an in-memory layer's from the loop its listener receives on
        (None when no listener runs in this process: nobody could hear it), else the send loop."""
        if isinstance(layer, InMemoryChannelLayer):
            loop = parked.loop
            listening = parked.listener is not None and not parked.listener.done()
            return loop if listening and loop is not None and loop.is_running() else None
        return send_loop.loop()

    async def _send(self, layer) -> None:
        with self.lock:
            if self.waiting_on is asyncio.get_running_loop():
                self.waiting_on = None  # it leaves now: the next commit queues a new one
        began = time.time()
        await layer.group_send(CLAIMS_GROUP, WAKE)
        self.sent += 1
        if logger.isEnabledFor(logging.DEBUG):  # the send's times (diagnosis)
            logger.debug("claims wake sent %.6f %.6f", began, time.time())

    def _after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        self.waiting_on = None


wake = ClaimsWake()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=wake._after_fork_in_child)
