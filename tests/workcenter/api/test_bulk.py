"""POST /work-items/bulk-preview and /work-items/bulk: many retries or cancels, each row fenced by
the revision the preview showed and applied in its own transaction."""
from __future__ import annotations

import pytest

from tests.conftest import Clock, Store, item_snapshot, make_graph
from tests.workcenter.api.support import error_of
from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem

pytestmark = pytest.mark.django_db


def _failed_graph(api, store, title="Broken"):
    """needs_attention: stage a failed (b depends on it) while sibling c still runs."""
    item = make_graph(store, [{"id": "a", "max_attempts": 1}, {"id": "b", "deps": ["a"]}, {"id": "c"}], title=title)
    claims = {}
    while len(claims) < 2:
        c = api.claim()
        claims[c["action"]["stage_id"]] = c
    api.submit(claims["a"], outcome="failed", error="crashed")
    assert WorkItem.objects.get(pk=item.pk).status == "needs_attention"
    return item, claims["c"]


def _waiting_linear(api, title="Asks"):
    item = api.create(title=title)
    api.submit(api.claim(), outcome="waiting", waiting_reason="Which database?")
    return item["id"]


def _preview(api, operation, ids):
    r = api.post("/work-items/bulk-preview", {"operation": operation, "ids": ids})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["operation"] == operation and [row["id"] for row in body["rows"]] == ids
    return {row["id"]: row for row in body["rows"]}


def _apply(api, operation, rows, reason="tidy up", *, tokens=False, **extra):
    """The bulk request for the preview's rows; with `tokens`, fenced by their state tokens too."""
    body = {"operation": operation, "ids": list(rows), "reason": reason,
            "expected_revisions": {i: (r["revision"] if r["revision"] is not None else 1) for i, r in rows.items()},
            **extra}
    if tokens:
        body["expected_state_tokens"] = {i: r["state_token"] or 0 for i, r in rows.items()}
    r = api.post("/work-items/bulk", body)
    assert r.status_code == 200, r.content
    out = r.json()
    assert out["operation"] == operation and [x["id"] for x in out["results"]] == list(rows)
    return {x["id"]: x for x in out["results"]}


def _everything():
    return [item_snapshot(pk) for pk in WorkItem.objects.order_by("pk").values_list("pk", flat=True)]


def test_retry_preview_rows_are_the_single_retry_preview_of_each_item_and_write_nothing(api):
    store = Store(Clock())
    graph, sibling = _failed_graph(api, store)
    waiting = _waiting_linear(api)
    ready = api.create(title="Fine")["id"]
    before = _everything()
    ids = [graph.pk, "no-such-item", waiting, ready]
    rows = _preview(api, "retry", ids)
    assert _everything() == before
    for item_id in (graph.pk, waiting):
        single = api.get(f"/work-items/{item_id}/retry-preview").json()
        row = rows[item_id]
        assert row["allowed"] and row["code"] is None and row["message"]
        assert row["reset_action_ids"] == single["reset_action_ids"]
        assert row["new_action"] == single["new_action"]
        assert [s["run_id"] for s in row["stops"]] == [
            r for r in single["superseded_run_ids"] if Run.objects.get(pk=r).status == "running"]
        item = WorkItem.objects.get(pk=item_id)
        assert (row["title"], row["status"], row["revision"]) == (item.title, item.status, item.revision)
        newest = Event.objects.filter(work_item_id=item_id).order_by("-id")[0].id
        assert row["state_token"] == single["state_token"] == newest
    g = rows[graph.pk]
    assert g["reset_stage_ids"] == ["a", "b", "c"] and not g["new_action"]
    run = sibling["run"]
    assert g["stops"] == [{"run_id": run["id"], "action_id": sibling["action"]["id"], "stage_id": "c",
                           "owner_boot_id": run["owner_boot_id"], "lease_epoch": run["lease_epoch"]}]
    w = rows[waiting]
    assert w["new_action"] and w["reset_action_ids"] == [] and "answer" in w["message"]
    assert rows["no-such-item"] == {"id": "no-such-item", "title": None, "status": None, "revision": None,
                                    "state_token": None, "allowed": False, "code": "not_found", "message": rows["no-such-item"]["message"],
                                    "reset_stage_ids": [], "reset_action_ids": [], "new_action": False, "stops": [],
                                    "waiting_stages": []}
    assert rows[ready]["code"] == "invalid_state" and not rows[ready]["allowed"]
    assert "ready" in rows[ready]["message"]


def test_cancel_preview_lists_the_runs_it_stops(api):
    store = Store(Clock())
    graph, sibling = _failed_graph(api, store)
    done = make_graph(store, [{"id": "x", "status": "completed"}], status="done", title="Done")
    gone = api.create(title="Gone")["id"]
    api.post(f"/work-items/{gone}/cancel")
    rows = _preview(api, "cancel", [done.pk, graph.pk, gone])
    assert rows[graph.pk]["allowed"] and [s["run_id"] for s in rows[graph.pk]["stops"]] == [sibling["run"]["id"]]
    assert rows[graph.pk]["reset_action_ids"] == [] and rows[graph.pk]["new_action"] is False
    assert (rows[done.pk]["allowed"], rows[done.pk]["code"]) == (False, "invalid_state")
    assert (rows[gone]["allowed"], rows[gone]["code"]) == (False, "invalid_state")


def test_a_row_changed_since_the_preview_is_refused_alone_and_the_others_apply(api):
    store = Store(Clock())
    items = [_failed_graph(api, store, title=f"Broken {k}")[0].pk for k in range(3)]
    rows = _preview(api, "retry", items)
    assert all(r["allowed"] and r["revision"] == 1 for r in rows.values())
    # meanwhile someone changes the middle item's contract: revision 1 → 2
    services.work_item_update(item_id=items[1], patch={"goal": "Another goal"})
    changed = item_snapshot(items[1])
    results = _apply(api, "retry", rows, reason="the flaky runner is fixed")
    bad = results[items[1]]
    assert (bad["ok"], bad["code"], bad["work_item"]) == (False, "revision_conflict", None)
    assert bad["message"] == "changed since the preview (revision 1 → 2); nothing was done to it"
    assert item_snapshot(items[1]) == changed
    for item_id in (items[0], items[2]):
        res = results[item_id]
        assert res["ok"] and res["code"] is None and res["work_item"]["status"] == "ready"
        assert WorkItem.objects.get(pk=item_id).status == "ready"
        ev = Event.objects.filter(work_item_id=item_id).order_by("-id")[0]
        assert ev.type == "work_item.retried" and ev.actor == "user:alice"
        assert ev.data == {"target_stage_id": "a", "reason": "the flaky runner is fixed"}
        # the running sibling was superseded, as the preview said
        assert Run.objects.get(pk=rows[item_id]["stops"][0]["run_id"]).status == "superseded"


def test_bulk_retry_gives_waiting_items_the_answer_and_refuses_them_without_one(api):
    store = Store(Clock())
    waiting = _waiting_linear(api)
    broken = _failed_graph(api, store)[0].pk
    rows = _preview(api, "retry", [waiting, broken])
    results = _apply(api, "retry", rows)
    assert results[broken]["ok"]
    assert (results[waiting]["ok"], results[waiting]["code"]) == (False, "invalid_input")
    assert "answer" in results[waiting]["message"]
    assert WorkItem.objects.get(pk=waiting).status == "waiting"
    other = _failed_graph(api, store, title="Broken too")[0].pk
    rows = _preview(api, "retry", [waiting, other])
    results = _apply(api, "retry", rows, answer="PostgreSQL")
    assert results[waiting]["ok"] and results[waiting]["work_item"]["status"] == "ready"
    assert results[other]["ok"]
    current = WorkItem.objects.get(pk=waiting).current_action_id
    assert Action.objects.get(pk=current).context[-1]["answer"] == "PostgreSQL"
    # the needs_attention item was not given the answer: it asked nothing
    target = Action.objects.get(pk=WorkItem.objects.get(pk=other).current_action_id)
    assert target.context[-1].get("answer") is None


def _waiting_graph(api, store, title="Two questions"):
    """waiting: stages a and b each asked a question."""
    item = make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a", "b"]}], title=title)
    claims = {}
    while len(claims) < 2:
        c = api.claim()
        claims[c["action"]["stage_id"]] = c
    api.submit(claims["a"], outcome="waiting", waiting_reason="Which database?")
    api.submit(claims["b"], outcome="waiting", waiting_reason="Which region?")
    assert WorkItem.objects.get(pk=item.pk).status == "waiting"
    return item


def test_bulk_retry_preview_lists_each_waiting_stage_and_answers_reach_their_own_stage(api):
    store = Store(Clock())
    two = _waiting_graph(api, store).pk
    one = _waiting_linear(api)
    broken = _failed_graph(api, store)[0].pk
    rows = _preview(api, "retry", [two, one, broken])
    single = api.get(f"/work-items/{two}/retry-preview").json()["waiting_stages"]
    assert rows[two]["waiting_stages"] == single
    assert [(w["stage_id"], w["waiting_reason"]) for w in rows[two]["waiting_stages"]] == [
        ("a", "Which database?"), ("b", "Which region?")]
    assert [w["waiting_reason"] for w in rows[one]["waiting_stages"]] == ["Which database?"]
    assert rows[broken]["waiting_stages"] == []
    by_stage = {w["stage_id"]: w["action_id"] for w in rows[two]["waiting_stages"]}
    answers = {two: [{"action_id": by_stage["a"], "answer": "PostgreSQL"},
                     {"action_id": by_stage["b"], "answer": "eu-west"}],
               one: [{"action_id": rows[one]["waiting_stages"][0]["action_id"], "answer": "SQLite"}]}
    results = _apply(api, "retry", rows, reason="answered in the weekly", tokens=True, answers=answers)
    assert all(r["ok"] for r in results.values()), results
    for stage, text in (("a", "PostgreSQL"), ("b", "eu-west")):
        action = Action.objects.get(work_item_id=two, stage_id=stage, status="ready")
        assert action.context[-1]["answer"] == text
    linear = Action.objects.get(pk=WorkItem.objects.get(pk=one).current_action_id)
    assert linear.context[-1]["answer"] == "SQLite"
    retried = Event.objects.filter(work_item_id=two, type="work_item.retried").order_by("id")
    assert [e.data for e in retried] == [{"target_stage_id": "a", "reason": "answered in the weekly"},
                                         {"target_stage_id": "b", "reason": "answered in the weekly"}]
    assert WorkItem.objects.get(pk=broken).status == "ready"  # named by no answers: retried without one


def test_bulk_answers_are_checked_before_any_row(api):
    store = Store(Clock())
    two = _waiting_graph(api, store).pk
    rows = _preview(api, "retry", [two])
    action = rows[two]["waiting_stages"][0]["action_id"]
    for extra in ({"answers": {two: [{"action_id": action, "answer": "x"}]}, "answer": "y"},
                  {"answers": {"elsewhere": [{"action_id": action, "answer": "x"}]}},
                  {"answers": {two: []}}):
        body = {"operation": "retry", "ids": [two], "reason": "r", "expected_revisions": {two: 1}, **extra}
        error_of(api.post("/work-items/bulk", body), 422, "invalid_input")
    assert WorkItem.objects.get(pk=two).status == "waiting"


def test_bulk_cancel_records_the_reason_and_stops_the_runs(api):
    store = Store(Clock())
    graph, sibling = _failed_graph(api, store)
    ready = api.create(title="Fine")["id"]
    done = make_graph(store, [{"id": "x", "status": "completed"}], status="done", title="Done")
    rows = _preview(api, "cancel", [graph.pk, ready, done.pk])
    results = _apply(api, "cancel", rows, reason="  duplicate of another request  ")
    assert results[graph.pk]["ok"] and results[ready]["ok"]
    assert results[graph.pk]["work_item"]["status"] == "cancelled"
    assert (results[done.pk]["ok"], results[done.pk]["code"]) == (False, "invalid_state")
    assert Run.objects.get(pk=sibling["run"]["id"]).status == "cancelled"
    for item_id in (graph.pk, ready):
        ev = Event.objects.filter(work_item_id=item_id, type="work_item.cancelled").get()
        assert ev.data == {"reason": "duplicate of another request"} and ev.actor == "user:alice"
    # again: already cancelled is refused, not silently "ok"
    again = _apply(api, "cancel", {ready: {"revision": 1}})
    assert (again[ready]["ok"], again[ready]["code"]) == (False, "invalid_state")
    assert Event.objects.filter(work_item_id=ready, type="work_item.cancelled").count() == 1


def _bulk_body(ids, over=None):
    body = {"operation": "cancel", "ids": ids, "reason": "why", "expected_revisions": {i: 1 for i in ids}}
    body.update(over or {})
    return body


@pytest.mark.parametrize("change, field", [
    ({"ids": []}, "ids"),
    ({"ids": [f"x{k}" for k in range(201)]}, "ids"),
    ({"ids": ["A", "A"]}, "ids"),
    ({"ids": [""]}, "ids"),
    ({"reason": "   "}, "reason"),
    ({"reason": None}, "reason"),
    ({"operation": "delete"}, "operation"),
    ({"expected_revisions": {}}, "expected_revisions"),
    ({"expected_revisions": {"A": 1}}, "expected_revisions"),
    ({"expected_revisions": {"A": 1, "B": 1, "C": 1}}, "expected_revisions"),
    ({"expected_revisions": {"A": "1", "B": 1}}, "expected_revisions"),
    ({"expected_revisions": {"A": True, "B": 1}}, "expected_revisions"),
    ({"answer": " "}, "answer"),
    ({"expected_state_tokens": {}}, "expected_state_tokens"),
    ({"expected_state_tokens": {"A": 1}}, "expected_state_tokens"),
    ({"expected_state_tokens": {"A": 1, "B": 1, "C": 1}}, "expected_state_tokens"),
    ({"expected_state_tokens": {"A": "1", "B": 1}}, "expected_state_tokens"),
    ({"expected_state_tokens": {"A": -1, "B": 1}}, "expected_state_tokens"),
    ({"expected_state_tokens": {"A": 2**63, "B": 1}}, "expected_state_tokens"),
    ({"expected_state_tokens": [1, 1]}, "expected_state_tokens"),
])
def test_bad_bodies_are_422_and_nothing_is_written(api, change, field):
    a = api.create(id="A")["id"]
    b = api.create(id="B")["id"]
    before = _everything()
    body = _bulk_body([a, b], change)
    if body.get("reason") is None:
        body.pop("reason")
    r = error_of(api.post("/work-items/bulk", body), 422, "invalid_input")
    assert field in [e["field"] for e in r["extra"]["errors"]], r
    assert _everything() == before
    if "ids" in change or "operation" in change:
        preview = error_of(api.post("/work-items/bulk-preview", {"operation": body["operation"], "ids": body["ids"]}),
                           422, "invalid_input")
        assert field in [e["field"] for e in preview["extra"]["errors"]]


def test_bulk_needs_the_change_permission(viewer, anonymous):
    error_of(viewer.post("/work-items/bulk-preview", {"operation": "retry", "ids": ["x"]}), 403, "permission_denied")
    error_of(viewer.post("/work-items/bulk", _bulk_body(["x"])), 403, "permission_denied")
    error_of(anonymous.post("/work-items/bulk", _bulk_body(["x"])), 401, "not_authenticated")


def test_a_row_claimed_since_the_preview_is_refused_alone_with_state_changed(api):
    store = Store(Clock())
    a = make_graph(store, [{"id": "build"}], title="A")
    b = make_graph(store, [{"id": "build"}], title="B", status="draft")
    rows = _preview(api, "cancel", [a.pk, b.pk])
    assert rows[a.pk]["message"] == "cancels it" and rows[a.pk]["stops"] == []
    claim = api.claim()  # a worker claims A's stage; A's revision stays 1
    assert claim["work_item"]["id"] == a.pk and WorkItem.objects.get(pk=a.pk).revision == 1
    before = item_snapshot(a.pk)
    results = _apply(api, "cancel", rows, tokens=True)
    bad = results[a.pk]
    assert (bad["ok"], bad["code"], bad["work_item"]) == (False, "state_changed", None)
    assert bad["message"] == "stage build was claimed since the preview; nothing was done to it"
    assert item_snapshot(a.pk) == before and Run.objects.get(pk=claim["run"]["id"]).status == "running"
    assert results[b.pk]["ok"] and results[b.pk]["work_item"]["status"] == "cancelled"


def test_a_row_retried_and_failed_again_since_the_preview_is_refused_alone(api, make_user, token_api):
    store = Store(Clock())
    a, _ = _failed_graph(api, store, title="A")
    c, _ = _failed_graph(api, store, title="C")
    rows = _preview(api, "retry", [a.pk, c.pk])
    assert rows[a.pk]["allowed"] and rows[c.pk]["allowed"]
    bob = token_api(make_user("bob", "view_workitem", "change_workitem"))
    assert bob.post(f"/work-items/{a.pk}/retry").status_code == 200
    claims = {c["action"]["stage_id"]: c for c in (api.claim(), api.claim())}  # A's reset stages a and c
    assert {c["work_item"]["id"] for c in claims.values()} == {a.pk}
    api.submit(claims["a"], outcome="failed", error="crashed again")
    assert (WorkItem.objects.get(pk=a.pk).status, WorkItem.objects.get(pk=a.pk).revision) == ("needs_attention", 1)
    before = item_snapshot(a.pk)
    results = _apply(api, "retry", rows, tokens=True)
    bad = results[a.pk]
    assert (bad["ok"], bad["code"]) == (False, "state_changed")
    assert bad["message"].startswith("retried by user:bob, ") and "since the preview" in bad["message"], bad
    assert "a run of stage a failed" in bad["message"]
    assert item_snapshot(a.pk) == before
    assert Event.objects.filter(work_item_id=a.pk, type="work_item.retried").count() == 1
    assert results[c.pk]["ok"] and WorkItem.objects.get(pk=c.pk).status == "ready"
