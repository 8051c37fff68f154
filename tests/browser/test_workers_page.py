"""The Workers page: pushed over /ws/workers/ (no HTTP request per update), a renewal on screen
within a second; with two real worker processes, one of them stopped with SIGSTOP, the stopped
one is marked as not renewing its leases within half a lease and the other is not."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.live import ROOT, database_url, stop_process, wait_until
from workcenter import clock, services
from workcenter.models import Run

from .conftest import Frames, screenshot, wait_live
from .conftest import wait_until as wait_on_page

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_MS = 4_000


def _worker(boot: str) -> subprocess.Popen:
    env = dict(os.environ, DATABASE_URL=database_url(), WORKCENTER_SIM_SCALE="200", WORKCENTER_SIM_RATES="0,0,0",
               PYTHONUNBUFFERED="1", WORKCENTER_LOG_LEVEL="WARNING")
    return subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--concurrency", "1",
                             "--lease-ms", str(LEASE_MS), "--poll-ms", "200"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_stopped_worker_is_marked_within_half_a_lease(page, daphne_server, bg):
    # given two items and two real workers, each holding one run (long simulated work)
    for i in range(2):
        bg(services.work_item_create, title=f"Held {i}", goal="g", work_item_type="software-change", actor="test")
    workers = [_worker("a"), _worker("b")]
    try:
        assert wait_until(lambda: bg(lambda: Run.objects.filter(status="running").count()) == 2, 30)
        boots = bg(lambda: dict(Run.objects.filter(status="running").values_list("owner_boot_id", "work_item__title")))
        assert len(boots) == 2
        frames = Frames(page)  # what the server pushes to the page
        page.goto(f"{daphne_server.url}/workers/")
        wait_live(page)
        requests: list[str] = []  # what the page asks over HTTP from now on (the websocket aside)
        page.on("request", lambda r: requests.append(f"{r.method} {r.url}") if r.resource_type != "websocket" else None)
        for boot in boots:
            page.wait_for_selector(f'#workers tr[data-boot="{boot}"][data-renewing="true"]')
        # when one worker process is stopped (SIGSTOP: alive, silent)
        victim = workers[0]
        stopped_boot = None
        deadline = time.monotonic() + 10
        while stopped_boot is None and time.monotonic() < deadline:  # which boot id is that process's
            by_boot = bg(lambda: {r.owner_boot_id: r.renewed_at for r in Run.objects.filter(status="running")})
            victim.send_signal(signal.SIGSTOP)
            t_stop = time.monotonic()
            time.sleep(LEASE_MS / 1000 / 3 + 0.5)  # one renewal period: the live one renews, the stopped one not
            after = bg(lambda: {r.owner_boot_id: r.renewed_at for r in Run.objects.filter(status="running")})
            frozen = [b for b in after if after[b] == by_boot.get(b)]
            if len(frozen) == 1:
                stopped_boot = frozen[0]
            else:
                victim.send_signal(signal.SIGCONT)
        assert stopped_boot is not None
        last_renewal = bg(lambda: Run.objects.get(status="running", owner_boot_id=stopped_boot).renewed_at)
        # then the page marks it within half a lease of its last renewal (which was before the stop)
        page.wait_for_selector(f'#workers tr[data-boot="{stopped_boot}"][data-renewing="false"]',
                               timeout=LEASE_MS)
        marked = time.monotonic()
        print(f"\nmarked {marked - t_stop:.1f} s after SIGSTOP (half a lease = {LEASE_MS / 2000:.1f} s)")
        assert marked - t_stop <= LEASE_MS / 2000 + 1.0
        live = next(b for b in boots if b != stopped_boot)
        assert page.locator(f'#workers tr[data-boot="{live}"]').get_attribute("data-renewing") == "true"
        assert "not renewing" in page.locator(f'#workers tr[data-boot="{stopped_boot}"]').inner_text()
        assert "1 not renewing" in page.locator("#workers-summary").inner_text()
        assert last_renewal is not None
        # its last-seen time counts the seconds since (not a "just now" beside the mark)
        seen = page.locator(f'#workers tr[data-boot="{stopped_boot}"] td.col-time').inner_text()
        assert re.fullmatch(r"\d+ s ago", seen), seen
        assert frames.count("workers") >= 1  # the live worker's renewals, pushed
        assert requests == [], requests
        screenshot(page, "workers-stopped.png")
        for width in (1280, 800):  # as a lead's laptop and a narrow window show it
            page.set_viewport_size({"width": width, "height": 900})
            screenshot(page, f"workers-stopped-{width}.png")
    finally:
        for w in workers:
            try:
                w.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            stop_process(w)


def test_renewals_are_pushed_and_shown_within_a_second_without_http_requests(page, daphne_server, bg):
    # given a run held by a worker (its renewals made here, through the service a worker calls)
    bg(services.work_item_create, title="Renewed", goal="g", work_item_type="software-change", actor="test")
    claim = bg(services.action_claim, owner_boot_id="boot-renewing", lease_ms=60_000)
    frames = Frames(page)
    page.goto(f"{daphne_server.url}/workers/")
    wait_live(page)
    page.wait_for_selector(f'#workers span.renew[data-run="{claim.run.pk}"]')
    requests: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}") if r.resource_type != "websocket" else None)
    updates = frames.count("workers")
    latencies = []
    for _ in range(5):
        # when the lease is renewed
        time.sleep(0.3)
        started = time.monotonic()
        renewed = bg(services.run_renew, run_id=claim.run.pk, owner_boot_id="boot-renewing",
                     lease_epoch=claim.run.lease_epoch, lease_ms=60_000)
        # then the page shows that renewal within a second, pushed
        page.wait_for_selector(f'#workers span.renew[data-run="{claim.run.pk}"]'
                               f'[data-renewed="{clock.iso_ms(renewed.renewed_at)}"]', timeout=3_000)
        latencies.append(time.monotonic() - started)
    print(f"\nrenewal on screen after {', '.join(f'{s * 1000:.0f}' for s in latencies)} ms")
    assert max(latencies) <= 1.0, latencies
    # one push per renewal (their frames may be reported a moment after the page drew the last)
    wait_on_page(page, lambda: frames.count("workers") - updates >= 5, timeout=2_000)
    assert frames.count("workers") - updates == 5
    assert requests == [], requests
    assert page.locator(f'span.renew[data-run="{claim.run.pk}"]').inner_text().startswith("renewed 0\u00a0s ago")
