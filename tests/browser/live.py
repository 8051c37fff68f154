"""A real server for browser tests: daphne as a subprocess on a free port, on the test database.

Events written by the test process (service calls) reach the server's websocket clients through
a Redis channel layer that both processes share (API.md §6: Redis is the layer of more than one
process). A Redis database of its own keeps other test runs' groups apart.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


from tests.live import free_port, start_daphne, stop_process
from workcenter.redis_layer import redis_channel_layers
from tests.live import redis_db_url

# A Redis database of each test process's own (pytest-xdist runs several, each with its server):
# one page's groups never receive another process's events.
_REDIS_DBS = (11, 10, 8, 7, 4, 1)
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
# How long a browser test waits for the page to show what it expects: an upper bound, never a
# figure (beside a CPU hog and other runs a retry's round trip was seen taking over 10 s).
WAIT_MS = 30_000

REDIS_URL = os.environ.get("WORKCENTER_BROWSER_REDIS_URL",
                           redis_db_url(_REDIS_DBS[_WORKER % len(_REDIS_DBS)]))
CHROMIUM = os.environ.get("WORKCENTER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def redis_layer() -> dict:
    return redis_channel_layers(REDIS_URL)


class LiveServer:
    def __init__(self, log_path: Path, env: dict | None = None):
        """`env` adds to (or overrides) the server's environment: debug on, this Redis layer."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LiveServer":
        self.log = open(self.log_path, "wb")
        try:
            self.proc = start_daphne(self.port, {"REDIS_URL": REDIS_URL, "DJANGO_DEBUG": "1", **self.env},
                                     stdout=self.log, timeout=120)  # a bound on a failure, not a figure
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {self.log_path.read_text(errors='replace')[-2000:]}") from None
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()
