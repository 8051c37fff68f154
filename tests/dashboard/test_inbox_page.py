"""The inbox page's shell (/inbox/) with Django's test client: sign-in, permission, the controls
offered by permission, and the nav badge every page carries."""
import json
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.conftest import make_graph

pytestmark = pytest.mark.django_db


def _client(username, *codenames):
    user = User.objects.create_user(username, password="pw")
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    c = Client()
    c.force_login(user)
    return c


def _config(body):
    return json.loads(re.search(r'<script id="wc-config" type="application/json">(.*?)</script>', body).group(1))


def test_the_inbox_needs_a_sign_in_and_the_view_permission():
    r = Client().get("/inbox/")
    assert r.status_code == 302 and r["Location"] == "/accounts/login/?next=/inbox/"
    assert _client("nobody").get("/inbox/").status_code == 403


def test_a_viewer_gets_the_inbox_without_a_control_a_lead_with_them():
    viewer = _client("viewer", "view_workitem").get("/inbox/").content.decode()
    assert 'id="inbox"' in viewer and 'src="/static/dashboard/inbox.js"' in viewer
    for control in ('id="notify-toggle"', 'id="bulk-dialog"', 'id="bulk-bar"', 'id="inbox-send"', 'id="select-all"'):
        assert control not in viewer, control
    lead = _client("lead", "view_workitem", "change_workitem").get("/inbox/").content.decode()
    for control in ('id="notify-toggle"', 'id="bulk-dialog"', 'id="bulk-bar"', 'id="inbox-send"', 'id="select-all"'):
        assert control in lead, control


def test_every_page_carries_the_inbox_link_and_its_count(store):
    make_graph(store, [{"id": "a"}], status="waiting", title="Waits")
    make_graph(store, [{"id": "b"}], status="needs_attention", title="Failed")
    make_graph(store, [{"id": "c"}], title="Ready")
    c = _client("lead", "view_workitem", "change_workitem")
    for path in ("/", "/workers/", "/inbox/"):
        body = c.get(path).content.decode()
        assert _config(body)["inbox_count"] == 2, path
        assert re.search(r'<a href="/inbox/"[^>]*>Inbox <span class="nav-count" id="nav-inbox-count"[^>]*>2</span>', body), path
    assert 'aria-current="page">Inbox' in c.get("/inbox/").content.decode()


def test_every_other_page_watches_for_notifications_only_for_a_person_who_turned_them_on():
    from workcenter.models import PersonSettings

    lead = _client("lead", "view_workitem", "change_workitem")
    assert _config(lead.get("/workers/").content.decode())["notify"] is False
    user = User.objects.get(username="lead")
    PersonSettings.objects.create(user=user, browser_notifications=True)
    assert _config(lead.get("/workers/").content.decode())["notify"] is True
    assert _config(lead.get("/").content.decode())["notify"] is True
    assert _config(lead.get("/inbox/").content.decode())["notify"] is False  # the inbox announces from its own reads
    # a viewer's choice stands, but nothing they could act on is announced
    viewer = _client("viewer", "view_workitem")
    PersonSettings.objects.create(user=User.objects.get(username="viewer"), browser_notifications=True)
    assert _config(viewer.get("/workers/").content.decode())["notify"] is False
