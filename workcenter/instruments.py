"""The process's own metrics (workcenter/metrics.py says what is read from the database instead,
and why): claim and submit latency, websocket clients. Imported by what measures them (the API's
worker routes, the stream's consumers) and by `/metrics`, which reports them. The claims' latency
of the last minute is also kept in a small ring (`CLAIMS_RECENT`), for `/healthz` and `/metrics`
to say how claims are doing now.

With `PROMETHEUS_MULTIPROC_DIR` set, prometheus-client keeps them in that directory, shared by
the processes of one machine, and `/metrics` sums them (its multiprocess mode); otherwise each
process reports its own.
"""
from __future__ import annotations

import os

import collections
import math
import threading
import time

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

RECENT_SECONDS = 60.0  # the window of RecentLatency.summary
RECENT_LIMIT = 4096  # observations kept (a busier minute reports its last 4,096)


class RecentLatency:
    """The last minute of one route's latency, kept in this process (a bounded ring): what
    `/healthz` and `/metrics` report as "recent", beside the histogram's totals since start."""

    def __init__(self, limit: int = RECENT_LIMIT) -> None:
        self.samples: collections.deque = collections.deque(maxlen=limit)  # (monotonic end, seconds)
        self.lock = threading.Lock()

    def observe(self, seconds: float, now: float | None = None) -> None:
        with self.lock:
            self.samples.append((time.monotonic() if now is None else now, seconds))

    def summary(self, now: float | None = None, window: float = RECENT_SECONDS) -> dict:
        """`{"count", "p50_seconds", "p99_seconds", "max_seconds"}` of the observations of the last
        `window` seconds (nearest rank; None without any)."""
        since = (time.monotonic() if now is None else now) - window
        with self.lock:
            values = sorted(s for t, s in self.samples if t >= since)
        if not values:
            return {"count": 0, "p50_seconds": None, "p99_seconds": None, "max_seconds": None}

        def rank(q: float) -> float:
            return values[min(len(values) - 1, max(0, math.ceil(len(values) * q) - 1))]

        return {"count": len(values), "p50_seconds": rank(0.5), "p99_seconds": rank(0.99), "max_seconds": values[-1]}


class RecentHistogram(Histogram):
    """A histogram whose observations also go to a RecentLatency (`recent`)."""

    def __init__(self, *args, recent: RecentLatency, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recent = recent

    def observe(self, amount: float, exemplar=None) -> None:
        super().observe(amount, exemplar)
        self.recent.observe(amount)


CLAIMS_RECENT = RecentLatency()

# registry=None: registered with no registry; /metrics builds one per scrape
CLAIM_SECONDS = RecentHistogram("workcenter_claim_seconds", "Time to answer POST /api/v1/claims, in seconds",
                          buckets=LATENCY_BUCKETS, registry=None, recent=CLAIMS_RECENT)
SUBMIT_SECONDS = Histogram("workcenter_submit_seconds", "Time to answer POST /api/v1/runs/{id}/submit, in seconds",
                           buckets=LATENCY_BUCKETS, registry=None)
WEBSOCKET_CLIENTS = Gauge("workcenter_websocket_clients", "Websocket clients connected", registry=None,
                          multiprocess_mode="livesum")
PARKED_CLAIMS = Gauge("workcenter_parked_claims", "Long-poll claims waiting for claimable work", registry=None,
                      multiprocess_mode="livesum")
EMPTY_WAKES = Counter("workcenter_claim_empty_wakes", "Long-poll claims woken that found nothing to claim "
                      "(and parked again)", registry=None)
HTTP_IN_FLIGHT = Gauge("workcenter_http_requests_in_flight", "HTTP requests being served on a request thread",
                       registry=None, multiprocess_mode="livesum")
