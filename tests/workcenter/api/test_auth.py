"""Authentication and permissions (API.md §1): tokens, sessions with CSRF, 401 vs 403."""
from __future__ import annotations

import pytest
from django.test import Client

from workcenter.auth import api_token_create, token_hash
from workcenter.models import ApiToken, Event

from .conftest import CHANGE, DEFINE, RUN, VIEW, Api

pytestmark = pytest.mark.django_db


def _assert_error(response, status: int, code: str):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "extra"}
    assert body["code"] == code
    assert body["message"]
    return body


# --- 401 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("get", "/work-items"),
    ("post", "/work-items"),
    ("get", "/work-items/x"),
    ("get", "/work-items/x/graph"),
    ("get", "/events"),
    ("post", "/claims"),
    ("post", "/runs/r/submit"),
    ("post", "/recoveries"),
])
def test_routes_without_credentials_are_401(anonymous, method, path):
    r = getattr(anonymous, method)(path, {"owner_boot_id": "b"} if method == "post" else None)
    _assert_error(r, 401, "not_authenticated")


def test_invalid_token_is_401(make_user):
    make_user("alice", VIEW)
    for header in ("Bearer wc_nope_secret", "Bearer garbage", "Bearer ", "Basic YWxpY2U6cHc="):
        r = Api(Client(HTTP_AUTHORIZATION=header)).get("/work-items")
        _assert_error(r, 401, "not_authenticated")


def test_token_with_wrong_secret_is_401(make_user):
    user = make_user("alice", VIEW)
    _, raw = api_token_create(user=user, name="ci")
    tampered = raw[:-2] + ("AA" if not raw.endswith("AA") else "BB")
    r = Api(Client(HTTP_AUTHORIZATION=f"Bearer {tampered}")).get("/work-items")
    _assert_error(r, 401, "not_authenticated")


def test_revoked_token_is_401(make_user, token_api):
    client = token_api(make_user("alice", VIEW))
    assert client.get("/work-items").status_code == 200
    ApiToken.objects.update(revoked_at="2026-01-01T00:00:00Z")
    _assert_error(client.get("/work-items"), 401, "not_authenticated")


def test_token_of_inactive_user_is_401(make_user, token_api):
    client = token_api(make_user("alice", VIEW))
    client.user.is_active = False
    client.user.save()
    _assert_error(client.get("/work-items"), 401, "not_authenticated")


def test_token_stores_only_the_hash_and_marks_use(make_user, token_api):
    client = token_api(make_user("alice", VIEW))
    row = ApiToken.objects.get()
    prefix, secret = client.token.split("_", 2)[1:]
    assert row.prefix == prefix
    assert row.token_hash == token_hash(secret)
    assert secret not in row.token_hash and row.last_used_at is None
    assert client.get("/work-items").status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_invalid_bearer_does_not_fall_back_to_the_session(make_user):
    client = Client(HTTP_AUTHORIZATION="Bearer wc_bad_token")
    client.force_login(make_user("alice", VIEW))
    _assert_error(Api(client).get("/work-items"), 401, "not_authenticated")


# --- 403 ---------------------------------------------------------------------------------------

def test_view_only_user_cannot_change(viewer, api):
    item = api.create()
    body = _assert_error(viewer.post("/work-items", {"title": "T", "goal": "G"}), 403, "permission_denied")
    assert "workcenter.change_workitem" in body["message"]
    _assert_error(viewer.post(f"/work-items/{item['id']}/cancel"), 403, "permission_denied")
    _assert_error(viewer.patch(f"/work-items/{item['id']}", {"title": "x"}), 403, "permission_denied")
    # nothing happened
    assert api.get(f"/work-items/{item['id']}").json()["status"] == "ready"


def test_view_only_user_cannot_use_the_worker_protocol(viewer, api):
    api.create()
    body = _assert_error(viewer.post("/claims", {"owner_boot_id": "b"}), 403, "permission_denied")
    assert "workcenter.run_actions" in body["message"]
    _assert_error(viewer.post("/recoveries", {"owner_boot_id": "b"}), 403, "permission_denied")
    _assert_error(viewer.post("/runs/r/renew", {"owner_boot_id": "b", "lease_epoch": 1}), 403, "permission_denied")
    assert not Event.objects.filter(type="run.claimed").exists()


def test_user_without_view_cannot_read(make_user, token_api):
    worker = token_api(make_user("robot", RUN))
    _assert_error(worker.get("/work-items"), 403, "permission_denied")
    _assert_error(worker.get("/events"), 403, "permission_denied")


def test_worker_permission_alone_allows_claims(make_user, token_api, api):
    api.create()
    worker = token_api(make_user("robot", RUN))
    r = worker.post("/claims", {"owner_boot_id": "boot-R"})
    assert r.status_code == 201
    assert r.json()["run"]["owner_boot_id"] == "boot-R"


def test_superuser_has_every_permission(make_user, token_api):
    root = token_api(make_user("root", superuser=True))
    item = root.create(workflow={"id": "solo", "stages": [{"id": "only", "type": "implement"}]})
    assert item["workflow_template"] == "solo"
    assert root.claim()["action"]["stage_id"] == "only"


def test_workflow_is_honoured_only_with_define_workflows(make_user, token_api):
    workflow = {"id": "solo", "stages": [{"id": "only", "type": "implement"}]}
    plain = token_api(make_user("plain", VIEW, CHANGE)).create(workflow=workflow)
    assert plain["workflow_template"] == "ai-planned"
    assert [a["type"] for a in plain["actions"]] == ["triage"]
    assert plain["origin"] is None
    trusted = token_api(make_user("trusted", VIEW, CHANGE, DEFINE)).create(
        workflow=workflow, origin={"session_id": "s1"})
    assert trusted["workflow_template"] == "solo"
    assert [a["stage_id"] for a in trusted["actions"]] == ["only"]
    assert trusted["origin"]["trusted_session"] is True


# --- sessions and CSRF -------------------------------------------------------------------------

def test_session_reads_without_csrf(make_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("alice", VIEW))
    r = Api(client).get("/work-items")
    assert r.status_code == 200
    assert r.json()["items"] == [] and r.json()["count"] == 0


def test_session_posts_require_csrf(make_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("alice", VIEW, CHANGE))
    session = Api(client)

    body = _assert_error(session.post("/work-items", {"title": "T", "goal": "G"}), 403, "permission_denied")
    assert "CSRF" in body["message"]
    assert session.get("/work-items").json()["count"] == 0

    client.cookies["csrftoken"] = "a" * 32
    r = session.post("/work-items", {"title": "T", "goal": "G"}, HTTP_X_CSRFTOKEN="a" * 32)
    assert r.status_code == 201, r.content
    event = Event.objects.get(type="work_item.created")
    assert event.actor == "user:alice"


def test_session_csrf_also_guards_worker_routes(make_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("alice", RUN))
    _assert_error(Api(client).post("/claims", {"owner_boot_id": "b"}), 403, "permission_denied")


def test_bearer_requests_need_no_csrf(make_user):
    user = make_user("alice", VIEW, CHANGE)
    _, raw = api_token_create(user=user)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert Api(client).post("/work-items", {"title": "T", "goal": "G"}).status_code == 201


def test_anonymous_session_post_is_401_not_csrf(anonymous):
    anonymous.client = Client(enforce_csrf_checks=True)
    _assert_error(anonymous.post("/work-items", {"title": "T", "goal": "G"}), 401, "not_authenticated")


# --- anonymous documents -------------------------------------------------------------------------

def test_openapi_document_is_anonymous(anonymous):
    r = anonymous.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    paths = doc["paths"]
    for path in ("/api/v1/work-items", "/api/v1/work-items/{item_id}", "/api/v1/work-items/{item_id}/graph",
                 "/api/v1/work-items/{item_id}/retry-preview", "/api/v1/events", "/api/v1/claims",
                 "/api/v1/runs/{run_id}/submit", "/api/v1/runs/{run_id}/integration/reservation",
                 "/api/v1/recoveries"):
        assert path in paths, path
    assert {"TokenAuth", "SessionAuth"} <= set(doc["components"]["securitySchemes"])
    assert set(paths["/api/v1/claims"]["post"]["responses"]) >= {"201", "204", "409"}


def test_docs_page_is_served(anonymous):
    assert anonymous.get("/docs").status_code == 200


def test_unknown_api_path_is_json_404(api):
    body = _assert_error(api.get("/no-such-route"), 404, "not_found")
    assert "/api/v1/no-such-route" in body["message"]


# --- one query per token request (workcenter.auth.api_token_user with a permission) ----------

class GrantEverything:
    """An extra authentication backend: with it, ModelBackend's tables no longer decide."""

    def authenticate(self, request, **credentials):
        return None

    def has_perm(self, user_obj, perm, obj=None):
        return user_obj.is_active


def _auth_queries(captured) -> list[str]:
    return [q["sql"] for q in captured if "auth_" in q["sql"] or "workcenter_apitoken" in q["sql"]]


def test_token_request_checks_token_and_permission_in_one_query(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert api.get("/events").status_code == 200  # marks last_used_at (once a minute)
    with CaptureQueriesContext(connection) as captured:
        r = api.get("/events")
    assert r.status_code == 200
    auth_sql = _auth_queries(captured.captured_queries)
    assert len(auth_sql) == 1, auth_sql
    assert "workcenter_apitoken" in auth_sql[0] and "auth_permission" in auth_sql[0]


def test_token_permission_through_a_group(make_user, token_api):
    from django.contrib.auth.models import Group, Permission

    # given a user whose worker permission comes from a group only
    user = make_user("grouped", VIEW)
    group = Group.objects.create(name="workers")
    group.permissions.add(Permission.objects.get(content_type__app_label="workcenter", codename=RUN))
    client = token_api(user)
    _assert_error(client.post("/claims", {"owner_boot_id": "b"}), 403, "permission_denied")
    # when the user joins the group, the very next request may claim
    user.groups.add(group)
    assert client.post("/claims", {"owner_boot_id": "b"}).status_code == 204
    # and leaving it takes effect at once (nothing is cached between requests)
    user.groups.remove(group)
    _assert_error(client.post("/claims", {"owner_boot_id": "b"}), 403, "permission_denied")


def test_token_permission_removed_takes_effect_on_the_next_request(make_user, token_api):
    from django.contrib.auth.models import Permission

    user = make_user("worker", VIEW, RUN)
    client = token_api(user)
    assert client.post("/claims", {"owner_boot_id": "b"}).status_code == 204
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="workcenter", codename=RUN))
    body = _assert_error(client.post("/claims", {"owner_boot_id": "b"}), 403, "permission_denied")
    assert body["extra"] == {"permission": "workcenter.run_actions"}


def test_superuser_token_passes_the_one_query_check(make_user, token_api):
    client = token_api(make_user("root", superuser=True))
    assert client.post("/claims", {"owner_boot_id": "b"}).status_code == 204


def test_other_backends_decide_through_has_perm(make_user, token_api, settings):
    # given a backend beside ModelBackend that grants everything
    settings.AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend",
                                        f"{__name__}.GrantEverything"]
    client = token_api(make_user("plain"))
    # then the permission tables alone no longer refuse
    assert client.get("/events").status_code == 200
    assert client.post("/claims", {"owner_boot_id": "b"}).status_code == 204


def test_token_use_is_written_at_most_once_a_minute(api):
    from datetime import timedelta

    from django.utils import timezone

    assert api.get("/events").status_code == 200
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    assert api.get("/events").status_code == 200
    assert ApiToken.objects.get().last_used_at == first  # within the minute: no write
    ApiToken.objects.update(last_used_at=timezone.now() - timedelta(minutes=2))
    assert api.get("/events").status_code == 200
    assert ApiToken.objects.get().last_used_at > first
