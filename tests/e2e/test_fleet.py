"""A fleet end to end on PostgreSQL + Redis: two daphne processes, four real `workcenter_worker`
processes over HTTP (long-poll claims and claim_next on, as by default), 100 graph items. Every
item is done, no action ran twice at once, and no ready action waited on an idle worker."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import timedelta

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction

from tests.conftest import Clock, Store, make_graph
from tests.live import ROOT, database_url, free_port, start_daphne, stop_process, wait_until
from workcenter import clock
from workcenter.auth import api_token_create
from workcenter.events import event_append
from workcenter.models import Action, Run, WorkItem

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the fleet runs on PostgreSQL + Redis"),
]

REDIS_URL = os.environ.get("WORKCENTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
ITEMS = 100
WORKERS = 4
CONCURRENCY = 2
IDLE_WAIT = timedelta(milliseconds=100)
# a -> b, a -> c, (b, c) -> d: each item has 4 actions, two of them able to run at once
STAGES = [{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["a"]}, {"id": "d", "deps": ["b", "c"]}]


def _token() -> str:
    user = User.objects.create_user("fleet")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="fleet")[1]


def _worker(base: str, token: str) -> subprocess.Popen:
    env = dict(os.environ, DATABASE_URL=database_url(), REDIS_URL=REDIS_URL, WORKCENTER_SIM_SCALE="0.03",
               WORKCENTER_SIM_RATES="0,0,0", PYTHONUNBUFFERED="1", WORKCENTER_LOG_LEVEL="WARNING")
    proc = subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--server", base, "--token", token,
                             "--concurrency", str(CONCURRENCY), "--lease-ms", "30000"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # drain its output
    return proc


def _ready_times() -> dict[str, object]:
    """When each action became ready: its item's creation for a first stage, else the completion of
    its last dependency (both from the store's own clock)."""
    completed_at = {}
    for run in Run.objects.filter(status="completed").select_related("action"):
        completed_at[(run.work_item_id, run.action.effective_stage_id)] = run.ended_at
    out = {}
    for action in Action.objects.select_related("work_item"):
        deps = list(action.depends_on_stage_ids or [])
        if not deps:
            out[action.pk] = action.work_item.created_at
        else:
            out[action.pk] = max(completed_at[(action.work_item_id, d)] for d in deps)
    return out


def test_a_fleet_of_long_polling_workers_finishes_100_items_without_double_claims_or_idle_waits():
    redis.Redis.from_url(REDIS_URL).flushdb()
    token = _token()
    env = {"REDIS_URL": REDIS_URL, "WORKCENTER_LOG_LEVEL": "WARNING"}
    ports = [free_port(), free_port()]
    servers = [start_daphne(p, env) for p in ports]
    workers = []
    try:
        # the workers start first and wait in long-poll claims, two per server
        workers = [_worker(f"http://127.0.0.1:{ports[i % 2]}", token) for i in range(WORKERS)]
        time.sleep(3)  # started, recovered, parked in their long-poll claims
        store = Store(Clock(clock.now()))
        for i in range(ITEMS):
            store.clock.t = clock.now()
            with transaction.atomic():  # the item and its event commit together, as a create does
                item = make_graph(store, STAGES, title=f"Fleet {i:03d}")
                event_append(work_item_id=item.pk, type="work_item.created", data={"status": "ready"}, actor="test",
                             now=store.clock.t)
        # then every item is done
        assert wait_until(lambda: WorkItem.objects.filter(status="done").count() == ITEMS, 180, 0.5), \
            dict(WorkItem.objects.values_list("status").annotate())
    finally:
        for w in workers:
            stop_process(w)
        for s in servers:
            stop_process(s)

    runs = list(Run.objects.order_by("started_at"))
    # no double claim: each action completed exactly once, and no two runs of one action overlapped
    by_action = defaultdict(list)
    for run in runs:
        by_action[run.action_id].append(run)
    assert len(by_action) == ITEMS * len(STAGES)
    for action_id, its in by_action.items():
        assert sum(r.status == "completed" for r in its) == 1, its
        for first, second in zip(its, its[1:]):
            assert first.ended_at is not None and first.ended_at <= second.started_at, (first, second)
    # no ready action waited on an idle worker: whenever an action was claimed more than 100 ms after
    # it became ready, every worker's slots were busy at the 100 ms mark
    ready = _ready_times()
    first_claim = {a: its[0].started_at for a, its in by_action.items()}
    boots = {r.owner_boot_id for r in runs}
    assert len(boots) == WORKERS
    idle_waits = []
    for action_id, claimed in first_claim.items():
        mark = ready[action_id] + IDLE_WAIT
        if claimed <= mark:
            continue
        busy = defaultdict(int)
        for r in runs:
            if r.started_at <= mark and (r.ended_at is None or r.ended_at > mark):
                busy[r.owner_boot_id] += 1
        idle = [b for b in boots if busy[b] < CONCURRENCY]
        if idle:
            idle_waits.append((action_id, (claimed - ready[action_id]).total_seconds(), idle))
    waits = sorted((first_claim[a] - ready[a]).total_seconds() * 1000 for a in first_claim)
    print(f"\n{len(runs)} runs by {len(boots)} workers; ready → claimed p50 {waits[len(waits) // 2]:.0f} ms, "
          f"max {waits[-1]:.0f} ms; waits over 100 ms with an idle worker: {len(idle_waits)}")
    assert idle_waits == []
