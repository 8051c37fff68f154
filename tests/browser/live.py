"""A real server for browser tests: daphne as a subprocess on a free port, on the test database.

Events written by the test process (service calls) reach the server's websocket clients through
a Redis channel layer that both processes share (API.md §6: Redis is the layer of more than one
process). A Redis database of its own keeps other test runs' groups apart.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("WORKCENTER_BROWSER_REDIS_URL", "redis://127.0.0.1:6379/11")
CHROMIUM = os.environ.get("WORKCENTER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def database_url() -> str:
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


def redis_layer() -> dict:
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000}}}


class LiveServer:
    def __init__(self, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LiveServer":
        env = dict(os.environ, DATABASE_URL=database_url(), REDIS_URL=REDIS_URL, PYTHONUNBUFFERED="1",
                   DJANGO_DEBUG="1")
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the server keeps Django's async safety checks
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                      "workcenter.asgi:application"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_until(lambda: port_open(self.port) or self.proc.poll() is not None, 30, 0.1) \
                or self.proc.poll() is not None:
            raise RuntimeError(f"daphne did not start: {self.log_path.read_text(errors='replace')[-2000:]}")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
