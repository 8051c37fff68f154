"""The Redis channel layer's client options (workcenter/redis_layer.py), as channels_redis really
builds its connection pool from them: whatever REDIS_URL holds, the read timeout outlasts the
layer's blocking receive, and the rest of the URL is kept."""
from __future__ import annotations

import asyncio

import pytest
from channels_redis.core import RedisChannelLayer
from channels_redis.utils import create_pool

from tests.live import redis_db_url
from workcenter.redis_layer import (BLOCKING_RECEIVE, CONNECT_TIMEOUT, MARGIN, SOCKET_TIMEOUT, redis_channel_layers,
                                    redis_host)


def pool_options(url: str) -> dict:
    layer = RedisChannelLayer(**redis_channel_layers(url)["default"]["CONFIG"])
    return create_pool(layer.hosts[0]).connection_kwargs


def test_the_blocking_receive_is_the_layers():
    assert RedisChannelLayer.brpop_timeout == BLOCKING_RECEIVE
    assert SOCKET_TIMEOUT >= BLOCKING_RECEIVE + MARGIN


@pytest.mark.parametrize("query, timeout", [
    ("", SOCKET_TIMEOUT),
    ("?socket_timeout=2", SOCKET_TIMEOUT),  # would end every quiet receive: replaced
    ("?socket_timeout=5", SOCKET_TIMEOUT),
    ("?socket_timeout=0", SOCKET_TIMEOUT),
    ("?socket_timeout=abc", SOCKET_TIMEOUT),
    ("?socket_timeout=nan", SOCKET_TIMEOUT),
    ("?socket_timeout=", SOCKET_TIMEOUT),
    ("?socket_timeout=120", 120.0),  # long enough: the operator's choice stands
    ("?socket_timeout=120&socket_timeout=1", 120.0),  # redis-py reads the first
    ("?socket_timeout=1&socket_timeout=120", SOCKET_TIMEOUT),
])
def test_read_timeout_outlasts_the_blocking_receive_whatever_the_url_says(query, timeout):
    options = pool_options(f"redis://127.0.0.1:6379/5{query}")
    assert options["socket_timeout"] == timeout
    assert options["socket_connect_timeout"] == CONNECT_TIMEOUT
    assert options["socket_keepalive"] is True
    assert options["db"] == 5


def test_the_rest_of_the_url_is_kept():
    options = pool_options("redis://user:p%40ss%2Fw@redis.example:6380/7?socket_connect_timeout=2"
                           "&socket_keepalive=false&health_check_interval=15&socket_timeout=3")
    assert (options["host"], options["port"], options["db"]) == ("redis.example", 6380, 7)
    assert (options["username"], options["password"]) == ("user", "p@ss/w")
    assert options["socket_connect_timeout"] == 2.0 and options["socket_keepalive"] is False
    assert options["health_check_interval"] == 15
    assert options["socket_timeout"] == SOCKET_TIMEOUT


def test_tls_and_unix_socket_urls():
    from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

    tls = RedisChannelLayer(hosts=[redis_host("rediss://redis.example:6379/0")])
    pool = create_pool(tls.hosts[0])
    assert pool.connection_class is SSLConnection and pool.connection_kwargs["socket_timeout"] == SOCKET_TIMEOUT
    unix = create_pool(redis_host("unix:///run/redis.sock?db=3&socket_timeout=1"))
    assert unix.connection_class is UnixDomainSocketConnection
    assert unix.connection_kwargs["path"] == "/run/redis.sock" and unix.connection_kwargs["db"] == 3
    assert unix.connection_kwargs["socket_timeout"] == SOCKET_TIMEOUT


def test_the_claims_wakes_have_a_pub_sub_layer_on_the_same_redis():
    layers = redis_channel_layers("redis://127.0.0.1:6379/5")
    assert layers["claims"]["BACKEND"] == "channels_redis.pubsub.RedisPubSubChannelLayer"
    assert layers["claims"]["CONFIG"]["hosts"] == layers["default"]["CONFIG"]["hosts"]


def test_the_claims_layer_keeps_to_its_database_though_pub_sub_belongs_to_the_whole_server():
    # the prefix names the database, from the path or (a unix socket) the query
    assert redis_channel_layers("redis://127.0.0.1:6379/5")["claims"]["CONFIG"]["prefix"] == "asgi.db5"
    assert redis_channel_layers("redis://127.0.0.1:6379")["claims"]["CONFIG"]["prefix"] == "asgi.db0"
    assert redis_channel_layers("unix:///run/redis.sock?db=3")["claims"]["CONFIG"]["prefix"] == "asgi.db3"
    # on a real Redis, a wake sent to the claims group of one database reaches no listener of another
    from channels_redis.pubsub import RedisPubSubChannelLayer

    def layer(db: int) -> RedisPubSubChannelLayer:
        return RedisPubSubChannelLayer(**redis_channel_layers(redis_db_url(db))["claims"]["CONFIG"])

    async def scenario():
        mine, theirs = layer(0), layer(13)  # (0: no other test's; 13: the pump tests', which count no wakes)
        channel = await mine.new_channel()
        await mine.group_add("workcenter.claims", channel)
        try:
            # one receive throughout: the pub/sub layer forgets a channel whose receive is cancelled
            receiving = asyncio.ensure_future(mine.receive(channel))
            await asyncio.sleep(0.2)  # subscribed
            await theirs.group_send("workcenter.claims", {"type": "claims.wake", "from": "theirs"})
            await asyncio.sleep(0.5)
            assert not receiving.done(), receiving.result()
            await mine.group_send("workcenter.claims", {"type": "claims.wake", "from": "mine"})
            assert await asyncio.wait_for(receiving, 5) == {"type": "claims.wake", "from": "mine"}
        finally:
            await mine.flush()
            await theirs.flush()

    asyncio.run(scenario())
