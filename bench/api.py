#!/usr/bin/env python3
"""Claim/submit benchmark over HTTP. A benchmark, not a test.

    python bench/api.py [--url URL --token TOKEN] [--db sqlite|postgres] [--items N] [--workers W]
                        [--servers K] [--rounds R] [--no-compare] [--json]

The same workload as bench/claims.py (whose set-up code it imports): N work items of the 6-stage
graph  a -> b, a -> c, b -> d, c -> d, d -> e -> f  in the state a completed planning triage leaves
them; then W client processes (multiprocessing spawn) loop
    POST /api/v1/claims  ->  POST /api/v1/runs/{id}/submit (outcome completed)
through `workcenter.worker.HttpStore` (the HTTP workers' client: keep-alive connections) until
every action is done, timing each call (request sent until the body is parsed).

Without --url it runs its own server: a fresh database (`--db sqlite`: a temporary SQLite file;
`--db postgres`: DATABASE_URL when it names a PostgreSQL database whose name contains "bench", else
postgres://postgres@127.0.0.1:5432/workcenter_apibench; dropped and recreated) and migrated, a user holding view_workitem/change_workitem/run_actions with an API
token, and `python -m daphne workcenter.asgi:application` on a free port (one process by default;
`--servers K` starts K daphne processes on K ports and spreads the clients over them; the output
says so). With --url and --token it drives that server; the items are then created in the database
named by DATABASE_URL, which must be the one that server uses (it is neither recreated nor migrated).

Each submission asks for the next claim (`claim_next`, the worker's default), so in steady state
one request per action; `--no-claim-next` claims with a request of its own instead. It prints
the HTTP requests per action.

For comparison it then runs `python bench/claims.py --db <db> --items N --workers W --json` (the
service layer without HTTP, on the same database kind; its own database) and
`python bench/http_floor.py` (the least a request costs: daphne + Django, a 404), and prints
`ratio_to_floor` = actions/s ÷ 1 / (service ms per action + requests per action × floor ms per
request), every figure from this run (goal >= 0.5). With --json the last line printed is one JSON
object {"actions_per_s", "claim_p50_ms", "claim_p99_ms", "submit_p50_ms", "submit_p99_ms",
"requests_per_action", "claim_next"} plus, with the comparison, "service_actions_per_s",
"floor_ms_per_request" and "ratio_to_floor".

On a shared machine one run's ratio swings by a fifth either way (the three measurements are
taken one after another, and the floor itself moves between 0.9 and 1.4 ms). `--rounds R`
repeats the whole measurement R times and reports the median of each figure, plus every round's
actions/s and ratio ("actions_per_s_each", "ratio_to_floor_each", "rounds").
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)
import claims as svcbench  # bench/claims.py: its workload (Builder, GRAPH, RESULT, timed_loop, run_parallel)
from workcenter.worker import HttpStore  # the HTTP workers' own client

PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_apibench"
LONG_LEASE_MS = svcbench.LONG_LEASE_MS
SUBMIT_BODY = dict(svcbench.RESULT)
MAX_EMPTY_RETRIES = 500  # a client that gets 204 while actions remain sleeps 2 ms and retries


# --------------------------------------------------------------------------- servers


def start_servers(count: int, logdir: Path) -> list[harness.Server]:
    env = harness.server_env()
    return [harness.start_server(logdir / f"daphne-{i}.log", env=env) for i in range(count)]


# --------------------------------------------------------------------------- set-up


def create_token() -> str:
    """A user who may run actions, and a token of a name of its own (a server given with --url may
    hold this user's earlier ones)."""
    return harness.api_user("apibench", harness.RUNNER, token_name=f"apibench-{os.getpid()}-{time.time_ns()}")


def create_items(n: int) -> None:
    builder = svcbench.Builder()
    t0 = time.monotonic()
    builder.create("graph", svcbench.GRAPH, n)
    print(f"  set-up: {n} graph items in {time.monotonic() - t0:.2f} s")


# --------------------------------------------------------------------------- clients


def drive(store: HttpStore, boot: str, done, total: int | None, claim_next: bool = True) -> dict:
    """Claim → submit until nothing is left. With `claim_next` (the worker's default) each
    submission also claims the next action, so a separate claim request is made only when the
    previous submission found nothing: a claim's time is then its share of the submission."""
    following: list[dict] = []  # the claim the last submission made
    requests = [0]

    def claim():
        if following:
            return following.pop()
        requests[0] += 1
        return store.claim(boot, LONG_LEASE_MS)

    def submit(task):
        requests[0] += 1
        answer = store.submit(task["run"], SUBMIT_BODY, (boot, LONG_LEASE_MS) if claim_next else None)
        run_out = answer["run"]
        if run_out.get("status") != "completed":
            raise RuntimeError(f"submit: run ended {run_out.get('status')!r}: {run_out.get('error')!r}")
        if answer.get("next"):
            following.append(answer["next"])
        with done.get_lock():
            done.value += 1

    out = svcbench.timed_loop(claim, submit, lambda: total is None or done.value < total, MAX_EMPTY_RETRIES)
    out["requests"] = requests[0]
    return out


def worker_main(idx: int, url: str, token: str, total, ready_q, start_evt, result_q, done,
                claim_next: bool = True) -> None:
    try:
        store = HttpStore(url, token, timeout=120)
        boot = f"apibench-w{idx}-{os.getpid()}"
        store.recover(boot)  # as a worker starts: opens the keep-alive connection before the clock starts
        ready_q.put(idx)
        start_evt.wait()
        out = drive(store, boot, done, total, claim_next)
        out["end"] = time.monotonic()
        result_q.put(out)
    except BaseException as exc:
        import traceback

        result_q.put({"error": f"client {idx}: {exc!r}\n{traceback.format_exc()}"})
        try:
            ready_q.put(idx)
        except Exception:
            pass


def run_clients(workers: int, urls: list[str], token: str, total: int | None,
                claim_next: bool = True) -> tuple[dict, float]:
    done = mp.get_context("spawn").Value("q", 0)
    return svcbench.run_parallel(
        worker_main, lambda i, rq, ev, resq: (i, urls[i % len(urls)], token, total, rq, ev, resq, done, claim_next),
        workers, label="client")


def http_floor() -> dict | None:
    """bench/http_floor.py in this run: the least a request costs (daphne + Django, a 404)."""
    cmd = [sys.executable, str(harness.REPO / "bench" / "http_floor.py"), "--requests", "2000", "--json"]
    print(f"\nHTTP floor, same run: {' '.join(cmd[1:])}")
    return harness.run_json(cmd)


# --------------------------------------------------------------------------- comparison


def service_layer(db: str, items: int, workers: int) -> dict | None:
    """bench/claims.py on its own fresh database of the same kind; its JSON (last line)."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # claims.py makes its own: a temp SQLite file, or on PostgreSQL
    if db == "postgres":           # <our database>_svc (dropped and recreated by claims.py)
        env["DATABASE_URL"] = harness.bench_pg_url(PG_URL) + "_svc"
    cmd = [sys.executable, str(harness.REPO / "bench" / "claims.py"), "--db", db, "--items", str(items),
           "--workers", str(workers), "--json"]
    print(f"\nService layer, same run: {' '.join(cmd[1:])}")
    return harness.run_json(cmd, env=env)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--url", help="base URL of a running server (default: start daphne here)")
    ap.add_argument("--token", help="API token holding run_actions (with --url)")
    ap.add_argument("--items", type=int, default=200, help="graph work items to drive (default 200)")
    ap.add_argument("--workers", type=int, default=1, help="concurrent client processes (default 1)")
    ap.add_argument("--servers", type=int, default=1,
                    help="daphne processes to start without --url (default 1; each is single-process)")
    ap.add_argument("--no-compare", action="store_true", help="skip the bench/claims.py comparison")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the whole measurement (HTTP, service layer, floor) and report medians")
    ap.add_argument("--no-claim-next", action="store_true",
                    help="claim with a request of its own after each submission (as before claim_next)")
    args = ap.parse_args(argv)
    if args.items < 1 or args.workers < 1 or args.servers < 1:
        ap.error("--items, --workers and --servers must be positive")
    if args.url and not args.token:
        ap.error("--url needs --token")
    if args.rounds < 1:
        ap.error("--rounds must be positive")
    if args.servers > 1 and args.db == "sqlite":
        print("note: several daphne processes share one SQLite file (writers serialise on its lock)")

    if args.rounds == 1:
        res = one_round(args)
    else:  # each round in a process of its own: a fresh database and Django set up for it
        argv = list(sys.argv[1:] if argv is None else argv)
        rounds = []
        for i in range(args.rounds):
            print(f"\n=== round {i + 1} of {args.rounds} ===", flush=True)
            one = harness.run_json([sys.executable, __file__, *argv, "--rounds", "1", "--json"], echo="")
            if one is None:
                print(f"round {i + 1} failed")
                return 1
            rounds.append(one)
        res = combine(rounds)
    harness.emit(res, args.json)
    return 0


def combine(rounds: list[dict]) -> dict:
    """The median of each figure over the rounds (each round's HTTP, service-layer and floor
    figures come from that round), with every round's actions/s and ratio."""
    out = dict(rounds[0])
    for key, value in rounds[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = round(statistics.median(r[key] for r in rounds if key in r), 3)
    out["rounds"] = len(rounds)
    out["actions_per_s_each"] = [r["actions_per_s"] for r in rounds]
    if all("ratio_to_floor" in r for r in rounds):
        out["ratio_to_floor_each"] = [r["ratio_to_floor"] for r in rounds]
        print(f"\nover {len(rounds)} rounds: actions/s {out['actions_per_s_each']} (median "
              f"{out['actions_per_s']:.1f}); ratio_to_floor {out['ratio_to_floor_each']} (median "
              f"{out['ratio_to_floor']:.2f}; goal >= 0.5: {'met' if out['ratio_to_floor'] >= 0.5 else 'NOT met'})")
    return out


def one_round(args) -> dict:
    """One measurement: the HTTP run, then (unless --no-compare) the service layer and the floor."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "workcenter.settings"
    os.environ.setdefault("DJANGO_DEBUG", "0")
    logdir = tempfile.TemporaryDirectory(prefix="wc-apibench-logs-")
    servers: list[harness.Server] = []
    try:
        if args.url:
            urls, token = [args.url.rstrip("/")], args.token
            harness.django_setup()
            where = f"server {args.url}"
        else:
            # fresh temp SQLite / dropped+recreated PG database, migrated
            harness.fresh_database(args.db, harness.bench_pg_url(PG_URL))
            token = create_token()
            n_srv = args.servers
            where = f"{n_srv} daphne process{'es' if n_srv > 1 else ''} (own server)"
        from django.db import connection, connections

        print(f"Work Center HTTP claim benchmark: {connection.vendor}, {args.items} items x "
              f"{len(svcbench.GRAPH)} actions, {args.workers} client process(es), {where}")
        create_items(args.items)
        connections.close_all()
        if not args.url:
            servers = start_servers(args.servers, Path(logdir.name))
            urls = [s.url for s in servers]
            print(f"  server(s): {', '.join(urls)}")

        total = args.items * len(svcbench.GRAPH)
        timings, wall = run_clients(args.workers, urls, token, total, not args.no_claim_next)
        svcbench.check_throughput_state(args.items)
        connections.close_all()
        n = len(timings["claims"])
        res = {
            "actions_per_s": round(n / wall, 3),
            **harness.p50_p99(timings["claims"], "claim"),
            **harness.p50_p99(timings["submits"], "submit"),
            "requests_per_action": round(timings["requests"] / n, 3) if n else None,
            "claim_next": not args.no_claim_next,
        }
        print(f"  HTTP throughput: {n} actions claimed and completed in {wall:.2f} s = "
              f"{res['actions_per_s']:.1f} actions/s")
        print(f"  HTTP requests per action: {res['requests_per_action']} "
              f"({'claim_next' if res['claim_next'] else 'claim, then submit'})")
        print(f"  claim  p50 {res['claim_p50_ms']:.3f} ms  p99 {res['claim_p99_ms']:.3f} ms")
        print(f"  submit p50 {res['submit_p50_ms']:.3f} ms  p99 {res['submit_p99_ms']:.3f} ms")
    finally:
        harness.stop(*servers)
        logdir.cleanup()

    if not args.no_compare:
        svc = service_layer(args.db, args.items, args.workers)
        if svc and svc.get("actions_per_s"):
            ratio = res["actions_per_s"] / svc["actions_per_s"]
            print(f"  service layer: {svc['actions_per_s']:.1f} actions/s "
                  f"(claim p50 {svc['claim_p50_ms']:.3f} ms, submit p50 {svc['submit_p50_ms']:.3f} ms)")
            print(f"  ratio HTTP / service layer = {ratio:.2f}")
            res["service_actions_per_s"] = svc["actions_per_s"]
            floor = http_floor()
            if floor and res.get("requests_per_action"):
                floor_ms = floor["django_404"]["floor_ms_per_request"]
                service_ms = 1000 / svc["actions_per_s"]
                bound = 1000 / (service_ms + res["requests_per_action"] * floor_ms)
                res.update(floor_ms_per_request=floor_ms, ratio_to_floor=round(res["actions_per_s"] / bound, 3))
                print(f"  bound from the same run: 1 / ({service_ms:.3f} ms service + {res['requests_per_action']} "
                      f"requests x {floor_ms:.3f} ms floor) = {bound:.1f} actions/s")
                print(f"  ratio_to_floor = {res['ratio_to_floor']:.2f}  (goal >= 0.5: "
                      f"{'met' if res['ratio_to_floor'] >= 0.5 else 'NOT met'})")
    return res


if __name__ == "__main__":
    sys.exit(main())
