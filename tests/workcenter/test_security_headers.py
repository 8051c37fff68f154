"""Every answer carries the security headers, including the ones made outside Django's middleware
chain (workcenter/security_headers.py): the body limit's 413 from the ASGI handler and from the
first middleware, a refused Host, static files. Driven in-process with raw ASGI messages."""
from __future__ import annotations

import asyncio
import json

import pytest
from django.test import Client

from workcenter.handlers import SyncASGIHandler
from workcenter.staticfiles import StaticFilesApp

pytestmark = pytest.mark.django_db

SECURITY = {b"x-frame-options": b"DENY", b"x-content-type-options": b"nosniff", b"referrer-policy": b"same-origin",
            b"cross-origin-opener-policy": b"same-origin"}


def _scope(method: str, path: str, headers=(), scheme: str = "http") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": scheme,
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *headers],
            "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}


def _call(app, scope: dict, chunks: list[bytes]) -> tuple[int, dict, bytes]:
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive():
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    headers = {bytes(name).lower(): bytes(value) for name, value in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def handler():
    h = SyncASGIHandler(threads=1)
    yield h
    h.executor.shutdown(wait=True)


def _has_security_headers(headers: dict) -> bool:
    return all(headers.get(name) == value for name, value in SECURITY.items())


def test_the_servers_413_carries_the_security_headers(handler, settings):
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    # a declared length over the limit: refused before the body is read
    status, headers, body = _call(handler, _scope("POST", "/api/v1/work-items", [(b"content-length", b"1001")]),
                                  [b"x" * 1001])
    assert status == 413 and json.loads(body)["code"] == "request_too_large"
    assert _has_security_headers(headers), headers
    # a body without a length, cut off when it passes the limit
    status, headers, _ = _call(handler, _scope("POST", "/api/v1/work-items"), [b" " * 400] * 10)
    assert status == 413 and _has_security_headers(headers), headers
    assert b"strict-transport-security" not in headers  # plain HTTP: no HSTS


def test_the_413_over_https_carries_hsts_as_every_https_answer(handler, settings):
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    settings.SECURE_HSTS_SECONDS = 3600
    status, headers, _ = _call(handler, _scope("POST", "/api/v1/work-items", [(b"content-length", b"5000")],
                                               scheme="https"), [b""])
    assert status == 413 and headers[b"strict-transport-security"] == b"max-age=3600"
    assert _has_security_headers(headers)


def test_the_first_middlewares_refusals_carry_the_security_headers(settings):
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    # the declared length checked by ApiErrorMiddleware (the test client, a WSGI server)
    r = Client().post("/api/v1/work-items", "{}", content_type="application/json", CONTENT_LENGTH="5000")
    assert r.status_code == 413 and r.json()["code"] == "request_too_large"
    assert r["X-Frame-Options"] == "DENY" and r["X-Content-Type-Options"] == "nosniff"
    assert r["Referrer-Policy"] == "same-origin"
    # a Host that ALLOWED_HOSTS does not name
    settings.ALLOWED_HOSTS = ["workcenter.example.com"]
    r = Client().get("/api/v1/work-items", HTTP_HOST="elsewhere.example.org")
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    assert r["X-Frame-Options"] == "DENY" and r["X-Content-Type-Options"] == "nosniff"


def test_static_files_carry_the_security_headers():
    app = StaticFilesApp(None)
    status, headers, body = _call(app, _scope("GET", "/static/dashboard/dashboard.css"), [b""])
    assert status == 200 and body
    assert _has_security_headers(headers), headers
    assert b"content-security-policy" not in headers  # a stylesheet, not a page
