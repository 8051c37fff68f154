#!/usr/bin/env python3
"""Live-stream latency benchmark (API.md §4). A benchmark, not a test.

    python bench/ws.py [--layer memory|redis] [--events N] [--interval-ms MS] [--json]

What is measured: for each of N events (default 1,000), the time from the commit of its
transaction to a connected websocket client having received and parsed its message.

How: this process runs the daphne server in-process (`daphne.server.Server` on a free port,
the real `workcenter.asgi:application`) on a fresh SQLite database. The events are committed in
the server process the way an API request commits them: `work_item_create` (one
`work_item.created` event each) runs in asgiref's sync thread (`sync_to_async`), one every
`--interval-ms` (default 5). The commit time is taken by a wrapper around the publisher's
after-commit hook (dashboard/publisher.py) as the first thing after the commit, before the message is rendered (Event + item summary,
a few queries) and handed to the channel layer. A separate client process (`websockets`, sync
client, `/ws/work-items/?token=…`) records when each message arrives; both sides read
CLOCK_MONOTONIC, which is system-wide on Linux.

`--layer memory`: Channels' in-memory layer (single process; that is why the commits run inside
the server process). `--layer redis`: channels_redis on REDIS_URL (default
redis://127.0.0.1:6379/3, flushed first), the multi-process configuration: every message makes a
round trip through Redis. Targets: p99 <= 10 ms in memory, <= 20 ms with Redis.

With --json the last line printed is one JSON object {"events", "p50_ms", "p99_ms"}.
"""
from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import sys
import time

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/3"


# --------------------------------------------------------------------------- client process


def client_main(url: str, count: int, connected, result_q) -> None:
    """Connect (retrying until the server listens), then record the arrival of `count` events."""
    from websockets.sync.client import connect

    deadline = time.monotonic() + 60
    while True:
        try:
            ws = connect(url, open_timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with ws:
        hello = json.loads(ws.recv(timeout=30))
        assert hello["type"] == "hello", hello
        connected.set()
        arrivals: list[tuple[int, float]] = []
        while len(arrivals) < count:
            raw = ws.recv(timeout=60)
            now = time.monotonic()
            message = json.loads(raw)
            if message["type"] == "event":
                arrivals.append((message["event"]["id"], now))
    result_q.put(arrivals)


# --------------------------------------------------------------------------- server side


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__)
    ap.add_argument("--layer", choices=("memory", "redis"), default="memory")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="pause between commits (default 5)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the stages: publish (render + hand-off), consumer dispatch, send")
    args = ap.parse_args(argv)

    harness.use_channel_layer(os.environ.get("WORKCENTER_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
                              if args.layer == "redis" else None)
    harness.production_settings()  # the server runs in this process
    harness.fresh_database("sqlite")
    token = harness.api_user("bench")
    from django.conf import settings
    from django.db import connections

    connections.close_all()  # the server's threads open their own

    from daphne.server import Server  # installs the asyncio reactor
    from twisted.internet import reactor

    from asgiref.sync import sync_to_async
    from dashboard.stream.publisher import publisher
    from workcenter import events, services
    from workcenter.asgi import application

    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    commit_times: dict[int, float] = {}

    stages: dict[str, dict[int, float]] = {"published": {}, "dispatched": {}, "sent": {}}

    def timed_publish(event) -> None:
        commit_times[event.id] = time.monotonic()
        publisher.publish(event)
        if args.breakdown:
            stages["published"][event.id] = time.monotonic()

    events.set_publisher(timed_publish)
    if args.breakdown:
        from dashboard.stream.consumers import WorkItemStreamConsumer

        forward = WorkItemStreamConsumer.stream_event

        async def timed_stream_event(self, message):
            stages["dispatched"][message["id"]] = time.monotonic()
            await forward(self, message)
            stages["sent"][message["id"]] = time.monotonic()

        WorkItemStreamConsumer.stream_event = timed_stream_event

    port = harness.free_port()
    ctx = mp.get_context("spawn")
    connected, result_q = ctx.Event(), ctx.Queue()
    client = ctx.Process(target=client_main, args=(f"ws://127.0.0.1:{port}/ws/work-items/?token={token}",
                                                   args.events, connected, result_q), daemon=True)
    client.start()
    outcome: dict = {}

    def commit_one(i: int) -> None:
        services.work_item_create(title=f"bench {i}", goal="latency", start=False)

    async def drive() -> None:
        try:
            loop = asyncio.get_running_loop()
            if not await loop.run_in_executor(None, connected.wait, 60):
                raise RuntimeError("the client did not connect")
            for i in range(args.events):
                await sync_to_async(commit_one)(i)
                await asyncio.sleep(args.interval_ms / 1000.0)
            outcome["arrivals"] = await loop.run_in_executor(None, result_q.get, True, 120)
        except BaseException as exc:  # report after the reactor stopped
            outcome["error"] = exc
        finally:
            reactor.stop()

    server = Server(application, endpoints=[f"tcp:port={port}:interface=127.0.0.1"], signal_handlers=False,
                    verbosity=0, ready_callable=lambda: asyncio.ensure_future(drive()))
    server.run()
    client.join(10)
    if "error" in outcome:
        raise outcome["error"]

    latencies = [t - commit_times[i] for i, t in outcome["arrivals"] if i in commit_times]
    ids = [i for i, _ in outcome["arrivals"]]
    assert ids == sorted(set(ids)), "events arrived out of order or twice"
    assert len(latencies) == args.events, (len(latencies), args.events)
    res = {"events": len(latencies), **harness.p50_p99(latencies)}
    print(f"layer {args.layer} ({backend}), {args.events} events, one commit every {args.interval_ms} ms")
    print(f"commit -> websocket client: p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, "
          f"max {harness.ms(max(latencies))} ms")
    if args.breakdown:
        arrived = dict(outcome["arrivals"])
        previous = commit_times
        for name, times in [*stages.items(), ("received", arrived)]:
            d = [times[i] - previous[i] for i in times if i in previous]
            print(f"  {name:<10} +p50 {harness.ms(harness.pct(d, 0.5))} ms  +p99 {harness.ms(harness.pct(d, 0.99))} ms")
            previous = times
    target = 10.0 if args.layer == "memory" else 20.0
    print(f"target p99 <= {target} ms: {'met' if res['p99_ms'] <= target else 'MISSED'}")
    harness.emit(res, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
