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
postgres://postgres@127.0.0.1:5432/workcenter_apibench; dropped and recreated),
`python manage.py migrate`, a user holding view_workitem/change_workitem/run_actions with an API
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

import argparse
import json
import multiprocessing as mp
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for p in (str(REPO), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import claims as svcbench  # noqa: E402  (bench/claims.py: Builder, GRAPH, prepare_database, ...)
from workcenter.worker import HttpStore  # noqa: E402  (the HTTP workers' own client)

PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_apibench"
LONG_LEASE_MS = svcbench.LONG_LEASE_MS
SUBMIT_BODY = dict(svcbench.RESULT)
MAX_EMPTY_RETRIES = 500  # a client that gets 204 while actions remain sleeps 2 ms and retries
SERVER_START_TIMEOUT = 60.0


def pg_url() -> str:
    """DATABASE_URL when it is a PostgreSQL bench database (so concurrent runs can use their own)."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")) and "bench" in url.rsplit("/", 1)[-1]:
        return url
    return PG_URL


# --------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"daphne exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"daphne did not listen on port {port} within {SERVER_START_TIMEOUT:.0f} s")


def production_env() -> dict[str, str]:
    """Debug off, as in production: a server then refuses the development key and any host."""
    return {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}


def start_server(app: str, log: Path, *, cwd: Path = REPO, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m daphne APP` on a free local port, its output in `log`; (process, base URL) once
    it listens."""
    port = free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app],
                                cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    wait_for_port(port, proc, log)
    return proc, f"http://127.0.0.1:{port}"


def start_servers(count: int, logdir: Path) -> tuple[list[subprocess.Popen], list[str]]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="workcenter.settings", WORKCENTER_LOG_LEVEL="WARNING",
               **production_env())
    procs, urls = [], []
    for i in range(count):
        proc, url = start_server("workcenter.asgi:application", logdir / f"daphne-{i}.log", env=env)
        procs.append(proc)
        urls.append(url)
    return procs, urls


def stop_servers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------- set-up


def create_token() -> str:
    from django.contrib.auth.models import Permission, User

    from workcenter.auth import api_token_create

    user, _ = User.objects.get_or_create(username="apibench")
    perms = Permission.objects.filter(content_type__app_label="workcenter",
                                      codename__in=["view_workitem", "change_workitem", "run_actions"])
    if perms.count() != 3:
        sys.exit("the workcenter permissions view_workitem/change_workitem/run_actions are missing")
    user.user_permissions.set(perms)
    _, raw = api_token_create(user=user, name=f"apibench-{os.getpid()}-{time.time_ns()}")
    return raw


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
    cmd = [sys.executable, str(REPO / "bench" / "http_floor.py"), "--requests", "2000", "--json"]
    print(f"\nHTTP floor, same run: {' '.join(cmd[1:])}")
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    for line in proc.stdout.strip().splitlines()[:-1]:
        print(f"  | {line}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"  bench/http_floor.py failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return None


# --------------------------------------------------------------------------- comparison


def service_layer(db: str, items: int, workers: int) -> dict | None:
    """bench/claims.py on its own fresh database of the same kind; its JSON (last line)."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # claims.py makes its own: a temp SQLite file, or on PostgreSQL
    if db == "postgres":           # <our database>_svc (dropped and recreated by claims.py)
        env["DATABASE_URL"] = pg_url() + "_svc"
    cmd = [sys.executable, str(BENCH / "claims.py"), "--db", db, "--items", str(items),
           "--workers", str(workers), "--json"]
    print(f"\nService layer, same run: {' '.join(cmd[1:])}")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines()[:-1]:
        print(f"  | {line}")
    if proc.returncode != 0:
        print(f"  bench/claims.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return None
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"  could not parse bench/claims.py output:\n{proc.stdout[-2000:]}")
        return None


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="base URL of a running server (default: start daphne here)")
    ap.add_argument("--token", help="API token holding run_actions (with --url)")
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--items", type=int, default=200, help="graph work items to drive (default 200)")
    ap.add_argument("--workers", type=int, default=1, help="concurrent client processes (default 1)")
    ap.add_argument("--servers", type=int, default=1,
                    help="daphne processes to start without --url (default 1; each is single-process)")
    ap.add_argument("--no-compare", action="store_true", help="skip the bench/claims.py comparison")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the whole measurement (HTTP, service layer, floor) and report medians")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object, last line")
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
            proc = subprocess.run([sys.executable, __file__, *argv, "--rounds", "1", "--json"], cwd=REPO,
                                  capture_output=True, text=True)
            lines = proc.stdout.strip().splitlines()
            print("\n".join(lines[:-1]), flush=True)
            if proc.returncode != 0 or not lines:
                print(f"round {i + 1} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
                return 1
            rounds.append(json.loads(lines[-1]))
        res = combine(rounds)
    if args.json:
        print(json.dumps(res))
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
    tmp = None
    logdir = tempfile.TemporaryDirectory(prefix="wc-apibench-logs-")
    servers: list[subprocess.Popen] = []
    try:
        if args.url:
            urls, token = [args.url.rstrip("/")], args.token
            svcbench.django_setup()
            where = f"server {args.url}"
        else:
            if args.db == "postgres":
                os.environ["DATABASE_URL"] = pg_url()
            tmp = svcbench.prepare_database(args.db)  # fresh temp SQLite / dropped+recreated PG database
            subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=REPO,
                           env=os.environ, check=True)
            svcbench.django_setup()
            token = create_token()
            n_srv = args.servers
            where = f"{n_srv} daphne process{'es' if n_srv > 1 else ''} (own server)"
        from django.db import connection, connections

        print(f"Work Center HTTP claim benchmark: {connection.vendor}, {args.items} items x "
              f"{len(svcbench.GRAPH)} actions, {args.workers} client process(es), {where}")
        create_items(args.items)
        connections.close_all()
        if not args.url:
            servers, urls = start_servers(args.servers, Path(logdir.name))
            print(f"  server(s): {', '.join(urls)}")

        total = args.items * len(svcbench.GRAPH)
        timings, wall = run_clients(args.workers, urls, token, total, not args.no_claim_next)
        svcbench.check_throughput_state(args.items)
        connections.close_all()
        n = len(timings["claims"])
        res = {
            "actions_per_s": round(n / wall, 3),
            "claim_p50_ms": svcbench.ms(svcbench.pct(timings["claims"], 0.5)),
            "claim_p99_ms": svcbench.ms(svcbench.pct(timings["claims"], 0.99)),
            "submit_p50_ms": svcbench.ms(svcbench.pct(timings["submits"], 0.5)),
            "submit_p99_ms": svcbench.ms(svcbench.pct(timings["submits"], 0.99)),
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
        stop_servers(servers)
        logdir.cleanup()
        if tmp is not None:
            tmp.cleanup()

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
