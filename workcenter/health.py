"""`GET /healthz` from a cached check: one probe per process per interval, whatever the traffic.

Why: a health check that probes per call can be turned against the server. Each call used to open
a Redis connection of its own and could hold one of the request threads (workcenter/handlers.py)
for up to 2 s while Redis did not answer, so anonymous callers looping on `/healthz` during a
Redis stall filled the threads and the API waited behind them.

How:

* **One probe per process** (`HealthProbe`), a daemon thread started by the first `/healthz` or
  `/metrics`: every WORKCENTER_HEALTH_INTERVAL_S seconds (default 2) it runs `SELECT 1` on the
  thread's own database connection (kept between probes, closed after an error so the next probe
  connects afresh) and pings Redis (when REDIS_URL is set) on one kept client, with 0.5 s connect
  and read timeouts and no retries. The last result (`Check`) is what every answer reports.
* **Answered at the ASGI level** (`HealthCheck`, in front of the application in
  workcenter/asgi.py): an anonymous `/healthz` costs no request thread and waits on nothing — on
  the event loop it reads the last check and answers (only a process's very first call waits,
  on the loop, up to 1 s for the first probe; through Django, on its request thread). A check
  older than `stale_after()` (3 intervals and 2 s: the probe is stuck, on a database that does
  not answer, say) reports unavailable.
* **Paced.** Answered at once, it is the cheapest request the server has, yet a client looping
  on it as fast as it can still takes the event loop's time, and with it the interpreter lock
  the request threads need: 16 such loops (about 850 answers a second) held the API's p50 at
  38 ms against 3 ms. So a process gives at most `PACE_PER_SECOND` (50) answers a second at
  once; a caller beyond that waits for its turn on the loop, never more than 0.5 s (a load
  balancer checking every few seconds never waits).
* **Who sees what.** Anonymous callers get `{"status": "ok" | "unavailable"}` with 200 or 503.
  The scrape token (WORKCENTER_METRICS_TOKEN) is checked here too and gets the details: each
  part's state and probe latency, the check's age, when Redis last answered, and the claims'
  latency over the last minute (workcenter/instruments.py). A request that carries any other
  credential (an API token, a session cookie) goes on to the Django view (workcenter/metrics.py),
  which looks the credential up on a request thread — as any API call does — and gives the
  details to a caller with `workcenter.view_workitem`, the status alone to anyone else. Both
  read the Authorization header with `auth.bearer_token`; a present header that says no bearer
  token gets the status alone, never the details (here, without the application).
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connections
from django.http import JsonResponse
from redis.backoff import NoBackoff
from redis.retry import Retry

from .auth import MalformedAuthorization, bearer_token
from .instruments import CLAIMS_RECENT
from .redis_layer import redis_host
from .security_headers import asgi_headers, secure_scope

logger = logging.getLogger("workcenter.health")

HEALTH_PATH = "/healthz"
DEFAULT_INTERVAL = 2.0  # seconds between probes (WORKCENTER_HEALTH_INTERVAL_S)
REDIS_TIMEOUT = 0.5  # seconds a probe waits for Redis to accept, and then to answer
STALE_INTERVALS = 3  # a check older than this many intervals (plus the probe's own time) is not believed
FIRST_CHECK_WAIT = 1.0  # seconds a process's first /healthz waits for its first probe
PACE_PER_SECOND = 50  # /healthz answers per second per process before callers wait their turn
PACE_MAX_WAIT = 0.5  # seconds a caller waits at most for its turn
CLIENT_NAME = f"workcenter-health-{os.getpid()}"  # the probe's connection in Redis's CLIENT LIST


@dataclass(frozen=True)
class Check:
    """One probe's result; times are `time.monotonic()` values."""

    database: str
    channel_layer: str
    database_seconds: float
    channel_layer_seconds: float
    checked_at: float
    channel_layer_ok_at: float | None  # the last probe whose Redis ping answered (None: none yet)


def interval() -> float:
    """Seconds between two probes."""
    return max(0.05, float(getattr(settings, "WORKCENTER_HEALTH_INTERVAL_S", DEFAULT_INTERVAL)))


def stale_after() -> float:
    return STALE_INTERVALS * interval() + 2 * REDIS_TIMEOUT + 1.0


class HealthProbe:
    """The process's probe thread and its last check (module doc)."""

    def __init__(self) -> None:
        self.last: Check | None = None
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.client: redis.Redis | None = None
        self.client_url = ""
        self.layer_ok_at: float | None = None

    def ensure_started(self) -> None:
        thread = self.thread
        if thread is not None and thread.is_alive():
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.stopping.clear()
                self.thread = threading.Thread(target=self.run, name="workcenter-health", daemon=True)
                self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the probe thread (tests; a process simply exits)."""
        with self.lock:
            thread, self.thread = self.thread, None
        self.stopping.set()
        if thread is not None:
            thread.join(timeout)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.probe_once()
                self.stopping.wait(interval())
        finally:
            self.close()

    def probe_once(self) -> Check:
        """Check both parts now (on the calling thread, with its database connection)."""
        database, database_seconds = self.database()
        channel_layer, layer_seconds = self.channel_layer()
        now = time.monotonic()
        if channel_layer == "ok":
            self.layer_ok_at = now
        check = Check(database, channel_layer, database_seconds, layer_seconds, now, self.layer_ok_at)
        last = self.last
        if last is None or (last.database, last.channel_layer) != (database, channel_layer):
            # a change of state, once (an outage is not one warning per probe)
            logger.log(logging.INFO if database == channel_layer == "ok" else logging.WARNING,
                       "health: database %s, channel layer %s", database, channel_layer)
        self.last = check
        return check

    def database(self) -> tuple[str, float]:
        connection = connections["default"]  # this thread's own
        started = time.monotonic()
        try:
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
            return "ok", time.monotonic() - started
        except Exception as exc:  # any driver error means: not healthy
            try:
                connection.close()
            except Exception:
                pass  # it is being dropped anyway
            return f"unavailable: {type(exc).__name__}", time.monotonic() - started

    def channel_layer(self) -> tuple[str, float]:
        url = getattr(settings, "REDIS_URL", "")
        if not url:
            return "ok", 0.0  # the in-memory layer lives in this process
        started = time.monotonic()
        try:
            self.redis(url).ping()
            return "ok", time.monotonic() - started
        except Exception as exc:
            return f"unavailable: {type(exc).__name__}", time.monotonic() - started

    def redis(self, url: str) -> redis.Redis:
        """The one client of this probe: one connection, reopened only after a failure."""
        if self.client is None or self.client_url != url:
            self.close_redis()
            pool = redis.ConnectionPool.from_url(redis_host(url)["address"], max_connections=1)
            # set after parsing, so a timeout in the URL (meant for the channel layer) does not apply
            pool.connection_kwargs.update(socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT,
                                          retry=Retry(NoBackoff(), 0), client_name=CLIENT_NAME)
            self.client, self.client_url = redis.Redis(connection_pool=pool), url
        return self.client

    def close_redis(self) -> None:
        if self.client is not None:
            try:
                self.client.connection_pool.disconnect()
            except Exception:
                pass  # a client that cannot say goodbye is dropped all the same
            self.client = None

    def close(self) -> None:
        self.close_redis()
        try:
            connections["default"].close()
        except Exception:
            pass

    def report(self, *, detailed: bool, now: float | None = None) -> tuple[bool, dict]:
        """(healthy, body) from the last check; never waits."""
        now = time.monotonic() if now is None else now
        check = self.last
        if check is None:
            body = {"status": "unavailable"}
            if detailed:
                body.update(database="unknown", channel_layer="unknown", probe="no check yet")
            return False, body
        age = now - check.checked_at
        stale = age > stale_after()
        ok = not stale and check.database == "ok" and check.channel_layer == "ok"
        body = {"status": "ok" if ok else "unavailable"}
        if detailed:
            body.update(
                database=check.database, channel_layer=check.channel_layer,
                probe=f"stale: the last check is {age:.1f} s old" if stale else "ok",
                checked_seconds_ago=round(age, 3), interval_seconds=interval(),
                database_seconds=round(check.database_seconds, 6),
                channel_layer_seconds=round(check.channel_layer_seconds, 6),
                channel_layer_ok_seconds_ago=(None if check.channel_layer_ok_at is None
                                              else round(now - check.channel_layer_ok_at, 3)),
                claims_last_minute=CLAIMS_RECENT.summary(now))
        return ok, body


probe = HealthProbe()


def health_response(*, detailed: bool, wait: float = 0.0) -> JsonResponse:
    """The answer of `/healthz` (security headers are the caller's: the Django chain, or HealthCheck);
    before the process's first check it waits up to `wait` seconds for it."""
    probe.ensure_started()
    deadline = time.monotonic() + wait
    while probe.last is None and time.monotonic() < deadline:
        time.sleep(0.01)
    ok, body = probe.report(detailed=detailed)
    response = JsonResponse(body, status=200 if ok else 503)
    response["Cache-Control"] = "no-store"
    return response


def scrape_token_matches(raw: str | None) -> bool:
    scrape = getattr(settings, "WORKCENTER_METRICS_TOKEN", "")
    return bool(scrape and raw and hmac.compare_digest(raw.encode(), scrape.encode()))


def _credential(scope) -> str:
    """"none" (the status alone), "scrape" (the scrape token: the details) or "other" (to be
    looked up by Django). The Authorization header is read by auth.bearer_token, as the Django
    view reads it (repeated, joined by commas): a present header that says no bearer token is
    answered as no credential, whatever else the request carries, since metrics.healthz answers
    it with the status alone too."""
    cookie_name = settings.SESSION_COOKIE_NAME.encode("latin-1") + b"="
    authorization: list[str] = []
    session = False
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"authorization":
            authorization.append(value.decode("latin-1"))
        elif name == b"cookie" and cookie_name in value:
            session = True
    try:
        raw = bearer_token(",".join(authorization) if authorization else None)
    except MalformedAuthorization:
        return "none"
    if raw is not None:
        return "scrape" if scrape_token_matches(raw) else "other"
    return "other" if session else "none"


class Pace:
    """Turns for the ASGI-level answers: one every 1/`per_second` s; a caller whose turn is later
    waits for it (on the event loop, holding nothing), at most `max_wait` seconds."""

    def __init__(self, per_second: float = PACE_PER_SECOND, max_wait: float = PACE_MAX_WAIT) -> None:
        self.step = 1.0 / per_second
        self.max_wait = max_wait
        self.next_turn = 0.0

    def wait_for(self, now: float) -> float:
        """Seconds until the caller's turn (0: now); takes the turn."""
        turn = min(max(now, self.next_turn), now + self.max_wait)
        self.next_turn = turn + self.step
        return turn - now


class HealthCheck:
    """ASGI middleware: answers `GET`/`HEAD /healthz` on the event loop (module doc)."""

    def __init__(self, app, pace: Pace | None = None) -> None:
        self.app = app
        self.pace = pace or Pace()

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope["path"] != HEALTH_PATH or scope["method"] not in ("GET", "HEAD")):
            return await self.app(scope, receive, send)
        credential = _credential(scope)
        if credential == "other":
            return await self.app(scope, receive, send)
        delay = self.pace.wait_for(time.monotonic())
        if delay:
            await asyncio.sleep(delay)
        probe.ensure_started()
        if probe.last is None:
            deadline = time.monotonic() + FIRST_CHECK_WAIT
            while probe.last is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        response = secure_scope(scope, health_response(detailed=credential == "scrape"))
        body = response.content
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [*asgi_headers(response), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

