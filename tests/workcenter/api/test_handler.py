"""The ASGI handler daphne serves (workcenter/handlers.py): one thread hop per request on a fixed
pool whose threads keep their database connection; the request cycle (signals, middleware, view,
close) runs on one thread. Driven in-process with raw ASGI messages."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest
from django.core.signals import request_finished, request_started
from django.db import connections
from django.db.backends.signals import connection_created
from django.http import HttpResponse, StreamingHttpResponse
from django.test import override_settings
from django.urls import include, path

from workcenter.auth import api_token_create
from workcenter.handlers import SyncASGIHandler
from workcenter.models import WorkItem

from .conftest import CHANGE, RUN, VIEW

pytestmark = pytest.mark.django_db(transaction=True)


def _plain(request):
    return HttpResponse(f"thread={threading.current_thread().name}", content_type="text/plain")


def _stream(request):
    return StreamingHttpResponse((f"part{i};".encode() for i in range(3)), content_type="text/plain")


# a URLconf for the streaming/plain views, beside the project's own
urlpatterns = [
    path("t/plain", _plain),
    path("t/stream", _stream),
    path("", include("workcenter.urls")),
]


def _scope(method: str, path_: str, *, token: str | None = None, query: bytes = b"") -> dict:
    headers = [(b"host", b"testserver")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if method == "POST":
        headers.append((b"content-type", b"application/json"))
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path_, "raw_path": path_.encode(), "query_string": query, "root_path": "",
            "headers": headers, "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}


async def _call(app, scope: dict, chunks: list[bytes] | None = None, *, disconnect_first: bool = False):
    """Run one request; returns (status, headers, body, number of body messages)."""
    chunks = chunks or [b""]
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    if disconnect_first:
        incoming = [{"type": "http.disconnect"}]
    done = asyncio.Event()
    sent: list[dict] = []

    async def receive():
        if incoming:
            return incoming.pop(0)
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    done.set()
    if not sent:
        return None, {}, b"", 0
    start, bodies = sent[0], sent[1:]
    assert start["type"] == "http.response.start"
    return (start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in bodies),
            len(bodies))


@pytest.fixture
def handler():
    h = SyncASGIHandler(threads=2)
    yield h
    _close_pool(h, 2)


@pytest.fixture
def token(make_user):
    _, raw = api_token_create(user=make_user("worker", VIEW, CHANGE, RUN), name="h")
    return raw


def run(coro):
    return asyncio.run(coro)


def _close_pool(h: SyncASGIHandler, threads: int) -> None:
    """Close the database connections held by the pool's threads (one task per thread), then stop it."""
    barrier = threading.Barrier(threads)

    def close():
        barrier.wait(timeout=10)
        connections.close_all()

    for f in [h.executor.submit(close) for _ in range(threads)]:
        f.result()
    h.executor.shutdown(wait=True)


def test_handler_serves_the_api_on_its_pool_threads(handler, token):
    # when an authenticated GET goes through the handler
    status, headers, body, _ = run(_call(handler, _scope("GET", "/api/v1/events", token=token, query=b"limit=5")))
    # then it answers like the API
    assert status == 200
    assert headers[b"Content-Type"] == b"application/json; charset=utf-8"
    assert json.loads(body) == {"events": [], "last_id": 0}


@override_settings(ROOT_URLCONF=__name__)
def test_request_cycle_runs_on_one_pool_thread(handler):
    # given receivers noting the thread of each request signal
    seen: list[tuple[str, str]] = []

    def on_start(**kwargs):
        seen.append(("started", threading.current_thread().name))

    def on_finish(**kwargs):
        seen.append(("finished", threading.current_thread().name))

    request_started.connect(on_start)
    request_finished.connect(on_finish)
    try:
        status, _, body, _ = run(_call(handler, _scope("GET", "/t/plain")))
    finally:
        request_started.disconnect(on_start)
        request_finished.disconnect(on_finish)
    # then signals and view ran on the same pool thread (the loop's thread never ran Django code)
    assert status == 200
    view_thread = body.decode().removeprefix("thread=")
    assert view_thread.startswith("wc-http")
    assert seen == [("started", view_thread), ("finished", view_thread)]


def test_pool_threads_keep_their_database_connection(token, settings):
    # given one pool thread and persistent connections
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0
    h = SyncASGIHandler(threads=1)
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(threading.current_thread().name)

    connection_created.connect(count)
    try:
        # when five authenticated requests are served
        for _ in range(5):
            status, *_ = run(_call(h, _scope("GET", "/api/v1/events", token=token)))
            assert status == 200
    finally:
        connection_created.disconnect(count)
        _close_pool(h, 1)
    # then the pool thread opened one connection and reused it (Django's stock ASGIHandler opens
    # one per request: every request gets a new thread)
    assert len(opened) == 1 and opened[0].startswith("wc-http")


def test_post_body_in_several_messages_reaches_the_view(handler, token):
    # when a claim's JSON body arrives in three ASGI messages
    body = json.dumps({"owner_boot_id": "boot-H", "lease_ms": 30_000}).encode()
    chunks = [body[:5], body[5:12], body[12:]]
    status, _, raw, _ = run(_call(handler, _scope("POST", "/api/v1/claims", token=token), chunks))
    # then the view parsed it: nothing is claimable
    assert status == 204 and raw == b""


def test_errors_leave_as_json(handler, token):
    status, _, raw, _ = run(_call(handler, _scope("POST", "/api/v1/claims", token=token), [b"{not json"]))
    assert status == 400
    assert json.loads(raw)["code"] == "bad_request"
    status, _, raw, _ = run(_call(handler, _scope("GET", "/api/v1/events", token="wc_x_y")))
    assert status == 401 and json.loads(raw)["code"] == "not_authenticated"


@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
def test_streaming_response_is_sent_in_parts_then_closed(handler):
    finished = []
    request_finished.connect(lambda **kw: finished.append(True), weak=False, dispatch_uid="h5-stream")
    try:
        status, _, body, messages = run(_call(handler, _scope("GET", "/t/stream")))
    finally:
        request_finished.disconnect(dispatch_uid="h5-stream")
    assert status == 200
    assert body == b"part0;part1;part2;"
    assert messages == 4  # three parts and the closing message
    assert finished == [True]


def test_client_gone_before_the_body_gets_no_response(handler, token):
    status, _, _, messages = run(_call(handler, _scope("POST", "/api/v1/claims", token=token),
                                       disconnect_first=True))
    assert status is None and messages == 0


def test_websocket_scope_is_refused(handler):
    with pytest.raises(ValueError, match="only handle ASGI/HTTP"):
        run(handler({"type": "websocket"}, None, None))


async def _call_counting(app, scope: dict, chunks: list[bytes]):
    """Run one request whose body arrives in `chunks`; returns (status, JSON body, chunks read)."""
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    read = 0
    sent: list[dict] = []

    async def receive():
        nonlocal read
        if read < len(incoming):
            read += 1
            return incoming[read - 1]
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), json.loads(body), read


def test_declared_body_over_the_limit_is_refused_unread(handler, token, settings):
    # given a request declaring a body one byte over the limit
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    scope = _scope("POST", "/api/v1/work-items", token=token)
    scope["headers"].append((b"content-length", b"1001"))
    # when it is handled
    status, headers, body, read = run(_call_counting(handler, scope, [b"x" * 1001]))
    # then it is answered 413 with the limit, before a byte of the body was received
    assert status == 413 and headers[b"Content-Type"] == b"application/json"
    assert body["code"] == "request_too_large" and body["extra"] == {"limit_bytes": 1_000}
    assert read == 0


def test_body_without_a_length_is_cut_off_at_the_limit(handler, token, settings):
    # given a body sent without Content-Length (chunked), in ten messages of 400 bytes
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    status, _, body, read = run(_call_counting(handler, _scope("POST", "/api/v1/work-items", token=token),
                                               [b" " * 400] * 10))
    # then reading stops at the message that passes the limit
    assert status == 413 and body["extra"] == {"limit_bytes": 1_000}
    assert read == 3
    assert WorkItem.objects.count() == 0


def test_body_at_the_limit_without_a_length_is_read(handler, token, settings):
    settings.WORKCENTER_MAX_BODY_BYTES = 1_000
    raw = json.dumps({"title": "Chunked", "goal": "g"}).encode().ljust(1_000)
    status, _, body, read = run(_call_counting(handler, _scope("POST", "/api/v1/work-items", token=token),
                                               [raw[:500], raw[500:]]))
    assert status == 201 and body["title"] == "Chunked" and read == 2


def test_query_string_that_is_not_utf8_is_a_json_400(handler, token):
    # Django builds no request for it, so no middleware runs: the handler answers for the API
    status, headers, raw, _ = run(_call(handler, _scope("GET", "/api/v1/events", token=token, query=b"limit=\xff")))
    assert status == 400 and headers[b"Content-Type"] == b"application/json"
    assert json.loads(raw)["code"] == "bad_request"
