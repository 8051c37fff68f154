import pytest
from django.core.management import call_command
from django.test import Client

from workcenter.constants import DEMO_LOGIN_ENV
from workcenter.demo_login import demo_login_path
from workcenter.management.commands.demo import FEED, SEED, ensure_users, feed_item, seed_items
from workcenter.models import Event, WorkItem


@pytest.mark.django_db
def test_demo_seed_covers_every_status_once():
    # when
    created = seed_items()
    # then
    assert created == len(SEED)
    statuses = set(WorkItem.objects.values_list("status", flat=True))
    assert {"draft", "ready", "waiting", "needs_attention", "done", "cancelled"} <= statuses
    assert seed_items() == 0  # a second run adds nothing


@pytest.mark.django_db
def test_demo_feed_creates_started_items_and_cycles_titles():
    # when
    items = [feed_item(n) for n in range(len(FEED) + 1)]
    # then
    assert all(i.status == "ready" for i in items)
    assert items[0].title == FEED[0][0]
    assert items[-1].title == f"{FEED[0][0]} (#2)"
    assert Event.objects.filter(type="work_item.created", actor="user:lead").count() == len(items)


@pytest.mark.django_db
def test_demo_no_serve_prepares_users_and_items(capsys):
    call_command("demo", "--no-serve")
    out = capsys.readouterr().out
    assert f"{len(SEED)} demo work items created" in out
    assert WorkItem.objects.count() == len(SEED)


@pytest.mark.django_db
def test_demo_sign_in_link_signs_the_lead_in_once(monkeypatch):
    # given the web server the demo starts (its environment turns the route on) and the demo's lead
    monkeypatch.setenv(DEMO_LOGIN_ENV, "1")
    lead = ensure_users()
    path = demo_login_path(lead)
    # when the link the demo prints is opened
    first = Client()
    response = first.get(path)
    # then it signs the lead in and opens the dashboard; the same link a second time does not
    assert response.status_code == 302 and response["Location"] == "/"
    assert first.session["_auth_user_id"] == str(lead.pk)
    assert Client().get(path).status_code == 404
