"""GET /work-items at scale: sorts, keyset paging with cursors, several statuses, counts by status."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import T0
from tests.workcenter.api.support import error_of
from workcenter import selectors
from workcenter.models import WorkItem

pytestmark = pytest.mark.django_db

STATUSES = ["draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"]
RANK = {s: i for i, s in enumerate(["needs_attention", "waiting", "running", "ready", "draft", "done", "cancelled"])}


def _items(n: int = 230) -> list[WorkItem]:
    """n items with every status and many equal timestamps (ties are broken by id)."""
    rows = []
    for k in range(n):
        rows.append(WorkItem(
            id=f"it-{k:05d}", title=f"{'Deploy' if k % 3 == 0 else 'Fix'} thing {k}", goal="g",
            status=STATUSES[(k * 5) % 7], workflow_snapshot={"execution_mode": "graph"},
            # a tie every few items on both timestamps, in an order unlike the ids'
            created_at=T0 + timedelta(seconds=(k * 7) % 61), updated_at=T0 + timedelta(seconds=(k * 13) % 47),
        ))
    WorkItem.objects.bulk_create(rows)
    return list(WorkItem.objects.all())


def _expected(rows, sort: str) -> list[str]:
    """The sort's order computed in Python from the rows (stable sorts: last key first)."""
    if sort == "updated":
        rows = sorted(sorted(rows, key=lambda r: r.pk), key=lambda r: r.updated_at, reverse=True)
    elif sort == "updated_asc":
        rows = sorted(sorted(rows, key=lambda r: r.pk, reverse=True), key=lambda r: r.updated_at)
    elif sort == "created":
        rows = sorted(sorted(rows, key=lambda r: r.pk), key=lambda r: r.created_at, reverse=True)
    elif sort == "created_asc":
        rows = sorted(sorted(rows, key=lambda r: r.pk, reverse=True), key=lambda r: r.created_at)
    else:
        rows = sorted(sorted(sorted(rows, key=lambda r: r.pk), key=lambda r: r.updated_at, reverse=True),
                      key=lambda r: RANK[r.status])
    return [r.pk for r in rows]


def _all_pages(api, limit: int, **params) -> tuple[list[str], list[dict]]:
    ids, pages, cursor = [], [], None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = api.get("/work-items", query)
        assert r.status_code == 200, r.content
        body = r.json()
        pages.append(body)
        ids += [i["id"] for i in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return ids, pages
        assert len(body["items"]) == limit
        assert len(pages) < 100


@pytest.mark.parametrize("sort", ["updated", "updated_asc", "created", "created_asc", "status"])
def test_every_sort_pages_through_every_item_once_in_its_order(api, sort):
    rows = _items()
    ids, pages = _all_pages(api, 37, sort=sort)
    assert ids == _expected(rows, sort)
    assert len(pages) == 7 and len(pages[-1]["items"]) == 230 - 6 * 37
    assert all(p["count"] == 230 for p in pages)


def test_the_default_sort_is_updated_and_a_page_exactly_at_the_end_has_no_next_cursor(api):
    rows = _items(40)
    body = api.get("/work-items", {"limit": 40}).json()
    assert [i["id"] for i in body["items"]] == _expected(rows, "updated")
    assert body["next_cursor"] is None


def test_several_statuses_filter_and_counts_ignore_the_filter(api):
    rows = _items()
    ids, pages = _all_pages(api, 25, status="waiting,needs_attention", sort="status")
    wanted = [r for r in rows if r.status in ("waiting", "needs_attention")]
    assert ids == _expected(wanted, "status")
    assert ids[0] in {r.pk for r in rows if r.status == "needs_attention"}
    by_status = {s: sum(1 for r in rows if r.status == s) for s in STATUSES}
    for page in pages:
        assert page["count"] == len(wanted)
        assert page["counts"] == by_status
    one = api.get("/work-items", {"status": "done", "sort": "created_asc", "limit": 500}).json()
    assert [i["id"] for i in one["items"]] == _expected([r for r in rows if r.status == "done"], "created_asc")
    assert one["count"] == by_status["done"] and one["counts"] == by_status


def test_search_narrows_items_count_and_counts(api):
    rows = _items()
    ids, pages = _all_pages(api, 30, search="deploy", sort="updated_asc", status="ready,done,cancelled")
    matching = [r for r in rows if "Deploy" in r.title]
    wanted = [r for r in matching if r.status in ("ready", "done", "cancelled")]
    assert ids == _expected(wanted, "updated_asc")
    assert pages[0]["count"] == len(wanted)
    assert pages[0]["counts"] == {s: sum(1 for r in matching if r.status == s) for s in STATUSES}


def test_session_filter_pages_with_a_cursor(api):
    rows = _items(30)
    linked = sorted(rows, key=lambda r: r.pk)[::2]
    WorkItem.objects.filter(pk__in=[r.pk for r in linked]).update(linked_session_ids=["sess-1"])
    ids, pages = _all_pages(api, 4, session_id="sess-1", sort="created")
    assert ids == _expected(linked, "created")
    assert pages[0]["count"] == 15 and sum(pages[0]["counts"].values()) == 15


def test_an_item_updated_between_pages_is_not_shown_twice(api):
    rows = _items(20)
    first = api.get("/work-items", {"limit": 10}).json()
    seen = [i["id"] for i in first["items"]]
    # the last item of the first page becomes the newest: keyset paging does not repeat it
    WorkItem.objects.filter(pk=seen[-1]).update(updated_at=T0 + timedelta(days=1))
    rest = api.get("/work-items", {"limit": 10, "cursor": first["next_cursor"]}).json()
    assert not set(seen) & {i["id"] for i in rest["items"]}
    assert [i["id"] for i in rest["items"]] == _expected(rows, "updated")[10:]


@pytest.mark.parametrize("params, field", [
    ({"status": "waiting,nope"}, "status"),
    ({"status": "Waiting"}, "status"),
    ({"status": "waiting,"}, "status"),
    ({"sort": "title"}, "sort"),
    ({"cursor": "not a cursor"}, "cursor"),
    ({"cursor": "bm90LWpzb24"}, "cursor"),  # base64 of "not-json"
    ({"cursor": "WyJ1cGRhdGVkIixudWxsLCJ4IiwiaWQiXQ"}, "cursor"),  # a bad timestamp
])
def test_bad_list_parameters_are_422_naming_the_parameter(api, params, field):
    body = error_of(api.get("/work-items", params), 422, "invalid_input")
    assert field in [e["field"] for e in body["extra"]["errors"]], body


def test_a_cursor_made_for_another_sort_is_refused(api):
    _items(10)
    cursor = api.get("/work-items", {"limit": 3, "sort": "created"}).json()["next_cursor"]
    body = error_of(api.get("/work-items", {"cursor": cursor, "sort": "updated"}), 422, "invalid_input")
    assert [e["field"] for e in body["extra"]["errors"]] == ["cursor"]
    assert "sort=created" in body["message"]
    status_cursor = api.get("/work-items", {"limit": 3, "sort": "status"}).json()["next_cursor"]
    error_of(api.get("/work-items", {"cursor": status_cursor, "sort": "created"}), 422, "invalid_input")


def test_a_page_is_a_few_fixed_statements_with_one_group_by_for_the_counts(api):
    _items()
    for sort in ("updated", "status"):
        cursor = api.get("/work-items", {"limit": 50, "sort": sort}).json()["next_cursor"]
        with CaptureQueriesContext(connection) as ctx:
            page = selectors.work_item_list(limit=50, sort=sort, cursor=cursor)
        assert len(page["items"]) == 50
        sql = [q["sql"] or "" for q in ctx.captured_queries]
        item_reads = [s for s in sql if 'FROM "workcenter_workitem"' in s]
        assert sum("GROUP BY" in s and "COUNT" in s.upper() for s in item_reads) == 1
        assert not any("OFFSET" in s.upper() for s in sql)
        assert len(sql) <= 10, sql
