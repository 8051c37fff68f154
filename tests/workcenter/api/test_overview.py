"""GET /overview and overview(now): figures from the stored rows, checked with a fixed clock."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import T0, Clock, Store, make_graph
from tests.workcenter.api.conftest import ISO_MS
from tests.workcenter.api.support import error_of
from workcenter import clock as wc_clock
from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.overview import overview

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(minutes=25)  # 12:25 ⇒ the buckets start at 13:00 the day before


def _at(store: Store, when) -> None:
    store.clock.t = when


def _finish_one(store: Store, when, title="One stage") -> WorkItem:
    """A one-stage graph item completed at `when`: one action.completed and one work_item.completed."""
    _at(store, when)
    item = make_graph(store, [{"id": "only"}], title=title)
    store.complete(store.claim_item(item.pk))
    return item


def _finish_linear(store: Store, when) -> WorkItem:
    """A linear item run to done at `when`, its review asking for changes once: six runs complete,
    the last stage records work_item.completed instead of action.completed."""
    _at(store, when)
    item = store.linear(title="Linear")
    for decision in (None, None, "changes_requested", None, "approved", None):
        store.complete(store.claim_item(item.pk), **({"review_decision": decision} if decision else {}))
    assert store.item(item.pk).status == "done"
    return item


def _wait(store: Store, item_id: str, when, stage=None) -> None:
    _at(store, when)
    claim = store.claim_item(item_id, stage=stage)
    store.submit(claim, {"outcome": "waiting", "waiting_reason": "which one?"})


@pytest.fixture
def scene(db):
    store = Store(Clock(T0 - timedelta(hours=30)))
    old = _finish_one(store, T0 - timedelta(hours=30))  # before the window: in no figure
    recent = [_finish_one(store, T0 - timedelta(hours=h, minutes=10)) for h in (22, 5, 5, 1)]
    now_hour = _finish_one(store, T0 + timedelta(minutes=5))
    linear = _finish_linear(store, T0 - timedelta(hours=2, minutes=10))
    w1 = make_graph(store, [{"id": "ask"}], title="Asked first")
    w2 = make_graph(store, [{"id": "ask"}], title="Asked second")
    _wait(store, w1.pk, T0 - timedelta(hours=3))
    _wait(store, w2.pk, T0 - timedelta(hours=1))
    # w1 is answered and asks again later: it waits since its latest question, not its first
    _at(store, T0 - timedelta(minutes=40))
    services.work_item_retry(item_id=w1.pk, answer="this one", now=store.now())
    _wait(store, w1.pk, T0 - timedelta(minutes=30))
    _at(store, T0 - timedelta(minutes=50))
    silent = make_graph(store, [{"id": "x"}], status="waiting", title="Waiting without a question")
    # two stages of one graph item ask 30 s apart: it waits since the first question
    _at(store, T0 - timedelta(minutes=20))
    w3 = make_graph(store, [{"id": "p"}, {"id": "q"}], title="Two questions")
    p, q = store.claim_item(w3.pk, stage="p"), store.claim_item(w3.pk, stage="q")
    store.submit(p, {"outcome": "waiting", "waiting_reason": "p?"})
    _at(store, T0 - timedelta(minutes=19, seconds=30))
    store.submit(q, {"outcome": "waiting", "waiting_reason": "q?"})
    _at(store, T0 + timedelta(minutes=10))
    busy = make_graph(store, [{"id": "run"}], title="Busy")
    store.claim_item(busy.pk)  # stays running
    failed = make_graph(store, [{"id": "boom", "max_attempts": 1}], title="Broken")
    store.submit(store.claim_item(failed.pk), {"outcome": "failed", "error": "crashed"})
    return {"store": store, "old": old, "recent": recent, "now_hour": now_hour, "w1": w1, "w2": w2,
            "silent": silent, "busy": busy, "failed": failed,
            "linear": linear, "w3": w3}


def _per_hour_from_events(now) -> list[int]:
    """The buckets recomputed from the events table in Python."""
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    out = [0] * 24
    done = ("action.completed", "work_item.completed", "review.changes_requested")
    for created in Event.objects.filter(type__in=done).values_list("created_at", flat=True):
        k = int((created - start).total_seconds() // 3600)
        if 0 <= k < 24 and created <= now:
            out[k] += 1
    return out


def test_the_figures_match_the_stored_rows(scene):
    o = overview(now=NOW)
    assert o["generated_at"] == wc_clock.iso_ms(NOW) and o["hours_from"] == "2026-12-01T13:00:00.000Z"
    per_hour = o["actions_finished_per_hour"]
    assert len(per_hour) == 24 and per_hour == _per_hour_from_events(NOW)
    # by hand: 22h10m before 12:00 is 13:50 (bucket 0), 5h10m ⇒ 06:50 (bucket 17) twice,
    # 1h10m ⇒ 10:50 (bucket 21), and the current hour (bucket 23) has 12:05; the linear item's
    # stages all completed at 09:50 (bucket 20), the last one recorded as work_item.completed
    stages = Run.objects.filter(work_item_id=scene["linear"].pk, status="completed").count()
    mine = Event.objects.filter(work_item_id=scene["linear"].pk)
    assert stages == 6 and mine.filter(type="work_item.completed").count() == 1
    assert mine.filter(type__in=["action.completed", "work_item.completed", "review.changes_requested"]).count() == 6
    assert per_hour[0] == 1 and per_hour[17] == 2 and per_hour[21] == 1 and per_hour[23] == 1
    assert per_hour[20] == stages and sum(per_hour) == 5 + stages
    assert o["finished_24h"] == 6 == WorkItem.objects.filter(
        status="done", updated_at__gt=NOW - timedelta(hours=24)).count()
    assert o["running"] == 1 == Action.objects.filter(status="running").count()
    counts = {s: WorkItem.objects.filter(status=s).count() for s in o["counts"]}
    assert o["counts"] == counts and counts["done"] == 7 and counts["waiting"] == 4
    assert o["waiting"] == 4 and o["needs_attention"] == 1 == counts["needs_attention"]
    asked = Event.objects.filter(work_item_id=scene["w2"].pk, type="action.waiting").get().created_at
    assert o["oldest_wait_since"] == wc_clock.iso_ms(asked)
    assert o["oldest_wait_item"] == {"id": scene["w2"].pk, "title": "Asked second"}


def test_the_oldest_wait_moves_on_and_falls_back_to_updated_at(scene):
    store = scene["store"]
    _at(store, NOW)
    services.work_item_cancel(item_id=scene["w2"].pk, now=store.now())
    o = overview(now=NOW)
    # the item made waiting without a question (12:10 − 50 min) now waits longest
    assert o["oldest_wait_item"]["id"] == scene["silent"].pk
    assert o["oldest_wait_since"] == wc_clock.iso_ms(WorkItem.objects.get(pk=scene["silent"].pk).updated_at)
    services.work_item_cancel(item_id=scene["silent"].pk, now=store.now())
    o = overview(now=NOW)
    last = Event.objects.filter(work_item_id=scene["w1"].pk, type="action.waiting").order_by("-id")[0]
    assert o["oldest_wait_item"]["id"] == scene["w1"].pk and o["oldest_wait_since"] == wc_clock.iso_ms(last.created_at)
    services.work_item_cancel(item_id=scene["w1"].pk, now=store.now())
    o = overview(now=NOW)
    first = Event.objects.filter(work_item_id=scene["w3"].pk, type="action.waiting").order_by("id")[0]
    assert o["oldest_wait_item"]["id"] == scene["w3"].pk and o["oldest_wait_since"] == wc_clock.iso_ms(first.created_at)
    services.work_item_cancel(item_id=scene["w3"].pk, now=store.now())
    o = overview(now=NOW)
    assert o["waiting"] == 0 and o["oldest_wait_since"] is None and o["oldest_wait_item"] is None


def test_later_the_window_slides(scene):
    later = NOW + timedelta(hours=6)
    o = overview(now=later)
    assert o["actions_finished_per_hour"] == _per_hour_from_events(later)
    stages = Run.objects.filter(work_item_id=scene["linear"].pk, status="completed").count()
    assert sum(o["actions_finished_per_hour"]) == 4 + stages  # 13:50 yesterday dropped out
    assert o["finished_24h"] == 5


def test_an_empty_store_and_a_handful_of_statements(db):
    with CaptureQueriesContext(connection) as ctx:
        o = overview(now=NOW)
    assert o["actions_finished_per_hour"] == [0] * 24 and o["finished_24h"] == 0 and o["running"] == 0
    assert o["oldest_wait_item"] is None and set(o["counts"].values()) == {0}
    assert len(ctx.captured_queries) <= 4  # no waiting item: no wait reads


def test_the_api_answers_the_overview(scene, viewer, anonymous):
    r = viewer.get("/overview")
    assert r.status_code == 200, r.content
    body = r.json()
    assert set(body) == {"running", "waiting", "oldest_wait_since", "oldest_wait_item", "needs_attention",
                         "finished_24h", "actions_finished_per_hour", "hours_from", "counts", "generated_at"}
    assert ISO_MS.match(body["generated_at"]) and ISO_MS.match(body["hours_from"])
    assert ISO_MS.match(body["oldest_wait_since"]) and body["oldest_wait_item"]["id"] == scene["w2"].pk
    assert body["hours_from"].endswith(":00:00.000Z") and len(body["actions_finished_per_hour"]) == 24
    assert set(body["counts"]) == {"draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"}
    error_of(anonymous.get("/overview"), 401, "not_authenticated")
