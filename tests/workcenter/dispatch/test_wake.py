"""The long-poll claims' listener (dashboard/longpoll.py) on real Redis layers: on the default
layer beside the other channels of its process, and on the pub/sub layer the settings give the
claims beside a Redis layer (dashboard/live_state.claims_layer)."""
from __future__ import annotations

import asyncio
import os

import pytest
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from workcenter.dispatch import longpoll
from dashboard.stream.live_state import CLAIMS_GROUP, WAKE, claims_layer
from workcenter.dispatch.longpoll import Parked
from workcenter.redis_layer import redis_channel_layers, redis_layer_config

REDIS_URL = os.environ.get("WORKCENTER_TEST_LONGPOLL_REDIS_URL", "redis://127.0.0.1:6379/15")


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
    monkeypatch.setattr(longpoll, "REJOIN_SECONDS", 0.05)

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
