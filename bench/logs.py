"""Run logs under load: `--runs` runs, each a shell command printing `--rate` lines a second for
`--seconds` seconds, through real worker processes (the HTTP worker protocol) to one web process;
prints what was stored and how fast it came.

Each line carries its run, its number and the time it was printed. `lines_per_s`: lines stored
over the printing time; `lost_lines`: lines printed and not stored (must be 0); `append_p50/p99_ms`:
the round trip of an append of 50 lines made by this process's own run (a probe holding its own
lease, four appends a second) while the load runs; `panel_delay_p50/p99_ms`: from a line's print to
its arrival at one page-like websocket client that follows one run's log (`log.follow`), for the
lines printed after it began to follow; `server_cpu_ms_per_1000_lines`: the web process's CPU time
(user + system) while the runs printed, over the lines it stored (the probe's included; claims and
submissions are in the time too); `requests_per_run_s`: appends per run per second (the
worker batches: a few at most, however fast the command prints).

    python bench/logs.py --db sqlite --runs 50 --rate 200 --seconds 30 --json
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import harness

# prints RATE lines a second for SECONDS seconds on an absolute schedule: "L <run id> <n> <epoch ms>"
EMIT = ("import os, sys, time\n"
        "run, rate, seconds = os.environ['WORKCENTER_RUN_ID'], float(sys.argv[1]), float(sys.argv[2])\n"
        "start = time.time()\n"
        "for n in range(int(rate * seconds)):\n"
        "    wait = start + n / rate - time.time()\n"
        "    if wait > 0: time.sleep(wait)\n"
        "    print(f'L {run} {n} {time.time() * 1000:.1f}', flush=True)\n")


def probe_appends(store, run: dict, stop: threading.Event, latencies: list[float]) -> None:
    """Four appends of 50 lines a second on the probe's own run, each timed."""
    n = 0
    while not stop.wait(0.25):
        chunk = {"stream": "stdout", "text": "".join(f"probe {n + i}\n" for i in range(50)),
                 "at": datetime.now(timezone.utc)}
        started = time.perf_counter()
        store.log(run, [chunk])
        latencies.append(time.perf_counter() - started)
        n += 50


async def follow_panel(url: str, token: str, item_id: str, run_id: str, stop: threading.Event,
                       delays: list[float], followed: list[float]) -> None:
    """A page's follow of one run's log: the delay of each line printed after it began."""
    import websockets

    ws_url = url.replace("http://", "ws://") + f"/ws/work-items/{item_id}/?token={token}"
    async with websockets.connect(ws_url, max_size=None) as ws:
        await ws.recv()  # hello
        await ws.send(json.dumps({"type": "log.follow", "run_id": run_id}))
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            now = time.time() * 1000
            msg = json.loads(raw)
            if msg.get("type") != "log":
                continue
            if not followed:
                followed.append(now)  # the follow's first page: lines printed before it are not timed
                continue
            for chunk in msg.get("chunks") or []:
                for line in chunk["text"].splitlines():
                    parts = line.split()
                    if len(parts) == 4 and parts[0] == "L":
                        delays.append((now - float(parts[3])) / 1000)
            if msg.get("live") is False:
                return


def main() -> None:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--rate", type=float, default=200.0, help="lines a second each run prints")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=10, help="runs per worker process")
    args = ap.parse_args()

    harness.production_settings()
    harness.fresh_database(args.db, harness.bench_pg_url(harness.DEFAULT_PG_URL) if args.db == "postgres" else None)
    harness.use_channel_layer(os.environ.get("WORKCENTER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
                              if args.db == "postgres" else None)
    from workcenter import services
    from workcenter.models import RunLogChunk
    from workcenter.worker import HttpStore

    token = harness.api_user("bench-worker", harness.RUNNER)
    tmp = Path(tempfile.mkdtemp(prefix="wc-bench-logs-"))
    server = harness.start_server(tmp / "daphne.log", env=harness.server_env())
    store = HttpStore(server.url, token)

    def item(stage: str, n: int):
        work = tmp / f"work-{stage}-{n}"
        work.mkdir()
        workflow = {"id": "bench-logs", "stages": [{"id": stage, "type": "implement"}]}
        return services.work_item_create(title=f"{stage} {n}", goal="print", acceptance_criteria=["printed"],
                                         work_dir=str(work), workflow=workflow, trusted=True)

    # the probe's own run first (no worker knows its stage), then the load
    item("probe", 0)
    probe = store.claim("bench-probe", 600_000)["run"]
    items = [item("emit", n) for n in range(args.runs)]
    commands = tmp / "commands.json"
    commands.write_text(json.dumps({"emit": [sys.executable, "-c", EMIT, str(args.rate), str(args.seconds)]}))
    workers_n = -(-args.runs // args.concurrency)
    worker_env = dict(harness.server_env(), WORKCENTER_TOKEN=token)
    workers = [subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--server", server.url,
                                 "--commands", str(commands), "--concurrency", str(args.concurrency),
                                 "--lease-ms", "60000", "--no-journal"], cwd=harness.REPO, env=worker_env,
                                stdout=subprocess.DEVNULL, stderr=open(tmp / "workers.log", "wb"))
               for _ in range(workers_n)]
    harness.log(f"{args.runs} runs printing {args.rate:g} lines/s for {args.seconds:g} s through {workers_n} "
                f"worker(s) to one web process ({args.db})")

    watched = items[0]
    deadline = time.time() + 60
    while (run_id := harness.http_get(server.port, f"/api/v1/work-items/{watched.pk}", token).get("current_run_id")) is None:
        if time.time() > deadline:
            sys.exit("the watched item was not claimed within 60 s")
        time.sleep(0.05)
    stop = threading.Event()
    delays: list[float] = []
    followed: list[float] = []
    panel = threading.Thread(target=lambda: asyncio.run(follow_panel(server.url, token, watched.pk, run_id, stop,
                                                                     delays, followed)), daemon=True)
    panel.start()
    latencies: list[float] = []
    prober = threading.Thread(target=probe_appends, args=(store, probe, stop, latencies), daemon=True)
    prober.start()
    cpu0, t0 = harness.cpu_seconds(server.pid), time.time()

    def finished() -> int:
        return sum(1 for i in items if harness.http_get(server.port, f"/api/v1/work-items/{i.pk}", token)["status"]
                   in ("done", "needs_attention", "cancelled"))

    deadline = time.time() + args.seconds + 120
    while finished() < len(items):
        if time.time() > deadline:
            break
        time.sleep(0.5)
    cpu1, t1 = harness.cpu_seconds(server.pid), time.time()
    stop.set()
    prober.join(5)
    panel.join(5)
    harness.stop(*workers)
    harness.stop(server)

    worker_notes = [line for line in (tmp / "workers.log").read_text(errors="replace").splitlines() if "log of run" in line]
    for line in worker_notes[:10]:
        harness.log(f"  worker: {line[-200:]}")
    # what was stored: every line of every load run, by its number
    seen: dict[str, set[int]] = {}
    first_at, last_at = float("inf"), 0.0
    chunks = 0
    logs: dict[str, list[str]] = {}
    for run_id, text in (RunLogChunk.objects.exclude(run_id=probe["id"]).order_by("run_id", "seq")
                         .values_list("run_id", "text").iterator()):
        chunks += 1
        logs.setdefault(run_id, []).append(text)
    for texts in logs.values():  # a run's text whole: a line may span two chunks (one longer than a chunk)
        for line in "".join(texts).splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "L":
                seen.setdefault(parts[1], set()).add(int(parts[2]))
                at = float(parts[3]) / 1000
                first_at, last_at = min(first_at, at), max(last_at, at)
    per_run = int(args.rate * args.seconds)
    stored = sum(len(v) for v in seen.values())
    # where lines went missing: a run's last lines (its end was not sent) or holes in between
    lost_at_end = sum(per_run - 1 - max(v) for v in seen.values()) + per_run * (args.runs - len(seen))
    from workcenter.models import WorkItem
    statuses = dict(Counter(WorkItem.objects.filter(pk__in=[i.pk for i in items]).values_list("status", flat=True)))
    printing = max(1e-9, last_at - first_at)
    figures = {
        "db": args.db, "runs": args.runs, "rate_per_run": args.rate, "seconds": args.seconds, "workers": workers_n,
        "lines_stored": stored, "lost_lines": args.runs * per_run - stored, "lost_at_end": lost_at_end,
        "runs_with_lost_lines": sum(1 for v in seen.values() if len(v) < per_run) + args.runs - len(seen),
        "item_statuses": statuses,
        "lines_per_s": round(stored / printing, 1), "chunks": chunks,
        "requests_per_run_s": round(chunks / max(1, len(seen)) / printing, 2),
        **harness.p50_p99(latencies, "append", digits=1), "appends_timed": len(latencies),
        **harness.p50_p99(delays, "panel_delay", digits=1), "panel_lines_timed": len(delays),
        # the probe's lines are the server's work too
        "server_cpu_ms_per_1000_lines": round((cpu1 - cpu0) * 1000 / max(1, stored + 50 * len(latencies)) * 1000, 2),
        "elapsed_s": round(t1 - t0, 1),
    }
    harness.log(f"stored {stored} lines ({figures['lines_per_s']}/s), lost {figures['lost_lines']}; append p99 "
                f"{figures['append_p99_ms']} ms; panel delay p50 {figures['panel_delay_p50_ms']} ms, p99 "
                f"{figures['panel_delay_p99_ms']} ms; server CPU {figures['server_cpu_ms_per_1000_lines']} ms/1000 lines")
    harness.emit(figures, args.json)
    if figures["lost_lines"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
