"""Bad input never becomes a 500 (API.md §0): out-of-range integers, text no database can store."""
from __future__ import annotations

import pytest

from workcenter.models import Run, WorkItem

from .conftest import fence

pytestmark = pytest.mark.django_db

HUGE = 10**30


@pytest.fixture
def running(api):
    item = api.create()
    return item, api.claim()


@pytest.mark.parametrize("path,body,field", [
    ("progress", {"loop_count": HUGE}, "loop_count"),
    ("progress", {"total_tokens": 1e300}, "total_tokens"),
    ("renew", {"lease_ms": HUGE}, "lease_ms"),
    ("renew", {"lease_ms": 10**15}, "lease_ms"),
    ("renew", {"lease_epoch": HUGE}, "lease_epoch"),
    ("integration/reservation", {"reservation_ms": 10**15}, "reservation_ms"),
    ("interrupt", {"final_progress": {"loopCount": HUGE}}, "final_progress"),
    ("submit", {"outcome": "failed", "cache_read_tokens": 10**25}, "cache_read_tokens"),
])
def test_out_of_range_worker_numbers_are_422(api, running, path, body, field):
    _item, claim = running
    r = api.post(f"/runs/{claim['run']['id']}/{path}", {**fence(claim), **body})
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == [field]
    run = Run.objects.get()
    assert run.status == "running" and run.loop_count == 0


def test_out_of_range_item_numbers_are_422(api, running):
    item, claim = running
    for response, field in (
        (api.post("/claims", {"owner_boot_id": "x", "lease_ms": 10**15}), "lease_ms"),
        (api.get("/events", {"after_id": HUGE}), "after_id"),
        (api.patch(f"/work-items/{item['id']}", {"title": "x", "expected_revision": HUGE}), "expected_revision"),
        (api.post(f"/work-items/{item['id']}/guidance", {"action_id": "a", "revision": HUGE, "guidance": "x"}),
         "revision"),
    ):
        assert response.status_code == 422, response.content
        assert [e["field"] for e in response.json()["extra"]["errors"]] == [field]


def test_unstorable_text_is_422(api):
    for response, field in (
        (api.post("/work-items", {"title": "a\u0000b", "goal": "g"}), "title"),
        (api.post("/work-items", '{"title": "a\\ud800", "goal": "g"}'), "title"),
        (api.post("/work-items", {"title": "t", "goal": "g", "origin": {"session_id": "x\u0000"}}), "origin"),
        (api.get("/work-items", {"search": "a\u0000"}), "search"),
    ):
        assert response.status_code == 422, response.content
        body = response.json()
        assert body["code"] == "invalid_input" and "NUL" in body["message"]
        assert [e["field"] for e in body["extra"]["errors"]] == [field]
    assert WorkItem.objects.count() == 0


def test_unstorable_path_parameter_is_not_a_500(api):
    # SQLite finds nothing (404); PostgreSQL refuses to compare NUL text (422)
    for response in (api.get("/work-items/a%00b"), api.post("/work-items/a%00b/start")):
        assert response.status_code in (404, 422), response.content
        assert response.json()["code"] in ("not_found", "invalid_input")
