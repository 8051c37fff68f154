"""Real servers for the end-to-end, stream and browser tests: daphne as a subprocess on a free port,
serving the test database (SQLite file or PostgreSQL) that the test process writes through."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.db import connection
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[1]

# The Redis server the tests use (each module names a database of its own on it): TESTS_REDIS
# points a run at another server, so two runs on one machine never flush each other's keys.
TESTS_REDIS = os.environ.get("TESTS_REDIS", "redis://127.0.0.1:6379").rstrip("/")


def redis_db_url(db: int) -> str:
    """The URL of database `db` on the tests' Redis server."""
    return f"{TESTS_REDIS}/{db}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def database_url() -> str:
    """The URL of the database this test runs on, for the subprocesses it starts."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def wait_until(pred, timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def start_daphne(port: int, env: dict | None = None, *, stdout=subprocess.DEVNULL, timeout: float = 60) -> subprocess.Popen:
    """daphne on 127.0.0.1:`port` over the test database (`env` overrides the environment);
    returns once the port accepts connections, raises if the server exits first."""
    env = dict(env or {})
    if env.get("DJANGO_DEBUG") == "0":  # a production server refuses the development key and any host
        env = {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost", **env}
    full_env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1", **env}
    full_env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # servers keep Django's async safety checks
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "workcenter.asgi:application"], cwd=ROOT, env=full_env,
                            stdout=stdout, stderr=subprocess.STDOUT if stdout is not subprocess.DEVNULL else subprocess.DEVNULL)
    if not wait_until(lambda: port_open(port) or proc.poll() is not None, timeout, 0.1) or proc.poll() is not None:
        stop_process(proc)
        raise RuntimeError(f"daphne did not start on port {port}")
    return proc


def stop_process(proc: subprocess.Popen | None, timeout: float = 10, sig: int = signal.SIGTERM) -> None:
    """Ask `proc` to stop with `sig` (SIGINT: as Ctrl-C would), kill it after `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


class Listener:
    """A real websocket client (the `websockets` package) reading on a thread, keeping every message."""

    def __init__(self, url: str):
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(url, open_timeout=10))
        self.hello = json.loads(self.ws.recv(timeout=10))
        self.messages: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for raw in self.ws:
                self.messages.append(json.loads(raw))
        except Exception:  # closed
            pass

    def event_ids(self) -> list[int]:
        return [m["event"]["id"] for m in list(self.messages) if m["type"] == "event"]

    def close(self):
        self._stack.close()
        self.thread.join(5)
