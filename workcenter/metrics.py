"""`GET /metrics` (Prometheus text format) and `GET /healthz`, for operators and load balancers.

Where each figure comes from, and why:

* **From the database, at scrape time** (one `StoreCollector` pass, a handful of indexed
  aggregates): work items by status; actions ready and claimable, ready and blocked, running,
  waiting; runs started and finished by outcome; runs recovered and, of those, the ones whose
  lease had expired; running runs whose lease has expired and that nobody has recovered yet;
  events appended (the highest event id); webhook deliveries pending and delivered, attempts by
  outcome and the age of the oldest pending delivery. These are counts of stored rows, so they are right
  whichever process (web servers, workers, commands) did the work, and a restart loses nothing —
  the reason they are read rather than counted in memory: a worker beside the database never
  passes through the web process that is scraped. As Prometheus counters they only grow while
  rows are never deleted (the store deletes none).
* **In the process, as it happens**: claim and submit latency (histograms of the API's worker
  routes, in seconds), the websocket clients connected, the long-poll claims parked and the
  wakes that found nothing, the HTTP requests on a request thread now, and the process's last
  health check (database and channel layer up, the Redis ping's latency, seconds since Redis last
  answered: workcenter/health.py) with the claims' latency over the last minute (p50, p99, max).
  They describe the process that answers the scrape; with several web processes, scrape each (or set `PROMETHEUS_MULTIPROC_DIR`
  to one directory per machine: prometheus-client's multiprocess mode then sums the processes
  that share it).

Access: `workcenter.view_workitem` (session or `Authorization: Bearer <API token>`), or
`Authorization: Bearer <WORKCENTER_METRICS_TOKEN>` when that setting is set (a scrape token that
reads only this page). `/healthz` needs nothing and then says only ok or not; with the same
access it gives the details (workcenter/health.py).
"""
from __future__ import annotations

import math
import time

from django.db.models import Count, F, Max, Min, Q, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import clock
from .api import error_body
from .auth import VIEW, MalformedAuthorization, api_token_user, bearer_token, user_has_perm
from .choices import ActionStatus, RunStatus, WorkItemStatus
from .health import FIRST_CHECK_WAIT, health_response, probe, scrape_token_matches
from .instruments import (CLAIM_SECONDS, CLAIMS_RECENT, EMPTY_WAKES, HTTP_IN_FLIGHT, MULTIPROCESS, PARKED_CLAIMS, SUBMIT_SECONDS,
                          WEBSOCKET_CLIENTS)
from .models import Action, Event, Run, WebhookDelivery, WorkItem
from .services.recovery import RECOVERY_ERROR, STALE_ERROR


class HealthCollector:
    """The last health check of this process (workcenter/health.py) and the claims' latency over the
    last minute; nothing for the check before the process's first probe has ended."""

    def collect(self):
        now = time.monotonic()
        check = probe.last
        if check is not None:
            yield GaugeMetricFamily("workcenter_database_up", "1 when the last health probe's SELECT 1 answered",
                                    value=1 if check.database == "ok" else 0)
            yield GaugeMetricFamily("workcenter_channel_layer_up", "1 when the last health probe's Redis ping "
                                    "answered within 0.5 s (always 1 on the in-memory layer)",
                                    value=1 if check.channel_layer == "ok" else 0)
            yield GaugeMetricFamily("workcenter_channel_layer_probe_seconds", "How long the last Redis ping "
                                    "took (or took to fail)", value=check.channel_layer_seconds)
            since_ok = math.inf if check.channel_layer_ok_at is None else now - check.channel_layer_ok_at
            yield GaugeMetricFamily("workcenter_channel_layer_seconds_since_ok", "Seconds since a Redis ping "
                                    "last answered (+Inf: none has yet)", value=since_ok)
            yield GaugeMetricFamily("workcenter_health_check_age_seconds", "Seconds since the last health probe "
                                    "ended (more than a few intervals: the probe is stuck)",
                                    value=now - check.checked_at)
        recent = CLAIMS_RECENT.summary(now)
        yield GaugeMetricFamily("workcenter_claim_recent_count", "Claims answered in the last minute by this "
                                "process", value=recent["count"])
        family = GaugeMetricFamily("workcenter_claim_recent_seconds", "Claim latency over the last minute "
                                   "(quantile 1 is the maximum; NaN without claims)", labels=["quantile"])
        for quantile, key in (("0.5", "p50_seconds"), ("0.99", "p99_seconds"), ("1", "max_seconds")):
            family.add_metric([quantile], math.nan if recent[key] is None else recent[key])
        yield family


class StoreCollector:
    """The figures read from the database at each scrape (module doc)."""

    def collect(self):
        items = dict(WorkItem.objects.order_by().values_list("status").annotate(n=Count("pk")))
        family = GaugeMetricFamily("workcenter_work_items", "Work items by status", labels=["status"])
        for status in WorkItemStatus.values:
            family.add_metric([status], items.get(status, 0))
        yield family

        actions = Action.objects.aggregate(
            ready_claimable=Count("pk", filter=Q(status=ActionStatus.READY, claimable=True)),
            ready_blocked=Count("pk", filter=Q(status=ActionStatus.READY, claimable=False)),
            running=Count("pk", filter=Q(status=ActionStatus.RUNNING)),
            waiting=Count("pk", filter=Q(status=ActionStatus.WAITING)))
        family = GaugeMetricFamily("workcenter_actions", "Actions ready (claimable now or blocked), running, "
                                                         "waiting on a person", labels=["state"])
        for state, n in actions.items():
            family.add_metric([state], n or 0)
        yield family

        now = clock.now()
        runs = dict(Run.objects.order_by().values_list("status").annotate(n=Count("pk")))
        yield CounterMetricFamily("workcenter_runs_started", "Runs started (claims)", value=sum(runs.values()))
        family = CounterMetricFamily("workcenter_runs_finished", "Runs finished, by outcome", labels=["outcome"])
        for status in RunStatus.values:
            if status != RunStatus.RUNNING:
                family.add_metric([status], runs.get(status, 0))
        yield family
        recovered = Run.objects.aggregate(
            recovered=Count("pk", filter=Q(error__in=[RECOVERY_ERROR, STALE_ERROR])),
            expired=Count("pk", filter=Q(error__in=[RECOVERY_ERROR, STALE_ERROR], ended_at__gt=F("expires_at"))),
            overdue=Count("pk", filter=Q(status=RunStatus.RUNNING, expires_at__lt=now)))
        yield CounterMetricFamily("workcenter_runs_recovered", "Runs ended by a recovery (their worker was gone "
                                                               "or no longer owned the action)",
                                  value=recovered["recovered"])
        yield CounterMetricFamily("workcenter_lease_expiries", "Runs recovered after their lease had expired",
                                  value=recovered["expired"])
        yield GaugeMetricFamily("workcenter_runs_lease_expired", "Running runs whose lease has expired, not "
                                                                 "recovered yet", value=recovered["overdue"])
        last = Event.objects.aggregate(last=Max("pk"))["last"] or 0
        yield CounterMetricFamily("workcenter_events_appended", "Events appended (the highest event id)", value=last)

        deliveries = WebhookDelivery.objects.aggregate(
            delivered=Count("pk", filter=Q(status="delivered")), pending=Count("pk", filter=Q(status="pending")),
            attempts=Sum("attempts"), failures=Sum("failures"),
            oldest=Min("created_at", filter=Q(status="pending")))
        family = GaugeMetricFamily("workcenter_webhook_deliveries", "Webhook deliveries by status", labels=["status"])
        for status in ("pending", "delivered"):
            family.add_metric([status], deliveries[status])
        yield family
        family = GaugeMetricFamily("workcenter_webhook_attempts", "Webhook delivery attempts by outcome, as the "
                                   "rows record them (a redelivery or a resume starts a row's failures again)",
                                   labels=["outcome"])
        attempts, failures = deliveries["attempts"] or 0, deliveries["failures"] or 0
        family.add_metric(["success"], max(0, attempts - failures))
        family.add_metric(["failure"], failures)
        yield family
        oldest = deliveries["oldest"]
        yield GaugeMetricFamily("workcenter_webhook_oldest_pending_seconds", "Age of the oldest pending webhook "
                                "delivery (0: none pending)", value=(now - oldest).total_seconds() if oldest else 0)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector())
    registry.register(HealthCollector())
    if MULTIPROCESS:
        multiprocess.MultiProcessCollector(registry)
    else:
        for collector in (CLAIM_SECONDS, SUBMIT_SECONDS, WEBSOCKET_CLIENTS, PARKED_CLAIMS, EMPTY_WAKES, HTTP_IN_FLIGHT):
            registry.register(collector)
    return registry


def _bearer(request: HttpRequest) -> str | None:
    """The request's bearer token, None without an Authorization header; a present but unusable
    one raises MalformedAuthorization (auth.bearer_token)."""
    return bearer_token(request.META.get("HTTP_AUTHORIZATION"))


def _allowed(request: HttpRequest) -> tuple[bool, int]:
    """(allowed, status when not): the scrape token, an API token or a session with the view
    permission; a malformed Authorization header is a 401 whatever the session."""
    try:
        raw = _bearer(request)
    except MalformedAuthorization:
        return False, 401
    if raw is not None:
        if scrape_token_matches(raw):
            return True, 200
        user = api_token_user(raw, permission=VIEW)
        if user is None:
            return False, 401
        return user_has_perm(user, VIEW), 403
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return False, 401
    return user_has_perm(user, VIEW), 403


def metrics(request: HttpRequest) -> HttpResponse:
    allowed, status = _allowed(request)
    if not allowed:
        if status == 401:
            return JsonResponse(error_body("not_authenticated", "credentials are required: a session, an API "
                                                                "token or the scrape token"), status=401)
        return JsonResponse(error_body("permission_denied", f"permission denied: {VIEW} is required",
                                       {"permission": VIEW}), status=403)
    probe.ensure_started()
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


# --- health ----------------------------------------------------------------------------------------

def healthz(request: HttpRequest) -> JsonResponse:
    """`/healthz` for a request that reached Django (workcenter/health.py answers the others at the
    ASGI level): the details for a caller who may read `/metrics`, the status alone for anyone else
    (a credential that is wrong is no reason to fail a health check)."""
    allowed, _ = _allowed(request)
    return health_response(detailed=allowed, wait=FIRST_CHECK_WAIT)
