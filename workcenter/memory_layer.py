"""The embedded default's channel layer: channels' in-memory layer with its expiry sweep bounded.

channels' `InMemoryChannelLayer` sweeps every queue and every group for expired messages and
memberships (`_clean_expired`) at the start of *every* `receive`. Each websocket consumer waits
in `receive`, so a delivery to K sockets costs K sweeps of K queues: quadratic in the number of
open pages (measured with bench/watchers.py at 500 sockets: a third of the web process's time
went to the sweep). Here the sweep runs at most once per `SWEEP_SECONDS`; messages expire after
60 s and memberships after a day, so a sweep a second late changes nothing a client can see.
Everything else is channels' own layer (the dashboard's publisher recognises it as in-memory).
"""
from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer


class InMemoryLayer(InMemoryChannelLayer):
    SWEEP_SECONDS = 1.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._swept = float("-inf")

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept < self.SWEEP_SECONDS:
            return
        self._swept = now
        super()._clean_expired()
