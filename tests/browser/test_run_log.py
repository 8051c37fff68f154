"""The run log in the item page's panel, live from a real shell worker in a process of its own: on
the embedded default (SQLite, the in-memory channel layer, the worker beside the database) and on
the team deployment (PostgreSQL + Redis), each line a command prints every 100 ms appears in the
open panel within a second (the delays' p50 and p99 are printed); a page whose panel is closed
receives no log bytes; the finished run's log stays, with its download link."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import urllib.request

import pytest
from django.db import connection

from tests.live import ROOT, database_url, stop_process
from tests.load import LoadWatch
from tests.workcenter.test_shell_executor import item_with_stage

from .conftest import Frames, log_in, wait_for_js, wait_live
from .live import REDIS_URL, WAIT_MS, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

LINES = 30
# prints LINES lines 100 ms apart once the test says go (a file in its work dir), each with the
# time it was printed (the machine's clock, which the page's shares), then one on stderr
TICKER = ("import os, sys, time\n"
          "while not os.path.exists('go'): time.sleep(0.02)\n"
          f"for i in range({LINES}):\n"
          "    print(f'tick {i} at {time.time() * 1000:.1f}', flush=True); time.sleep(0.1)\n"
          "print('warning: that was the last tick', file=sys.stderr, flush=True)\n")


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.demo), "postgresql"])
def deployment(request, tmp_path_factory):
    """(server, the worker's extra environment): SQLite with a server of its own on the in-memory
    layer (no REDIS_URL anywhere), or PostgreSQL with the package's server on Redis."""
    if request.param != connection.vendor:
        pytest.skip(f"the {request.param} deployment runs on its own database")
    if request.param == "postgresql":
        yield request.getfixturevalue("daphne_server"), {"REDIS_URL": REDIS_URL}
        return
    server = LiveServer(tmp_path_factory.mktemp("daphne-memory") / "daphne.log", env={"REDIS_URL": ""}).start()
    yield server, {"REDIS_URL": ""}
    server.stop()


def start_worker(tmp_path, env: dict) -> subprocess.Popen:
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps({"ticker": [sys.executable, "-c", TICKER]}))
    cmd = [sys.executable, "manage.py", "workcenter_worker", "--commands", str(commands), "--poll-ms", "100",
           "--lease-ms", "30000"]
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, DATABASE_URL=database_url(), PYTHONUNBUFFERED="1",
                                                    **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# records when each log line appeared in the panel (epoch ms, the clock the command printed)
WATCH_LINES = """() => {
  const seen = [];
  new MutationObserver((records) => {
    const at = performance.timeOrigin + performance.now();
    for (const r of records) for (const n of r.addedNodes) {
      if (n.classList && n.classList.contains('log-line')) seen.push([n.textContent, at]);
    }
  }).observe(document.body, { childList: true, subtree: true });
  document.lineWatch = seen;  // the test's own expando, read below
}"""


def test_a_commands_lines_appear_in_the_open_panel_within_a_second(deployment, browser, lead, bg, tmp_path):
    server, worker_env = deployment
    work = tmp_path / "work"
    work.mkdir()
    item = bg(item_with_stage, work, "ticker")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    watcher, closed = context.new_page(), context.new_page()
    for pg in (watcher, closed):
        pg.set_default_timeout(WAIT_MS)
    log_in(watcher, server.url, "lead")
    closed_frames = Frames(closed)
    for pg in (watcher, closed):
        pg.goto(f"{server.url}/work-items/{item.pk}/")
        wait_live(pg)
    worker = start_worker(tmp_path, worker_env)
    try:
        # given the panel open on the running stage, its log live
        watcher.wait_for_selector('#graph g.node[data-stage="ticker"][data-status="running"]')
        watcher.click('#graph g.node[data-stage="ticker"]')
        watcher.wait_for_selector("#run-log .log-status.live")
        watcher.evaluate(WATCH_LINES)
        # when the command prints a line every 100 ms
        with LoadWatch() as load:
            (work / "go").write_text("go")
            wait_for_js(watcher, f"() => document.querySelectorAll('#run-log .log-line').length >= {LINES + 1}")
        seen = watcher.evaluate("() => document.lineWatch")
        # then each line was in the panel within a second of being printed
        delays = sorted(at - float(text.rsplit(" at ", 1)[1]) for text, at in seen if text.startswith("tick "))
        assert len(delays) == LINES, seen
        p50, p99 = statistics.median(delays), delays[min(len(delays) - 1, round(0.99 * (len(delays) - 1)))]
        print(f"\nrun log to the panel ({connection.vendor}): {LINES} lines, delay p50 {p50:.0f} ms, "
              f"p99 {p99:.0f} ms (load {load.factor:.1f})")
        assert p50 < load.within(1000, cap=3000), delays
        assert p99 < load.within(1000, cap=5000), delays
        lines = watcher.locator("#run-log .log-line")
        assert lines.last.get_attribute("data-stream") == "stderr"
        # the run ends: its log stays, not live, with the whole log to download
        watcher.wait_for_selector('#graph g.node[data-stage="ticker"][data-status="completed"]')
        watcher.wait_for_selector("#run-log .log-status:not(.live)")
        assert watcher.locator("#run-log .log-status").inner_text() == "ended"
        href = watcher.locator("#run-log .log-download").get_attribute("href")
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        req = urllib.request.Request(server.url + href, headers={"Cookie": f"sessionid={cookies['sessionid']}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        assert sum(line.startswith("tick ") for line in text.splitlines()) == LINES and "last tick" in text
        # and the page whose panel stayed closed received no log message at all
        assert closed_frames.count("log") == 0
        assert closed_frames.count("event") > 0  # (it was listening)
    finally:
        stop_process(worker)
        context.close()
