"""GET /workers: the workers seen in the last hour, from their runs."""
from __future__ import annotations

from datetime import timedelta

import pytest

from workcenter import clock
from workcenter.models import Run

from .conftest import checks_for, fence

pytestmark = pytest.mark.django_db


def test_workers_are_their_runs_held_finished_and_failed(api):
    for i in range(4):
        api.create(title=f"W{i}", work_item_type="software-change", acceptance_criteria=["ok"])
    done = api.claim("boot-one", lease_ms=30_000)
    api.submit(done, outcome="completed", summary="s", evidence=["e"], acceptance_checks=checks_for(["ok"]))
    failed = api.claim("boot-one", lease_ms=30_000)
    api.submit(failed, outcome="failed", error="broken")
    held = api.claim("boot-two", lease_ms=30_000)
    r = api.get("/workers")
    assert r.status_code == 200, r.content
    workers = {w["boot_id"]: w for w in r.json()["workers"]}
    assert set(workers) == {"boot-one", "boot-two"}
    one, two = workers["boot-one"], workers["boot-two"]
    assert (one["finished_1h"], one["failed_1h"], one["held"], one["renewing"]) == (1, 1, [], True)
    assert two["finished_1h"] == two["failed_1h"] == 0 and two["renewing"] is True
    [run] = two["held"]
    assert run["run_id"] == held["run"]["id"] and run["work_item_id"] == held["work_item"]["id"]
    assert run["stage_id"] == "triage" and run["lease_epoch"] == 1 and run["lease_ms"] == 30_000
    assert r.json()["workers"][0]["boot_id"] == "boot-two"  # most recently seen first


def test_a_worker_whose_lease_went_half_its_length_unrenewed_is_not_renewing(api):
    api.create(title="Stale", work_item_type="software-change")
    claim = api.claim("boot-stale", lease_ms=10_000)
    past = clock.now() - timedelta(seconds=6)  # renewed 6 s ago, a 10 s lease: past half of it
    Run.objects.filter(pk=claim["run"]["id"]).update(renewed_at=past, started_at=past,
                                                     expires_at=past + timedelta(seconds=10))
    [worker] = api.get("/workers").json()["workers"]
    assert worker["renewing"] is False
    # a renewal makes it a live worker again
    assert api.post(f"/runs/{claim['run']['id']}/renew", {**fence(claim), "lease_ms": 10_000}).status_code == 200
    [worker] = api.get("/workers").json()["workers"]
    assert worker["renewing"] is True


def test_workers_need_the_view_permission(anonymous):
    assert anonymous.get("/workers").status_code == 401
