"""POST /work-items/{id}/retry with `answers` and GET retry-preview?action_id=… (API.md §2)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import Clock, Store, item_snapshot, make_graph
from workcenter.models import Action

from .support import error_of

pytestmark = pytest.mark.django_db


def _fields(body: dict) -> list[str]:
    return [e["field"] for e in body["extra"]["errors"]]


@pytest.fixture
def two_waiting(api):
    """A graph item whose stages ask-db and ask-region both wait; build depends on both."""
    store = Store(Clock())
    item = make_graph(store, [{"id": "ask-db"}, {"id": "ask-region"},
                              {"id": "build", "deps": ["ask-db", "ask-region"]}])
    claims = {}
    for _ in range(2):
        c = api.claim()
        claims[c["action"]["stage_id"]] = c
    api.submit(claims["ask-db"], outcome="waiting", waiting_reason="Which database?")
    api.submit(claims["ask-region"], outcome="waiting", waiting_reason="Which region?")
    return item.pk, {s: c["action"]["id"] for s, c in claims.items()}


def test_answers_reset_both_waiting_stages_in_one_call(api, two_waiting):
    item_id, ids = two_waiting
    r = api.post(f"/work-items/{item_id}/retry", {"answers": [
        {"action_id": ids["ask-db"], "answer": "PostgreSQL"}, {"action_id": ids["ask-region"], "answer": "eu-west"}]})
    assert r.status_code == 200, r.content
    detail = r.json()
    assert detail["status"] == "ready"
    by_id = {a["id"]: a for a in detail["actions"]}
    assert by_id[ids["ask-db"]]["context"][-1]["answer"] == "PostgreSQL"
    assert by_id[ids["ask-region"]]["context"][-1]["answer"] == "eu-west"
    assert [e["data"] for e in detail["events"][:2]] == [{"target_stage_id": "ask-region"},
                                                         {"target_stage_id": "ask-db"}]


@pytest.mark.parametrize("body, fields, says", [
    ({"answer": "x", "answers": [{"action_id": "a", "answer": "y"}]}, ["body"], "not both"),
    ({"answer": None, "answers": [{"action_id": "a", "answer": "y"}]}, ["body"], "not both"),
    ({"answers": []}, ["answers"], "at least 1 item"),
    ({"answers": [{"action_id": "a"}]}, ["answers"], '"answers", "0", "answer"'),
    ({"answers": [{"action_id": "a", "answer": "   "}]}, ["answers"], "must not be blank"),
    ({"answers": [{"action_id": "a", "answer": "y" * 8001}]}, ["answers"], "at most 8000 characters"),
    ({"answers": [{"action_id": "a", "answer": "y", "note": 1}]}, ["answers"], '"answers", "0", "note"'),
    ({"answers": [{"action_id": "", "answer": "y"}]}, ["answers"], "at least 1 character"),
    ({"answers": {"a": "y"}}, ["answers"], "valid list"),
])
def test_malformed_answers_are_422_and_write_nothing(api, two_waiting, body, fields, says):
    item_id, _ = two_waiting
    before = item_snapshot(item_id)
    body = error_of(api.post(f"/work-items/{item_id}/retry", body), 422, "invalid_input")
    assert _fields(body) == fields, body
    assert says in json.dumps(body["extra"]["errors"]), body
    assert item_snapshot(item_id) == before


def test_answers_naming_what_does_not_wait_are_422_and_write_nothing(api, two_waiting):
    item_id, ids = two_waiting
    build = Action.objects.get(work_item_id=item_id, stage_id="build").pk
    before = item_snapshot(item_id)
    for answers, words in (
        ([{"action_id": ids["ask-db"], "answer": "a"}, {"action_id": build, "answer": "b"}], "not waiting: " + build),
        ([{"action_id": ids["ask-region"], "answer": "eu"}], "answer is required"),
        ([{"action_id": ids["ask-db"], "answer": "a"}, {"action_id": ids["ask-db"], "answer": "b"}], "twice"),
    ):
        body = error_of(api.post(f"/work-items/{item_id}/retry", {"answers": answers}), 422, "invalid_input")
        assert words in body["message"] and _fields(body) == ["answers"], body
    assert item_snapshot(item_id) == before


def test_answers_for_an_item_that_needs_no_retry_is_409(api):
    item = api.create()
    body = error_of(api.post(f"/work-items/{item['id']}/retry",
                             {"answers": [{"action_id": item["current_action_id"], "answer": "x"}]}),
                    409, "invalid_state")
    assert "only an item that is waiting or needs attention can be retried" in body["message"]


def test_preview_lists_the_waiting_stages_and_previews_an_answers_retry(api, two_waiting):
    item_id, ids = two_waiting
    build = Action.objects.get(work_item_id=item_id, stage_id="build").pk
    r = api.get(f"/work-items/{item_id}/retry-preview")
    assert r.status_code == 200, r.content
    p = r.json()
    assert p["reset_action_ids"] == [ids["ask-db"], build]
    waiting = [(w["action_id"], w["stage_id"], w["waiting_reason"], w["reset_action_ids"]) for w in p["waiting_stages"]]
    assert waiting == [
        (ids["ask-db"], "ask-db", "Which database?", [ids["ask-db"], build]),
        (ids["ask-region"], "ask-region", "Which region?", [ids["ask-region"], build])]
    assert all(w["waiting_since"].endswith("Z") and w["run_id"] for w in p["waiting_stages"])
    r = api.get(f"/work-items/{item_id}/retry-preview?action_id={ids['ask-db']}&action_id={ids['ask-region']}")
    assert r.status_code == 200, r.content
    assert r.json()["reset_action_ids"] == [ids["ask-db"], ids["ask-region"], build]
    body = error_of(api.get(f"/work-items/{item_id}/retry-preview?action_id={build}&action_id={ids['ask-db']}"),
                    422, "invalid_input")
    assert _fields(body) == ["action_id"]


def test_linear_answers_name_the_current_action(api):
    item = api.create()
    claim = api.claim()
    api.submit(claim, outcome="waiting", waiting_reason="Which database?")
    body = error_of(api.post(f"/work-items/{item['id']}/retry", {"answers": [{"action_id": "other", "answer": "x"}]}),
                    422, "invalid_input")
    assert "current action only" in body["message"]
    p = api.get(f"/work-items/{item['id']}/retry-preview").json()
    assert [w["waiting_reason"] for w in p["waiting_stages"]] == ["Which database?"]
    r = api.post(f"/work-items/{item['id']}/retry", {"answers": [{"action_id": claim["action"]["id"], "answer": "PG"}]})
    assert r.status_code == 200, r.content
    assert r.json()["actions"][-1]["context"][-1]["answer"] == "PG"


def test_the_document_describes_answers_and_the_preview_query(api):
    doc = api.get("/openapi.json").json()
    retry_in = doc["components"]["schemas"]["RetryIn"]
    assert retry_in["not"] == {"required": ["answer", "answers"]}
    assert retry_in["properties"]["answers"]["anyOf"][0]["minItems"] == 1
    answer = doc["components"]["schemas"]["RetryAnswerIn"]
    assert answer["required"] == ["action_id", "answer"] and answer["additionalProperties"] is False
    assert answer["properties"]["answer"]["maxLength"] == 8000
    params = doc["paths"]["/api/v1/work-items/{item_id}/retry-preview"]["get"]["parameters"]
    assert any(p["name"] == "action_id" and p["in"] == "query" for p in params)
