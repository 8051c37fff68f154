"""Bulk operations racing other writers on PostgreSQL, with real threads on their own connections
(SQLite serialises writers, so these races only exist there)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from tests.conftest import Clock, Store, make_graph
from workcenter import services
from workcenter.errors import WorkcenterError
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.services import bulk

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="race tests need PostgreSQL"),
]

N = 24


def _real_clock_store() -> Store:
    class RealClock(Clock):
        def tick(self, ms=1):
            return timezone.now()

    return Store(RealClock())


def _race(*jobs) -> list[str]:
    """Run the jobs at once (a barrier), each on its own connection; returns their errors."""
    barrier = threading.Barrier(len(jobs))
    errors: list[str] = []

    def run(job):
        try:
            barrier.wait()
            job()
        except Exception as exc:  # pragma: no cover - surfaced by the caller's assertion
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def test_bulk_cancel_racing_a_workers_submits_loses_nothing():
    store = _real_clock_store()
    items = [make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}], title=f"race {k}") for k in range(N)]
    claims = {}
    while len(claims) < N:
        c = store.claim()
        claims[c.work_item.pk] = c
    ids = [i.pk for i in items]
    submitted: dict[str, str] = {}
    cancelled: dict = {}

    def cancel():
        out = bulk.work_items_bulk_apply(operation="cancel", ids=ids, reason="race", actor="user:alice",
                              expected_revisions={i: 1 for i in ids})
        cancelled.update({r["id"]: r for r in out["results"]})

    def submit():
        for item_id in reversed(ids):  # meet the cancels halfway
            c = claims[item_id]
            try:
                services.run_submit(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id,
                                    lease_epoch=c.run.lease_epoch,
                                    result={"outcome": "completed", "summary": "ok", "evidence": ["race"],
                                            "acceptance_checks": []})
                submitted[item_id] = "completed"
            except WorkcenterError as exc:
                submitted[item_id] = exc.code

    assert _race(cancel, submit) == []
    assert all(r["ok"] for r in cancelled.values()), cancelled
    assert set(WorkItem.objects.values_list("status", flat=True)) == {"cancelled"}
    assert not Action.objects.filter(status__in=["ready", "running"]).exists()
    assert not Action.objects.filter(claimable=True).exists()
    assert not Run.objects.filter(status="running").exists()
    for item_id in ids:
        run = Run.objects.get(pk=claims[item_id].run.pk)
        a = Action.objects.get(pk=claims[item_id].action.pk)
        events = list(Event.objects.filter(work_item_id=item_id).order_by("id").values_list("type", "data"))
        types = [t for t, _ in events]
        assert types.count("work_item.cancelled") == 1 and types[-1] == "work_item.cancelled"
        assert events[-1][1] == {"reason": "race"}
        if submitted[item_id] == "completed":  # the submit went first: its work stands, then the cancel
            assert run.status == "completed" and a.status == "completed"
            assert types.index("action.completed") < types.index("work_item.cancelled")
            assert Action.objects.get(work_item_id=item_id, stage_id="b").status == "cancelled"
        else:  # the cancel went first: the submit was fenced out and wrote nothing
            assert submitted[item_id] == "stale_run"
            assert run.status == "cancelled" and a.status == "cancelled"
            assert "action.completed" not in types
    assert len(submitted) == N


def test_bulk_retry_racing_contract_edits_never_applies_a_stale_revision():
    store = _real_clock_store()
    items = [make_graph(store, [{"id": "a", "max_attempts": 1}], title=f"edit race {k}") for k in range(N)]
    for _ in items:
        c = store.claim()
        store.submit(c, {"outcome": "failed", "error": "boom"})
    assert set(WorkItem.objects.values_list("status", flat=True)) == {"needs_attention"}
    ids = [i.pk for i in items]
    results: dict = {}
    edited: dict[str, str] = {}

    def retry():
        out = bulk.work_items_bulk_apply(operation="retry", ids=ids, reason="race", actor="user:alice",
                              expected_revisions={i: 1 for i in ids})
        results.update({r["id"]: r for r in out["results"]})

    def edit():
        for item_id in reversed(ids):
            try:
                services.work_item_update(item_id=item_id, patch={"goal": "a new goal"})
                edited[item_id] = "ok"
            except WorkcenterError as exc:
                edited[item_id] = exc.code

    assert _race(retry, edit) == []
    for item_id in ids:
        item = WorkItem.objects.get(pk=item_id)
        types = list(Event.objects.filter(work_item_id=item_id).order_by("id").values_list("type", flat=True))
        assert edited[item_id] == "ok" and item.revision == 2
        if results[item_id]["ok"]:  # the retry saw revision 1 under its lock, then the edit came
            assert types[-2:] == ["work_item.retried", "workflow.retriaged"]
        else:  # the edit went first: the retry was refused alone and wrote nothing
            assert results[item_id]["code"] == "revision_conflict"
            assert "revision 1 → 2" in results[item_id]["message"]
            assert types[-1] == "workflow.retriaged" and "work_item.retried" not in types


def test_bulk_cancel_fenced_by_state_tokens_racing_claims_never_stops_a_run_it_did_not_show():
    store = _real_clock_store()
    items = [make_graph(store, [{"id": "a"}], title=f"claim race {k}") for k in range(N)]
    ids = [i.pk for i in items]
    preview = {r["id"]: r for r in bulk.work_items_bulk_preview(operation="cancel", ids=ids)["rows"]}
    assert all(r["allowed"] and r["stops"] == [] for r in preview.values())
    results: dict = {}
    claimed: list[str] = []

    def cancel():
        out = bulk.work_items_bulk_apply(operation="cancel", ids=ids, reason="race", actor="user:alice",
                                         expected_revisions={i: 1 for i in ids},
                                         expected_state_tokens={i: preview[i]["state_token"] for i in ids})
        results.update({r["id"]: r for r in out["results"]})

    def claim():
        while True:
            c = services.action_claim(owner_boot_id="racer")
            if c is None:
                return
            claimed.append(c.work_item.pk)

    assert _race(cancel, claim) == []
    assert set(results) == set(ids)
    for item_id in ids:
        types = list(Event.objects.filter(work_item_id=item_id).order_by("id").values_list("type", flat=True))
        runs = list(Run.objects.filter(work_item_id=item_id).values_list("status", flat=True))
        if results[item_id]["ok"]:  # the cancel went first: no claim ever reached it
            assert types == ["work_item.cancelled"] and runs == [] and item_id not in claimed
        else:  # the claim went first: the cancel was refused and wrote nothing
            assert results[item_id]["code"] == "state_changed"
            assert "was claimed since the preview" in results[item_id]["message"]
            assert types == ["run.claimed"] and runs == ["running"] and item_id in claimed
