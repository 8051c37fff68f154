"""The dashboard's pages with Django's test client: sign-in, permissions, the shells they render."""
import json
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from workcenter.constants import DEMO_LOGIN_ENV
from workcenter.demo_login import demo_login_path

pytestmark = pytest.mark.django_db


def _user(username, *codenames):
    user = User.objects.create_user(username, password="pw")
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    return user


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _config(response):
    match = re.search(r'<script id="wc-config" type="application/json">(.*?)</script>', response.content.decode())
    assert match, "the page carries its JSON config"
    return json.loads(match.group(1))


def test_list_page_requires_sign_in():
    r = Client().get("/")
    assert r.status_code == 302
    assert r["Location"] == "/accounts/login/?next=/"


def test_item_page_requires_sign_in(store):
    item = store.create()
    r = Client().get(f"/work-items/{item.pk}/")
    assert r.status_code == 302
    assert r["Location"].startswith("/accounts/login/?next=/work-items/")


def test_list_page_without_view_permission_is_403():
    assert _client(_user("nobody")).get("/").status_code == 403


def test_item_page_without_view_permission_is_403(store):
    item = store.create()
    assert _client(_user("nobody")).get(f"/work-items/{item.pk}/").status_code == 403


def test_list_page_for_a_viewer_has_no_create_form():
    r = _client(_user("viewer", "view_workitem")).get("/")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="items"' in body and 'src="/static/dashboard/list.js"' in body
    assert 'id="new-item"' not in body
    config = _config(r)
    assert {k: config[k] for k in ("username", "can_change", "api_base")} == {"username": "viewer", "can_change": False, "api_base": "/api/v1"}
    assert not any(config["may"].values())


def test_list_page_for_a_lead_has_the_create_form():
    r = _client(_user("lead", "view_workitem", "change_workitem")).get("/")
    assert r.status_code == 200
    assert 'id="new-item-form"' in r.content.decode()
    assert _config(r)["can_change"] is True


def test_item_page_shows_title_and_buttons_by_permission(store):
    item = store.create(title="Fix <the> bug")
    lead = _client(_user("lead", "view_workitem", "change_workitem")).get(f"/work-items/{item.pk}/")
    assert lead.status_code == 200
    body = lead.content.decode()
    assert "Fix &lt;the&gt; bug" in body and "Fix <the> bug" not in body
    assert 'id="btn-retry"' in body and 'id="retry-dialog"' in body
    config = _config(lead)
    assert config.pop("may")["retry"] is True
    assert config == {"username": "lead", "can_change": True, "api_base": "/api/v1", "item_id": item.pk,
                      "inbox_count": 0, "notify": False}
    viewer = _client(_user("viewer", "view_workitem")).get(f"/work-items/{item.pk}/")
    assert viewer.status_code == 200
    assert 'id="btn-retry"' not in viewer.content.decode()
    assert 'id="retry-dialog"' not in viewer.content.decode()


def test_item_page_of_unknown_item_is_404():
    r = _client(_user("viewer", "view_workitem")).get("/work-items/no-such-item/")
    assert r.status_code == 404


def test_superuser_sees_admin_link():
    admin = User.objects.create_superuser("root", password="pw")
    body = _client(admin).get("/").content.decode()
    assert 'href="/admin/"' in body


def test_api_paths_still_answer_json_404():
    r = Client().get("/api/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


def test_demo_login_is_off_outside_the_demo(monkeypatch):
    monkeypatch.delenv(DEMO_LOGIN_ENV, raising=False)
    user = _user("lead", "view_workitem")
    assert Client().get(demo_login_path(user)).status_code == 404


def test_demo_login_signs_in_once(monkeypatch):
    monkeypatch.setenv(DEMO_LOGIN_ENV, "1")
    user = _user("lead", "view_workitem")
    path = demo_login_path(user)
    first = Client()
    r = first.get(path)
    assert r.status_code == 302 and r["Location"] == "/"
    assert first.get("/").status_code == 200
    # signing in changed last_login: the same link no longer works
    assert Client().get(path).status_code == 404


def test_demo_login_refuses_a_forged_token(monkeypatch):
    monkeypatch.setenv(DEMO_LOGIN_ENV, "1")
    user = _user("lead", "view_workitem")
    path = demo_login_path(user)
    forged = path.rstrip("/").rsplit("/", 1)[0] + "/abc-0123456789abcdef/"
    assert Client().get(forged).status_code == 404
    assert Client().get("/accounts/demo-login/!!!/x/").status_code == 404


def test_login_page_renders_and_redirects_to_the_list():
    _user("lead", "view_workitem")
    c = Client()
    assert c.get("/accounts/login/").status_code == 200
    r = c.post("/accounts/login/", {"username": "lead", "password": "pw", "next": "/"})
    assert r.status_code == 302 and r["Location"] == "/"


def test_list_api_rows_name_the_workspace_the_list_page_shows(store, tmp_path):
    # the list page's "workspace" column reads these two summary fields
    store.create(title="With dir", work_dir=str(tmp_path))
    store.create(title="Without dir")
    c = _client(_user("viewer", "view_workitem"))
    rows = {i["title"]: i for i in c.get("/api/v1/work-items").json()["items"]}
    assert rows["With dir"]["work_dir"] == str(tmp_path)
    assert rows["With dir"]["workspace_key"] == str(tmp_path.resolve())
    assert rows["Without dir"]["work_dir"] == "" and rows["Without dir"]["workspace_key"] == ""


def test_logs_page_needs_sign_in_and_the_view_permission_and_is_in_the_navigation():
    assert Client().get("/logs/")["Location"] == "/accounts/login/?next=/logs/"
    assert _client(_user("nobody")).get("/logs/").status_code == 403
    r = _client(_user("viewer", "view_workitem")).get("/logs/")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="log-search"' in body and 'src="/static/dashboard/logs.js"' in body
    assert '<a href="/logs/" aria-current="page">Logs</a>' in body
    assert '<a href="/logs/" >Logs</a>' in _client(_user("other", "view_workitem")).get("/").content.decode()
