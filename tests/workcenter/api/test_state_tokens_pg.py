"""The state fence against a real worker process on PostgreSQL: `manage.py workcenter_worker` on
the test database (LocalStore, the simulated executor) claims and fails stages between a preview
and its apply. The contract revision does not move; the state token does, and the apply refuses
the moved rows alone (state_changed, in words) while the others go through."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.db import connection
from django.utils import timezone

from tests.conftest import Clock, Store, item_snapshot, make_graph
from tests.live import ROOT, database_url, stop_process, wait_until
from tests.workcenter.api.support import error_of
from workcenter.models import Event, Run, WorkItem

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a worker process beside the test needs PostgreSQL"),
]


# what a worker writes on its own running run while the test looks on (renewals, progress): a
# refused call must write nothing else, and cannot stop the worker from doing this
WORKERS_OWN = {"expires_at", "renewed_at", "progress_revision", "response", "checkpoint", "loop_count",
               "tool_count", "llm_request_count", "input_tokens", "output_tokens", "cache_read_tokens",
               "cache_write_tokens", "total_tokens"}


def _but_the_workers_own(snapshot):
    item, actions, runs, events = snapshot
    return item, actions, [{k: v for k, v in r.items() if k not in WORKERS_OWN} for r in runs], events


class RealClock(Clock):
    def tick(self, ms=1):
        return timezone.now()


def _worker(tmp_path, scale: str) -> subprocess.Popen:
    """A worker process over the test database; returns once it has started."""
    env = {**os.environ, "DATABASE_URL": database_url(), "WORKCENTER_SIM_SCALE": scale,
           "WORKCENTER_SIM_RATES": "0,0,0", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / f"worker-{scale}.log"
    proc = subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--concurrency", "1",
                             "--poll-ms", "100", "--lease-ms", "60000"],
                            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    if not wait_until(lambda: re.search(r"worker \S+ starting", log.read_text()) or proc.poll() is not None, 60):
        stop_process(proc)
        raise AssertionError("the worker did not start: " + log.read_text())
    assert proc.poll() is None, log.read_text()
    return proc


def _preview(api, operation, ids):
    r = api.post("/work-items/bulk-preview", {"operation": operation, "ids": ids})
    assert r.status_code == 200, r.content
    return {row["id"]: row for row in r.json()["rows"]}


def _apply(api, operation, rows):
    r = api.post("/work-items/bulk", {
        "operation": operation, "ids": list(rows), "reason": "as previewed",
        "expected_revisions": {i: row["revision"] for i, row in rows.items()},
        "expected_state_tokens": {i: row["state_token"] for i, row in rows.items()}})
    assert r.status_code == 200, r.content
    return {x["id"]: x for x in r.json()["results"]}


def test_a_bulk_cancel_refuses_the_item_a_worker_claimed_since_the_preview(api, tmp_path):
    store = Store(RealClock())
    a = make_graph(store, [{"id": "build"}], title="A: claimable")
    b = make_graph(store, [{"id": "build"}], title="B: a draft nobody claims", status="draft")
    rows = _preview(api, "cancel", [a.pk, b.pk])
    # the lead is told A stops no running run
    assert rows[a.pk]["allowed"] and rows[a.pk]["stops"] == [] and rows[a.pk]["message"] == "cancels it"
    worker = _worker(tmp_path, scale="200")  # each simulated run lasts minutes
    try:
        assert wait_until(lambda: Run.objects.filter(work_item_id=a.pk, status="running").exists(), 60)
        run = Run.objects.get(work_item_id=a.pk, status="running")
        assert WorkItem.objects.get(pk=a.pk).revision == rows[a.pk]["revision"]  # the revision fence sees nothing
        before = _but_the_workers_own(item_snapshot(a.pk))
        results = _apply(api, "cancel", rows)
        bad = results[a.pk]
        assert (bad["ok"], bad["code"]) == (False, "state_changed"), bad
        assert "claimed" in bad["message"] and "since the preview" in bad["message"], bad
        # nothing was written for A: no cancel event, its run still running
        assert _but_the_workers_own(item_snapshot(a.pk)) == before
        assert not Event.objects.filter(work_item_id=a.pk, type="work_item.cancelled").exists()
        assert Run.objects.get(pk=run.pk).status == "running"
        assert WorkItem.objects.get(pk=a.pk).status == "running"
        assert results[b.pk]["ok"] and WorkItem.objects.get(pk=b.pk).status == "cancelled"
    finally:
        stop_process(worker)


def test_a_retry_refuses_an_item_retried_elsewhere_and_failed_again_since_the_preview(api, make_user, token_api,
                                                                                       tmp_path):
    store = Store(RealClock())
    a = make_graph(store, [{"id": "build", "max_attempts": 1}], title="A [sim:fail]")
    c = make_graph(store, [{"id": "build", "max_attempts": 1}], title="C")
    d = make_graph(store, [{"id": "build", "max_attempts": 1}], title="D [sim:fail]")
    for item in (a, c, d):
        store.submit(store.claim_item(item.pk, stage="build"), {"outcome": "failed", "error": "boom"})
        assert store.item(item.pk).status == "needs_attention"
    rows = _preview(api, "retry", [a.pk, c.pk])
    assert rows[a.pk]["allowed"] and rows[c.pk]["allowed"]
    single = api.get(f"/work-items/{d.pk}/retry-preview").json()
    # bob retries A and D elsewhere; a real worker runs them and they fail again
    bob = token_api(make_user("bob", "view_workitem", "change_workitem"))
    for item in (a, d):
        assert bob.post(f"/work-items/{item.pk}/retry").status_code == 200
    worker = _worker(tmp_path, scale="0.05")
    try:
        def failed_again(item_id):
            return (WorkItem.objects.get(pk=item_id).status == "needs_attention"
                    and Event.objects.filter(work_item_id=item_id, type="run.claimed").count() == 2)

        assert wait_until(lambda: failed_again(a.pk) and failed_again(d.pk), 60)
    finally:
        stop_process(worker)
    for item in (a, d):
        assert WorkItem.objects.get(pk=item.pk).revision == 1  # the contract never moved
    before = {item.pk: item_snapshot(item.pk) for item in (a, d)}

    # the bulk retry: A is refused alone, saying it was retried since; C is retried
    results = _apply(api, "retry", rows)
    bad = results[a.pk]
    assert (bad["ok"], bad["code"]) == (False, "state_changed"), bad
    assert bad["message"].startswith("retried by user:bob") and "since the preview" in bad["message"], bad
    assert item_snapshot(a.pk) == before[a.pk]
    assert Event.objects.filter(work_item_id=a.pk, type="work_item.retried").count() == 1  # bob's alone
    assert results[c.pk]["ok"] and WorkItem.objects.get(pk=c.pk).status == "ready"

    # the single retry: the stale token is refused and writes nothing, the fresh one goes through
    body = error_of(api.post(f"/work-items/{d.pk}/retry", {"expected_state_token": single["state_token"]}),
                    409, "state_changed")
    assert body["message"].startswith("retried by user:bob") and "failed" in body["message"], body
    assert item_snapshot(d.pk) == before[d.pk]
    fresh = api.get(f"/work-items/{d.pk}/retry-preview").json()["state_token"]
    assert fresh == body["extra"]["state_token"]
    r = api.post(f"/work-items/{d.pk}/retry", {"expected_state_token": fresh})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "ready"
