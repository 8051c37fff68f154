"""The Workers page's figures: bounded reads (workcenter/worker_figures.py) and the push (`/ws/workers/`,
dashboard/workers_stream.py)."""
from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard import workers_stream
from workcenter import clock, services, worker_figures
from workcenter.models import Run

from .conftest import TIMEOUT, close_code, open_stream, run

pytestmark = pytest.mark.django_db(transaction=True)

db_call = database_sync_to_async


def bearer(token: str):
    return [(b"authorization", f"Bearer {token}".encode())]


def ended_runs(n: int, boots=("boot-old-a", "boot-old-b"), minutes: int = 59, ago=timedelta(0)) -> None:
    """`n` runs that ended over the `minutes` minutes before `ago` ago (half completed, half failed),
    on one item."""
    item = services.work_item_create(title="Past", goal="g", work_item_type="software-change", actor="test")
    claim = services.action_claim(owner_boot_id="boot-setup", lease_ms=60_000)
    services.run_interrupt(run_id=claim.run.pk, owner_boot_id="boot-setup", lease_epoch=claim.run.lease_epoch,
                           reason="setup")
    now = clock.now() - ago
    rows = []
    for i in range(n):
        ended = now - timedelta(seconds=60 * minutes * (i + 1) / n)
        rows.append(Run(action_id=claim.action.pk, work_item_id=item.pk, owner_boot_id=boots[i % len(boots)],
                        lease_epoch=1, status="completed" if i % 2 else "failed", started_at=ended - timedelta(seconds=5),
                        renewed_at=ended - timedelta(seconds=5), expires_at=ended + timedelta(seconds=55),
                        ended_at=ended))
    Run.objects.bulk_create(rows, batch_size=2000)


def held_run(boot: str, lease_ms: int = 30_000):
    services.work_item_create(title=f"Held by {boot}", goal="g", work_item_type="software-change", actor="test")
    return services.action_claim(owner_boot_id=boot, lease_ms=lease_ms)


def renew(claim, lease_ms: int = 30_000):
    return services.run_renew(run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
                              lease_epoch=claim.run.lease_epoch, lease_ms=lease_ms)


# --- the bounded reads ------------------------------------------------------------------------------

def test_a_refresh_with_nothing_changed_is_one_read_that_finds_no_row():
    ended_runs(400)
    claim = held_run("boot-live")
    time.sleep(worker_figures.MARGIN.total_seconds() + 0.1)  # the claim's and the ends' times out of the margin
    tracker = worker_figures.Tracker()
    tracker.load()
    before = tracker.snapshot()
    by_boot = {w["boot_id"]: w for w in before["workers"]}
    assert by_boot["boot-old-a"]["failed_1h"] + by_boot["boot-old-b"]["failed_1h"] == 200
    assert by_boot["boot-old-a"]["finished_1h"] + by_boot["boot-old-b"]["finished_1h"] == 200
    assert [h["run_id"] for h in by_boot["boot-live"]["held"]] == [claim.run.pk]
    tracker.mark = mark = clock.now() - worker_figures.MARGIN  # as after a refresh: nothing changed since
    with CaptureQueriesContext(connection) as queries:
        assert tracker.refresh() is None
    assert len(queries.captured_queries) == 1  # the changed runs: none of the hour's 401 runs
    assert worker_figures.changed_runs(mark).count() == 0
    # the same figures as a load (GET /api/v1/workers) reads
    assert tracker.snapshot()["workers"] == worker_figures.workers_seen()["workers"]


def test_a_renewal_and_an_end_are_diffs_of_their_worker_only():
    ended_runs(40)
    a, b = held_run("boot-a"), held_run("boot-b")
    tracker = worker_figures.Tracker()
    tracker.load()
    tracker.refresh()  # the claims within the margin: read again, unchanged
    assert tracker.refresh() is None
    time.sleep(0.01)
    renewed = renew(a)
    diff = tracker.refresh()
    assert [w["boot_id"] for w in diff["workers"]] == ["boot-a"] and diff["gone"] == []
    assert diff["workers"][0]["held"][0]["renewed_at"] == renewed.renewed_at
    assert tracker.refresh() is None  # read again within the margin: no second diff
    services.run_interrupt(run_id=b.run.pk, owner_boot_id="boot-b", lease_epoch=b.run.lease_epoch, reason="stop")
    diff = tracker.refresh()
    [row] = diff["workers"]
    assert row["boot_id"] == "boot-b" and row["held"] == [] and row["failed_1h"] == 1
    assert tracker.refresh() is None
    assert tracker.snapshot()["workers"] == worker_figures.workers_seen()["workers"]


def test_the_window_moves_by_the_minute_and_a_worker_leaves_it():
    ended_runs(2, boots=("boot-gone",), minutes=1)
    tracker = worker_figures.Tracker()
    now = clock.now()
    tracker.load(now)
    assert {w["boot_id"] for w in tracker.snapshot(now)["workers"]} == {"boot-gone", "boot-setup"}
    diff = tracker.refresh(now + timedelta(minutes=59, seconds=-now.second))  # still in the window
    assert diff is None or diff["gone"] == []
    later = now + timedelta(minutes=62)
    tracker.mark = later - worker_figures.MARGIN
    diff = tracker.refresh(later)
    assert diff["workers"] == [] and diff["gone"] == ["boot-gone", "boot-setup"]
    assert tracker.snapshot(later)["workers"] == []


def test_a_held_run_deleted_with_its_item_leaves_at_the_reconcile():
    claim = held_run("boot-deleted")
    tracker = worker_figures.Tracker()
    tracker.load()
    claim.work_item.delete()
    tracker.reconciled = float("-inf")
    diff = tracker.refresh()
    [row] = diff["workers"]
    assert row["boot_id"] == "boot-deleted" and row["held"] == []


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan of the PostgreSQL planner")
def test_the_reads_use_the_time_indexes_on_postgresql():
    ended_runs(5000)
    ended_runs(25_000, minutes=60 * 24, ago=timedelta(days=1))  # yesterday's runs
    # a large fleet: 2,000 running runs, renewed more than a tick ago
    template = Run.objects.filter(status="failed").first()
    old = clock.now() - timedelta(seconds=20)
    Run.objects.bulk_create([Run(action_id=template.action_id, work_item_id=template.work_item_id,
                                 owner_boot_id=f"boot-fleet-{i % 500}", lease_epoch=1, status="running",
                                 started_at=old, renewed_at=old, expires_at=old + timedelta(seconds=60))
                             for i in range(2000)])
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE workcenter_run")
    since = clock.now() - timedelta(seconds=3)
    plan = worker_figures.changed_runs(since).explain()
    assert "wc_run_status_renewed" in plan and "wc_run_ended" in plan and "Seq Scan on workcenter_run" not in plan, plan
    plan = worker_figures.ended_since(worker_figures.window_start(clock.now())).explain()
    assert "wc_run_ended" in plan and "Seq Scan" not in plan, plan


def test_the_reads_name_the_time_indexes():
    """On either database the planner can use the two time indexes (SQLite's plan names them at
    any size; PostgreSQL's large-table plan is the test above)."""
    since = clock.now() - timedelta(seconds=3)
    plan = worker_figures.changed_runs(since).explain()
    if connection.vendor == "sqlite":
        assert "wc_run_status_renewed" in plan and "wc_run_ended" in plan, plan
    else:
        with connection.cursor() as cur:
            cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'workcenter_run'")
            names = {row[0] for row in cur.fetchall()}
        assert {"wc_run_status_renewed", "wc_run_ended"} <= names, names


# --- the push ---------------------------------------------------------------------------------------

def test_the_workers_stream_needs_credentials():
    async def scenario():
        comm, _ = await open_stream("/ws/workers/", expect_hello=False)
        assert await close_code(comm) == 4401
    run(scenario)


def test_a_renewal_reaches_a_workers_stream_client_within_a_second(viewer_token):
    claim = held_run("boot-push")

    async def scenario():
        comm, hello = await open_stream("/ws/workers/", headers=bearer(viewer_token))
        [worker] = hello["workers"]
        assert worker["boot_id"] == "boot-push" and worker["held"][0]["run_id"] == claim.run.pk
        await asyncio.sleep(worker_figures.MARGIN.total_seconds() + 0.2)  # past the claim's margin
        assert await comm.receive_nothing(timeout=0.3)  # nothing changed: nothing sent
        notified = workers_stream.feed.notified
        started = time.monotonic()
        renewed = await db_call(renew)(claim)
        message = await comm.receive_json_from(timeout=TIMEOUT)
        latency = time.monotonic() - started
        assert message["type"] == "workers" and message["gone"] == []
        [row] = message["workers"]
        assert row["held"][0]["renewed_at"] == clock.iso_ms(renewed.renewed_at)
        assert latency <= 1.0, latency
        if connection.vendor == "postgresql":  # the renewal's notification woke the refresh
            assert workers_stream.feed.notified > notified
        # a second client of the process shares the one ticker and gets the same state in its hello
        other, hello2 = await open_stream("/ws/workers/", headers=bearer(viewer_token))
        assert hello2["workers"] == [row]
        assert workers_stream.feed.thread is not None
        await other.disconnect()
        await comm.disconnect()
        for _ in range(60):  # the last client gone: the ticker ends (on PostgreSQL within PG_TICK)
            if workers_stream.feed.thread is None:
                break
            await asyncio.sleep(0.05)
        assert workers_stream.feed.thread is None
    run(scenario)
