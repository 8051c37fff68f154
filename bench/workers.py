#!/usr/bin/env python3
"""Workers page benchmark: one open Workers page over a busy hour of runs. A benchmark, not a test.

    python bench/workers.py [--db sqlite|postgres] [--runs N] [--held H] [--seconds S]
                            [--renewals R] [--mode push|poll|both] [--poll-ms MS]
                            [--server-repo PATH] [--json]

What runs (everything on 127.0.0.1, every process started here and stopped at exit):

* the database: `--db sqlite` (default) a temporary SQLite file; `--db postgres` DATABASE_URL
  when it names a PostgreSQL database containing "bench", else
  postgres://postgres@127.0.0.1:5432/workcenter_workers_bench (dropped and recreated). The
  channel layer is the in-memory one (the Workers stream uses none).
* set-up, before the clock: N runs (default 20,000) that ended over the last hour, spread evenly,
  by 8 boot ids, a third of them failed (bulk inserted on one item); H items (default 4) each
  claimed by a worker boot id of its own (real claims, 1 h leases); a user with `view_workitem`
  and an API token. VACUUM ANALYZE on PostgreSQL.
* ONE daphne process (`python -m daphne workcenter.asgi:application`, cwd `--server-repo`, default
  this checkout: point it at a checkout of an older version to measure that version's server).
  First, min(S, 10) seconds with no client: the server's own idle CPU per minute
  (`baseline_server_cpu_ms_per_min`), which the figures below include.

Phases (`--mode both`, the default, runs push then poll):

* push: one Workers page-like client on /ws/workers/ (Bearer token): its hello, then S seconds
  (default 60) with nothing changing: the daphne process's CPU time (`cpu_seconds`) over them,
  per minute (`idle_server_cpu_ms_per_min`), and the messages received meanwhile. Then R lease
  renewals (default 10, 1.0–1.6 s apart at random, made from this process through
  `services.run_renew`, as a local-store worker renews): the time from the renewal's commit until the client holds a
  message with that renewal (`update_p50_ms` / `update_p99_ms`). The client applies messages as
  the page does (static/dashboard/workers.js) and counts an HTTP request for a renewal it would
  have to read back (a push that does not carry it): `http_requests_per_update`.
* poll: no websocket; GET /api/v1/workers every `--poll-ms` (default 500, the old page's fastest
  cadence; it polled every 0.5–3 s) for S seconds: the server's CPU per request and per minute at
  that cadence (`poll_cpu_ms_per_min`), and at 3 s.

The machine's other load counts in the wall times (latency); the CPU figures are the server
process's own CPU time, not wall time. With --json the last line is one JSON object with the
figures above and db, runs_last_hour, held, seconds, hello_ms.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_workers_bench"
BOOTS = 8
LEASE_MS = 3_600_000  # the held runs: no lease expires during the run
RENEW_GAP = (1.0, 1.6)  # seconds between two renewals, at random: no phase lock with the server's tick


log = harness.log


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process's threads: the sum of /proc/<pid>/task/*/schedstat (nanoseconds on
    the CPU; /proc/<pid>/stat counts in 10 ms clock ticks, too coarse for tens of milliseconds a
    minute). A thread that ends within a window takes its time with it; the server's threads here
    outlive the windows."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def setup(args) -> tuple[str, list]:
    """Fresh database, migrated; user + token; the hour's runs; the held runs. Returns (token,
    claims)."""
    harness.production_settings()
    harness.use_channel_layer(None)
    harness.fresh_database(args.db, harness.bench_pg_url(DEFAULT_PG_URL))
    from django.db import connection, connections

    from workcenter import clock, services
    from workcenter.models import Run

    token = harness.api_user("workers-bench")
    started = time.perf_counter()
    item = services.work_item_create(title="the hour's runs", goal="g", work_item_type="software-change", actor="bench")
    first = services.action_claim(owner_boot_id="bench-setup", lease_ms=LEASE_MS)
    services.run_interrupt(run_id=first.run.pk, owner_boot_id="bench-setup", lease_epoch=first.run.lease_epoch,
                           reason="set-up")
    now = clock.now() - timedelta(seconds=10)  # out of the refresh's margin by the time the clock starts
    rows = []
    for i in range(args.runs):
        ended = now - timedelta(seconds=3590 * i / max(1, args.runs))
        rows.append(Run(action_id=first.action.pk, work_item_id=item.pk, owner_boot_id=f"bench-boot-{i % BOOTS}",
                        lease_epoch=1, status="failed" if i % 3 == 0 else "completed",
                        started_at=ended - timedelta(seconds=4), renewed_at=ended - timedelta(seconds=2),
                        expires_at=ended + timedelta(seconds=56), ended_at=ended))
    Run.objects.bulk_create(rows, batch_size=2000)
    claims = []
    for i in range(args.held):
        services.work_item_create(title=f"held {i}", goal="g", work_item_type="software-change", actor="bench")
        claims.append(services.action_claim(owner_boot_id=f"bench-held-{i}", lease_ms=LEASE_MS))
    if args.db == "postgres":
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE workcenter_run")
    log(f"set-up: {args.runs:,} runs ended in the last hour by {BOOTS} boot ids, {args.held} held, "
        f"in {time.perf_counter() - started:.1f} s")
    connections.close_all()
    return token, claims


def renew(claim) -> tuple[str, float]:
    """Renew one held lease as a worker does; (its renewed_at as the API writes it, time after commit)."""
    from workcenter import clock, services

    run = services.run_renew(run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
                             lease_epoch=claim.run.lease_epoch, lease_ms=LEASE_MS)
    return clock.iso_ms(run.renewed_at), time.time()


class Page:
    """The Workers page's state, kept as static/dashboard/workers.js keeps it."""

    def __init__(self) -> None:
        self.by_boot: dict[str, dict] = {}
        self.messages = 0  # pushes ("workers" messages)
        self.arrivals: list[tuple[float, dict]] = []

    def apply(self, msg: dict) -> None:
        if msg["type"] == "hello":
            self.by_boot = {w["boot_id"]: w for w in msg["workers"]}
        elif msg["type"] == "workers":
            self.messages += 1
            for boot in msg["gone"]:
                self.by_boot.pop(boot, None)
            for w in msg["workers"]:
                self.by_boot[w["boot_id"]] = w
            self.arrivals.append((time.time(), msg))

    def renewed_at(self, run_id: str) -> str | None:
        for w in self.by_boot.values():
            for h in w["held"]:
                if h["run_id"] == run_id:
                    return h["renewed_at"]
        return None


async def push_phase(args, port: int, token: str, claims: list, pid: int) -> dict:
    from websockets.asyncio.client import connect

    page = Page()
    t0 = time.perf_counter()
    async with connect(f"ws://127.0.0.1:{port}/ws/workers/", additional_headers={"Authorization": f"Bearer {token}"},
                       max_size=None) as ws:
        hello = json.loads(await ws.recv())
        hello_ms = (time.perf_counter() - t0) * 1000
        page.apply(hello)
        log(f"push: hello in {hello_ms:.0f} ms, {len(hello['workers'])} workers, "
            f"{sum(w['finished_1h'] + w['failed_1h'] for w in hello['workers']):,} runs ended in the hour")

        async def reader():
            async for text in ws:
                page.apply(json.loads(text))

        task = asyncio.create_task(reader())
        await asyncio.sleep(1.0)  # the ticker's first refreshes
        before = page.messages
        cpu0, w0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(args.seconds)
        cpu1, window = cpu_seconds(pid), time.monotonic() - w0
        idle_cpu = (cpu1 - cpu0) * 1000 * 60 / window
        idle_messages = page.messages - before
        log(f"push: idle {window:.0f} s: server CPU {(cpu1 - cpu0) * 1000:.0f} ms = {idle_cpu:.1f} ms per minute; "
            f"{idle_messages} messages")
        latencies, missing = [], 0
        cpu2 = cpu_seconds(pid)
        for i in range(args.renewals):
            claim = claims[i % len(claims)]
            renewed, committed = await asyncio.to_thread(renew, claim)
            deadline = time.monotonic() + 5
            while page.renewed_at(claim.run.pk) != renewed and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            if page.renewed_at(claim.run.pk) == renewed:
                arrived = next(t for t, msg in page.arrivals
                               if any(h["run_id"] == claim.run.pk and h["renewed_at"] == renewed
                                      for w in msg["workers"] for h in w["held"]))
                latencies.append((arrived - committed) * 1000)
            else:
                missing += 1  # the page would have to read it back
            await asyncio.sleep(random.uniform(*RENEW_GAP))
        cpu3 = cpu_seconds(pid)
        task.cancel()
    log(f"push: {args.renewals} renewals: on the page after p50 {harness.pct(latencies, 0.5):.0f} ms, "
        f"p99 {harness.pct(latencies, 0.99):.0f} ms (max {max(latencies, default=0):.0f}); {missing} not pushed; "
        f"server CPU during them {(cpu3 - cpu2) * 1000:.0f} ms")
    return {"hello_ms": round(hello_ms, 1), "idle_server_cpu_ms_per_min": round(idle_cpu, 1),
            "idle_messages": idle_messages, "renewals": args.renewals,
            **harness.p50_p99(latencies, "update", scale=1, digits=1),  # latencies in ms
            "update_max_ms": round(max(latencies, default=0), 1),
            "update_mean_ms": round(statistics.mean(latencies), 1) if latencies else None,
            "http_requests_per_update": missing / max(1, args.renewals)}


def poll_phase(args, port: int, token: str, pid: int) -> dict:
    harness.http_get(port, "/api/v1/workers", token)  # warm
    period = args.poll_ms / 1000
    cpu0, w0, n = cpu_seconds(pid), time.monotonic(), 0
    while time.monotonic() - w0 < args.seconds:
        started = time.monotonic()
        harness.http_get(port, "/api/v1/workers", token)
        n += 1
        time.sleep(max(0.0, period - (time.monotonic() - started)))
    cpu1, window = cpu_seconds(pid), time.monotonic() - w0
    per_request = (cpu1 - cpu0) * 1000 / n
    log(f"poll: {n} GET /api/v1/workers in {window:.0f} s: server CPU {per_request:.1f} ms per request = "
        f"{(cpu1 - cpu0) * 1000 * 60 / window:.0f} ms per minute every {args.poll_ms} ms, "
        f"{per_request * 20:.0f} ms per minute every 3 s")
    return {"poll_ms": args.poll_ms, "poll_requests": n, "poll_cpu_ms_per_request": round(per_request, 2),
            "poll_cpu_ms_per_min": round((cpu1 - cpu0) * 1000 * 60 / window, 1),
            "poll_cpu_ms_per_min_every_3s": round(per_request * 20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--runs", type=int, default=20_000, help="runs ended in the last hour (default 20,000)")
    ap.add_argument("--held", type=int, default=4, help="held runs, one boot id each (default 4)")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each idle window (default 60)")
    ap.add_argument("--renewals", type=int, default=10, help="renewals timed (default 10)")
    ap.add_argument("--mode", choices=("push", "poll", "both"), default="both")
    ap.add_argument("--poll-ms", type=int, default=500, help="the poll phase's period (default 500)")
    ap.add_argument("--server-repo", type=Path, default=harness.REPO, help="the checkout daphne runs from")
    args = ap.parse_args(argv)
    if args.runs < 0 or args.held < 1 or args.seconds <= 0 or args.renewals < 1 or args.poll_ms < 1:
        ap.error("--held, --seconds, --renewals and --poll-ms must be positive, --runs not negative")

    token, claims = setup(args)
    workdir = Path(tempfile.mkdtemp(prefix="wc-workers-bench-"))
    daphne_log = workdir / "daphne.log"
    daphne = None
    out = {"db": args.db, "runs_last_hour": args.runs, "held": args.held, "seconds": args.seconds}
    try:
        daphne = harness.start_server(daphne_log, cwd=args.server_repo, env=harness.server_env())
        port = daphne.port
        time.sleep(1.0)
        cpu0, w0 = cpu_seconds(daphne.pid), time.monotonic()
        time.sleep(min(10.0, args.seconds))
        baseline = (cpu_seconds(daphne.pid) - cpu0) * 1000 * 60 / (time.monotonic() - w0)
        out["baseline_server_cpu_ms_per_min"] = round(baseline, 1)
        log(f"baseline: the server with no client: {baseline:.1f} ms CPU per minute")
        if args.mode in ("push", "both"):
            out.update(asyncio.run(push_phase(args, port, token, claims, daphne.pid)))
            time.sleep(1.0)  # the ticker ends with its last client
        if args.mode in ("poll", "both"):
            out.update(poll_phase(args, port, token, daphne.pid))
        log(f"server log kept in {daphne_log}")
    finally:
        harness.stop(daphne)
    harness.emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
