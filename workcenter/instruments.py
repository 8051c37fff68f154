"""The process's own metrics (workcenter/metrics.py says what is read from the database instead,
and why): claim and submit latency, websocket clients. Imported by what measures them (the API's
worker routes, the stream's consumers) and by `/metrics`, which reports them.

With `PROMETHEUS_MULTIPROC_DIR` set, prometheus-client keeps them in that directory, shared by
the processes of one machine, and `/metrics` sums them (its multiprocess mode); otherwise each
process reports its own.
"""
from __future__ import annotations

import os

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

# registry=None: registered with no registry; /metrics builds one per scrape
CLAIM_SECONDS = Histogram("workcenter_claim_seconds", "Time to answer POST /api/v1/claims, in seconds",
                          buckets=LATENCY_BUCKETS, registry=None)
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
