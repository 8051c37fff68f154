"""GET /inbox (every waiting stage and every item needing attention, oldest first, with the fence of
the bulk retry that answers it) and GET/PATCH /me/settings (a person's own choices)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.conftest import Clock, Store, make_graph
from tests.workcenter.api.support import error_of
from workcenter.models import Action, PersonSettings, WorkItem

from .conftest import CHANGE, VIEW

pytestmark = pytest.mark.django_db

TWO_ASK = [{"id": "ask-db"}, {"id": "ask-region"}, {"id": "build", "deps": ["ask-db", "ask-region"]}]


def _graph_two_waiting(store, title="Two questions"):
    item = make_graph(store, TWO_ASK, title=title)
    db = store.claim_item(item.pk, stage="ask-db")
    region = store.claim_item(item.pk, stage="ask-region")
    store.submit(db, {"outcome": "waiting", "waiting_reason": "Which database?", "summary": "read the code"})
    store.submit(region, {"outcome": "waiting", "waiting_reason": "Which region?"})
    return WorkItem.objects.get(pk=item.pk), db, region


def _linear_waiting(store, question="PostgreSQL or SQLite?", title="Linear asks"):
    item = store.linear(title=title)
    claim = store.claim_item(item.pk)
    store.submit(claim, {"outcome": "waiting", "waiting_reason": question})
    return WorkItem.objects.get(pk=item.pk), claim


def _failed(store, title="Broken"):
    item = make_graph(store, [{"id": "compile", "max_attempts": 1}, {"id": "ship", "deps": ["compile"]}], title=title)
    store.submit(store.claim_item(item.pk, stage="compile"), {"outcome": "failed", "error": "compiler crashed"})
    return WorkItem.objects.get(pk=item.pk)


def _inbox(api):
    r = api.get("/inbox")
    assert r.status_code == 200, r.content
    return r.json()


def test_the_inbox_lists_each_waiting_stage_and_each_failed_item_oldest_first(api):
    store = Store(Clock())
    linear, l_claim = _linear_waiting(store)
    graph, db, region = _graph_two_waiting(store)
    broken = _failed(store)
    make_graph(store, [{"id": "calm"}], title="Nothing to do")
    body = _inbox(api)
    assert (body["items"], body["questions"], body["failures"], body["truncated"]) == (3, 3, 1, False)
    rows = body["rows"]
    assert [(r["item_id"], r["kind"], r["stage_id"]) for r in rows] == [
        (linear.pk, "question", "triage"), (graph.pk, "question", "ask-db"), (graph.pk, "question", "ask-region"),
        (broken.pk, "failure", "compile")]
    assert [r["since"] for r in rows] == sorted(r["since"] for r in rows)
    by_stage = {r["stage_id"]: r for r in rows}
    assert by_stage["triage"]["text"] == "PostgreSQL or SQLite?" and by_stage["triage"]["current"] is True
    assert by_stage["triage"]["action_id"] == l_claim.action.pk and by_stage["triage"]["run_id"] == l_claim.run.pk
    assert by_stage["ask-db"]["text"] == "Which database?" and by_stage["ask-db"]["run_id"] == db.run.pk
    assert by_stage["ask-db"]["tried"][0]["summary"] == "read the code"
    assert by_stage["ask-region"]["text"] == "Which region?"
    assert [by_stage[s]["current"] for s in ("ask-db", "ask-region")].count(True) == 1
    assert by_stage["compile"]["text"] == "compiler crashed" and by_stage["compile"]["item_status"] == "needs_attention"
    assert by_stage["compile"]["failed_stages"] == 1 and by_stage["compile"]["attempts"] == 1
    # who made each item's newest change: the worker that asked or failed
    assert {r["last_actor"] for r in rows} == {"worker:boot-A"}
    # the fence of the bulk retry: the item's revision and the state token its preview shows
    preview = api.post("/work-items/bulk-preview", {"operation": "retry", "ids": [graph.pk, broken.pk]}).json()
    for row in preview["rows"]:
        mine = next(r for r in rows if r["item_id"] == row["id"])
        assert (mine["revision"], mine["state_token"]) == (row["revision"], row["state_token"])


def test_a_stage_asked_again_counts_its_attempts_and_shows_what_it_tried(api):
    store = Store(Clock())
    item, first = _linear_waiting(store, "First question?")
    api_retry = api.post(f"/work-items/{item.pk}/retry", {"answer": "the first answer"})
    assert api_retry.status_code == 200, api_retry.content
    again = store.claim_item(item.pk)
    store.submit(again, {"outcome": "waiting", "waiting_reason": "Second question?", "summary": "tried the answer"})
    (row,) = _inbox(api)["rows"]
    assert (row["text"], row["run_id"], row["attempts"]) == ("Second question?", again.run.pk, 2)
    assert [t["run_id"] for t in row["tried"]] == [again.run.pk, first.run.pk]
    assert row["tried"][0]["summary"] == "tried the answer"


def test_the_inbox_reads_in_a_fixed_number_of_queries(api):
    store = Store(Clock())
    _graph_two_waiting(store)
    _failed(store)
    _inbox(api)  # the token's first use of the minute writes its last_used_at
    with CaptureQueriesContext(connection) as few:
        assert len(_inbox(api)["rows"]) == 3
    for n in range(4):
        _graph_two_waiting(store, title=f"More {n}")
        _linear_waiting(store, title=f"Linear {n}")
        _failed(store, title=f"Broken {n}")
    with CaptureQueriesContext(connection) as many:
        assert len(_inbox(api)["rows"]) == 3 + 4 * 4
    assert len(many) == len(few) <= 8, [q["sql"][:80] for q in many]


def test_answers_fenced_by_the_inbox_go_through_and_a_question_answered_meanwhile_is_refused_alone(api):
    store = Store(Clock())
    graph, db, region = _graph_two_waiting(store)
    linear, _ = _linear_waiting(store)
    rows = _inbox(api)["rows"]
    fence = {r["item_id"]: r for r in rows}
    # someone answers the linear item elsewhere after the read
    assert api.post(f"/work-items/{linear.pk}/retry", {"answer": "elsewhere"}).status_code == 200
    ids = [graph.pk, linear.pk]
    answers = {graph.pk: [{"action_id": db.action.pk, "answer": "PostgreSQL"},
                          {"action_id": region.action.pk, "answer": "eu-west-1"}],
               linear.pk: [{"action_id": fence[linear.pk]["action_id"], "answer": "too late"}]}
    r = api.post("/work-items/bulk", {"operation": "retry", "ids": ids, "reason": "answered in the inbox", "answers": answers,
                                      "expected_revisions": {i: fence[i]["revision"] for i in ids},
                                      "expected_state_tokens": {i: fence[i]["state_token"] for i in ids}})
    assert r.status_code == 200, r.content
    results = {x["id"]: x for x in r.json()["results"]}
    assert results[graph.pk]["ok"] is True
    assert results[linear.pk]["code"] == "state_changed" and "retried by user:alice" in results[linear.pk]["message"]
    assert Action.objects.get(pk=db.action.pk).context[-1]["answer"] == "PostgreSQL"
    assert Action.objects.get(pk=region.action.pk).context[-1]["answer"] == "eu-west-1"
    assert [r["item_id"] for r in _inbox(api)["rows"]] == []


def test_a_viewer_reads_the_inbox_and_nobody_anonymous_does(viewer, token_api, anonymous, make_user):
    store = Store(Clock())
    _failed(store)
    r = viewer.get("/inbox")
    assert r.status_code == 200 and len(r.json()["rows"]) == 1
    error_of(anonymous.get("/inbox"), 401, "not_authenticated")
    error_of(token_api(make_user("nobody")).get("/inbox"), 403, "permission_denied")


# --- /me/settings ---------------------------------------------------------------------------------

def test_settings_default_off_and_a_choice_is_kept_with_the_person(api, make_user, token_api):
    assert api.get("/me/settings").json() == {"browser_notifications": False}
    assert not PersonSettings.objects.exists()  # a read writes nothing
    r = api.client.patch("/api/v1/me/settings", '{"browser_notifications": true}', content_type="application/json")
    assert r.status_code == 200 and r.json() == {"browser_notifications": True}
    assert PersonSettings.objects.get(user=api.user).browser_notifications is True
    # a second token of the same person, another person
    assert token_api(api.user).get("/me/settings").json() == {"browser_notifications": True}
    other = token_api(make_user("bob", VIEW, CHANGE))
    assert other.get("/me/settings").json() == {"browser_notifications": False}
    r = api.client.patch("/api/v1/me/settings", '{"browser_notifications": false}', content_type="application/json")
    assert r.json() == {"browser_notifications": False}
    assert PersonSettings.objects.get(user=api.user).browser_notifications is False


@pytest.mark.parametrize("body,field", [
    ('{"browser_notifications": "yes"}', "browser_notifications"),
    ('{"browser_notifications": 1}', "browser_notifications"),
    ("{}", "browser_notifications"),  # the setting is required
    ('{"browser_notifications": null}', "browser_notifications"),
    ('{"browser_notifications": true, "email": true}', "email"),
])
def test_a_bad_setting_is_422_and_nothing_is_stored(api, body, field):
    r = api.client.patch("/api/v1/me/settings", body, content_type="application/json")
    err = error_of(r, 422, "invalid_input")
    assert field in [e["field"] for e in err["extra"]["errors"]]
    assert not PersonSettings.objects.exists()


def test_a_viewer_keeps_their_own_choice_and_a_browser_change_needs_the_csrf_token(viewer, anonymous):
    c = Client(enforce_csrf_checks=True)
    c.force_login(viewer.user)
    assert c.get("/api/v1/me/settings").json() == {"browser_notifications": False}
    # a browser session: the change needs the CSRF token
    err = error_of(c.patch("/api/v1/me/settings", '{"browser_notifications": true}', content_type="application/json"),
                   403, "permission_denied")
    assert err["extra"]["reason"] == "csrf"
    c.get("/inbox/")  # the page sets the csrftoken cookie
    token = c.cookies["csrftoken"].value
    r = c.patch("/api/v1/me/settings", '{"browser_notifications": true}', content_type="application/json",
              HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200 and r.json() == {"browser_notifications": True}
    error_of(c.patch("/api/v1/me/settings", "not json", content_type="application/json", HTTP_X_CSRFTOKEN=token),
             400, "bad_request")
    error_of(anonymous.client.patch("/api/v1/me/settings", '{"browser_notifications": true}',
                                  content_type="application/json"), 401, "not_authenticated")


def test_the_service_refuses_what_is_not_a_setting(api):
    from workcenter.errors import InvalidInput
    from workcenter.services.person_settings import person_settings_set

    with pytest.raises(InvalidInput):
        person_settings_set(user=api.user, changes={"browser_notifications": "true"})
    with pytest.raises(InvalidInput):
        person_settings_set(user=api.user, changes={"theme": "dark"})
    assert not PersonSettings.objects.exists()
