"""The wake of the parked claims (workcenter/dispatch/wake.py): its listener on real Redis layers,
on the default layer beside the other channels of its process and on the pub/sub layer the
settings give the claims beside a Redis layer (`claims_layer`); and its sends, one per burst."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from workcenter.dispatch import wake as waking
from workcenter.dispatch.wake import CLAIMS_GROUP, WAKE, Parked, claims_layer
from workcenter.redis_layer import redis_channel_layers, redis_layer_config
from workcenter.send_loop import send_loop
from tests.live import redis_db_url

REDIS_URL = os.environ.get("WORKCENTER_TEST_LONGPOLL_REDIS_URL", redis_db_url(15))


@pytest.fixture
def layer():
    import redis

    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError:
        pytest.fail(f"no Redis at {REDIS_URL}: the long-poll layer tests need one")
    layer = RedisChannelLayer(**redis_layer_config(REDIS_URL))
    yield layer
    asyncio.run(layer.flush())


def test_a_parked_claims_listener_does_not_hold_back_the_processes_websockets(layer):
    """The listener waits in a blocking receive for most of its life; a websocket consumer of the
    same process (same layer) must still get every group message at once, and the listener
    its wakes."""

    async def scenario():
        await layer.flush()
        parked = Parked()
        await parked.listen(layer)
        try:
            consumer = await layer.new_channel()
            await layer.group_add("test.items", consumer)
            await asyncio.sleep(0.3)  # the listener is inside its blocking receive
            for n in range(30):
                await layer.group_send("test.items", {"type": "stream.test", "n": n})
            got = [(await asyncio.wait_for(layer.receive(consumer), 2.0))["n"] for _ in range(30)]
            assert got == list(range(30))
            woken = parked.park()
            await layer.group_send(CLAIMS_GROUP, WAKE)
            await asyncio.wait_for(woken, 2.0)
            assert parked.wakes == 1
        finally:
            parked.listener.cancel()
            await asyncio.gather(parked.listener, return_exceptions=True)

    asyncio.run(scenario())


def test_with_redis_the_wakes_go_over_pub_sub_and_the_listener_keeps_its_channel(layer, settings, monkeypatch):
    """With REDIS_URL the claims have a pub/sub layer of their own; the listener renews its group
    membership now and then, and a renewal must not drop its channel (the pub/sub layer forgets a
    channel whose receive is cancelled, and refuses group_add for it)."""
    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_URL)
    pubsub = claims_layer()
    assert isinstance(pubsub, RedisPubSubChannelLayer)
    monkeypatch.setattr(waking, "REJOIN_SECONDS", 0.05)

    async def scenario():
        parked = Parked()
        await parked.listen(pubsub)
        try:
            await asyncio.sleep(0.3)  # several renewals
            assert not parked.listener.done()
            for n in range(1, 4):
                woken = parked.park()
                await pubsub.group_send(CLAIMS_GROUP, WAKE)  # as the publisher sends it
                await asyncio.wait_for(woken, 2.0)
                assert parked.wakes == n
                await asyncio.sleep(0.1)
        finally:
            parked.listener.cancel()
            await asyncio.gather(parked.listener, return_exceptions=True)
            await pubsub.flush()

    asyncio.run(scenario())


class _CountingLayer:
    """A layer that only counts what it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    async def group_send(self, group, message):
        self.sent.append((group, message))


def test_a_burst_of_commits_sends_one_wake_and_a_commit_after_it_leaves_sends_another():
    layer = _CountingLayer()
    wakes = waking.ClaimsWake()
    held = threading.Event()

    async def hold_the_loop():
        held.wait(5)  # the send loop is busy: the first wake waits to leave

    send_loop.submit(hold_the_loop())
    for _ in range(5):
        wakes.request(layer)
    held.set()
    send_loop.drain(5)
    assert layer.sent == [(CLAIMS_GROUP, WAKE)]  # one wake stood for the burst
    wakes.request(layer)
    send_loop.drain(5)
    assert len(layer.sent) == 2 and wakes.sent == 2


def test_a_wake_left_waiting_on_a_loop_that_stopped_does_not_hold_back_the_next():
    layer = _CountingLayer()
    wakes = waking.ClaimsWake()
    gone = asyncio.new_event_loop()  # never runs: what it was handed is never sent
    wakes.waiting_on = gone
    wakes.request(layer)
    send_loop.drain(5)
    assert layer.sent == [(CLAIMS_GROUP, WAKE)]
    gone.close()


def test_an_in_memory_wake_needs_a_listener_of_this_process():
    layer = InMemoryChannelLayer()
    wakes = waking.ClaimsWake()
    wakes.request(layer)  # nobody listens in this process: nothing to send, nothing raised
    assert wakes.loop_for(layer) is None and wakes.sent == 0 and wakes.waiting_on is None
