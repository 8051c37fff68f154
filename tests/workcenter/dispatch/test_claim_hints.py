"""What a claim attempt tells the long-poll claim that runs it (workcenter/constants.py CLAIM_HINTS):
values in the attempt's scope, filled by the real claim route; nothing of it in the answer."""
from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User

from tests.conftest import make_graph
from workcenter.auth import api_token_create
from workcenter.constants import CLAIM_HINTS
from workcenter.handlers import SyncASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)


def _token() -> str:
    user = User.objects.create_user("robot")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workcenter",
                                                         codename__in=["view_workitem", "run_actions"]))
    return api_token_create(user=user, name="hints")[1]


def _attempt(token: str, hints: dict | None) -> tuple[int, list]:
    """One `POST /api/v1/claims` through the HTTP application, as the long-poll runs an attempt."""
    body = json.dumps({"owner_boot_id": "boot-hints"}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/api/v1/claims", "raw_path": b"/api/v1/claims", "root_path": "",
             "query_string": b"", "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
             "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode()),
                         (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    if hints is not None:
        scope[CLAIM_HINTS] = hints
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    async_to_sync(SyncASGIHandler(threads=1))(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], [bytes(name).lower() for name, _ in start.get("headers") or []]


def test_the_claim_route_says_more_and_contended_as_values_never_as_headers(store):
    # given a graph item with two ready branches and a dependant (c waits for both)
    make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a", "b"]}])
    token = _token()
    answers = []
    for _ in range(3):
        hints: dict = {}
        status, headers = _attempt(token, hints)
        answers.append((status, hints))
        assert not [h for h in headers if h.startswith(b"workcenter-claim")], headers
    # the first claim saw the other branch; the second nothing more; the third found nothing, uncontended
    assert answers == [(201, {"contended": False, "more": True}), (201, {"contended": False, "more": False}),
                       (204, {"contended": False, "more": False})]
    # a claim no long-poll runs is asked for no hints
    assert _attempt(token, None)[0] == 204
