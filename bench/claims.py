#!/usr/bin/env python3
"""Claim/submit benchmark of the store. A benchmark, not a test.

    python bench/claims.py [--items N] [--db sqlite|postgres] [--workers W] [--json] [--profile]

1. Throughput: creates N work items whose workflow is a 6-stage graph
       a -> b, a -> c, b -> d, c -> d, d -> e -> f      (b and c in parallel)
   in the state a completed planning triage leaves them (graph snapshot, ready actions, claim
   flags computed by `sync_claimable`), then W worker processes drive
   `services.action_claim` -> `services.run_submit(completed)` until every item is done.
   Each call is timed with perf_counter.
2. Flat cost: with 100, 1,000 and 10,000 actions that are ready but blocked by an unfinished
   dependency (the stage they depend on is running, held by a claim of this benchmark), times
   200 claims of fresh single-action items (each claim is followed by an untimed submit).

`--db sqlite` uses a fresh temporary SQLite file. `--db postgres` uses DATABASE_URL
(default postgres://postgres@127.0.0.1:5432/workcenter_bench) and drops and recreates that
database first (refused unless its name contains "bench"). With `--json` the last line printed
is one JSON object with the figures.

PostgreSQL commits are durable by default: each commit waits for its WAL flush, and since event
ids commit in id order (one advisory lock from the event insert to the commit), commits cannot
share a flush, so throughput is bounded by the disk's flush rate (two commits per action). To
measure asynchronous commit, pass it as a connection option in the URL:
`DATABASE_URL='postgres://…/workcenter_bench?options=-c%20synchronous_commit%3Doff'`.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

BOOT_HOLDER = "bench-holder"
LONG_LEASE_MS = 3_600_000
RESULT = {"outcome": "completed", "summary": "ok", "evidence": ["bench"], "acceptance_checks": []}
GRAPH = [  # (stage id, depends on)
    ("a", []),
    ("b", ["a"]),
    ("c", ["a"]),
    ("d", ["b", "c"]),
    ("e", ["d"]),
    ("f", ["e"]),
]
BLOCKED_PER_ITEM = 100
BLOCKED_LEVELS = (100, 1_000, 10_000)
LATENCY_CLAIMS = 200
BATCH_ITEMS = 100
MAX_EMPTY_RETRIES = 50  # a worker that finds nothing sleeps 2 ms and retries while items are unfinished


# --------------------------------------------------------------------------- building items


class Builder:
    """Creates graph items as a completed planning triage leaves them, in batched transactions.

    Stage definitions are normalised by the store's own workflow code and action fields come
    from `rules.action_fields` (the same rendering the services use), computed once per shape.
    """

    def __init__(self):
        from workcenter.domain import planning, workflows

        self.planning, self.workflows = planning, workflows
        self.title, self.goal = "Bench item", "Exercise claim and submit"
        self.shapes: dict[str, tuple[dict, list[dict]]] = {}

    def shape(self, name: str, stages: list[tuple[str, list[str]]]):
        if name in self.shapes:
            return self.shapes[name]
        from workcenter.models import WorkItem
        from workcenter.domain import rules

        wf = self.workflows
        snap = self.planning.planning_snapshot(wf.default_workflows(), None)
        snap["stages"] = [
            wf.normalize_stage({"id": sid, "type": "research", "objective": f"Bench stage {sid}",
                                "depends_on_stage_ids": deps}, i, planning_mode="ai")
            for i, (sid, deps) in enumerate(stages)
        ]
        snap.update(id=f"bench-{name}", name=f"Bench {name}", execution_mode="graph", work_item_type="bench",
                    action_templates=[])
        probe = WorkItem(title=self.title, goal=self.goal, acceptance_criteria=[], workflow_snapshot=snap)
        fields = [rules.action_fields(probe, stage=stage, context=[]) for stage in snap["stages"]]
        self.shapes[name] = (snap, fields)
        return self.shapes[name]

    def create(self, name: str, stages: list[tuple[str, list[str]]], count: int) -> list[str]:
        from django.db import transaction
        from django.utils import timezone

        from workcenter.models import Action, WorkItem, WorkItemStatus, new_id
        from workcenter.services import graph

        snap, fields = self.shape(name, stages)
        ids: list[str] = []
        for start in range(0, count, BATCH_ITEMS):
            n = min(BATCH_ITEMS, count - start)
            with transaction.atomic():
                now = timezone.now()
                items, actions_by_item = [], []
                for _ in range(n):
                    acts = [
                        Action(id=new_id(), work_item_id="", sequence=i + 1, contract_revision=1,
                               status="ready", claimable=False, created_at=now, updated_at=now, **f)
                        for i, f in enumerate(fields)
                    ]
                    item = WorkItem(id=new_id(), title=self.title, goal=self.goal, acceptance_criteria=[],
                                    workflow_template=f"bench-{name}", workflow_snapshot=snap,
                                    status=WorkItemStatus.READY, current_action_id=acts[0].id,
                                    created_at=now, updated_at=now)
                    for a in acts:
                        a.work_item_id = item.id
                    items.append(item)
                    actions_by_item.append(acts)
                WorkItem.objects.bulk_create(items)
                Action.objects.bulk_create([a for acts in actions_by_item for a in acts])
                for item, acts in zip(items, actions_by_item):
                    graph.sync_claimable(item, acts)
            ids.extend(i.id for i in items)
        return ids


# --------------------------------------------------------------------------- helpers


def unfinished_graph_items() -> bool:
    from workcenter.models import WorkItem

    return WorkItem.objects.filter(workflow_template="bench-graph").exclude(status="done").exists()


def timed_loop(claim, submit, more_work, max_empty: int = MAX_EMPTY_RETRIES) -> dict:
    """claim() -> submit(task) until claim() finds nothing and more_work() says nothing is left
    (a few short retries cover work that another worker is about to make ready). The timings of
    each call, for bench/claims.py (service layer) and bench/api.py (HTTP) alike."""
    claims: list[float] = []
    submits: list[float] = []
    empty = 0
    perf = time.perf_counter
    while True:
        t0 = perf()
        task = claim()
        t1 = perf()
        if task is None:
            if empty < max_empty and more_work():
                empty += 1
                time.sleep(0.002)
                continue
            break
        empty = 0
        claims.append(t1 - t0)
        t0 = perf()
        submit(task)
        submits.append(perf() - t0)
    return {"claims": claims, "submits": submits}


def drive(boot: str) -> dict:
    """Claim -> submit(completed) through the service layer until nothing is left."""
    from workcenter import services

    return timed_loop(
        lambda: services.action_claim(owner_boot_id=boot, lease_ms=LONG_LEASE_MS),
        lambda c: services.run_submit(run_id=c.run.pk, owner_boot_id=boot, lease_epoch=c.run.lease_epoch,
                                      result=RESULT),
        unfinished_graph_items,
    )


def worker_main(idx: int, ready_q, start_evt, result_q) -> None:
    """A worker process (spawn): own Django set-up, own connection."""
    try:
        harness.django_setup()
        from django.db import connections

        connections.close_all()
        from workcenter.models import WorkItem

        WorkItem.objects.exists()  # open the connection before the clock starts
        ready_q.put(idx)
        start_evt.wait()
        out = drive(f"bench-w{idx}-{os.getpid()}")
        out["end"] = time.monotonic()
        result_q.put(out)
    except BaseException as exc:  # report instead of hanging the parent
        import traceback

        result_q.put({"error": f"worker {idx}: {exc!r}\n{traceback.format_exc()}"})
        try:
            ready_q.put(idx)
        except Exception:
            pass


def run_parallel(target, make_args, workers: int, label: str = "worker") -> tuple[dict, float]:
    """Start `workers` spawned processes running `target(*make_args(i, ready_q, start_evt, result_q))`,
    release them together once all are ready, and merge their timings. Shared with bench/api.py."""
    ctx = mp.get_context("spawn")
    ready_q, result_q, start_evt = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=make_args(i, ready_q, start_evt, result_q)) for i in range(workers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready_q.get(timeout=120)
    t_start = time.monotonic()
    start_evt.set()
    results, errors = [], []
    for _ in procs:
        try:
            r = result_q.get(timeout=3600)
        except queue.Empty:
            errors.append(f"a {label} sent no result within an hour")
            break
        (errors.append(r["error"]) if "error" in r else results.append(r))
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
    if errors:
        sys.exit(f"benchmark {label} failed:\n" + "\n".join(errors))
    merged = {"claims": [x for r in results for x in r["claims"]],
              "submits": [x for r in results for x in r["submits"]],
              "requests": sum(r.get("requests", 0) for r in results)}
    return merged, max(r["end"] for r in results) - t_start


def run_workers(workers: int) -> tuple[dict, float]:
    return run_parallel(worker_main, lambda i, rq, ev, resq: (i, rq, ev, resq), workers)


def run_in_process(profile: bool) -> tuple[dict, float]:
    if not profile:
        t0 = time.monotonic()
        out = drive("bench-w0-inproc")
        return out, time.monotonic() - t0
    import cProfile
    import pstats

    prof = cProfile.Profile()
    t0 = time.monotonic()
    out = prof.runcall(drive, "bench-w0-inproc")
    wall = time.monotonic() - t0
    print("\n--- cProfile of the claim/submit loop (top 15 by cumulative time; profiling slows it down) ---")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    if os.environ.get("BENCH_PROFILE_TOTTIME"):
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return out, wall


def check_throughput_state(n_items: int) -> None:
    from workcenter.models import Action, Run, WorkItem

    items = WorkItem.objects.filter(workflow_template="bench-graph")
    not_done = items.exclude(status="done").count()
    done_actions = Action.objects.filter(work_item__workflow_template="bench-graph", status="completed").count()
    runs = Run.objects.filter(work_item__workflow_template="bench-graph").count()
    want = n_items * len(GRAPH)
    if not_done or done_actions != want or runs != want:
        sys.exit(f"benchmark state is wrong: {not_done} items not done, {done_actions}/{want} actions "
                 f"completed, {runs} runs")


def hold_blockers(count: int) -> None:
    """Claim (and keep running) the root stage of each new blocker item."""
    from workcenter import services

    for _ in range(count):
        c = services.action_claim(owner_boot_id=BOOT_HOLDER, lease_ms=LONG_LEASE_MS)
        if c is None or c.work_item.workflow_template != "bench-blocker" or c.action.stage_id != "root":
            sys.exit(f"unexpected claim while holding blockers: {c!r}")


def latency_by_blocked(builder: Builder) -> dict[str, float]:
    from workcenter import services
    from workcenter.models import Action

    blocker_shape = [("root", [])] + [(f"w{i:03d}", ["root"]) for i in range(BLOCKED_PER_ITEM)]
    out: dict[str, float] = {}
    have = 0
    for level in BLOCKED_LEVELS:
        new_items = (level - have) // BLOCKED_PER_ITEM
        builder.create("blocker", blocker_shape, new_items)
        hold_blockers(new_items)
        have = level
        blocked = Action.objects.filter(work_item__workflow_template="bench-blocker", status="ready",
                                        claimable=False).count()
        if blocked != level or Action.objects.filter(claimable=True).exists():
            sys.exit(f"blocked set-up is wrong: {blocked} blocked actions (want {level})")
        builder.create("single", [("s", [])], LATENCY_CLAIMS)
        times = []
        perf = time.perf_counter
        for _ in range(LATENCY_CLAIMS):
            t0 = perf()
            c = services.action_claim(owner_boot_id="bench-latency", lease_ms=LONG_LEASE_MS)
            times.append(perf() - t0)
            if c is None:
                sys.exit("latency phase: claim returned None")
            services.run_submit(run_id=c.run.pk, owner_boot_id="bench-latency", lease_epoch=c.run.lease_epoch,
                                result=RESULT)
        out[str(level)] = harness.ms(harness.pct(times, 0.5))
        print(f"  {level:>6} blocked actions waiting: claim p50 {out[str(level)]:.3f} ms, "
              f"p99 {harness.ms(harness.pct(times, 0.99)):.3f} ms ({LATENCY_CLAIMS} claims)")
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--items", type=int, default=500, help="graph work items to drive (default 500)")
    ap.add_argument("--workers", type=int, default=1, help="concurrent worker processes (default 1)")
    ap.add_argument("--profile", action="store_true",
                    help="run the claim/submit loop in this process under cProfile (implies 1 worker)")
    args = ap.parse_args(argv)
    if args.items < 1 or args.workers < 1:
        ap.error("--items and --workers must be positive")
    workers = 1 if args.profile else args.workers

    harness.fresh_database(args.db)
    from django.db import connection, connections

    print(f"Work Center claim benchmark: {connection.vendor}, {args.items} items x {len(GRAPH)} actions, "
          f"{workers} worker(s)")
    builder = Builder()
    t0 = time.monotonic()
    builder.create("graph", GRAPH, args.items)
    print(f"  set-up: {args.items} graph items in {time.monotonic() - t0:.2f} s")

    connections.close_all()
    if args.profile:
        timings, wall = run_in_process(True)
    else:
        timings, wall = run_workers(workers)
    check_throughput_state(args.items)
    n = len(timings["claims"])
    res = {
        "actions_per_s": round(n / wall, 3),
        **harness.p50_p99(timings["claims"], "claim"),
        **harness.p50_p99(timings["submits"], "submit"),
    }
    print(f"  throughput: {n} actions claimed and completed in {wall:.2f} s = {res['actions_per_s']:.1f} actions/s")
    print(f"  claim  p50 {res['claim_p50_ms']:.3f} ms  p99 {res['claim_p99_ms']:.3f} ms")
    print(f"  submit p50 {res['submit_p50_ms']:.3f} ms  p99 {res['submit_p99_ms']:.3f} ms")

    print("  claim latency with ready-but-blocked actions waiting:")
    res["claim_p50_ms_by_blocked"] = latency_by_blocked(builder)
    by = res["claim_p50_ms_by_blocked"]
    ratio = by["10000"] / by["100"] if by["100"] else float("nan")
    print(f"  ratio p50(10,000) / p50(100) = {ratio:.2f}")
    connections.close_all()
    harness.emit(res, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
