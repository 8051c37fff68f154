"""The long-poll claims' listener (dashboard/longpoll.py) on a real Redis layer, beside the other
channels of its process."""
from __future__ import annotations

import asyncio
import os

import pytest
from channels_redis.core import RedisChannelLayer

from dashboard.live_state import CLAIMS_GROUP, WAKE
from dashboard.longpoll import Parked
from workcenter.redis_layer import redis_layer_config

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
