#!/usr/bin/env python3
"""The HTTP floor under bench/api.py. A benchmark, not a test.

    python bench/http_floor.py [--requests N] [--body-kb K] [--service-actions-per-s S] [--json]

Starts daphne (the server the product runs on) with a bare ASGI application that answers every
POST with a fixed JSON body of K KB (default 25, the size of a claim or submit response) and no
Django, no database, no work at all; then one client sends N sequential POSTs over one keep-alive
connection with `http.client`, as the worker's `HttpStore` does. That is the least a request of
bench/api.py can cost on this machine.

It then measures the same client against Work Center's own stack (`workcenter.asgi:application`
under daphne: the request handler, the middleware, URL resolution through the API's routes) asking
for an API route that does not exist: a 404 that touches no database and runs no API code. That is the least any
API call costs before its own work.

A worker action is two requests (claim, submit), so with the floor F ms per request and the
service layer at S actions/s (bench/claims.py, one worker) the best possible one-client HTTP
throughput is 1 / (1/S + 2F/1000) actions/s, and the best HTTP / service-layer ratio is that
divided by S. With `--service-actions-per-s S` it prints both, for each floor.
"""
from __future__ import annotations

import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

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


def time_requests(url: str, method: str, path: str, body: bytes | None, n: int) -> list[float]:
    """n sequential requests over one keep-alive connection (as the worker's HttpStore sends them)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port))
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}

    def one() -> None:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        json.loads(resp.read())

    for _ in range(min(200, n)):
        one()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        one()
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    return times


def report(label: str, times: list[float], service: float | None) -> dict:
    floor_ms = sum(times) / len(times) * 1000
    out = {"floor_ms_per_request": round(floor_ms, 3), **harness.p50_p99(times)}
    print(f"{label}: {floor_ms:.3f} ms/request (p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms), "
          f"{1000 / floor_ms:.0f} requests/s")
    if service:
        best = 1 / (1 / service + 2 * floor_ms / 1000)
        out.update(best_http_actions_per_s=round(best, 1), best_ratio=round(best / service, 3))
        print(f"  with the service layer at {service:g} actions/s, one HTTP client can reach at most "
              f"{best:.0f} actions/s: a ratio of {best / service:.2f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--body-kb", type=float, default=25.0)
    ap.add_argument("--service-actions-per-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.requests < 1 or args.body_kb < 0:
        ap.error("--requests must be positive and --body-kb not negative")

    tmp = tempfile.TemporaryDirectory(prefix="wc-floor-")
    body = json.dumps({"pad": "x" * max(0, int(args.body_kb * 1024) - 10)})
    Path(tmp.name, "floor_app.py").write_text(APP.replace('b"{}"', repr(body.encode())))
    payload = json.dumps({"owner_boot_id": "floor", "lease_ms": 60000}).encode()
    out: dict = {"body_kb": args.body_kb}

    logs = Path(tmp.name)
    server = harness.start_server(logs / "bare.log", app="floor_app:app", cwd=logs,
                                  env=dict(os.environ, PYTHONPATH=tmp.name))
    try:
        bare = time_requests(server.url, "POST", "/api/v1/claims", payload, args.requests)
    finally:
        harness.stop(server)
    out["bare"] = report(f"daphne, bare ASGI app, {args.body_kb:g} KB bodies, one keep-alive client", bare,
                         args.service_actions_per_s)

    # Work Center's stack; the 404 reads no database (a throwaway SQLite path keeps it that way)
    env = harness.server_env(DATABASE_URL=f"sqlite:///{Path(tmp.name) / 'unused.sqlite3'}")
    server = harness.start_server(logs / "stack.log", env=env)
    try:
        # a GET: Django's CSRF check would answer a POST outside the API's routes with an HTML 403
        stack = time_requests(server.url, "GET", "/api/v1/no-such-route", None, args.requests)
    finally:
        harness.stop(server)
    out["django_404"] = report("daphne + Django's request cycle (workcenter.asgi), a 404 that runs no API code", stack,
                               args.service_actions_per_s)
    harness.emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
