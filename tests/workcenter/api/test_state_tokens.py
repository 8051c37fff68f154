"""The single-item retry and cancel fenced by the state token a preview showed: GET retry-preview
returns it, POST retry / cancel take it (`expected_state_token`) and refuse with 409 state_changed,
nothing written, once the item moved (a claim, a failure, a retry elsewhere)."""
from __future__ import annotations

import pytest

from tests.conftest import item_snapshot
from tests.workcenter.api.support import error_of
from workcenter.models import Event, Run, WorkItem

pytestmark = pytest.mark.django_db


def _newest(item_id) -> int:
    return Event.objects.filter(work_item_id=item_id).order_by("-id")[0].id


def _needs_attention(api, title="Broken"):
    """A linear item whose implement stage failed for good (max attempts reached)."""
    item = api.create(title=title)
    api.complete(api.claim())  # triage
    for _ in range(5):
        claim = api.claim()
        if claim is None:
            break
        api.submit(claim, outcome="failed", error="crashed")
        if WorkItem.objects.get(pk=item["id"]).status == "needs_attention":
            break
    assert WorkItem.objects.get(pk=item["id"]).status == "needs_attention"
    return item["id"]


def test_retry_preview_returns_the_token_and_a_stale_one_is_refused_without_a_write(api, make_user, token_api):
    item_id = _needs_attention(api)
    seen = api.get(f"/work-items/{item_id}/retry-preview").json()["state_token"]
    assert seen == _newest(item_id)
    # bob retries it elsewhere and it fails again: needs_attention again, the same revision
    bob = token_api(make_user("bob", "view_workitem", "change_workitem"))
    assert bob.post(f"/work-items/{item_id}/retry").status_code == 200
    while WorkItem.objects.get(pk=item_id).status != "needs_attention":
        api.submit(api.claim(), outcome="failed", error="crashed again")
    assert WorkItem.objects.get(pk=item_id).revision == 1
    before = item_snapshot(item_id)
    body = error_of(api.post(f"/work-items/{item_id}/retry", {"expected_state_token": seen}), 409, "state_changed")
    assert body["message"].startswith("retried by user:bob, ") and body["message"].endswith("since the preview")
    assert "claimed" in body["message"] and "failed" in body["message"]
    assert body["extra"]["state_token"] == _newest(item_id) and body["extra"]["expected_state_token"] == seen
    assert item_snapshot(item_id) == before
    fresh = api.get(f"/work-items/{item_id}/retry-preview").json()["state_token"]
    assert fresh == _newest(item_id) != seen
    r = api.post(f"/work-items/{item_id}/retry", {"expected_state_token": fresh})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "ready"


def test_cancel_takes_an_optional_token(api):
    item = api.create(title="Claimed meanwhile")["id"]
    seen = _newest(item)
    claim = api.claim()
    assert claim["work_item"]["id"] == item
    before = item_snapshot(item)
    body = error_of(api.post(f"/work-items/{item}/cancel", {"expected_state_token": seen}), 409, "state_changed")
    assert body["message"] == "stage triage was claimed since the preview"
    assert item_snapshot(item) == before and Run.objects.get(pk=claim["run"]["id"]).status == "running"
    r = api.post(f"/work-items/{item}/cancel", {"expected_state_token": _newest(item)})
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    # no body, or an empty one: no fence, as before
    other = api.create(title="Plain")["id"]
    assert api.post(f"/work-items/{other}/cancel").json()["status"] == "cancelled"
    third = api.create(title="Empty body")["id"]
    assert api.post(f"/work-items/{third}/cancel", {}).json()["status"] == "cancelled"


@pytest.mark.parametrize("route", ["cancel", "retry"])
@pytest.mark.parametrize("token", ["1", -1, 2**63, 1.5, True])
def test_a_bad_token_is_422_and_nothing_is_written(api, route, token):
    item_id = _needs_attention(api)
    before = item_snapshot(item_id)
    body = error_of(api.post(f"/work-items/{item_id}/{route}", {"expected_state_token": token}), 422, "invalid_input")
    assert "expected_state_token" in [e["field"] for e in body["extra"]["errors"]]
    assert item_snapshot(item_id) == before


def test_the_document_describes_the_tokens(api):
    doc = api.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "expected_state_token" in schemas["RetryIn"]["properties"]
    assert "expected_state_token" in schemas["CancelIn"]["properties"]
    assert "expected_state_tokens" in schemas["BulkIn"]["properties"]
    assert "expected_state_tokens" not in schemas["BulkIn"].get("required", [])
    assert "state_token" in schemas["RetryPreviewOut"]["required"]
    assert "state_token" in schemas["BulkPreviewRowOut"]["properties"]
    cancel = doc["paths"]["/api/v1/work-items/{item_id}/cancel"]["post"]
    assert cancel["requestBody"]["content"]["application/json"]["schema"]["type"] == "object"
    assert "409" in cancel["responses"]
