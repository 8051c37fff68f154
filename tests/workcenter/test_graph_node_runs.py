"""What a graph node says about time: its newest run (for durations) and when its lease was last
renewed (for the worker's liveness), read without one query per node."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_graph
from workcenter import selectors, services
from workcenter.models import Run

pytestmark = pytest.mark.django_db


def _fence(c):
    return dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)


def _nodes(item_id):
    return {n["stage_id"]: n for n in selectors.graph_snapshot(item_id)["nodes"]}


def test_a_claim_stamps_renewed_at_with_the_claim_time(store):
    store.linear()
    c = store.claim(lease_ms=10_000)
    stored = Run.objects.get(pk=c.run.pk)
    assert stored.renewed_at == stored.started_at == c.run.renewed_at
    assert stored.expires_at - stored.renewed_at == timedelta(milliseconds=10_000)


def test_renew_moves_renewed_at_with_the_expiry_in_one_update(store, clock):
    store.linear()
    c = store.claim(lease_ms=10_000)
    clock.tick(4_000)
    with CaptureQueriesContext(connection) as queries:
        run = services.run_renew(**_fence(c), lease_ms=20_000, now=clock())
    assert run.renewed_at == clock() and run.expires_at == clock() + timedelta(milliseconds=20_000)
    stored = Run.objects.get(pk=c.run.pk)
    assert (stored.renewed_at, stored.expires_at) == (run.renewed_at, run.expires_at)
    assert stored.started_at < stored.renewed_at
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1, updates
    assert '"renewed_at"' in updates[0] and '"expires_at"' in updates[0]


def test_a_refused_renew_leaves_renewed_at_alone(store, clock):
    store.linear()
    c = store.claim(lease_ms=1_000)
    clock.tick(5_000)  # the lease has run out
    assert services.run_renew(**_fence(c), now=clock()) is None
    stored = Run.objects.get(pk=c.run.pk)
    assert stored.renewed_at == stored.started_at


def test_a_running_node_shows_when_its_lease_was_renewed(store, clock):
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    c = store.claim(lease_ms=30_000)
    lease = _nodes(item.pk)["a"]["lease"]
    assert lease["renewed_at"] == c.run.started_at and lease["expires_at"] == c.run.expires_at
    clock.tick(10_000)
    services.run_renew(**_fence(c), lease_ms=30_000, now=clock())
    lease = _nodes(item.pk)["a"]["lease"]
    assert lease["renewed_at"] == clock()
    assert lease["expires_at"] - lease["renewed_at"] == timedelta(milliseconds=30_000)
    # a run stored before the column existed (imported, migrated) falls back to its start
    Run.objects.filter(pk=c.run.pk).update(renewed_at=None)
    assert _nodes(item.pk)["a"]["lease"]["renewed_at"] == c.run.started_at


def test_each_node_carries_its_newest_run(store, clock):
    item = make_graph(store, [{"id": "a", "max_attempts": 3}, {"id": "b", "deps": ["a"]}, {"id": "c"}])
    first = store.claim_item(item.pk, stage="a")
    store.submit(first, {"outcome": "retryable", "error": "flaky"})
    clock.tick(2_000)
    second = store.claim_item(item.pk, stage="a")
    clock.tick(3_000)
    store.complete(second)
    done = Run.objects.get(pk=second.run.pk)
    nodes = _nodes(item.pk)
    assert nodes["a"]["run"] == {"id": second.run.pk, "status": "completed", "started_at": done.started_at,
                                 "ended_at": done.ended_at}
    assert done.ended_at - done.started_at >= timedelta(milliseconds=3_000)
    assert nodes["b"]["run"] is None
    # a running node's run is its current one, still open
    running = store.claim_item(item.pk, stage="b")
    node_b = _nodes(item.pk)["b"]
    assert node_b["run"]["id"] == running.run.pk == node_b["lease"]["run_id"]
    assert node_b["run"]["status"] == "running" and node_b["run"]["ended_at"] is None


def test_the_graph_reads_runs_in_a_fixed_number_of_statements(store):
    def statements(n):
        item = make_graph(store, [{"id": f"s{i}"} for i in range(n)], title=f"{n} stages")
        for _ in range(n):
            store.complete(store.claim_item(item.pk))
        with CaptureQueriesContext(connection) as queries:
            graph = selectors.graph_snapshot(item.pk)
        assert all(node["run"] is not None for node in graph["nodes"])
        return len(queries.captured_queries)

    assert statements(2) == statements(12)
