"""A stage's usual duration (workcenter/stage_durations.py) and the graph node's alarms built on it:
`usual_duration_s` / `overdue_after_s` from the completed runs of the same workflow and stage across
items, and `stopping` for a running sibling whose item went to needs_attention (DOMAIN §6.1).
Both databases: `DATABASE_URL=postgres://…` runs them on PostgreSQL."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from workcenter import selectors, stage_durations
from workcenter.models import Run

from tests.conftest import make_graph

pytestmark = pytest.mark.django_db

SURVEY = [{"id": "survey", "type": "research", "mode": "read"}]
PAIR = [{"id": "survey", "type": "research", "mode": "read", "max_attempts": 1},
        {"id": "measure", "type": "research", "mode": "read"}]


@pytest.fixture(autouse=True)
def fresh_figures():
    stage_durations.forget()
    yield
    stage_durations.forget()


def history(store, seconds, stages=SURVEY, stage="survey"):
    """One item per duration, whose `stage` ran that long and completed (the real services)."""
    for s in seconds:
        item = make_graph(store, stages, title=f"Past {s}")
        claim = store.claim_item(item.pk, stage=stage)
        store.clock.tick(int(s * 1000))
        store.complete(claim)


def node(graph, stage):
    return next(n for n in graph["nodes"] if n["stage_id"] == stage)


def test_the_rule():
    assert stage_durations.usual([1, 2, 3, 4]) is None  # fewer than 5
    assert stage_durations.usual([1, 2, 3, 4, 3.2]) == (4, 34)  # p90 4 s: 3×4 < 4+30
    assert stage_durations.usual([100] * 9 + [5]) == (100, 300)  # p90 100 s: 3×100 > 100+30
    assert stage_durations.usual([0.2] * 6) == (1, 31)  # at least a second
    # nearest rank: of 20 durations the 18th
    assert stage_durations.usual(list(range(1, 21)))[0] == 18


def test_a_running_stage_carries_its_stages_usual_figures(store):
    history(store, [1.2, 2.0, 3.5, 2.2, 1.8, 3.9])
    item = make_graph(store, SURVEY, title="Now")
    store.claim_item(item.pk, stage="survey")
    survey = node(selectors.graph_snapshot(item.pk), "survey")
    assert (survey["usual_duration_s"], survey["overdue_after_s"]) == (4, 34)
    assert survey["stopping"] is False


def test_no_figures_without_enough_history_or_for_another_workflow_or_a_stage_not_running(store):
    history(store, [1.5, 2.5, 3.5, 3.7])  # four: too few
    item = make_graph(store, PAIR, title="Now")
    store.claim_item(item.pk, stage="survey")
    graph = selectors.graph_snapshot(item.pk)
    assert node(graph, "survey")["usual_duration_s"] is None and node(graph, "survey")["overdue_after_s"] is None
    history(store, [1.5, 2.5])  # six now, but the figures are kept for a while …
    assert node(selectors.graph_snapshot(item.pk), "survey")["usual_duration_s"] is None
    stage_durations.forget()  # … until they are read again
    graph = selectors.graph_snapshot(item.pk)
    assert node(graph, "survey")["usual_duration_s"] == 4
    assert node(graph, "measure")["usual_duration_s"] is None  # ready, not running
    # the same stage id in another workflow has a history of its own
    Run.objects.filter(work_item__workflow_template="test-graph", status="completed").update(
        ended_at=None)  # (no completed run with an end left)
    stage_durations.forget()
    assert node(selectors.graph_snapshot(item.pk), "survey")["usual_duration_s"] is None


def test_a_running_sibling_of_a_failed_stage_is_stopping(store):
    item = make_graph(store, PAIR, title="Orphan")
    survey = store.claim_item(item.pk, stage="survey")
    store.claim_item(item.pk, stage="measure")
    before = node(selectors.graph_snapshot(item.pk), "measure")
    assert before["stopping"] is False and before["lease"] is not None
    store.submit(survey, {"outcome": "failed", "error": "broke"})
    assert store.item(item.pk).status == "needs_attention"
    measure = node(selectors.graph_snapshot(item.pk), "measure")
    assert measure["status"] == "running" and measure["lease"] is not None
    assert measure["stopping"] is True


def test_a_running_linear_stage_is_not_stopping(store):
    item = store.linear(title="Linear")
    claim = store.claim_item(item.pk)
    assert claim is not None
    graph = selectors.graph_snapshot(item.pk)
    running = [n for n in graph["nodes"] if n["status"] == "running"]
    assert running and all(n["stopping"] is False for n in running)


def test_the_read_is_one_bounded_statement_and_cheap_on_a_store_with_many_runs(store):
    """50,000 completed runs over 200 items and 10 stages: the read is one statement, reads at most
    WINDOW rows, and takes well under a second (its figure is printed)."""
    history(store, [2, 3, 2, 3, 2])
    template = Run.objects.filter(status="completed").first()
    base = template.ended_at
    rows = []
    for i in range(50_000):
        ended = base - timedelta(seconds=i + 1)
        rows.append(Run(action_id=template.action_id, work_item_id=template.work_item_id, owner_boot_id="boot-old",
                        lease_epoch=1, status="completed" if i % 5 else "failed",
                        started_at=ended - timedelta(seconds=2 + i % 3), expires_at=ended, ended_at=ended))
    Run.objects.bulk_create(rows, batch_size=2000)
    stage_durations.read()  # warm
    if connection.vendor == "sqlite":  # the end index, backwards: no sort of every run
        with connection.cursor() as cur:
            sql, params = _window_sql()
            cur.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = " / ".join(str(r[3]) for r in cur.fetchall())
        assert "wc_run_ended" in plan and "TEMP B-TREE" not in plan, plan
    else:  # PostgreSQL, its statistics current: the same walk, no sort
        with connection.cursor() as cur:
            cur.execute("ANALYZE workcenter_run")
            sql, params = _window_sql()
            cur.execute("EXPLAIN " + sql, params)
            plan = "\n".join(r[0] for r in cur.fetchall())
        assert "wc_run_ended" in plan and "Sort" not in plan, plan
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        figures = stage_durations.read()
        took = time.perf_counter() - started
    assert len(queries) == 1
    assert "LIMIT 2000" in queries[0]["sql"].upper()
    assert figures[("test-graph", "survey")] == (4, 34)  # of durations 2, 3 and 4 s
    print(f"\nstage durations read, {connection.vendor}, 50,005 runs: {took * 1000:.1f} ms")
    assert took < 2.0  # an upper bound on a loaded machine, not the figure
    # and an item read with a running stage, its figures kept: no statement of its own
    item = make_graph(store, SURVEY, title="Now")
    store.claim_item(item.pk, stage="survey")
    selectors.graph_snapshot(item.pk)
    with CaptureQueriesContext(connection) as queries:
        selectors.graph_snapshot(item.pk)
    assert not [q for q in queries if "ended_at" in q["sql"] and "workflow_template" in q["sql"]]


def _window_sql():
    return (Run.objects.filter(ended_at__isnull=False).order_by("-ended_at")
            .values_list("status", "started_at", "ended_at", "action__stage_id", "action__type",
                         "work_item__workflow_template")[:stage_durations.WINDOW].query.sql_with_params())
