"""The Redis channel layer's configuration (`REDIS_URL`), with the client's timeouts explicit.

Why: channels_redis receives with a blocking `BZPOPMIN` that waits up to `BLOCKING_RECEIVE`
seconds (`RedisChannelLayer.brpop_timeout`). A client read timeout at or below that turns every
quiet wait into `redis.exceptions.TimeoutError` ("Timeout reading from …"), which ends the
consumer: each websocket is closed with 1011 after about 5.6 s without traffic. redis-py 8
made 5 s the default `socket_timeout` (it used to be none), so the defaults alone break every
Redis-layer deployment (channels_redis issue #422).

What: every host is given to channels_redis as `{"address": <url>, **connection options}`
(channels_redis builds its pool with `ConnectionPool.from_url(address, **options)`, where the
URL's own query options win over the keyword ones):

* `socket_timeout` `SOCKET_TIMEOUT` (30 s): well above the blocking receive, yet a read from a
  Redis that stopped answering still ends (a half-open connection is not waited on forever).
  A `socket_timeout` in the URL is kept when it is a number of seconds above the blocking
  receive plus `MARGIN`, otherwise replaced (it is removed from the URL, which would win);
* `socket_connect_timeout` `CONNECT_TIMEOUT` (5 s) and `socket_keepalive`, unless the URL sets
  them: connecting fails fast, and the operating system probes idle connections.

Everything else in the URL (scheme, credentials, database, other options) is passed through.
"""
from __future__ import annotations

import math
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

BLOCKING_RECEIVE = 5  # seconds: channels_redis RedisChannelLayer.brpop_timeout (4.x)
MARGIN = 5  # seconds beyond the blocking receive that a reply may take (a loaded Redis, a slow link)
SOCKET_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
CAPACITY = 1000


def _seconds(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if not math.isnan(seconds) else None


def redis_host(url: str) -> dict:
    """channels_redis host options for `url`: the URL without a read timeout that would break the
    blocking receive, and the client timeouts explicit."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [v for k, v in query if k == "socket_timeout"]
    timeout = _seconds(given[0]) if given else None  # redis-py reads the first value
    if timeout is None or timeout < BLOCKING_RECEIVE + MARGIN:
        timeout = SOCKET_TIMEOUT
    kept = [(k, v) for k, v in query if k != "socket_timeout"]
    address = urlunsplit(parts._replace(query=urlencode(kept)))
    if parts.scheme and not parts.netloc and url[len(parts.scheme) + 1:].startswith("//"):
        # urlunsplit writes `unix:///run/redis.sock` as `unix:/run/redis.sock` (no authority), which
        # redis-py 8.2 refuses: it wants the `scheme://` the URL was given with
        address = f"{parts.scheme}://{address[len(parts.scheme) + 1:]}"
    host = {"address": address, "socket_timeout": timeout}
    names = {k for k, _ in kept}
    if "socket_connect_timeout" not in names:
        host["socket_connect_timeout"] = CONNECT_TIMEOUT
    if "socket_keepalive" not in names:
        host["socket_keepalive"] = True
    return host


def redis_layer_config(url: str, capacity: int = CAPACITY) -> dict:
    """The `CONFIG` of a `channels_redis.core.RedisChannelLayer` on `url`."""
    return {"hosts": [redis_host(url)], "capacity": capacity}


CLAIMS_LAYER = "claims"  # the alias of the long-poll claims' wake-ups (workcenter/dispatch/wake.claims_layer)


def redis_channel_layers(url: str, capacity: int = CAPACITY) -> dict:
    """A `CHANNEL_LAYERS` setting whose default layer is Redis at `url`, and beside it the claims'
    wake-up layer on the same Redis: channels_redis's pub/sub layer. A wake is worth something only
    to a process listening at that moment, which is what Redis PUBLISH gives, in one command; the
    default layer's group send is four round trips and a script, and its receive three more
    (measured here from send to receipt: 0.5 ms against 1.55 ms in an idle process, several times
    that in a busy server, where each round trip waits for the interpreter)."""
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                        "CONFIG": redis_layer_config(url, capacity)},
            CLAIMS_LAYER: {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                           "CONFIG": {"hosts": [redis_host(url)], "prefix": pubsub_prefix(url)}}}


def pubsub_prefix(url: str) -> str:
    """The claims layer's channel prefix, named after the URL's database: Redis pub/sub channels
    belong to the whole server, not to a database, so two deployments on two databases of one
    Redis (or two test processes) would otherwise wake each other's parked claims."""
    parts = urlsplit(url)
    given = [v for k, v in parse_qsl(parts.query) if k == "db"]  # unix sockets name it in the query
    db = (given[0] if given else "") or (parts.path.strip("/") if parts.scheme != "unix" else "") or "0"
    return f"asgi.db{db}" if db.isdigit() else "asgi"
