#!/usr/bin/env python3
"""Idle sockets benchmark: the CPU a server spends on K open, idle websockets, with heartbeats
(`WORKCENTER_STREAM_HEARTBEAT_S`, dashboard/stream/heartbeat.py) on and off. A benchmark, not a test.

    python bench/idle_sockets.py [--sockets K] [--seconds S] [--beats 0,5,1] [--json]

For each heartbeat interval (0: off): ONE daphne process on a fresh SQLite database (in-memory
channel layer), K websocket clients in this process (list, item and Workers streams, dealt
round-robin; bearer token), each reading everything it is sent; once every client has its hello
and 5 s have passed, the daphne process's user+sys CPU (/proc/<pid>/stat) over S seconds, as ms
per minute, and the heartbeats the clients received.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402



async def measure(port: int, token: str, item_id: str, sockets: int, seconds: float, pid: int) -> dict:
    from websockets.asyncio.client import connect

    paths = ["/ws/work-items/", f"/ws/work-items/{item_id}/", "/ws/workers/"]
    beats = [0]
    hellos = 0
    ready = asyncio.Event()
    stop = asyncio.Event()

    async def client(i: int) -> None:
        nonlocal hellos
        async with connect(f"ws://127.0.0.1:{port}{paths[i % len(paths)]}", open_timeout=30,
                           additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
            await ws.recv()
            hellos += 1
            if hellos == sockets:
                ready.set()
            while not stop.is_set():
                try:
                    msg = await asyncio.wait_for(ws.recv(), 0.5)
                except asyncio.TimeoutError:
                    continue
                if '"heartbeat"' in msg:
                    beats[0] += 1

    tasks = [asyncio.create_task(client(i)) for i in range(sockets)]
    await asyncio.wait_for(ready.wait(), 120)
    await asyncio.sleep(5)
    start_cpu, start, start_beats = harness.cpu_seconds(pid), time.monotonic(), beats[0]
    await asyncio.sleep(seconds)
    cpu, took, got = harness.cpu_seconds(pid) - start_cpu, time.monotonic() - start, beats[0] - start_beats
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"server_cpu_ms_per_min": round(cpu / took * 60_000, 1), "heartbeats_received": got}


def main() -> int:
    ap = harness.argument_parser(__doc__)
    ap.add_argument("--sockets", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--beats", default="0,5", help="heartbeat intervals to compare, seconds (0: off)")
    args = ap.parse_args()
    harness.production_settings()
    harness.use_channel_layer(None)
    harness.fresh_database("sqlite")
    from django.db import connections

    from workcenter import services

    token = harness.api_user("idle-bench")
    item = services.work_item_create(title="idle bench", goal="watched", start=False, actor="bench")
    connections.close_all()
    figures = {"sockets": args.sockets, "seconds": args.seconds}
    for beat in args.beats.split(","):
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"idle-bench-daphne-{beat}.log"
        server = harness.start_server(log, env=harness.server_env(WORKCENTER_STREAM_HEARTBEAT_S=beat))
        try:
            res = asyncio.run(measure(server.port, token, item.pk, args.sockets, args.seconds, server.pid))
        finally:
            harness.stop(server)
        figures[f"heartbeat_{beat}s"] = res
        harness.log(f"heartbeat {beat} s: {res}")
    harness.emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
