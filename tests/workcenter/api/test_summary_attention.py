"""WorkItemSummary.attention: what a "needs me" item waits for, in the list and on the stream."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import Clock, Store, make_graph
from workcenter import selectors
from dashboard.stream.messages import event_message
from workcenter.models import Event

pytestmark = pytest.mark.django_db


def _by_id(api, **params):
    r = api.get("/work-items", params)
    assert r.status_code == 200, r.content
    return {i["id"]: i for i in r.json()["items"]}


def _waiting_linear(api, reason="Which database should the service use?"):
    item = api.create()
    claim = api.claim()
    api.submit(claim, outcome="waiting", waiting_reason=reason)
    return item, claim


def test_a_waiting_linear_item_says_which_stage_asks_and_what(api):
    item, claim = _waiting_linear(api, "Which database\n  should the service use?  " + "x" * 300)
    ready = api.create(title="Nothing to do")
    items = _by_id(api)
    att = items[item["id"]]["attention"]
    assert att["kind"] == "waiting" and att["stage_id"] == "triage" and att["action_id"] == claim["action"]["id"]
    assert att["text"].startswith("Which database should the service use? xxx") and len(att["text"]) == 200
    assert att["since"].endswith("Z") and att["count"] == 1
    # the linear action that asked stays completed by design: the summary still says the item waits
    assert items[item["id"]]["current_action"]["status"] == "completed"
    assert items[ready["id"]]["attention"] is None


def test_graph_items_name_the_first_blocked_stage_and_how_many_are_blocked(api):
    store = Store(Clock())
    waiting = make_graph(store, [{"id": "ask-db"}, {"id": "ask-region"}], title="Two questions")
    failing = make_graph(store, [{"id": "compile"}], title="Broken")
    claims = {}
    for _ in range(3):
        c = api.claim()
        claims[c["action"]["stage_id"]] = c
    api.submit(claims["ask-db"], outcome="waiting", waiting_reason="Which database?")
    api.submit(claims["ask-region"], outcome="waiting", waiting_reason="Which region?")
    api.submit(claims["compile"], outcome="failed", error="compiler crashed: out of memory")
    items = _by_id(api)
    assert {k: items[waiting.pk]["attention"][k] for k in ("kind", "stage_id", "text", "count")} == {
        "kind": "waiting", "stage_id": "ask-db", "text": "Which database?", "count": 2}
    assert {k: items[failing.pk]["attention"][k] for k in ("kind", "stage_id", "text", "count")} == {
        "kind": "failed", "stage_id": "compile", "text": "compiler crashed: out of memory", "count": 1}
    # the live stream's summary carries the same
    ev = Event.objects.filter(work_item_id=waiting.pk).last()
    assert event_message(ev)["work_item"]["attention"]["text"] == "Which database?"


def test_attention_is_read_in_one_statement_for_the_whole_page(api):
    def reads(n_waiting: int) -> int:
        for _ in range(n_waiting):
            _waiting_linear(api)
        ids = [i["id"] for i in api.get("/work-items", {"limit": 500}).json()["items"]]
        with CaptureQueriesContext(connection) as ctx:
            summaries = selectors.work_item_summaries(ids)
        assert sum(1 for s in summaries.values() if s.attention) == len(ids)
        return len(ctx.captured_queries)

    few = reads(3)
    many = reads(60)
    assert few == many, (few, many)
