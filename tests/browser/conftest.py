"""Browser fixtures: one daphne server and one headless Debian chromium for the browser tests of a
test process (package scope: they end when the process leaves tests/browser, so Playwright's
loop never sits beside the other tests), a signed-in page per test, and a Redis channel layer in
this process so service calls here reach the pages."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import Permission, User
from django.db import connection

from dashboard.stream.publisher import publisher
from workcenter.auth import api_token_create

from tests.conftest import Clock, Store, make_graph
from tests.live import ROOT

from .live import CHROMIUM, CHROMIUM_ARGS, LiveServer, WAIT_MS, redis_layer

SCREENSHOTS = ROOT / "artifacts" / "screenshots"
PASSWORD = "browser-test-password"


@pytest.fixture(scope="package")
def daphne_server(django_db_setup, django_db_blocker, tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("daphne") / "daphne.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop on this thread; Django refuses ORM calls next to
    # a running loop unless told that this thread is in fact synchronous (Playwright's advice).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield b
            b.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def store_thread():
    """One thread without an event loop for every write of the test: Playwright's loop occupies
    the main thread, and a service's after-commit publish must not land on that loop."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="store") as pool:
        yield pool


@pytest.fixture
def bg(store_thread):
    """`bg(fn, *args, **kwargs)` runs fn on the store thread and returns its result."""

    def run(fn, *args, **kwargs):
        return store_thread.submit(fn, *args, **kwargs).result(timeout=120)

    yield run
    run(lambda: connection.close())  # resolved on the store thread: its own connection


@pytest.fixture(autouse=True)
def shared_channel_layer(settings, bg):
    """This process publishes to the server's Redis layer (channels resets its layers when the
    setting changes)."""
    settings.CHANNEL_LAYERS = redis_layer()
    bg(lambda: async_to_sync(get_channel_layer().flush)())
    publisher.register()
    yield
    publisher.register()


@pytest.fixture
def lead(transactional_db):
    user = User.objects.create_user("lead", password=PASSWORD)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return user


class Api:
    """JSON calls to the live server with a bearer token."""

    def __init__(self, base: str, token: str):
        self.base = base
        self.token = token

    def call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base}/api/v1{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)


@pytest.fixture
def http_api(daphne_server, lead):
    _, raw = api_token_create(user=lead, name="browser")
    return Api(daphne_server.url, raw)


@pytest.fixture
def page(browser, daphne_server, lead):
    """A signed-in page; fails the test if it asked any host but the server (everything offline)
    or raised a script error."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    foreign: list[str] = []
    errors: list[str] = []
    pg.on("request", lambda r: foreign.append(r.url)
          if not r.url.startswith((daphne_server.url, daphne_server.url.replace("http", "ws"), "data:")) else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    log_in(pg, daphne_server.url, "lead")
    yield pg
    context.close()
    assert not foreign, f"requests outside the app: {foreign}"
    assert not errors, f"script errors: {errors}"


def log_in(pg, base: str, username: str, *, admin: bool = False) -> None:
    """Sign `username` in through the dashboard's login form (the admin's own with `admin`)."""
    path, submit, landing = (("/admin/login/", "input[type=submit]", "/admin/") if admin
                             else ("/accounts/login/", "button[type=submit]", "/"))
    pg.goto(f"{base}{path}")
    pg.fill("#id_username", username)
    pg.fill("#id_password", PASSWORD)
    pg.click(submit)
    pg.wait_for_url(f"{base}{landing}")


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path))
    return path


def wait_for_js(page, expression: str, arg=None, timeout: float = WAIT_MS) -> None:
    """`page.wait_for_function` without its in-page `eval`, which the pages' Content-Security-Policy
    (no 'unsafe-eval') refuses: polls `page.evaluate`, a DevTools call that no page policy governs.
    `expression` is a JS expression, or a function of `arg`."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression, arg):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout:.0f} ms: {expression}")
        page.wait_for_timeout(50)


def wait_until(page, condition, timeout: float = WAIT_MS) -> None:
    """Wait until `condition()` (Python) is true, the page's events (its websocket frames, a tap's
    messages) flowing meanwhile."""
    deadline = time.monotonic() + timeout / 1000
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout:.0f} ms: {condition}")
        page.wait_for_timeout(50)


def wait_live(page) -> None:
    page.wait_for_selector('#conn[data-state="live"]')


# --- what a page shows of itself, read from outside it ----------------------------------------------
# The pages put nothing on `window` for tests: the tests read the DOM, the performance entries the
# pages make (static/dashboard/common.js markLatest / measureLatest) and the websocket traffic.

def perf(page, name: str) -> dict | None:
    """The page's latest performance mark or measure `name`: {"start", "duration", "detail"} in ms
    (`start` counts from navigation start), or None."""
    return page.evaluate("""(name) => { const e = performance.getEntriesByName(name).at(-1);
        return e ? {start: e.startTime, duration: e.duration, detail: e.detail} : null; }""", name)


def wait_perf(page, name: str, condition: str = "true", timeout: float = WAIT_MS) -> dict:
    """Wait until the entry `name` exists and `condition` (a JS expression of the entry `e`) holds;
    returns it as `perf` does."""
    wait_for_js(page, f"(name) => {{ const e = performance.getEntriesByName(name).at(-1); return !!e && ({condition}); }}",
                name, timeout=timeout)
    return perf(page, name)


def graph_view(page) -> dict:
    """The graph's pan and zoom as drawn: {"k", "x", "y"} of its viewport's transform."""
    return page.evaluate("""() => { const t = document.querySelector('#graph g.viewport').transform.baseVal.consolidate();
        return t ? {k: t.matrix.a, x: t.matrix.e, y: t.matrix.f} : {k: 1, x: 0, y: 0}; }""")


def _message(payload) -> dict | None:
    try:
        msg = json.loads(payload)
    except (TypeError, ValueError):
        return None
    return msg if isinstance(msg, dict) else None


class Frames:
    """Every message the server sent the page's websockets, as the browser received them (the page
    keeps its own sockets). Made before the page opens the sockets it should count."""

    def __init__(self, page):
        self.messages: list[dict] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._received))

    def _received(self, payload) -> None:
        msg = _message(payload)
        if msg is not None:
            self.messages.append(msg)

    def count(self, kind: str) -> int:
        return sum(1 for m in self.messages if m.get("type") == kind)

    def event_ids(self, after: int = 0) -> set[int]:
        """The distinct ids of the stored events received (a replay may repeat one)."""
        return {int(m["event"]["id"]) for m in self.messages
                if m.get("type") == "event" and m.get("event") and int(m["event"]["id"]) > after}


class StreamTap:
    """The page's websockets through Playwright's websocket routing: each reaches the real server,
    and every message the server sends passes here on its way to the page, so a test can drop one
    (`drop_next`), stop them all (`deafen`) or cut the connection (`cut`) as a network would.
    Messages move while the test is inside a Playwright call (a wait): no latency test uses it."""

    def __init__(self, page, path: str = "/ws/"):
        self.sockets: list = []  # the page side of every connection made, newest last
        self.passed: list[dict] = []
        self.dropped: list[dict] = []
        self._drop = None
        self._deaf = False
        page.route_web_socket(re.compile(r"^wss?://[^/]+" + re.escape(path)), self._connect)

    def _connect(self, ws) -> None:
        server = ws.connect_to_server()
        server.on_message(lambda payload: self._forward(ws, payload))
        self.sockets.append(ws)

    def _forward(self, ws, payload) -> None:
        msg = _message(payload) or {}
        if self._deaf:
            self.dropped.append(msg)
            return
        if self._drop is not None and self._drop(msg):
            self._drop = None
            self.dropped.append(msg)
            return
        self.passed.append(msg)
        ws.send(payload)

    def drop_next(self, which) -> None:
        """The next message for which `which(msg)` is true never reaches the page."""
        self._drop = which

    def deafen(self) -> None:
        """From now on nothing the server sends reaches the page (its socket stays open)."""
        self._deaf = True

    def cut(self) -> None:
        """Close the newest connection, both sides, as a network failure would (code 1006 is not
        one a script may send: 4000, which the page treats alike)."""
        self.sockets[-1].close(code=4000, reason="connection cut")


class ThreadedStore:
    """The shared test driver (tests/conftest.py), every call made on the store thread. `behind`
    starts its clock that far before the wall clock (runs that began, or waited, that long ago)."""

    def __init__(self, bg, behind: timedelta = timedelta(0)):
        self._store = Store(Clock(datetime.now(timezone.utc) - behind) if behind else Clock())
        self._bg = bg

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        return (lambda *a, **k: self._bg(attr, *a, **k)) if callable(attr) else attr

    def graph(self, stages, **kw):
        return self._bg(make_graph, self._store, stages, **kw)
