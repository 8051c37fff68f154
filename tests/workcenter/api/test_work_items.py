"""Work item routes (API.md §2): success paths, payload shapes and the error codes of §0."""
from __future__ import annotations

import os

import pytest

from workcenter.models import Action, Event, WorkItem

from .conftest import ISO_MS, fence
from .support import error_of

pytestmark = pytest.mark.django_db

COUNTERS = {"llm_request_count", "loop_count", "tool_count", "input_tokens", "output_tokens",
            "cache_read_tokens", "cache_write_tokens", "total_tokens"}


def _field_names(body: dict) -> list[str]:
    return [e["field"] for e in body["extra"]["errors"]]


# --- create ------------------------------------------------------------------------------------

def test_create_returns_201_with_the_full_detail(api, tmp_path):
    # when
    r = api.post("/work-items", {"title": " Ship it ", "goal": "Make it so", "acceptance_criteria": ["a", " ", "b"],
                                 "work_dir": str(tmp_path), "linked_session_ids": ["s1", "s1", "s2"],
                                 "origin": {"session_id": "s1", "message_id": "m1", "created_by": "bob"}})
    # then
    assert r.status_code == 201, r.content
    item = r.json()
    assert item["title"] == "Ship it"
    assert item["status"] == "ready"
    assert item["revision"] == 1
    assert item["acceptance_criteria"] == ["a", "b"]
    assert item["work_dir"] == item["workspace_key"] == os.path.realpath(tmp_path)
    assert item["workflow_template"] == "ai-planned"
    assert item["planning_mode"] == "ai" and item["execution_mode"] == "linear"
    assert item["workflow_snapshot"]["id"] == "ai-planned"
    assert item["linked_session_ids"] == ["s1", "s2"]
    assert item["origin"] == {"session_id": "s1", "message_id": "m1", "created_by": "bob", "trusted_session": False}
    assert item["current_run_id"] is None
    assert set(item["execution_stats"]) == COUNTERS
    assert ISO_MS.match(item["created_at"]) and ISO_MS.match(item["updated_at"])
    [action] = item["actions"]
    assert item["current_action_id"] == action["id"]
    assert action["type"] == action["stage_id"] == "triage"
    assert action["status"] == "ready" and action["sequence"] == 1 and action["work_item_id"] == item["id"]
    assert set(action["execution_stats"]) == COUNTERS
    for key in ("assignment_policy", "model_policy", "depends_on_stage_ids", "workspace_mode",
                "changes_requested_stage_id", "workspace", "required_role", "instruction", "brief", "context",
                "contract_revision", "attempt", "max_attempts", "current_run_id", "lease_epoch"):
        assert key in action, key
    assert item["runs"] == []
    [event] = item["events"]
    assert event["type"] == "work_item.created"
    assert event["data"] == {"status": "ready"}
    assert event["actor"] == "user:alice"
    assert event["work_item_id"] == item["id"] and event["action_id"] == action["id"]
    assert ISO_MS.match(event["created_at"])


def test_create_without_start_is_a_draft(api):
    item = api.create(start=False)
    assert item["status"] == "draft"
    assert item["actions"] == []


def test_create_with_a_caller_id_and_duplicate_is_409(api):
    item = api.create(id="my-item")
    assert item["id"] == "my-item"
    body = error_of(api.post("/work-items", {"title": "T", "goal": "G", "id": "my-item"}), 409, "invalid_state")
    assert "my-item" in body["message"]
    assert WorkItem.objects.count() == 1


def test_create_missing_title_is_422(api):
    body = error_of(api.post("/work-items", {"goal": "G"}), 422, "invalid_input")
    assert _field_names(body) == ["title"]
    body = error_of(api.post("/work-items", {"title": "   ", "goal": "G"}), 422, "invalid_input")
    assert _field_names(body) == ["title"]
    assert WorkItem.objects.count() == 0


@pytest.mark.parametrize("work_dir", ["/definitely/not/here", "", "   ", None, 42])
def test_create_bad_work_dir_is_422_mentioning_workDir(api, work_dir):
    body = error_of(api.post("/work-items", {"title": "T", "goal": "G", "work_dir": work_dir}), 422, "invalid_input")
    assert "workDir" in body["message"]
    assert _field_names(body) == ["work_dir"]
    assert WorkItem.objects.count() == 0 and Event.objects.count() == 0


def test_create_without_work_dir_uses_the_default_setting(api, settings, tmp_path):
    settings.WORKCENTER_DEFAULT_WORK_DIR = str(tmp_path)
    assert api.create()["work_dir"] == os.path.realpath(tmp_path)


def test_create_wrong_types_are_422_with_snake_case_fields(api):
    body = error_of(api.post("/work-items", {"title": "T", "goal": "G", "acceptance_criteria": "one",
                                           "reuse_memory": "maybe"}), 422, "invalid_input")
    assert set(_field_names(body)) == {"acceptance_criteria", "reuse_memory"}


def test_malformed_json_is_400(api):
    body = error_of(api.post("/work-items", '{"title": "T",'), 400, "bad_request")
    assert "JSON" in body["message"]
    assert WorkItem.objects.count() == 0


def test_non_object_body_is_422(api):
    error_of(api.post("/work-items", "[1, 2]"), 422, "invalid_input")
    error_of(api.post("/work-items", '"text"'), 422, "invalid_input")


# --- list and read -----------------------------------------------------------------------------

def test_list_is_newest_first_with_count_and_summary_shape(api):
    first = api.create(title="Alpha", goal="find me")
    second = api.create(title="Beta", linked_session_ids=["sess-9"])
    api.create(title="Gamma", start=False)
    # when
    r = api.get("/work-items", {"limit": 2})
    # then
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == 3
    assert [i["title"] for i in body["items"]] == ["Gamma", "Beta"]
    beta = body["items"][1]
    assert set(beta) == {"id", "revision", "title", "goal", "status", "workflow_template", "work_item_type",
                         "planning_mode", "execution_mode", "current_action", "execution_stats", "action_counts",
                         "created_at", "updated_at", "work_dir", "workspace_key", "attention"}
    assert beta["current_action"] == {"id": second["current_action_id"], "type": "triage",
                                      "stage_id": "triage", "status": "ready"}
    assert beta["action_counts"] == {"ready": 1}
    assert body["items"][0]["current_action"] is None
    # filters
    assert [i["id"] for i in api.get("/work-items", {"search": "FIND"}).json()["items"]] == [first["id"]]
    assert [i["id"] for i in api.get("/work-items", {"session_id": "sess-9"}).json()["items"]] == [second["id"]]
    drafts = api.get("/work-items", {"status": "draft"}).json()
    assert drafts["count"] == 1 and drafts["items"][0]["title"] == "Gamma"


@pytest.mark.parametrize("limit", [0, -1, 501, "x"])
def test_list_limit_outside_range_is_422(api, limit):
    body = error_of(api.get("/work-items", {"limit": limit}), 422, "invalid_input")
    assert _field_names(body) == ["limit"]


def test_list_unknown_status_is_422(api):
    body = error_of(api.get("/work-items", {"status": "sleeping"}), 422, "invalid_input")
    assert _field_names(body) == ["status"]


def test_get_unknown_item_is_404(api):
    for path in ("/work-items/nope", "/work-items/nope/graph", "/work-items/nope/events",
                 "/work-items/nope/retry-preview"):
        body = error_of(api.get(path), 404, "not_found")
        assert "nope" in body["message"]
    error_of(api.post("/work-items/nope/start"), 404, "not_found")
    error_of(api.post("/work-items/nope/cancel"), 404, "not_found")
    error_of(api.patch("/work-items/nope", {"title": "x"}), 404, "not_found")
    error_of(api.post("/work-items/nope/retry", {"answer": "x"}), 404, "not_found")


def test_get_detail_lists_runs_newest_first_and_events_highest_first(api, viewer):
    item = api.create()
    claim = api.claim()
    api.post(f"/runs/{claim['run']['id']}/interrupt", {**fence(claim), "reason": "stop"})
    api.claim()
    # when
    r = viewer.get(f"/work-items/{item['id']}")
    # then
    assert r.status_code == 200
    detail = r.json()
    assert [run["status"] for run in detail["runs"]] == ["running", "interrupted"]
    ids = [e["id"] for e in detail["events"]]
    assert ids == sorted(ids, reverse=True)
    assert [e["type"] for e in detail["events"]] == ["run.claimed", "run.interrupted", "run.claimed",
                                                     "work_item.created"]
    run = detail["runs"][0]
    assert ISO_MS.match(run["started_at"]) and ISO_MS.match(run["expires_at"]) and run["ended_at"] is None
    assert ISO_MS.match(detail["runs"][1]["ended_at"])


# --- start, cancel, update ---------------------------------------------------------------------

def test_start_a_draft(api):
    item = api.create(start=False)
    r = api.post(f"/work-items/{item['id']}/start")
    assert r.status_code == 200
    detail = r.json()
    assert detail["status"] == "ready"
    assert [a["type"] for a in detail["actions"]] == ["triage"]
    assert detail["events"][0]["type"] == "work_item.started"
    assert detail["events"][0]["actor"] == "user:alice"


def test_start_of_a_running_item_is_409_invalid_state(api):
    item = api.create()
    api.claim()
    body = error_of(api.post(f"/work-items/{item['id']}/start"), 409, "invalid_state")
    assert "must be resumed with retry" in body["message"]


def test_cancel_and_cancel_of_done_is_409(api):
    item = api.create()
    claim = api.claim()
    r = api.post(f"/work-items/{item['id']}/cancel")
    assert r.status_code == 200
    detail = r.json()
    assert detail["status"] == "cancelled"
    assert detail["runs"][0]["status"] == "cancelled"
    assert detail["actions"][0]["status"] == "cancelled"
    # the cancelled run's late submission is stale
    body = api.submit(claim, expect=409, outcome="completed")
    assert body["code"] == "stale_run" and "cancelled" in body["message"]
    # a done item cannot be cancelled
    done = api.create(workflow=None, start=False)
    WorkItem.objects.filter(pk=done["id"]).update(status="done")
    body = error_of(api.post(f"/work-items/{done['id']}/cancel"), 409, "invalid_state")
    assert "cannot be cancelled" in body["message"]


def test_patch_title_only_is_not_a_contract_change(api):
    item = api.create()
    r = api.patch(f"/work-items/{item['id']}", {"title": "Renamed"})
    assert r.status_code == 200
    detail = r.json()
    assert detail["title"] == "Renamed" and detail["revision"] == 1
    event = detail["events"][0]
    assert event["type"] == "work_item.updated"
    assert event["data"] == {"revision": 1, "changed_fields": ["title"]}
    assert event["actor"] == "user:alice"


def test_patch_contract_change_retriages(api):
    item = api.create(acceptance_criteria=["a"])
    claim = api.claim()
    r = api.patch(f"/work-items/{item['id']}", {"goal": "New goal", "acceptance_criteria": ["a", "b"],
                                               "expected_revision": 1})
    assert r.status_code == 200, r.content
    detail = r.json()
    assert detail["revision"] == 2
    assert detail["goal"] == "New goal"
    assert [a["status"] for a in detail["actions"]] == ["superseded", "ready"]
    assert detail["events"][0]["type"] == "workflow.retriaged"
    assert detail["events"][0]["data"]["changed_fields"] == ["goal", "acceptance_criteria"]
    assert api.submit(claim, expect=409, outcome="completed")["code"] == "stale_run"


def test_patch_with_stale_expected_revision_is_409_revision_conflict(api):
    item = api.create()
    body = error_of(api.patch(f"/work-items/{item['id']}", {"goal": "x", "expected_revision": 7}),
                  409, "revision_conflict")
    assert body["extra"]["revision"] == 1
    assert WorkItem.objects.get(pk=item["id"]).goal == "Do the thing"


def test_patch_bad_work_dir_is_422(api):
    item = api.create()
    body = error_of(api.patch(f"/work-items/{item['id']}", {"work_dir": "/no/such/dir"}), 422, "invalid_input")
    assert "workDir" in body["message"]


def test_patch_of_cancelled_item_is_409(api):
    item = api.create()
    api.post(f"/work-items/{item['id']}/cancel")
    body = error_of(api.patch(f"/work-items/{item['id']}", {"goal": "x"}), 409, "invalid_state")
    assert "its contract can no longer be edited" in body["message"]


# --- guidance ----------------------------------------------------------------------------------

def test_guidance_restarts_the_current_action(api):
    item = api.create()
    old = item["current_action_id"]
    r = api.post(f"/work-items/{item['id']}/guidance", {"action_id": old, "revision": 1, "guidance": " focus "})
    assert r.status_code == 200, r.content
    detail = r.json()
    assert [a["status"] for a in detail["actions"]] == ["superseded", "ready"]
    assert detail["current_action_id"] == detail["actions"][1]["id"]
    assert detail["actions"][1]["context"][-1]["summary"] == "focus"
    assert detail["events"][0]["type"] == "action.guidance_added"
    assert detail["events"][0]["data"] == {"guidance": "focus"}


def test_guidance_on_a_changed_action_is_409_revision_conflict(api):
    item = api.create()
    old = item["current_action_id"]
    api.post(f"/work-items/{item['id']}/guidance", {"action_id": old, "revision": 1, "guidance": "one"})
    body = error_of(api.post(f"/work-items/{item['id']}/guidance", {"action_id": old, "revision": 1,
                                                                  "guidance": "two"}), 409, "revision_conflict")
    assert "the stage changed before your guidance" in body["message"]


def test_blank_guidance_is_422(api):
    item = api.create()
    body = error_of(api.post(f"/work-items/{item['id']}/guidance",
                           {"action_id": item["current_action_id"], "revision": 1, "guidance": "   "}),
                  422, "invalid_input")
    assert _field_names(body) == ["guidance"]
    body = error_of(api.post(f"/work-items/{item['id']}/guidance", {"guidance": "x"}), 422, "invalid_input")
    assert set(_field_names(body)) == {"action_id", "revision"}
    assert Action.objects.count() == 1


# --- retry and its preview ---------------------------------------------------------------------

def _waiting_item(api):
    item = api.create()
    claim = api.claim()
    api.submit(claim, outcome="waiting", waiting_reason="Which database?")
    return item


def test_retry_of_waiting_item_needs_an_answer(api):
    item = _waiting_item(api)
    body = error_of(api.post(f"/work-items/{item['id']}/retry", {}), 422, "invalid_input")
    assert "answer is required" in body["message"]
    assert _field_names(body) == ["answer"]
    error_of(api.post(f"/work-items/{item['id']}/retry"), 422, "invalid_input")  # no body at all
    # when
    r = api.post(f"/work-items/{item['id']}/retry", {"answer": "PostgreSQL"})
    # then
    assert r.status_code == 200, r.content
    detail = r.json()
    assert detail["status"] == "ready"
    assert len(detail["actions"]) == 2
    assert detail["actions"][1]["context"][-1]["answer"] == "PostgreSQL"
    assert detail["events"][0]["type"] == "work_item.retried"


def test_retry_of_ready_item_is_409(api):
    item = api.create()
    body = error_of(api.post(f"/work-items/{item['id']}/retry", {"answer": "x"}), 409, "invalid_state")
    assert "only an item that is waiting or needs attention can be retried" in body["message"]


def test_retry_preview_of_a_linear_item(api):
    item = api.create()
    claim = api.claim()
    api.submit(claim, outcome="failed", error="boom")
    # when
    r = api.get(f"/work-items/{item['id']}/retry-preview")
    # then
    assert r.status_code == 200, r.content
    assert r.json() == {"target_action_id": claim["action"]["id"], "target_stage_id": "triage", "mode": "linear",
                        "reset_action_ids": [], "superseded_run_ids": [], "new_action": True, "waiting_stages": [],
                        "state_token": Event.objects.filter(work_item_id=item["id"]).order_by("-id")[0].id}
    # nothing was written
    assert Action.objects.count() == 1
    assert api.get(f"/work-items/{item['id']}").json()["status"] == "needs_attention"
    # and a retry without answer is allowed from needs_attention
    assert api.post(f"/work-items/{item['id']}/retry").json()["status"] == "ready"


def test_retry_preview_when_retry_is_not_allowed_is_409(api):
    item = api.create()
    body = error_of(api.get(f"/work-items/{item['id']}/retry-preview"), 409, "invalid_state")
    assert "only an item that is waiting or needs attention can be retried" in body["message"]


# --- events ------------------------------------------------------------------------------------

def test_item_events_after_id_and_last_id(api):
    item = api.create()
    other = api.create()
    api.claim()
    all_item = api.get(f"/work-items/{item['id']}/events").json()
    assert [e["type"] for e in all_item["events"]] == ["work_item.created", "run.claimed"]
    assert all(e["work_item_id"] == item["id"] for e in all_item["events"])
    assert all_item["last_id"] == all_item["events"][-1]["id"]
    first_id = all_item["events"][0]["id"]
    page = api.get(f"/work-items/{item['id']}/events", {"after_id": first_id, "limit": 1}).json()
    assert [e["type"] for e in page["events"]] == ["run.claimed"]
    assert page["events"][0]["actor"] == "worker:boot-A"
    empty = api.get(f"/work-items/{item['id']}/events", {"after_id": all_item["last_id"]}).json()
    assert empty == {"events": [], "last_id": all_item["last_id"]}
    # the global stream
    stream = api.get("/events").json()
    assert [e["id"] for e in stream["events"]] == sorted(e["id"] for e in stream["events"])
    assert {e["work_item_id"] for e in stream["events"]} == {item["id"], other["id"]}
    assert stream["last_id"] == max(e["id"] for e in stream["events"])
    assert api.get("/events", {"after_id": stream["last_id"]}).json() == {"events": [], "last_id": stream["last_id"]}


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"after_id": -1}, {"after_id": "x"}])
def test_events_bad_query_is_422(api, params):
    item = api.create()
    error_of(api.get("/events", params), 422, "invalid_input")
    error_of(api.get(f"/work-items/{item['id']}/events", params), 422, "invalid_input")


@pytest.mark.parametrize("session", ["sess-1", "Sitzung «ü» \"q\""])
def test_list_session_filter_matches_origin_or_linked_ids_exactly(api, session):
    by_origin = api.create(title="origin", origin={"session_id": session})
    by_link = api.create(title="linked", linked_session_ids=["other", session])
    api.create(title="prefix only", linked_session_ids=[session + "x"], origin={"session_id": "x" + session})
    api.create(title="none")
    body = api.get("/work-items", {"session_id": session}).json()
    assert body["count"] == 2
    assert {i["id"] for i in body["items"]} == {by_origin["id"], by_link["id"]}
