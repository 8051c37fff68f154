"""`manage.py demo` as a real process: every option explained by --help, one line per worker
event, no line per HTTP request unless --access-log asks for it, and a used sign-in link that
answers the product's page with the demo's debug on."""
from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys

import pytest
from django.core.management import load_command_class

from tests.live import ROOT, free_port, port_open, stop_process, wait_until
from tests.production import process_env

pytestmark = pytest.mark.demo  # the embedded default: CI runs it on SQLite

STARTED = re.compile(r"worker (\S+) started \(concurrency")


def test_demo_help_explains_every_option():
    parser = load_command_class("workcenter", "demo").create_parser("manage.py", "demo")
    options = [a for a in parser._actions if a.option_strings]
    unexplained = [a.option_strings[0] for a in options if not (a.help or "").strip()]
    assert unexplained == []
    text = parser.format_help()
    for flag in ("--host", "--port", "--workers", "--no-workers", "--no-serve", "--feed-seconds", "--access-log"):
        assert flag in text


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body


def _run_demo(tmp_path, *args: str, until, timeout: float = 120) -> str:
    """Starts the demo on a fresh SQLite file, calls `until(port, output)` once it listens until
    that is true, stops it with Ctrl-C; everything the demo and its processes printed."""
    port = free_port()
    log_path = tmp_path / "demo.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port), "--feed-seconds", "0", *args],
                                cwd=ROOT, env=process_env({"DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: port_open(port) or proc.poll() is not None, timeout, 0.2), log_path.read_text()
        assert proc.poll() is None, log_path.read_text()
        assert wait_until(lambda: until(port, log_path.read_text()), timeout, 0.5), log_path.read_text()
    finally:
        stop_process(proc, 30, signal.SIGINT)
    return log_path.read_text()


def test_demo_prints_one_line_per_worker_event_and_no_request_lines(tmp_path):
    visited = []

    def until(port, output):
        if not visited:
            link = re.search(r"link works once\): http://[^/]+(/accounts/demo-login/\S+)", output).group(1)
            visited.append(_get(port, "/accounts/login/"))
            visited.append(_get(port, link))  # signs in
            visited.append(_get(port, link))  # used
        return len(set(STARTED.findall(output))) == 2

    # when
    output = _run_demo(tmp_path, "--workers", "2", until=until)
    # then each worker's start is one line
    boots = STARTED.findall(output)
    assert len(set(boots)) == 2 and len(boots) == 2, output
    assert len(re.findall(r"worker \S+ starting", output)) == 2, output
    # the pages were served, and not one request line printed
    assert visited[0][0] == 200 and visited[1][0] == 302
    status, body = visited[2]
    assert status == 404 and "already used" in body and "URLconf" not in body
    assert '"GET /' not in output, output


def test_demo_access_log_flag_prints_requests(tmp_path):
    def until(port, output):
        _get(port, "/accounts/login/")
        return '"GET /accounts/login/" 200' in output

    output = _run_demo(tmp_path, "--no-workers", "--access-log", until=until, timeout=60)
    assert '"GET /accounts/login/" 200' in output
