"""The embedded default's channel layer sweeps expired messages at most once a second."""
from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django.conf import settings

from workcenter.memory_layer import InMemoryLayer


def test_the_default_layer_is_the_bounded_sweep_one():
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] in ("workcenter.memory_layer.InMemoryLayer",
                                                              "channels_redis.core.RedisChannelLayer")


def test_expired_messages_go_at_the_next_sweep_not_at_every_receive():
    async def scenario():
        layer = InMemoryLayer(expiry=0.05)
        await layer.send("a", {"type": "x"})
        await layer.send("b", {"type": "y"})
        await asyncio.sleep(0.1)  # both expired
        await layer.send("c", {"type": "z"})
        assert (await layer.receive("c"))["type"] == "z"  # the first receive sweeps: a and b are gone
        assert "a" not in layer.channels and "b" not in layer.channels
        await layer.send("d", {"type": "w"})
        await asyncio.sleep(0.1)  # expired, but the next sweep is up to a second away
        await layer.send("e", {"type": "v"})
        assert (await layer.receive("e"))["type"] == "v"
        assert "d" in layer.channels  # not swept yet
        layer._swept -= InMemoryLayer.SWEEP_SECONDS
        await layer.send("f", {"type": "u"})
        assert (await layer.receive("f"))["type"] == "u"
        assert "d" not in layer.channels
    async_to_sync(scenario)()
