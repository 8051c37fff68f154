#!/usr/bin/env python3
"""The HTTP floor under bench/api.py (issue 3). A benchmark, not a test.

    python bench/http_floor.py [--requests N] [--body-kb K] [--service-actions-per-s S] [--json]

Starts daphne (the server the product runs on) with a bare ASGI application that answers every
POST with a fixed JSON body of K KB (default 25, the size of a claim or submit response) and no
Django, no database, no work at all; then one client sends N sequential POSTs over one keep-alive
connection with `http.client`, as the worker's `HttpStore` does. That is the least a request of
bench/api.py can cost on this machine.

A worker action is two requests (claim, submit), so with the floor F ms per request and the
service layer at S actions/s (bench/claims.py, one worker) the best possible one-client HTTP
throughput is 1 / (1/S + 2F/1000) actions/s, and the best HTTP / service-layer ratio is that
divided by S. With `--service-actions-per-s S` it prints both.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP = '''
BODY = b"{}"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--body-kb", type=float, default=25.0)
    ap.add_argument("--service-actions-per-s", type=float, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.requests < 1 or args.body_kb < 0:
        ap.error("--requests must be positive and --body-kb not negative")

    tmp = tempfile.TemporaryDirectory(prefix="wc-floor-")
    body = json.dumps({"pad": "x" * max(0, int(args.body_kb * 1024) - 10)})
    Path(tmp.name, "floor_app.py").write_text(APP.replace('b"{}"', repr(body.encode())))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "floor_app:app"],
                              cwd=tmp.name, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONPATH=tmp.name))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("daphne did not start")
                time.sleep(0.1)
        conn = http.client.HTTPConnection("127.0.0.1", port)
        payload = json.dumps({"owner_boot_id": "floor", "lease_ms": 60000}).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}

        def one() -> None:
            conn.request("POST", "/api/v1/claims", body=payload, headers=headers)
            resp = conn.getresponse()
            json.loads(resp.read())

        for _ in range(min(200, args.requests)):
            one()
        times = []
        for _ in range(args.requests):
            t0 = time.perf_counter()
            one()
            times.append(time.perf_counter() - t0)
    finally:
        server.terminate()
        server.wait(10)
    times.sort()
    floor_ms = sum(times) / len(times) * 1000
    out = {"floor_ms_per_request": round(floor_ms, 3), "p50_ms": round(times[len(times) // 2] * 1000, 3),
           "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 3), "body_kb": args.body_kb}
    print(f"daphne, bare ASGI app, {args.body_kb:g} KB bodies, one keep-alive client: "
          f"{floor_ms:.3f} ms/request (p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms), "
          f"{1000 / floor_ms:.0f} requests/s")
    if args.service_actions_per_s:
        s = args.service_actions_per_s
        best = 1 / (1 / s + 2 * floor_ms / 1000)
        out.update(best_http_actions_per_s=round(best, 1), best_ratio=round(best / s, 3))
        print(f"with the service layer at {s:g} actions/s, one HTTP client can reach at most {best:.0f} actions/s: "
              f"a ratio of {best / s:.2f}, before Django, the API or the database do anything")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
