#!/usr/bin/env python3
"""Dispatch benchmark: how fast a parked worker gets an action that just became claimable.
A benchmark, not a test.

    python bench/dispatch.py [--db sqlite|postgres] [--parked P] [--dispatches N] [--poll-ms MS] [--json]

One daphne process (SQLite with the in-memory layer, or PostgreSQL with Redis) on a fresh
database. P workers park long-poll claims (`POST /api/v1/claims`, `wait_ms` 30,000; each on a
thread of this process with its own keep-alive connection, parking again after every answer).
A separate process makes one action claimable at a time (a new item through the service layer:
its first stage is ready), N times, one every `--interval-ms`, and notes the time right after
each commit. dispatch = that commit → the worker holding the claim of that item's action
(the claim's answer read).

While the P workers are parked (a quiet two seconds before the dispatches) it samples the
server's `workcenter_http_requests_in_flight` (request threads busy, the sampling request itself
not counted) and, on PostgreSQL, the server's database connections running a statement
(`pg_stat_activity`, state `active`): both must stay 0 however many requests are parked.
`failed_claims_per_dispatch`: the claims woken that found nothing (`workcenter_claim_empty_wakes_total`,
read before and after) per dispatch.

Then the same dispatches against P polling workers (a claim without `wait_ms` every `--poll-ms`,
default 1,000, each at its own phase), for comparison: their dispatch latency and failed claims
(204 answers) per dispatch.

With --json the last line is one JSON object {"parked", "dispatch_p50_ms", "dispatch_p99_ms",
"threads_busy_max", "db_connections_max", "failed_claims_per_dispatch", "polling": {...}}.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_dispatch_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"

DISPATCHER = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["WC_REPO"])
import django
django.setup()
from workcenter import services
n, interval = int(sys.argv[1]), float(sys.argv[2])
out = []
for i in range(n):
    item = services.work_item_create(title=f"dispatch {i}", goal="g", work_item_type="software-change", actor="bench")
    out.append([item.pk, time.time()])  # right after the commit
    time.sleep(interval)
print(json.dumps(out))
"""


class Worker(threading.Thread):
    """One worker: claims in a loop (a long poll, or a poll every `poll_s`); notes each claim."""

    def __init__(self, url: str, token: str, boot: str, *, wait_ms: int, poll_s: float, phase: float, stop):
        super().__init__(daemon=True)
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.body = json.dumps({"owner_boot_id": boot, "lease_ms": 600_000, **({"wait_ms": wait_ms} if wait_ms else {})})
        self.poll_s, self.phase, self.stop = poll_s, phase, stop
        self.claimed: list[tuple[str, float]] = []  # (item id, when the answer was read)
        self.empty = 0
        self.errors = 0

    def run(self):
        time.sleep(self.phase)
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.conn.request("POST", "/api/v1/claims", body=self.body, headers=self.headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                self.errors += 1
                self.conn.close()
                time.sleep(0.1)
                continue
            if resp.status == 201:
                self.claimed.append((json.loads(raw)["work_item"]["id"], time.time()))
            elif resp.status == 204:
                self.empty += 1
            else:
                self.errors += 1
            if self.poll_s:
                time.sleep(max(0.0, self.poll_s - (time.monotonic() - started)))


def metric(url: str, token: str, name: str) -> float:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def active_connections(db: str) -> int | None:
    """The server's database connections running a statement now (PostgreSQL), this one excluded."""
    if db != "postgres":
        return None
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'active' AND pid <> pg_backend_pid() AND application_name <> 'dispatch-bench'")
        return cur.fetchone()[0]


def phase(url: str, token: str, args, *, long_poll: bool, env: dict) -> dict:
    stop = threading.Event()
    workers = [Worker(url, token, f"{'parked' if long_poll else 'polling'}-{i}", wait_ms=30_000 if long_poll else 0,
                      poll_s=0 if long_poll else args.poll_ms / 1000,
                      phase=0 if long_poll else (i / args.parked) * args.poll_ms / 1000, stop=stop)
               for i in range(args.parked)]
    for w in workers:
        w.start()
    if long_poll:
        deadline = time.monotonic() + 60
        while metric(url, token, "workcenter_parked_claims") < args.parked and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        time.sleep(args.poll_ms / 1000 + 0.5)
    busy, conns = [], []
    if long_poll:  # a quiet moment: what the parked requests hold while they wait
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < quiet_until:
            busy.append(max(0.0, metric(url, token, "workcenter_http_requests_in_flight") - 1))
            c = active_connections(args.db)
            if c is not None:
                conns.append(c)
            time.sleep(0.05)
    empty_before = metric(url, token, "workcenter_claim_empty_wakes_total")
    polls_before = sum(w.empty for w in workers)
    # the separate process that makes one action claimable at a time
    proc = subprocess.Popen([sys.executable, "-c", DISPATCHER, str(args.dispatches), str(args.interval_ms / 1000)],
                            env=env, stdout=subprocess.PIPE, text=True)
    proc.wait()
    commits = {item_id: t for item_id, t in json.loads(proc.stdout.read())}
    deadline = time.monotonic() + 10
    while sum(1 for w in workers for i, _ in w.claimed if i in commits) < len(commits) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    got = {i: t for w in workers for i, t in w.claimed if i in commits}
    latencies = sorted(got[i] - commits[i] for i in got)
    out = {
        "dispatches": len(commits), "claimed": len(got),
        **harness.p50_p99(latencies, "dispatch", digits=1),
    }
    if long_poll:
        out.update(threads_busy_max=max(busy, default=0), db_connections_max=max(conns) if conns else None,
                   failed_claims_per_dispatch=round((metric(url, token, "workcenter_claim_empty_wakes_total")
                                                     - empty_before) / max(1, len(commits)), 3))
    else:
        out["failed_claims_per_dispatch"] = round((sum(w.empty for w in workers) - polls_before) / max(1, len(commits)), 1)
    out["client_errors"] = sum(w.errors for w in workers)
    for w in workers:  # parked requests end with their connections (shut: a blocked read returns)
        try:
            if w.conn.sock is not None:
                w.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for w in workers:
        w.join(5)
        w.conn.close()
    time.sleep(0.5)  # the server forgets the requests whose clients left
    return out


def main(argv=None) -> int:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--parked", type=int, default=200)
    ap.add_argument("--dispatches", type=int, default=50)
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--poll-ms", type=int, default=1000)
    args = ap.parse_args(argv)

    harness.use_channel_layer(os.environ.get("WORKCENTER_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
                              if args.db == "postgres" else None)
    harness.fresh_database(args.db, harness.bench_pg_url(DEFAULT_PG_URL))
    if args.db == "postgres":  # this process's connection, left out of the server's count (opened next)
        from django.db import connection

        connection.settings_dict.setdefault("OPTIONS", {})["application_name"] = "dispatch-bench"
    token = harness.api_user("dispatch-bench", harness.RUNNER)
    logdir = tempfile.TemporaryDirectory(prefix="wc-dispatch-")
    # the P workers share one token: the server lets them all wait (else past the bound they get 429)
    bound = str(max(64, args.parked))
    env = harness.server_env(WORKCENTER_LONG_POLL_MAX_PER_TOKEN=bound,
                             WORKCENTER_LONG_POLL_MAX_PER_PROCESS=str(max(400, args.parked)))
    server = harness.start_server(Path(logdir.name) / "daphne.log", env=env)
    url = server.url
    dispatcher_env = dict(os.environ, DJANGO_SETTINGS_MODULE="workcenter.settings", WC_REPO=str(harness.REPO),
                          WORKCENTER_LOG_LEVEL="WARNING")
    print(f"Work Center dispatch benchmark: {args.db}{' + Redis' if args.db == 'postgres' else ' (in-memory layer)'}, "
          f"{args.parked} workers, {args.dispatches} actions made claimable one at a time by another process")
    try:
        parked = phase(url, token, args, long_poll=True, env=dispatcher_env)
        print(f"  long poll: dispatch p50 {parked['dispatch_p50_ms']} ms, p99 {parked['dispatch_p99_ms']} ms "
              f"({parked['claimed']}/{parked['dispatches']} claimed); request threads busy at most "
              f"{parked['threads_busy_max']:g}, database connections at work at most {parked['db_connections_max']}; "
              f"failed claims per dispatch {parked['failed_claims_per_dispatch']}")
        polling = phase(url, token, args, long_poll=False, env=dispatcher_env)
        print(f"  polling every {args.poll_ms} ms: dispatch p50 {polling['dispatch_p50_ms']} ms, "
              f"p99 {polling['dispatch_p99_ms']} ms ({polling['claimed']}/{polling['dispatches']} claimed); "
              f"failed claims per dispatch {polling['failed_claims_per_dispatch']}, client errors {polling['client_errors']}")
    finally:
        harness.stop(server)
        logdir.cleanup()
    out = {"parked": args.parked, "dispatch_p50_ms": parked["dispatch_p50_ms"],
           "dispatch_p99_ms": parked["dispatch_p99_ms"], "threads_busy_max": parked["threads_busy_max"],
           "db_connections_max": parked["db_connections_max"],
           "failed_claims_per_dispatch": parked["failed_claims_per_dispatch"], "db": args.db,
           "claimed": parked["claimed"], "dispatches": parked["dispatches"],
           "polling": {"poll_ms": args.poll_ms, **polling}}
    harness.emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
