"""Alarms that are true, and the ones that were missing (docs/dashboard.md, "Alarms"):

* a running sibling of a failed stage (an orphan, DOMAIN §6.1) reads "stopping", never "no
  heartbeat", through the half of its lease after which a dead worker would be called out;
* a run past its stage's usual duration (from earlier completed runs of the same workflow and
  stage) reads "⚠ usually ≤ N s"; one within it does not;
* a server stopped with SIGSTOP turns the connection pill of the list, item and Workers pages to
  "No word from the server for N s" within 2.5 heartbeats (and the 1 s check), and Live returns
  after SIGCONT.
"""
from __future__ import annotations

import os
import re
import signal
import time
from datetime import timedelta

import pytest

from workcenter import services, stage_durations

from .conftest import ThreadedStore, log_in, screenshot, wait_for_js, wait_live
from .live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

PAIR = [{"id": "survey", "type": "research", "mode": "read", "max_attempts": 1},
        {"id": "measure", "type": "research", "mode": "read"}]
SURVEY = [{"id": "survey", "type": "research", "mode": "read"}]
LONG_LEASE_MS = 900_000  # a production lease: its half is far away


def node(page, stage):
    return page.locator(f'#graph g.node[data-stage="{stage}"]')


def drawn(locator) -> str:
    """The text a node draws, line by line (not its tooltip)."""
    return locator.evaluate("g => [...g.querySelectorAll('text')].map(t => t.textContent.trim()).join(' / ')")


def sign_in(browser, server, width=1280, height=800):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    log_in(page, server.url, "lead")
    return context, page, errors


@pytest.fixture
def own_server(tmp_path):
    """A server of the test's own: a fresh process (nothing kept from earlier tests), which the
    test may stop; `start(env)`."""
    servers = []

    def start(**env):
        server = LiveServer(tmp_path / f"daphne-{len(servers)}.log", env={k: str(v) for k, v in env.items()})
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        if server.proc is not None and server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()


# --- an orphaned sibling -----------------------------------------------------------------------------

def test_an_orphaned_sibling_reads_stopping_never_no_heartbeat(page, daphne_server, bg):
    store = ThreadedStore(bg, behind=timedelta(milliseconds=1))
    item = store.graph(PAIR, title="Orphaned sibling")
    lease_ms = 8_000  # its half (4 s) passes while the test looks: a dead worker would be called out
    claims = {}
    for _ in range(2):
        c = bg(services.action_claim, owner_boot_id="boot-orphan", lease_ms=lease_ms, now=store.now())
        claims[c.action.stage_id] = c
    claimed = time.monotonic()
    store.submit(claims["survey"], {"outcome": "failed", "error": "tool missing"})
    assert store.item(item.pk).status == "needs_attention"

    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    page.wait_for_selector('#graph g.node[data-stage="measure"]')
    wait_live(page)
    measure = node(page, "measure")
    seen = []
    shot = False
    # sample the node until its lease has ended (past the half where "no heartbeat" used to show)
    while time.monotonic() - claimed < lease_ms / 1000 + 1:
        seen.append((drawn(measure), measure.get_attribute("class") or ""))
        if not shot and time.monotonic() - claimed > lease_ms / 2000 + 1:
            screenshot(page, "alarms-orphan-stopping-1280.png")
            page.emulate_media(color_scheme="dark")
            page.set_viewport_size({"width": 800, "height": 900})
            page.wait_for_timeout(200)
            screenshot(page, "alarms-orphan-stopping-800-dark.png")
            shot = True
        page.wait_for_timeout(250)
    assert shot and len(seen) > 10, len(seen)
    assert not [t for t, _ in seen if "no heartbeat" in t][:1]
    assert not [c for _, c in seen if "hb-stale" in c]
    # while the run still runs: "stopping", and why, in the node …
    stopping = [t for t, c in seen if "stopping" in c.split()]
    assert stopping and all("■ stopping" in t and "runs again after a retry" in t for t in stopping), seen[:3]
    assert "stopping: the item needs attention" in measure.locator("title").text_content()
    # … and the whole sentence in its panel
    measure.click()
    page.wait_for_selector("#panel:not([hidden])")
    panel = page.locator("#panel-body").inner_text()
    if measure.get_attribute("data-status") == "running":
        assert "stopping: the item needs attention; this stage runs again after a retry" in panel, panel


# --- a run longer than usual ---------------------------------------------------------------------------

def test_a_run_past_its_stages_usual_duration_shows_the_warning(browser, own_server, lead, bg):
    # history: five completed runs of survey (workflow test-graph) of 1.2-1.8 s, four minutes ago
    past = ThreadedStore(bg, behind=timedelta(minutes=4))
    for s in (1.2, 1.4, 1.5, 1.6, 1.8):
        done = past.graph(SURVEY, title=f"Earlier {s}")
        claim = past.claim_item(done.pk, stage="survey")
        past._store.clock.tick(int(s * 1000))
        past.complete(claim)
    # a run that began 3 minutes ago and still holds a long lease (its worker renews nothing, but
    # half of 900 s is not over): overdue; one that began just now: not
    late = past.graph(SURVEY, title="Overdue survey")
    past._store.clock.tick(50_000)
    bg(services.action_claim, owner_boot_id="boot-slow", lease_ms=LONG_LEASE_MS, now=past.now())
    fresh_store = ThreadedStore(bg, behind=timedelta(milliseconds=1))
    fresh = fresh_store.graph(SURVEY, title="Fresh survey")
    bg(services.action_claim, owner_boot_id="boot-fast", lease_ms=LONG_LEASE_MS, now=fresh_store.now())
    bg(stage_durations.forget)  # this process publishes states too: read the history as it is now

    server = own_server()
    context, page, errors = sign_in(browser, server)
    try:
        page.goto(f"{server.url}/work-items/{fresh.pk}/")
        page.wait_for_selector('#graph g.node[data-stage="survey"]')
        wait_live(page)
        page.wait_for_timeout(1500)  # a tick or so
        text = drawn(node(page, "survey"))
        assert "running" in text and "usually" not in text, text

        page.goto(f"{server.url}/work-items/{late.pk}/")
        survey = node(page, "survey")
        survey.wait_for()
        wait_live(page)
        wait_for_js(page, """() => (document.querySelector('#graph g.node[data-stage="survey"] .node-extra') || {})
            .textContent?.includes('usually')""")
        text = drawn(survey)
        assert re.search(r"running · 3 m \d\d s", text), text
        assert "⚠ usually ≤ 2 s" in text, text
        assert "no heartbeat" not in text
        assert "overdue" in survey.get_attribute("class")
        screenshot(page, "alarms-overdue-1280.png")
        page.emulate_media(color_scheme="dark")
        page.set_viewport_size({"width": 800, "height": 900})
        page.wait_for_timeout(300)
        screenshot(page, "alarms-overdue-800-dark.png")
        assert not errors, errors
    finally:
        context.close()


# --- a silent server -------------------------------------------------------------------------------

BEAT_S = 1.0


def pill(page) -> tuple[str, str]:
    return page.evaluate("() => { const c = document.getElementById('conn'); return [c.dataset.state, c.innerText]; }")


def _seconds_until(pages: dict, state: str, since: float, limit: float = 30) -> dict:
    """{page name: seconds from `since` until its pill read `state`}, for the pages that did
    within `limit` seconds (polled every 100 ms)."""
    reached = {}
    some = next(iter(pages.values()))
    while len(reached) < len(pages) and time.monotonic() - since < limit:
        for name, p in pages.items():
            if name not in reached and pill(p)[0] == state:
                reached[name] = time.monotonic() - since
        some.wait_for_timeout(100)
    return reached

def test_a_stopped_server_turns_the_pill_and_live_returns_after_sigcont(browser, own_server, lead, bg):
    store = ThreadedStore(bg, behind=timedelta(milliseconds=1))
    item = store.graph(SURVEY, title="Watched while the server stops")
    server = own_server(WORKCENTER_STREAM_HEARTBEAT_S=BEAT_S)
    context, list_page, errors = sign_in(browser, server)
    try:
        item_page = context.new_page()
        item_page.on("pageerror", lambda e: errors.append(str(e)))
        item_page.goto(f"{server.url}/work-items/{item.pk}/")
        item_page.wait_for_selector("#graph g.node")
        workers_page = context.new_page()
        workers_page.on("pageerror", lambda e: errors.append(str(e)))
        workers_page.goto(f"{server.url}/workers/")
        pages = {"list": list_page, "item": item_page, "workers": workers_page}
        for p in pages.values():
            wait_live(p)
        # a quiet server is not a silent one: 4 heartbeats' time with no event, still Live
        quiet_until = time.monotonic() + 4 * BEAT_S
        while time.monotonic() < quiet_until:
            for name, p in pages.items():
                assert pill(p)[0] == "live", (name, pill(p))
            list_page.wait_for_timeout(200)

        os.kill(server.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            turned = _seconds_until(pages, "silent", stopped)
            assert len(turned) == len(pages), turned
            # stated: silent past 2.5 heartbeats, checked once a second (a loaded machine's timers
            # may run late: a generous bound, the figures are printed)
            assert all(t < 2.5 * BEAT_S + 1 + 5 for t in turned.values()), turned
            assert all(t >= 2.5 * BEAT_S - 1 for t in turned.values()), turned  # not before
            state, label = pill(item_page)
            first = int(re.search(r"No word from the server for (\d+) s", label).group(1))
            item_page.wait_for_timeout(2200)
            later = int(re.search(r"No word from the server for (\d+) s", pill(item_page)[1]).group(1))
            assert later >= first + 1, (first, later)  # it counts up
            screenshot(list_page, "alarms-silent-list-1280.png")
            screenshot(item_page, "alarms-silent-item-1280.png")
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        back = _seconds_until(pages, "live", time.monotonic())
        assert len(back) == len(pages), back
        print(f"\npill silent after SIGSTOP (heartbeat {BEAT_S} s): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in turned.items())
              + "; Live again after SIGCONT: " + ", ".join(f"{k} {v:.1f} s" for k, v in back.items()))
        assert not errors, errors
    finally:
        context.close()
