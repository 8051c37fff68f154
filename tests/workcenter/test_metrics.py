"""GET /metrics: Prometheus text, figures that match the database, and the process's health
(tests/workcenter/test_health.py tests GET /healthz)."""
from __future__ import annotations

import collections
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Max
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from workcenter import health, instruments
from workcenter.auth import api_token_create
from workcenter.models import Action, Event, Run, WorkItem

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_probe_thread(monkeypatch):
    """/metrics starts the process's health probe; here the tests probe when they mean to."""
    monkeypatch.setattr(health.probe, "ensure_started", lambda: None)


def _token(*codenames: str) -> str:
    user = User.objects.create_user(f"u-{len(codenames)}-{User.objects.count()}")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    return api_token_create(user=user, name="metrics")[1]


def _samples(text: str) -> dict:
    """{(name, labels as a sorted tuple): value} of a Prometheus text page."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def _post(client: Client, path: str, body: dict):
    return client.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")


def test_metrics_match_the_database_after_a_scripted_run(settings):
    # given a worker's scripted run over the API: 4 items, 3 actions claimed, 2 completed, 1 failed
    worker = Client(HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem', 'change_workitem', 'run_actions')}")
    for i in range(4):
        assert _post(worker, "/work-items", {"title": f"M{i}", "goal": "g", "work_item_type": "software-change", "acceptance_criteria": ["ok"]}).status_code == 201
    outcomes = ["completed", "completed", "failed"]
    for outcome in outcomes:
        claim = _post(worker, "/claims", {"owner_boot_id": "boot-M"}).json()
        body = {"owner_boot_id": "boot-M", "lease_epoch": claim["run"]["lease_epoch"], "outcome": outcome,
                "summary": "s", "evidence": ["e"], "error": "broken" if outcome == "failed" else None,
                "acceptance_checks": [{"criterion": "ok", "status": "passed", "evidence": "e"}]}
        assert _post(worker, f"/runs/{claim['run']['id']}/submit", body).status_code == 200
    assert list(Run.objects.order_by("started_at").values_list("status", "error")) == [
        ("completed", None), ("completed", None), ("failed", "broken")], list(Run.objects.values_list("status", "error"))
    # when Prometheus scrapes with an API token that may view
    r = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem')}")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain")
    m = _samples(r.content.decode())
    # then every figure is the database's
    for status in ("draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"):
        assert m["workcenter_work_items", (("status", status),)] == WorkItem.objects.filter(status=status).count()
    assert m["workcenter_actions", (("state", "ready_claimable"),)] == Action.objects.filter(status="ready", claimable=True).count()
    assert m["workcenter_actions", (("state", "running"),)] == Action.objects.filter(status="running").count()
    assert m["workcenter_runs_started_total", ()] == Run.objects.count() == 3
    assert m["workcenter_runs_finished_total", (("outcome", "completed"),)] == 2
    assert m["workcenter_runs_finished_total", (("outcome", "failed"),)] == 1
    assert m["workcenter_events_appended_total", ()] == Event.objects.aggregate(m=Max("pk"))["m"]
    assert m["workcenter_runs_recovered_total", ()] == 0
    # and the latency histograms counted this process's worker calls
    assert m["workcenter_claim_seconds_count", ()] >= 3
    assert m["workcenter_submit_seconds_count", ()] >= 3


def test_metrics_need_the_view_permission_or_the_scrape_token(settings):
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    r = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {_token()}")
    assert r.status_code == 403 and r.json()["code"] == "permission_denied"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-123").status_code == 200
    settings.WORKCENTER_METRICS_TOKEN = ""
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-123").status_code == 401


def test_metrics_report_the_channel_layer_health_and_the_recent_claim_latency(settings, monkeypatch):
    # given this process's health probe found Redis not answering (nothing listens on port 1),
    # and three claims answered in the last minute
    monkeypatch.setattr(health.probe, "last", None)
    monkeypatch.setattr(health.probe, "layer_ok_at", None)
    monkeypatch.setattr(instruments.CLAIMS_RECENT, "samples", collections.deque(maxlen=16))
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    try:
        health.probe.probe_once()
    finally:
        health.probe.close_redis()
    for seconds in (0.010, 0.020, 0.400):
        instruments.CLAIMS_RECENT.observe(seconds)
    # when Prometheus scrapes
    r = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem')}")
    m = _samples(r.content.decode())
    # then the channel layer is down, never seen up, and the database up
    assert m["workcenter_channel_layer_up", ()] == 0
    assert m["workcenter_database_up", ()] == 1
    assert m["workcenter_channel_layer_seconds_since_ok", ()] == float("inf")
    assert 0 <= m["workcenter_channel_layer_probe_seconds", ()] < 1.0
    assert 0 <= m["workcenter_health_check_age_seconds", ()] < 5
    # and the claims' last minute is there: p50, p99, max
    assert m["workcenter_claim_recent_count", ()] == 3
    assert m["workcenter_claim_recent_seconds", (("quantile", "0.5"),)] == 0.020
    assert m["workcenter_claim_recent_seconds", (("quantile", "0.99"),)] == 0.400
    assert m["workcenter_claim_recent_seconds", (("quantile", "1"),)] == 0.400

    # when Redis answers again (the in-memory layer: nothing to ping) and the probe runs
    settings.REDIS_URL = ""
    health.probe.probe_once()
    m = _samples(Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem')}").content.decode())
    # then it is up, last seen up just now
    assert m["workcenter_channel_layer_up", ()] == 1
    assert 0 <= m["workcenter_channel_layer_seconds_since_ok", ()] < 5


def test_metrics_count_webhook_deliveries_and_the_oldest_pending_age(settings):
    from datetime import timedelta

    from workcenter.models import WebhookDelivery
    from workcenter.services import webhooks

    settings.WORKCENTER_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    webhooks.webhook_create(name="all", url="http://127.0.0.1:9/", event_types=["work_item.created"])
    worker = Client(HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem', 'change_workitem')}")
    for i in range(3):
        assert _post(worker, "/work-items", {"title": f"W{i}", "goal": "g"}).status_code == 201
    first, second, _ = WebhookDelivery.objects.order_by("event_id")
    WebhookDelivery.objects.filter(pk=first.pk).update(status="delivered", attempts=3, failures=2)
    WebhookDelivery.objects.filter(pk=second.pk).update(created_at=first.created_at - timedelta(minutes=5))
    m = _samples(Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {_token('view_workitem')}").content.decode())
    assert m["workcenter_webhook_deliveries", (("status", "pending"),)] == 2
    assert m["workcenter_webhook_deliveries", (("status", "delivered"),)] == 1
    assert (m["workcenter_webhook_attempts", (("outcome", "success"),)],
            m["workcenter_webhook_attempts", (("outcome", "failure"),)]) == (1, 2)
    assert m["workcenter_webhook_oldest_pending_seconds", ()] >= 300
