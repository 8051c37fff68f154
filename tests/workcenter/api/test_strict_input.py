"""Strict input (API.md §0): booleans are never integers, a boolean is only a boolean, unknown fields
are refused, work_dir is an absolute path inside the allowed roots and its refusal never tells
whether a path exists; each refusal is a 422 with the API's error body and writes nothing. And the
OpenAPI document states the same rules the server applies."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from django.db.models import Max

from tests.live import ROOT
from workcenter.api import api as ninja_api
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.schemas_in import (
    ITEM_ID_PATTERN,
    NO_NUL_PATTERN,
    NON_BLANK_PATTERN,
    WHITESPACE,
    WORK_DIR_PATTERN,
)
from workcenter.work_dirs import work_dir_syntax_error

from .conftest import fence

pytestmark = pytest.mark.django_db

DOCUMENT = ninja_api.get_openapi_schema(path_params={})
COMPONENTS = DOCUMENT["components"]["schemas"]


def _resolve(schema: dict) -> dict:
    while "$ref" in schema:
        schema = COMPONENTS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _is_integer(schema: dict) -> bool:
    schema = _resolve(schema)
    return schema.get("type") == "integer" or any(_is_integer(s) for s in schema.get("anyOf", ()))


def _integer_body_fields() -> list[tuple[str, str, str]]:
    """(method, path, field) for every integer property of every JSON request body in the document."""
    found = []
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if not body:
                continue
            schema = _resolve(body["schema"])
            schema = next((_resolve(s) for s in schema.get("anyOf", ()) if "$ref" in s), schema)
            found += [(method.upper(), path, name) for name, prop in schema.get("properties", {}).items()
                      if _is_integer(prop)]
    return found


def _integer_query_fields() -> list[tuple[str, str]]:
    return [(path, p["name"]) for path, operations in DOCUMENT["paths"].items()
            for operation in operations.values() for p in operation.get("parameters", ())
            if p["in"] == "query" and _is_integer(p["schema"])]


INTEGER_BODY_FIELDS = _integer_body_fields()
INTEGER_QUERY_FIELDS = _integer_query_fields()


def test_the_document_has_the_integer_fields_this_file_knows():
    # a new integer field lands in the parametrised tests below by itself; this guards the walk
    names = {f for _m, _p, f in INTEGER_BODY_FIELDS}
    assert {"lease_ms", "lease_epoch", "expected_revision", "revision", "reservation_ms", "wait_ms"} <= names
    assert len(INTEGER_BODY_FIELDS) == 17  # the log append's lease_epoch the 17th
    assert {name for _p, name in INTEGER_QUERY_FIELDS} == {"limit", "after_id", "after", "before"}


def _state() -> tuple:
    """Everything a request could have written."""
    return (WorkItem.objects.count(), Action.objects.count(), Run.objects.count(),
            Event.objects.aggregate(Max("id"))["id__max"],
            sorted(WorkItem.objects.values_list("id", "revision", "title", "work_dir", "status", "updated_at")),
            sorted(Run.objects.values_list("id", "status", "expires_at", "lease_epoch", "loop_count")))


@pytest.fixture
def running(api):
    """Two items, the first one claimed: a live run to aim the worker calls at."""
    item = api.create(title="Claimed", acceptance_criteria=["done"])
    api.create(title="Waiting in line")
    return item, api.claim()


def _valid_body(method: str, path: str, item: dict, claim: dict) -> tuple[str, dict]:
    """A URL and a body the server accepts for this operation (so one bad field is the only fault)."""
    run_id, action_id = claim["run"]["id"], claim["action"]["id"]
    url = path.removeprefix("/api/v1").format(item_id=item["id"], run_id=run_id)
    bodies = {
        "/claims": {"owner_boot_id": "boot-B", "lease_ms": 1000},
        "/work-items/{item_id}": {"title": "Renamed", "expected_revision": 0},
        "/work-items/{item_id}/guidance": {"action_id": action_id, "revision": 0, "guidance": "go"},
        "/work-items/{item_id}/cancel": {},
        "/work-items/{item_id}/retry": {},
        "/runs/{run_id}/renew": {**fence(claim), "lease_ms": 60_000},
        "/runs/{run_id}/submit": {**fence(claim), "outcome": "failed", "error": "gave up"},
        "/runs/{run_id}/integration": {**fence(claim), "workspace": {}},
        "/runs/{run_id}/integration/reservation": {**fence(claim), "reservation_ms": 20_000},
        "/runs/{run_id}/integration/finish": {**fence(claim), "token": "t", "workspace": {}},
        "/runs/{run_id}/integration/rollback": {**fence(claim), "token": "t"},
        "/runs/{run_id}/log": {**fence(claim), "chunks": [{"stream": "stdout", "text": "x"}]},
    }
    body = bodies.get(path.removeprefix("/api/v1"), dict(fence(claim)))
    return url, body


@pytest.mark.parametrize("method,path,field", INTEGER_BODY_FIELDS,
                         ids=[f"{m} {p} {f}" for m, p, f in INTEGER_BODY_FIELDS])
@pytest.mark.parametrize("boolean", [True, False])
def test_a_boolean_is_not_an_integer(api, running, method, path, field, boolean):
    # given a body the server would take, but for one integer field sent as a boolean
    item, claim = running
    url, body = _valid_body(method, path, item, claim)
    body[field] = boolean
    before = _state()
    # when
    r = api.client.generic(method, "/api/v1" + url, json.dumps(body), content_type="application/json")
    # then it is refused for that field, and nothing changed
    assert r.status_code == 422, r.content
    out = r.json()
    assert out["code"] == "invalid_input" and set(out) == {"code", "message", "extra"}
    assert [e["field"] for e in out["extra"]["errors"]] == [field], out
    assert _state() == before


@pytest.mark.parametrize("value", ["1", "1.5", [], {}])
def test_an_integer_field_takes_only_a_json_integer(api, running, value):
    item, claim = running
    before = _state()
    r = api.post(f"/runs/{claim['run']['id']}/renew", {**fence(claim), "lease_ms": value})
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == ["lease_ms"]
    assert _state() == before


def test_a_number_without_fraction_is_the_integer_it_names(api, running):
    # JSON Schema (and JSON) make no difference between 60000 and 60000.0
    _item, claim = running
    r = api.post(f"/runs/{claim['run']['id']}/renew", {"owner_boot_id": claim["run"]["owner_boot_id"],
                                                       "lease_epoch": float(claim["run"]["lease_epoch"]),
                                                       "lease_ms": 60000.0})
    assert r.status_code == 200, r.content


@pytest.mark.parametrize("path,name", INTEGER_QUERY_FIELDS, ids=[f"{p} {n}" for p, n in INTEGER_QUERY_FIELDS])
@pytest.mark.parametrize("value", ["true", "false", "1.5", "ten"])
def test_a_query_integer_is_not_a_boolean(make_user, token_api, running, path, name, value):
    item, claim = running
    api = token_api(make_user("root", superuser=True))  # may read every route, the webhooks' included
    required = {"/api/v1/logs/search": {"q": "abc"}}.get(path, {})  # what the route needs besides
    r = api.get(path.removeprefix("/api/v1").format(item_id=item["id"], webhook_id="no-such-webhook",
                                                     run_id=claim["run"]["id"]), {**required, name: value})
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == [name]


@pytest.mark.parametrize("value", [0, 1, "true", "false", None])
def test_expired_only_is_a_boolean(api, frozen_clock, value):
    # given a claimed run whose lease expired: a recovery would interrupt it
    api.create()
    claim = api.claim(lease_ms=1000)
    frozen_clock.advance(5000)
    before = _state()
    # when a recovery is asked for with a boolean spelt otherwise
    r = api.post("/recoveries", {"owner_boot_id": "boot-R", "expired_only": value})
    # then it is refused and the run is still there, running
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == ["expired_only"]
    assert _state() == before
    assert Run.objects.get(pk=claim["run"]["id"]).status == "running"


@pytest.mark.parametrize("field,value", [("start", 0), ("start", "false"), ("reuse_memory", 1), ("reuse_memory", "")])
def test_create_booleans_are_booleans(api, field, value):
    r = api.post("/work-items", {"title": "t", "goal": "g", field: value})
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == [field]
    assert WorkItem.objects.count() == 0 and Event.objects.count() == 0


def test_a_boolean_lease_does_not_cut_a_live_lease(api, running):
    # `"lease_ms": true` once meant a 1 ms lease
    _item, claim = running
    expires = Run.objects.get(pk=claim["run"]["id"]).expires_at
    r = api.post(f"/runs/{claim['run']['id']}/renew", {**fence(claim), "lease_ms": True})
    assert r.status_code == 422, r.content
    assert Run.objects.get(pk=claim["run"]["id"]).expires_at == expires


# --- unknown fields and blank text ----------------------------------------------------------------

def test_an_unknown_field_is_refused(api, running):
    item, claim = running
    before = _state()
    for r, field in (
        (api.post("/work-items", {"title": "t", "goal": "g", "titel": "typo"}), "titel"),
        # a misspelt expected_revision must not silently skip the revision check
        (api.patch(f"/work-items/{item['id']}", {"title": "x", "expected_revison": 7}), "expected_revison"),
        (api.post(f"/runs/{claim['run']['id']}/submit", {**fence(claim), "outcome": "completed",
                                                         "loopCount": 3}), "loopCount"),
    ):
        assert r.status_code == 422, r.content
        assert [e["field"] for e in r.json()["extra"]["errors"]] == [field]
    assert _state() == before


def test_blank_text_is_refused(api, running):
    item, claim = running
    before = _state()
    for r, field in (
        (api.post("/work-items", {"title": " \u3000\x1c", "goal": "g"}), "title"),
        (api.patch(f"/work-items/{item['id']}", {"goal": "\t"}), "goal"),
        (api.post(f"/runs/{claim['run']['id']}/renew", {**fence(claim), "owner_boot_id": "  "}), "owner_boot_id"),
        (api.post("/claims", {"owner_boot_id": "\n"}), "owner_boot_id"),
        (api.post(f"/work-items/{item['id']}/guidance", {"action_id": claim["action"]["id"], "revision": 0,
                                                         "guidance": "\u2028"}), "guidance"),
    ):
        assert r.status_code == 422, r.content
        assert [e["field"] for e in r.json()["extra"]["errors"]] == [field]
    assert _state() == before


@pytest.mark.parametrize("item_id", ["a/b", ".", "..", " ", "x" * 201])
def test_a_caller_chosen_id_must_be_usable_in_a_url(api, item_id):
    r = api.post("/work-items", {"title": "t", "goal": "g", "id": item_id})
    assert r.status_code == 422, r.content
    assert [e["field"] for e in r.json()["extra"]["errors"]] == ["id"]
    assert WorkItem.objects.count() == 0 and Event.objects.count() == 0


def test_a_numeric_counter_string_too_large_is_stored_as_zero(api, running):
    # DOMAIN §12.1: invalid counters are 0; only a JSON number above 2^63-1 is refused (documented)
    _item, claim = running
    r = api.post(f"/runs/{claim['run']['id']}/progress", {**fence(claim), "input_tokens": "1e300", "tool_count": "7"})
    assert r.status_code == 200, r.content
    run = Run.objects.get(pk=claim["run"]["id"])
    assert (run.input_tokens, run.tool_count) == (0, 7)


# --- work_dir --------------------------------------------------------------------------------------

@pytest.fixture
def roots(tmp_path, settings):
    """An allow-list with one root holding a project; beside it, directories outside every root."""
    root = tmp_path / "projects"
    (root / "app").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "escape").symlink_to(tmp_path / "elsewhere")
    settings.WORKCENTER_WORK_DIR_ROOTS = [str(root)]
    return root


def _refusal(api, work_dir):
    r = api.post("/work-items", {"title": "t", "goal": "g", "work_dir": work_dir})
    assert r.status_code == 422, r.content
    body = r.json()
    assert body["code"] == "invalid_input" and "workDir" in body["message"]
    assert [e["field"] for e in body["extra"]["errors"]] == ["work_dir"]
    return body["message"]


@pytest.mark.parametrize("work_dir,reason", [
    (".", "absolute"), ("a/b", "absolute"), ("", "blank"), (" ", "blank"),
    ("~/project", "absolute"), ("/tmp/../etc", "'..'"), ("/tmp/x/..", "'..'"),
])
def test_work_dir_must_be_an_absolute_path_without_dot_dot(api, roots, work_dir, reason):
    assert reason in _refusal(api, work_dir)
    assert WorkItem.objects.count() == 0 and Event.objects.count() == 0


def test_work_dir_refusals_never_tell_what_exists(api, roots, tmp_path):
    # given paths outside the root that exist and that do not, and inside the root one that does not
    refused = [
        "/etc", "/", str(tmp_path / "elsewhere"), "/proc/self/cwd",            # exist, outside
        "/no/such/dir", str(tmp_path / "missing"),                              # do not exist, outside
        str(roots / "missing"), str(roots / "escape"), str(roots / "escape" / "x"),  # inside, missing or escaping
        str(roots / "app" / "file.txt"),
    ]
    (roots / "app" / "file.txt").write_text("not a directory")
    # when each is sent, then each gets the same message (the path aside) and nothing is written
    messages = {_refusal(api, p).replace(p, "<path>") for p in refused}
    assert messages == {"this folder is not one the server may use, or it does not exist (workDir: <path>); "
                        "ask an admin which folders are allowed"}
    assert WorkItem.objects.count() == 0 and Event.objects.count() == 0


def test_work_dir_inside_a_root_is_stored_resolved(api, roots):
    item = api.create(work_dir=str(roots / "app") + "/./")
    assert item["work_dir"] == item["workspace_key"] == os.path.realpath(roots / "app")


def test_patch_work_dir_outside_the_roots_changes_nothing(api, roots, tmp_path):
    item = api.create(work_dir=str(roots / "app"))
    before = _state()
    for work_dir in (".", "/etc", str(tmp_path / "elsewhere"), str(roots / "escape"), "/x/../y"):
        r = api.patch(f"/work-items/{item['id']}", {"work_dir": work_dir, "goal": "moved"})
        assert r.status_code == 422, r.content
        assert [e["field"] for e in r.json()["extra"]["errors"]] == ["work_dir"]
    assert _state() == before


@pytest.mark.parametrize("work_dir", ["/", "/etc", "/usr/lib", "/proc/self/cwd", "/dev", "/sys/kernel"])
def test_without_roots_system_directories_are_refused(api, settings, work_dir):
    settings.WORKCENTER_WORK_DIR_ROOTS = []
    _refusal(api, work_dir)
    assert WorkItem.objects.count() == 0


def test_without_roots_a_project_directory_is_taken(api, settings, tmp_path):
    settings.WORKCENTER_WORK_DIR_ROOTS = []
    assert api.create(work_dir=str(tmp_path))["work_dir"] == os.path.realpath(tmp_path)


def test_kernel_trees_are_refused_even_inside_a_root(api, settings):
    settings.WORKCENTER_WORK_DIR_ROOTS = ["/"]
    _refusal(api, "/proc/self/cwd")
    assert api.create(work_dir="/tmp")["work_dir"] == os.path.realpath("/tmp")


def test_relative_roots_are_a_configuration_error():
    env = dict(os.environ, WORKCENTER_WORK_DIR_ROOTS=f"/srv/work{os.pathsep}projects",
               DJANGO_SETTINGS_MODULE="workcenter.settings")
    proc = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "WORKCENTER_WORK_DIR_ROOTS must list absolute paths" in proc.stderr


# --- the document says what the server does ------------------------------------------------------

def test_whitespace_is_what_strip_removes():
    assert set(WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}


def test_the_text_patterns_agree_with_the_server():
    for c in map(chr, range(0x10000)):
        for text in (c, f" {c} ", f"a{c}"):
            assert bool(re.fullmatch(NON_BLANK_PATTERN, text)) == (bool(text.strip()) and "\x00" not in text), text
            assert bool(re.fullmatch(NO_NUL_PATTERN, text)) == ("\x00" not in text)
            assert bool(re.fullmatch(ITEM_ID_PATTERN, text)) == (
                bool(text.strip()) and "\x00" not in text and "/" not in text)


@pytest.mark.parametrize("work_dir", [
    "/", "/a", "/a/b/", "//a", "/a//b", "/.", "/a/.", "/./a", "/.a", "/a.", "/...", "/..a", "/a..", "/a/...b",
    "/..", "/a/..", "/../a", "/a/../b", "..", ".", "a", "a/b", "", " /a", "/a ", "~", "/a\x00b",
])
def test_the_work_dir_pattern_agrees_with_the_server(work_dir):
    assert bool(re.fullmatch(WORK_DIR_PATTERN, work_dir)) == (
        work_dir_syntax_error(work_dir) is None and "\x00" not in work_dir)


def test_every_request_body_refuses_unknown_fields():
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                refs = [body["schema"], *body["schema"].get("anyOf", ())]
                schema = next(_resolve(s) for s in refs if "$ref" in s)
                assert schema.get("additionalProperties") is False, (method, path)


def test_a_body_is_validated_once_and_refused_as_before():
    # ninja validates a model that forbids extra fields twice (the second time through its ORM
    # getter); a request body is validated once, nested bodies too, and still refused as before
    from pydantic import ValidationError, field_validator

    from workcenter.schemas_in import InputSchema

    seen = []

    class Inner(InputSchema):
        y: int

        @field_validator("y")
        @classmethod
        def _count(cls, value):
            seen.append(("y", value))
            return value

    class Outer(InputSchema):
        x: int
        inner: Inner | None = None

        @field_validator("x")
        @classmethod
        def _count(cls, value):
            seen.append(("x", value))
            return value

    got = Outer.model_validate({"x": 1, "inner": {"y": 2}})
    assert (got.x, got.inner.y) == (1, 2) and seen == [("x", 1), ("y", 2)]
    with pytest.raises(ValidationError) as refused:
        Outer.model_validate({"x": 1, "inner": {"y": 2, "z": 3}})
    assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [("extra_forbidden", ("inner", "z"))]
    # an object that is not a dict still goes ninja's way (attributes read through its getter)
    assert Outer.model_validate(type("Row", (), {"x": 5, "inner": None})()).x == 5
