"""The status line a real daphne writes carries the standard reason phrase of its code: an API
error answered 422 reads `HTTP/1.1 422 Unprocessable Content`, never Twisted's `Unknown Status`
(workcenter/serving.py: standard_reason_phrases). Read byte for byte off the socket."""
from __future__ import annotations

import json
import socket

import pytest
from django.contrib.auth.models import Permission, User

from tests.live import free_port, start_daphne, stop_process
from workcenter.auth import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)


def status_line(port: int, method: str, path: str, *, token: str = "", body: bytes = b"") -> str:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
            f"Content-Length: {len(body)}", "Content-Type: application/json"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1")


def test_a_real_daphne_writes_the_standard_reason_phrase_of_each_api_error(django_db_blocker):
    lead = User.objects.create_user("phrase-lead", password="pw")
    lead.user_permissions.add(*Permission.objects.filter(content_type__app_label="workcenter",
                                                         codename__in=["view_workitem", "change_workitem"]))
    _, token = api_token_create(user=lead, name="phrases")
    port = free_port()
    with django_db_blocker.unblock():
        proc = start_daphne(port, {"DJANGO_DEBUG": "1", "WORKCENTER_LOG_LEVEL": "WARNING"})
    try:
        # an invalid body (API.md §0: 422 invalid_input) and an invalid query
        bad = json.dumps({"title": ""}).encode()
        assert status_line(port, "POST", "/api/v1/work-items", token=token, body=bad) \
            == "HTTP/1.1 422 Unprocessable Content"
        assert status_line(port, "GET", "/api/v1/work-items?limit=true", token=token) \
            == "HTTP/1.1 422 Unprocessable Content"
        # the codes Twisted already knew keep their phrase
        assert status_line(port, "GET", "/api/v1/work-items") == "HTTP/1.1 401 Unauthorized"
        assert status_line(port, "GET", "/api/v1/work-items/nope", token=token) == "HTTP/1.1 404 Not Found"
        assert status_line(port, "GET", "/api/v1/work-items", token=token) == "HTTP/1.1 200 OK"
    finally:
        stop_process(proc)
