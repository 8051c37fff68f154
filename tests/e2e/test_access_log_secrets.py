"""No token secret in the web process's logs: a real daphne with `--access-log FILE` (and every
logger at debug, `-v 2`) is called with a token in every way API.md §4 names — the session
cookie, `Authorization: Bearer`, the `workcenter.bearer` subprotocol, `?token=` — and by HTTP
API calls that put the token in the query string (refused with 401). The access log has a line
for each request, and the secret in none of them (workcenter/serving.py, dashboard/routing.py)."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from workcenter.auth import api_token_create

from tests.live import ROOT, database_url, free_port, port_open, stop_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _viewer() -> User:
    user = User.objects.create_user("log-viewer", password="pw")
    user.user_permissions.add(Permission.objects.get(content_type__app_label="workcenter", codename="view_workitem"))
    return user


def _start_daphne(port: int, access_log, output) -> subprocess.Popen:
    """tests/live.py's start_daphne, with daphne's own access log in a file and debug logging."""
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "1",
           "WORKCENTER_LOG_LEVEL": "DEBUG"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "2",
                             "--access-log", str(access_log), "workcenter.asgi:application"],
                            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    if not wait_until(lambda: port_open(port) or proc.poll() is not None, 60, 0.1) or proc.poll() is not None:
        stop_process(proc)
        raise RuntimeError(f"daphne did not start on port {port}")
    return proc


def _get(url: str, headers=None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def _hello(ws) -> dict:
    hello = json.loads(ws.recv(timeout=10))
    assert hello["type"] == "hello", hello
    return hello


def test_no_token_secret_reaches_the_web_process_logs(tmp_path):
    viewer = _viewer()
    _, token = api_token_create(user=viewer, name="logs")
    secret = token.split("_", 2)[2]
    unknown = f"wc_deadbeef_{secrets.token_urlsafe(32)}"  # well-formed, but no such token
    client = Client()
    client.force_login(viewer)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    access_log, output = tmp_path / "access.log", tmp_path / "daphne.out"
    port = free_port()
    ws_base, http_base = f"ws://127.0.0.1:{port}/ws/work-items/", f"http://127.0.0.1:{port}/api/v1"
    with open(output, "wb") as out:
        proc = _start_daphne(port, access_log, out)
    try:
        with connect(ws_base, additional_headers={"Cookie": cookie}, open_timeout=10) as ws:
            _hello(ws)
        with connect(ws_base, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10) as ws:
            _hello(ws)
        with connect(ws_base, subprotocols=["workcenter.bearer", token], open_timeout=10) as ws:
            assert ws.subprotocol == "workcenter.bearer"
            answer = ws.response.headers.get_all("Sec-WebSocket-Protocol")
            assert answer == ["workcenter.bearer"]  # the accepted name, never the token
            assert secret not in str(ws.response.headers)
            _hello(ws)
        with connect(f"{ws_base}?token={token}&after_id=0", open_timeout=10) as ws:
            _hello(ws)
        with connect(f"{ws_base}?token={unknown}", open_timeout=10) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 4401

        assert _get(f"{http_base}/work-items?token={token}") == 401  # the HTTP API takes no query token
        assert _get(f"{http_base}/events?after_id=0&access_token={token}&ticket={token}") == 401
        assert _get(f"{http_base}/work-items?token={unknown}") == 401
        assert _get(f"{http_base}/work-items", {"Authorization": f"Bearer {token}"}) == 200
    finally:
        stop_process(proc)  # daphne writes each access-log line as it happens; stopped, all are there

    log = access_log.read_text()
    every_output = log + output.read_text(errors="replace")
    assert secret not in every_output and unknown.split("_", 2)[2] not in every_output
    # the lines are there, so the check above read them
    assert log.count("WSCONNECT /ws/work-items/") >= 5, log
    assert '"GET /api/v1/work-items?token=[redacted]" 401' in log, log
    assert '"GET /api/v1/events?after_id=0&access_token=[redacted]&ticket=[redacted]" 401' in log, log
    assert log.count('"GET /api/v1/work-items?token=[redacted]" 401') == 2, log
    assert '"GET /api/v1/work-items" 200' in log, log
    assert "DEBUG" in every_output  # the debug loggers wrote too: they were read as well
