"""Requests the API cannot take get its error body (API.md §0), never an HTML page or a traceback,
and write nothing: bodies over the size limit (413), bodies that are not UTF-8 JSON objects sent as
application/json, JSON nested too deeply, unknown routes and methods, a Host the settings do not
allow, failures inside a view — with debug on and off, through django.test.Client and through a
real daphne server.
"""
from __future__ import annotations

import http.client
import json
import secrets

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.conftest import item_snapshot
from tests.live import free_port, start_daphne, stop_process
from workcenter.api import MAX_JSON_DEPTH, api as ninja_api
from workcenter.auth import api_token_create
from workcenter.models import Action, Event, Run, WorkItem

from .conftest import BASE
from .support import error_of

MB = 1_000_000
NOT_OBJECTS = ['"hello"', "[1, 2, 3]", "42", "null", "true"]
ALLOWED_HOST = "127.0.0.1"


def api_error(response, status: int, code: str) -> dict:
    """The JSON error body of `response` (status, code, a message, an `extra` object)."""
    assert response["Content-Type"].startswith("application/json"), (response["Content-Type"], response.content[:300])
    body = error_of(response, status, code)
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["extra"], dict)
    return body


def store_rows() -> tuple:
    """Every stored row of the store: equal before and after a refused request means nothing was written."""
    return tuple(list(model.objects.order_by("pk").values()) for model in (WorkItem, Action, Run, Event))


def nested(depth: int) -> str:
    """A work item whose `origin` is `depth - 1` objects deep: the body is `depth` levels deep."""
    inner = '{"a": ' * (depth - 1) + "1" + "}" * (depth - 1)
    return '{"title": "Deep", "goal": "g", "origin": ' + inner + "}"


def body_routes() -> list[tuple[str, str]]:
    """(method, path template) of every operation that takes a request body, from the OpenAPI document."""
    schema = ninja_api.get_openapi_schema()
    routes = [(method.upper(), path) for path, operations in schema["paths"].items()
              for method, operation in operations.items() if "requestBody" in operation]
    assert len(routes) >= 13, routes  # the document is read, not silently empty
    return routes


@pytest.fixture
def running(api):
    """An item whose first action is running (its run for the worker routes) and a draft item."""
    api.create(title="Running")
    claim = api.claim()
    draft = api.create(title="Draft", start=False)
    return claim, draft


def _fill(path: str, claim: dict, draft: dict) -> str:
    # a webhook the route need not find: the body is refused before the webhook is looked up
    values = {"item_id": draft["id"], "run_id": claim["run"]["id"], "webhook_id": "no-such-webhook", "delivery_id": "1"}
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"no test value for a parameter of {path}"
    return path


# --- Django test client --------------------------------------------------------------------------

@pytest.mark.django_db
class TestBodies:
    @pytest.mark.parametrize("size", [2 * MB, 3 * MB, 30 * MB])
    def test_body_over_the_limit_is_413_with_the_limit(self, api, settings, size):
        # given a stored item
        item = api.create()
        before = store_rows()
        goal = "g" * size
        # when a create and an update carry a body over the limit
        for response in (api.post("/work-items", {"title": "Big", "goal": goal}),
                         api.patch(f"/work-items/{item['id']}", {"goal": goal})):
            # then both are 413 naming the limit, and nothing is written
            body = api_error(response, 413, "request_too_large")
            assert body["extra"] == {"limit_bytes": settings.WORKCENTER_MAX_BODY_BYTES}
        assert store_rows() == before

    def test_limit_is_the_setting_to_the_byte(self, api, settings):
        settings.WORKCENTER_MAX_BODY_BYTES = 2_000
        template = '{"title": "Edge", "goal": "%s"}'
        at_limit = template % ("g" * (2_000 - len(template) + 2))
        assert len(at_limit.encode()) == 2_000
        assert api.post("/work-items", at_limit).status_code == 201
        body = api_error(api.post("/work-items", at_limit.replace('"Edge"', '"Edge!"')), 413, "request_too_large")
        assert body["extra"] == {"limit_bytes": 2_000}
        assert WorkItem.objects.count() == 1

    def test_largest_submission_a_worker_needs_fits_the_default_limit(self, api, running):
        # a response of the 65,536 characters the store keeps, each one sent as a 12-byte JSON escape
        claim, _ = running
        response = "\U0001F600" * 65_536
        assert len(json.dumps({"response": response})) > 780_000
        api.complete(claim, response=response)
        assert Run.objects.get(pk=claim["run"]["id"]).response == response

    def test_django_upload_limit_below_the_setting_is_413_too(self, api, settings):
        # an operator's lower DATA_UPLOAD_MAX_MEMORY_SIZE: Django refuses when ninja reads the body
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000
        body = api_error(api.post("/work-items", {"title": "t", "goal": "g" * 2_000}), 413, "request_too_large")
        assert body["extra"] == {"limit_bytes": 1_000}
        assert WorkItem.objects.count() == 0

    @pytest.mark.parametrize("raw", [
        b'{"title": "\xff\xfe", "goal": "g"}',  # invalid UTF-8
        b'{"title": "caf\xe9", "goal": "g"}',  # Latin-1
        json.dumps({"title": "t", "goal": "g"}).encode("utf-16"),  # UTF-16 with its byte-order mark
        json.dumps({"title": "t", "goal": "g"}).encode("utf-32-le"),
    ], ids=["invalid", "latin-1", "utf-16", "utf-32"])
    def test_body_not_utf8_is_400(self, api, raw):
        body = api_error(api.post("/work-items", raw), 400, "bad_request")
        assert "UTF-8" in body["message"] or "malformed JSON" in body["message"]
        assert WorkItem.objects.count() == 0

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                              "multipart/form-data; boundary=x", "application/xml", ""])
    def test_body_not_sent_as_json_is_400(self, api, content_type):
        # a valid JSON object, sent with another content type (text/plain needs no CORS preflight)
        raw = json.dumps({"title": "Plain", "goal": "g"})
        response = api.client.generic("POST", f"{BASE}/work-items", raw, content_type=content_type)
        body = api_error(response, 400, "bad_request")
        assert "application/json" in body["message"]
        assert WorkItem.objects.count() == 0

    def test_json_content_type_with_parameters_is_accepted(self, api):
        raw = json.dumps({"title": "Charset", "goal": "g"})
        response = api.client.post(f"{BASE}/work-items", raw, content_type="Application/JSON; charset=utf-8")
        assert response.status_code == 201, response.content

    @pytest.mark.parametrize("raw", ["{not json", '{"title": "t",}', '{"title": "t"} trailing', "\ufeff{}", "'x'"])
    def test_malformed_json_is_400(self, api, raw):
        body = api_error(api.post("/work-items", raw), 400, "bad_request")
        assert body["message"].startswith("malformed JSON body")
        assert WorkItem.objects.count() == 0

    @pytest.mark.parametrize("depth", [10_000, 999, MAX_JSON_DEPTH + 1])
    def test_json_nested_too_deeply_is_400(self, api, depth):
        for raw in (nested(depth), "[" * depth + "]" * depth):
            body = api_error(api.post("/work-items", raw), 400, "bad_request")
            assert body["message"] == f"malformed JSON body: nested deeper than {MAX_JSON_DEPTH} levels"
            assert body["extra"] == {"max_depth": MAX_JSON_DEPTH}
        assert WorkItem.objects.count() == 0

    def test_json_at_the_depth_limit_is_accepted(self, api):
        response = api.post("/work-items", nested(MAX_JSON_DEPTH))
        assert response.status_code == 201, response.content

    @pytest.mark.parametrize("raw,field", [
        ('{"title": "t", "goal": "g", "origin": {"k\\u0000": 1}}', "origin"),
        ('{"title": "t", "goal": "g", "acceptance_criteria": ["ok", "\\uDFFF"]}', "acceptance_criteria"),
        ('{"title": "\\ud83d", "goal": "g"}', "title"),
    ])
    def test_escaped_text_no_database_can_store_is_422(self, api, raw, field):
        body = api_error(api.post("/work-items", raw), 422, "invalid_input")
        assert [e["field"] for e in body["extra"]["errors"]] == [field]
        assert WorkItem.objects.count() == 0

    def test_escaped_surrogate_pair_is_one_character(self, api):
        item = api.create(title="\U0001F600 smile")
        raw = '{"title": "\\uD83D\\uDE00 smile", "goal": "g"}'
        assert api.post("/work-items", raw).json()["title"] == item["title"]

    def test_every_route_with_a_body_refuses_a_json_value_that_is_not_an_object(self, make_user, token_api, running):
        # given a running item (worker routes) and a draft item (item routes), and a caller who may
        # call every route (the webhook routes need an admin's permissions)
        api = token_api(make_user("root", superuser=True))
        claim, draft = running
        before = (store_rows(), item_snapshot(draft["id"]))
        routes = body_routes()
        for method, template in routes:
            path = _fill(template, claim, draft)
            for raw in NOT_OBJECTS:
                # when the body is a JSON value that is not an object
                response = api.client.generic(method, path, raw, content_type="application/json")
                # then 422 naming the body, and nothing is written
                body = api_error(response, 422, "invalid_input")
                assert [e["field"] for e in body["extra"]["errors"]] == ["body"], (method, path, raw)
        assert (store_rows(), item_snapshot(draft["id"])) == before
        assert {"PATCH", "POST"} == {m for m, _ in routes}

    def test_patch_with_a_string_body_keeps_the_title(self, api):
        # a JSON string is not a patch: "hello" must not become the title "Hello"
        item = api.create(title="Kept")
        before = item_snapshot(item["id"])
        body = api_error(api.patch(f"/work-items/{item['id']}", '"hello"'), 422, "invalid_input")
        assert body["message"] == "the body must be a JSON object, not a string"
        assert item_snapshot(item["id"]) == before


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False], ids=["debug", "no-debug"])
class TestNoHtmlPages:
    def test_unknown_routes_are_json_404(self, api, settings, debug):
        settings.DEBUG = debug
        for method in ("GET", "POST", "PATCH", "PUT", "DELETE"):
            for path in (f"{BASE}/nope", f"{BASE}/", f"{BASE}/work-items/x/nope", "/ws/work-items/", "/ws/nope"):
                api_error(api.client.generic(method, path, "{}", content_type="application/json"), 404, "not_found")

    def test_unknown_route_is_404_not_a_csrf_failure(self, make_user, settings, debug):
        # a signed-in browser without the CSRF token
        settings.DEBUG = debug
        client = Client(enforce_csrf_checks=True)
        client.force_login(make_user("browser", "view_workitem", "change_workitem"))
        api_error(client.post(f"{BASE}/nope", "{}", content_type="application/json"), 404, "not_found")
        api_error(client.post(f"{BASE}/work-items", "{}", content_type="application/json"), 403, "permission_denied")

    def test_wrong_method_is_json_405_with_allow(self, api, settings, debug):
        settings.DEBUG = debug
        item = api.create()
        before = item_snapshot(item["id"])
        for method, path, allowed in (("DELETE", f"/work-items/{item['id']}", ["GET", "PATCH"]),
                                      ("PUT", f"/work-items/{item['id']}/start", ["POST"]),
                                      ("GET", "/claims", ["POST"])):
            response = api.client.generic(method, BASE + path, "{}", content_type="application/json")
            body = api_error(response, 405, "method_not_allowed")
            assert sorted(body["extra"]["allowed"]) == allowed
            assert sorted(m.strip() for m in response["Allow"].split(",")) == allowed
        assert item_snapshot(item["id"]) == before

    def test_host_not_allowed_is_json_400(self, api, settings, debug):
        settings.DEBUG = debug
        settings.ALLOWED_HOSTS = ["workcenter.example"]
        item = json.loads(api.client.post(f"{BASE}/work-items", json.dumps({"title": "t", "goal": "g"}),
                                          content_type="application/json", HTTP_HOST="workcenter.example").content)
        before = store_rows()
        for response in (api.client.get(f"{BASE}/events", HTTP_HOST="evil.example"),
                         api.client.post(f"{BASE}/work-items", json.dumps({"title": "t", "goal": "g"}),
                                         content_type="application/json", HTTP_HOST="evil.example"),
                         api.client.patch(f"{BASE}/work-items/{item['id']}", json.dumps({"title": "x"}),
                                          content_type="application/json", HTTP_HOST="evil.example:8000"),
                         api.client.get(f"{BASE}/nope", HTTP_HOST="evil.example"),
                         api.client.get("/ws/work-items/", HTTP_HOST="evil.example"),
                         api.client.get(f"{BASE}/events", HTTP_HOST="bad host!")):
            body = api_error(response, 400, "bad_request")
            assert "Host" in body["message"]
        assert store_rows() == before

    def test_failure_inside_a_view_is_json_500_without_traceback(self, api, settings, monkeypatch, debug):
        settings.DEBUG = debug

        def broken(**kwargs):
            raise RuntimeError("selector exploded")

        monkeypatch.setattr("workcenter.selectors.events_after", broken)
        client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {api.token}")
        response = client.get(f"{BASE}/events")
        body = api_error(response, 500, "internal_error")
        assert "exploded" not in response.content.decode() and "Traceback" not in response.content.decode()
        assert body["extra"] == {}

    def test_pages_outside_the_api_keep_their_html(self, settings, debug):
        settings.DEBUG = debug
        response = Client().get("/no-such-page/")
        assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


# --- a real daphne server ------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["debug", "no-debug"])
def daphne(request, django_db_setup, django_db_blocker, tmp_path_factory):
    """daphne over the test database, answering to ALLOWED_HOST only, with debug on or off."""
    env = {"DJANGO_ALLOWED_HOSTS": ALLOWED_HOST, "WORKCENTER_LOG_LEVEL": "WARNING"}
    if request.param == "debug":
        env["DJANGO_DEBUG"] = "1"
    else:
        env.update(DJANGO_DEBUG="0", DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    log = tmp_path_factory.mktemp("daphne") / "daphne.log"
    port = free_port()
    with django_db_blocker.unblock(), open(log, "wb") as out:
        proc = start_daphne(port, env, stdout=out, timeout=60)
    yield port
    stop_process(proc)


@pytest.fixture
def server_token(transactional_db):
    user = User.objects.create_user("robot")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="robot")[1]


def _request(port: int, method: str, path: str, body=None, *, token: str | None = None, host: str = ALLOWED_HOST,
             content_type: str | None = "application/json", chunked: bool = False):
    """One request over a fresh connection: (status, headers, parsed JSON or the raw bytes)."""
    headers = {"Host": host}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if content_type:
        headers["Content-Type"] = content_type
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        if chunked:
            step = 64 * 1024
            conn.request(method, path, body=(body[i:i + step] for i in range(0, len(body), step)), headers=headers,
                         encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, raw


def _json_error(result, status: int, code: str) -> dict:
    got_status, headers, raw = result
    assert got_status == status, raw[:500]
    assert headers["content-type"].startswith("application/json"), raw[:500]
    body = json.loads(raw)
    assert set(body) == {"code", "message", "extra"} and body["code"] == code, body
    assert isinstance(body["message"], str) and isinstance(body["extra"], dict)
    return body


def test_server_refuses_bodies_over_the_limit(daphne, server_token, settings):
    # given a stored item
    created = _request(daphne, "POST", f"{BASE}/work-items", json.dumps({"title": "t", "goal": "g"}).encode(),
                       token=server_token)
    assert created[0] == 201, created[2]
    item_id = json.loads(created[2])["id"]
    before = store_rows()
    limit = {"limit_bytes": settings.WORKCENTER_MAX_BODY_BYTES}
    for size, chunked in ((30 * MB, False), (3 * MB, False), (3 * MB, True)):
        body = json.dumps({"title": "Big", "goal": "g" * size}).encode()
        # when it is posted with its length, or chunked without one
        result = _request(daphne, "POST", f"{BASE}/work-items", body, token=server_token, chunked=chunked)
        # then 413 naming the limit
        assert _json_error(result, 413, "request_too_large")["extra"] == limit
    patched = _request(daphne, "PATCH", f"{BASE}/work-items/{item_id}", json.dumps({"goal": "g" * 3 * MB}).encode(),
                       token=server_token, chunked=True)
    assert _json_error(patched, 413, "request_too_large")["extra"] == limit
    # and nothing is written
    assert store_rows() == before


def test_server_refuses_bodies_it_cannot_read(daphne, server_token):
    before = store_rows()
    valid = json.dumps({"title": "t", "goal": "g"})
    for body, content_type, status, code in (
        (b'{"title": "\xff", "goal": "g"}', "application/json", 400, "bad_request"),
        (valid.encode("utf-16"), "application/json", 400, "bad_request"),
        (valid.encode(), "text/plain", 400, "bad_request"),
        (valid.encode(), None, 400, "bad_request"),
        (nested(10_000).encode(), "application/json", 400, "bad_request"),
        (("[" * 10_000 + "]" * 10_000).encode(), "application/json", 400, "bad_request"),
        (b"{not json", "application/json", 400, "bad_request"),
        (b'"hello"', "application/json", 422, "invalid_input"),
        (b"[1, 2, 3]", "application/json", 422, "invalid_input"),
    ):
        _json_error(_request(daphne, "POST", f"{BASE}/work-items", body, token=server_token,
                             content_type=content_type), status, code)
    assert store_rows() == before


def test_server_answers_unknown_routes_methods_and_hosts_as_the_api(daphne, server_token):
    before = store_rows()
    valid = json.dumps({"title": "t", "goal": "g"}).encode()
    for method, path in (("GET", f"{BASE}/nope"), ("POST", f"{BASE}/nope"), ("GET", "/ws/work-items/"),
                         ("GET", "/ws/work-items/x/")):
        _json_error(_request(daphne, method, path, token=server_token), 404, "not_found")
    status, headers, _ = result = _request(daphne, "GET", f"{BASE}/claims", token=server_token)
    assert _json_error(result, 405, "method_not_allowed")["extra"] == {"allowed": ["POST"]}
    assert headers["allow"] == "POST"
    for method, path, body in (("GET", f"{BASE}/events", None), ("POST", f"{BASE}/work-items", valid),
                               ("GET", "/ws/work-items/", None), ("GET", f"{BASE}/nope", None)):
        for host in ("evil.example", f"evil.example:{daphne}"):
            result = _request(daphne, method, path, body, token=server_token, host=host)
            assert "Host" in _json_error(result, 400, "bad_request")["message"]
    assert store_rows() == before
