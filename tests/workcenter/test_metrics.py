"""GET /metrics (Prometheus text, figures that match the database) and GET /healthz (200/503)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Max
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.live import free_port, start_daphne, stop_process
from workcenter.auth import api_token_create
from workcenter.models import Action, Event, Run, WorkItem

pytestmark = pytest.mark.django_db


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


def test_healthz_answers_ok_and_says_what_is_unreachable(settings):
    r = Client().get("/healthz")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "ok" and r.json()["database"] == "ok" and r.json()["channel_layer"] == "ok"
    # a Redis that does not answer (nothing listens on port 1)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    r = Client().get("/healthz")
    assert r.status_code == 503
    assert r.json()["status"] == "unavailable" and r.json()["channel_layer"].startswith("unavailable")
    assert r.json()["database"] == "ok"


@pytest.mark.django_db(transaction=True)
def test_healthz_answers_503_when_postgresql_does_not_answer():
    # a real server whose PostgreSQL is not there (nothing listens on its port)
    port = free_port()
    dead = f"postgres://postgres@127.0.0.1:{free_port()}/workcenter"
    proc = start_daphne(port, {"DATABASE_URL": dead})
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30)
        assert err.value.code == 503
        body = json.loads(err.value.read())
        assert body["status"] == "unavailable" and body["database"].startswith("unavailable")
    finally:
        stop_process(proc)
