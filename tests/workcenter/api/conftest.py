"""Fixtures for the HTTP API tests: users with given permissions, token clients, a movable clock.

Everything goes through the real URL configuration with django.test.Client.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from workcenter.auth import api_token_create

BASE = "/api/v1"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

VIEW = "view_workitem"
CHANGE = "change_workitem"
RUN = "run_actions"
DEFINE = "define_workflows"


class Api:
    """JSON calls against /api/v1 with one django.test.Client."""

    def __init__(self, client: Client, user=None, token: str | None = None):
        self.client = client
        self.user = user
        self.token = token

    def _body(self, body):
        if body is None:
            return ""
        return body if isinstance(body, (str, bytes)) else json.dumps(body)

    def get(self, path: str, params: dict | None = None, **extra):
        return self.client.get(BASE + path, params or {}, **extra)

    def post(self, path: str, body=None, **extra):
        return self.client.post(BASE + path, self._body(body), content_type="application/json", **extra)

    def patch(self, path: str, body=None, **extra):
        return self.client.patch(BASE + path, self._body(body), content_type="application/json", **extra)

    # --- shortcuts used by many tests ---------------------------------------------------------

    def create(self, expect: int = 201, **body):
        body.setdefault("title", "Item")
        body.setdefault("goal", "Do the thing")
        r = self.post("/work-items", body)
        assert r.status_code == expect, r.content
        return r.json()

    def claim(self, boot: str = "boot-A", **body):
        r = self.post("/claims", {"owner_boot_id": boot, **body})
        assert r.status_code in (201, 204), r.content
        return r.json() if r.status_code == 201 else None

    def submit(self, claim: dict, expect: int = 200, **result):
        run = claim["run"]
        body = {"owner_boot_id": run["owner_boot_id"], "lease_epoch": run["lease_epoch"], **result}
        r = self.post(f"/runs/{run['id']}/submit", body)
        assert r.status_code == expect, r.content
        return r.json()

    def complete(self, claim: dict, **extra):
        criteria = claim["work_item"]["acceptance_criteria"]
        result = {"outcome": "completed", "summary": f"{claim['action']['stage_id']} done",
                  "evidence": [f"did {claim['action']['stage_id']}"], "acceptance_checks": checks_for(criteria)}
        result.update(extra)
        return self.submit(claim, **result)


def checks_for(criteria, status="passed"):
    return [{"criterion": c, "status": status, "evidence": f"checked {c}"} for c in criteria]


def fence(claim: dict) -> dict:
    return {"owner_boot_id": claim["run"]["owner_boot_id"], "lease_epoch": claim["run"]["lease_epoch"]}


@pytest.fixture
def make_user(db):
    def make(username: str, *codenames: str, superuser: bool = False) -> User:
        if superuser:
            return User.objects.create_superuser(username, email=None, password=None)
        user = User.objects.create_user(username)
        perms = Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames)
        assert perms.count() == len(set(codenames)), codenames
        user.user_permissions.set(perms)
        return user

    return make


@pytest.fixture
def token_api():
    """An Api authenticated with a fresh bearer token of `user`."""

    def make(user) -> Api:
        _, raw = api_token_create(user=user, name=f"{user.username}-token")
        return Api(Client(HTTP_AUTHORIZATION=f"Bearer {raw}"), user=user, token=raw)

    return make


@pytest.fixture
def api(make_user, token_api) -> Api:
    """A program holding view, change and worker permissions."""
    return token_api(make_user("alice", VIEW, CHANGE, RUN))


@pytest.fixture
def viewer(make_user, token_api) -> Api:
    return token_api(make_user("victor", VIEW))


@pytest.fixture
def anonymous() -> Api:
    return Api(Client())


class MovableClock:
    def __init__(self):
        self.t = datetime.now(timezone.utc).replace(microsecond=123000)

    def __call__(self):
        return self.t

    def advance(self, ms: int) -> None:
        self.t += timedelta(milliseconds=ms)


@pytest.fixture
def frozen_clock(monkeypatch) -> MovableClock:
    """Freeze the services' clock (workcenter.clock.now) so leases can expire without sleeping."""
    c = MovableClock()
    monkeypatch.setattr("workcenter.clock.now", c)
    return c
