"""GET /healthz (workcenter/health.py): answered from the process's cached check, the status alone
for anonymous callers and the details for readers; at the ASGI level without the application for
anonymous callers and the scrape token; paced; one kept Redis connection; a stale check is
unavailable. The flood against a real server is tests/e2e/test_health_flood.py."""
from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.live import free_port, start_daphne, stop_process, wait_until
from workcenter import health
from workcenter.auth import api_token_create
from workcenter.instruments import RecentLatency
from tests.live import redis_db_url

pytestmark = pytest.mark.django_db

TEST_REDIS_URL = redis_db_url(12)
DETAILS = {"status", "database", "channel_layer", "probe", "checked_seconds_ago", "interval_seconds",
           "database_seconds", "channel_layer_seconds", "channel_layer_ok_seconds_ago", "claims_last_minute"}


@pytest.fixture
def probe(monkeypatch):
    """The process's probe, run by the test itself (no thread), with no check yet."""
    health.probe.stop()
    monkeypatch.setattr(health.probe, "ensure_started", lambda: None)
    monkeypatch.setattr(health.probe, "last", None)
    monkeypatch.setattr(health.probe, "layer_ok_at", None)
    yield health.probe
    health.probe.close_redis()


def _token(*codenames: str) -> str:
    user = User.objects.create_user(f"h-{User.objects.count()}")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    return api_token_create(user=user, name="health")[1]


def _scope(method: str = "GET", path: str = "/healthz", headers=()) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80)}


class _Inner:
    """The application behind HealthCheck: counts what reaches it."""

    def __init__(self):
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})


def _asgi(app, scope: dict) -> tuple[int, dict, bytes, float]:
    sent: list[dict] = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    started = time.monotonic()
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:]), \
        time.monotonic() - started


# --- who sees what -------------------------------------------------------------------------------

def test_anonymous_callers_get_the_status_alone_and_readers_the_details(probe, settings):
    # given a check that found both parts answering
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    probe.probe_once()
    # when an anonymous caller asks, then it gets the status, nothing else, with the security headers
    r = Client().get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r["X-Frame-Options"] == "DENY" and r["X-Content-Type-Options"] == "nosniff"
    assert r["Cache-Control"] == "no-store"
    # and a wrong credential or one without the view permission is no reason to fail, nor to say more
    for header in ("Bearer wrong", f"Bearer {_token()}"):
        r = Client().get("/healthz", HTTP_AUTHORIZATION=header)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, header
    # when a reader asks (an API token with the view permission, or the scrape token)
    for header in (f"Bearer {_token('view_workitem')}", "Bearer scrape-secret-123"):
        body = Client().get("/healthz", HTTP_AUTHORIZATION=header).json()
        # then it gets the details
        assert set(body) == DETAILS, header
        assert body["database"] == body["channel_layer"] == body["probe"] == "ok"
        assert body["claims_last_minute"]["count"] >= 0 and body["interval_seconds"] == 2.0


def test_a_redis_that_does_not_answer_is_unavailable_and_readers_see_which_part(probe, settings):
    # given a check that found Redis not answering (nothing listens on port 1)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    probe.probe_once()
    # then everyone gets 503, the anonymous caller nothing more
    r = Client().get("/healthz")
    assert r.status_code == 503 and r.json() == {"status": "unavailable"}
    body = Client().get("/healthz", HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem')}").json()
    assert body["status"] == "unavailable" and body["database"] == "ok"
    assert body["channel_layer"].startswith("unavailable") and body["channel_layer_ok_seconds_ago"] is None
    assert body["channel_layer_seconds"] < 1.0  # the probe gives up after 0.5 s


def test_a_stale_check_is_unavailable(probe):
    # given a check that was fine, and a probe that has not ended one since (stuck)
    check = probe.probe_once()
    assert probe.report(detailed=False) == (True, {"status": "ok"})
    # when more than the stale limit has passed
    ok, body = probe.report(detailed=True, now=check.checked_at + health.stale_after() + 0.1)
    # then it is unavailable, and the details say why
    assert not ok and body["status"] == "unavailable" and body["probe"].startswith("stale")
    assert body["database"] == "ok"


def test_before_any_check_the_answer_is_unavailable(probe):
    assert probe.report(detailed=False) == (False, {"status": "unavailable"})
    assert probe.report(detailed=True)[1]["probe"] == "no check yet"


# --- at the ASGI level ---------------------------------------------------------------------------

def test_anonymous_and_scrape_token_callers_are_answered_without_the_application(probe, settings):
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    probe.probe_once()
    inner = _Inner()
    app = health.HealthCheck(inner)
    # anonymous: the status, with the security headers every answer carries
    status, headers, body, _ = _asgi(app, _scope())
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert headers[b"x-frame-options"] == b"DENY" and headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"content-type"] == b"application/json" and headers[b"content-length"] == str(len(body)).encode()
    # HEAD: the same headers, no body
    status, headers, body, _ = _asgi(app, _scope("HEAD"))
    assert status == 200 and body == b"" and headers[b"content-length"] == b"16"
    # the scrape token: the details
    status, _, body, _ = _asgi(app, _scope(headers=[(b"authorization", b"Bearer scrape-secret-123")]))
    assert status == 200 and set(json.loads(body)) == DETAILS
    assert inner.calls == 0


def test_other_credentials_methods_and_paths_go_to_the_application(probe, settings):
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    probe.probe_once()
    inner = _Inner()
    app = health.HealthCheck(inner)
    for scope in (_scope(headers=[(b"authorization", b"Bearer wc_abc_def")]),  # an API token: Django looks it up
                  _scope(headers=[(b"cookie", f"{settings.SESSION_COOKIE_NAME}=abc".encode())]),  # a session
                  _scope("POST"), _scope(path="/healthz/"), _scope(path="/api/v1/work-items")):
        assert _asgi(app, scope)[0] == 299, scope
    assert inner.calls == 5
    # a cookie that is not the session's changes nothing
    assert _asgi(app, _scope(headers=[(b"cookie", b"theme=dark")]))[0] == 200


def test_the_header_is_read_as_the_api_reads_it_and_a_malformed_one_gets_the_status_alone(probe, settings):
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    probe.probe_once()
    inner = _Inner()
    app = health.HealthCheck(inner)
    session = (b"cookie", f"{settings.SESSION_COOKIE_NAME}=abc".encode())
    # the scrape token in any case of the scheme, with spaces around and between (auth.bearer_token)
    for header in (b"bearer scrape-secret-123", b"Bearer  scrape-secret-123", b" BEARER scrape-secret-123 "):
        status, _, body, _ = _asgi(app, _scope(headers=[(b"authorization", header)]))
        assert status == 200 and set(json.loads(body)) == DETAILS, header
    # present but no bearer token (the scrape token among other words, or the header twice): the
    # status alone, answered here, a session beside it or not
    for headers in ([(b"authorization", b"Bearer scrape-secret-123 x")],
                    [(b"authorization", b"Basic c2NyYXBlOnNlY3JldA==")],
                    [(b"authorization", b"Bearer")], [(b"authorization", b"")],
                    [(b"authorization", b"Bearer scrape-secret-123"), (b"authorization", b"Bearer scrape-secret-123")],
                    [session, (b"authorization", b"Bearer scrape-secret-123 x")]):
        status, _, body, _ = _asgi(app, _scope(headers=headers))
        assert status == 200 and json.loads(body) == {"status": "ok"}, headers
    assert inner.calls == 0


def test_the_answer_never_waits_on_the_probe(probe, monkeypatch):
    # given a probe that is stuck in a check that will not end, its last check long ago
    check = probe.probe_once()
    monkeypatch.setattr(probe, "probe_once", lambda: time.sleep(3600))
    monkeypatch.setattr(health.time, "monotonic", lambda: check.checked_at + health.stale_after() + 1)
    # when asked at the ASGI level, then the answer is at once, and unavailable
    status, _, body, seconds = _asgi(health.HealthCheck(_Inner()), _scope())
    assert status == 503 and json.loads(body) == {"status": "unavailable"}
    assert seconds < 0.5


def test_answers_beyond_the_pace_wait_their_turn_at_most_max_wait():
    pace = health.Pace(per_second=10, max_wait=0.5)
    # ten callers at the same instant: the first at once, then one each 0.1 s, never more than 0.5 s
    assert [round(pace.wait_for(100.0), 3) for _ in range(8)] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5]
    # a caller after a quiet second is answered at once
    assert pace.wait_for(102.0) == 0.0


# --- the probe -----------------------------------------------------------------------------------

def test_the_probe_keeps_one_redis_connection(probe, settings):
    # given a real Redis (shared with other test processes: the probe's connection is told by its name)
    settings.REDIS_URL = TEST_REDIS_URL
    monitor = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=5)

    def probes() -> list[int]:
        return [c["id"] for c in monitor.client_list() if c.get("name") == health.CLIENT_NAME]

    # when the probe runs twenty times
    checks = [probe.probe_once()]
    first = probes()
    checks += [probe.probe_once() for _ in range(19)]
    # then it connected once: the same one connection throughout, and every check was fine
    assert len(first) == 1 and probes() == first
    assert {c.channel_layer for c in checks} == {"ok"} and {c.database for c in checks} == {"ok"}
    monitor.close()


@pytest.mark.django_db(transaction=True)
def test_the_probe_thread_checks_every_interval_and_stops(settings, monkeypatch):
    # given a short interval and no check yet, when /healthz starts the process's probe
    settings.WORKCENTER_HEALTH_INTERVAL_S = 0.05
    health.probe.stop()
    monkeypatch.setattr(health.probe, "last", None)
    try:
        assert Client().get("/healthz").status_code == 200
        first = health.probe.last
        # then it checks again on its own
        assert wait_until(lambda: health.probe.last is not first, 5)
        assert health.probe.thread is not None and health.probe.thread.name == "workcenter-health"
    finally:
        health.probe.stop()
    # and a stopped probe has ended its thread
    assert health.probe.thread is None


def test_recent_latency_reports_the_last_minute_only():
    recent = RecentLatency(limit=200)
    for _ in range(10):
        recent.observe(5.0, now=1000.0)  # over a minute before
    for ms in range(1, 101):
        recent.observe(ms / 1000, now=1050.0)
    assert recent.summary(now=1070.0) == {"count": 100, "p50_seconds": 0.05, "p99_seconds": 0.099,
                                          "max_seconds": 0.1}
    assert recent.summary(now=1200.0) == {"count": 0, "p50_seconds": None, "p99_seconds": None,
                                          "max_seconds": None}
    # and the ring is bounded: the oldest go first
    small = RecentLatency(limit=5)
    for ms in range(1, 11):
        small.observe(ms / 1000, now=1.0)
    assert small.summary(now=2.0)["count"] == 5 and small.summary(now=2.0)["p50_seconds"] == 0.008


# --- a real server ---------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_healthz_answers_503_when_the_database_does_not_answer():
    # a real server whose PostgreSQL is not there (nothing listens on its port)
    port = free_port()
    dead = f"postgres://postgres@127.0.0.1:{free_port()}/workcenter"
    proc = start_daphne(port, {"DATABASE_URL": dead, "WORKCENTER_METRICS_TOKEN": "scrape-secret-123"})
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30)
        assert err.value.code == 503 and json.loads(err.value.read()) == {"status": "unavailable"}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz",
                                         headers={"Authorization": "Bearer scrape-secret-123"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        body = json.loads(err.value.read())
        assert err.value.code == 503 and body["database"].startswith("unavailable"), body
        assert body["channel_layer"] == "ok"
    finally:
        stop_process(proc)
