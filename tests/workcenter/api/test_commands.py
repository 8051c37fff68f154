"""create_api_token, revoke_api_token and recover_runs (API.md §1, §5)."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from workcenter.auth import token_hash
from workcenter.models import ApiToken, Event, Run

from .conftest import VIEW, Api

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_create_api_token_prints_the_token_alone_on_the_last_line(make_user):
    user = make_user("alice", VIEW)
    # when
    output = _run("create_api_token", "alice", "--name", "ci")
    # then
    token = output.strip().splitlines()[-1]
    assert token.startswith("wc_") and " " not in token
    row = ApiToken.objects.get()
    assert row.user == user and row.name == "ci" and row.revoked_at is None
    _, prefix, secret = token.split("_", 2)
    assert row.prefix == prefix and row.token_hash == token_hash(secret)
    assert secret not in output.strip().splitlines()[0]
    r = Api(Client(HTTP_AUTHORIZATION=f"Bearer {token}")).get("/work-items")
    assert r.status_code == 200


def test_create_api_token_for_unknown_user_fails(db):
    with pytest.raises(CommandError, match="unknown user"):
        _run("create_api_token", "ghost")
    assert ApiToken.objects.count() == 0


@pytest.mark.parametrize("by", ["label", "prefix", "token"])
def test_revoke_api_token_by_label_or_prefix(make_user, by):
    make_user("alice", VIEW)
    token = _run("create_api_token", "alice", "--name", "ci").strip().splitlines()[-1]
    keep = _run("create_api_token", "alice", "--name", "other").strip().splitlines()[-1]
    key = {"label": "ci", "prefix": token.split("_")[1], "token": token}[by]
    # when
    output = _run("revoke_api_token", key)
    # then
    assert "Revoked" in output
    assert ApiToken.objects.get(name="ci").revoked_at is not None
    assert ApiToken.objects.get(name="other").revoked_at is None
    body = Api(Client(HTTP_AUTHORIZATION=f"Bearer {token}")).get("/work-items").json()
    assert body["code"] == "not_authenticated"
    assert Api(Client(HTTP_AUTHORIZATION=f"Bearer {keep}")).get("/work-items").status_code == 200


def test_revoke_unknown_token_fails(db):
    with pytest.raises(CommandError, match="no live API token"):
        _run("revoke_api_token", "nothing")


def test_recover_runs_recovers_with_a_fresh_boot_id(api):
    api.create()
    api.create()
    api.claim(boot="old-boot")
    # when
    output = _run("recover_runs")
    # then
    assert output.strip() == "1"
    run = Run.objects.get()
    assert run.status == "interrupted"
    event = Event.objects.get(type="run.interrupted")
    assert event.actor.startswith("recovery:") and event.actor != "recovery:old-boot"
    assert _run("recover_runs").strip() == "0"
