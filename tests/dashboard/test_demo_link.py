"""The one-time demo sign-in link once it no longer signs in: a page of the product (status, a
short explanation, a link to the sign-in page, no inline script or style), never Django's
technical 404 page, even with debug on as the demo runs."""
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from workcenter.constants import DEMO_LOGIN_ENV
from workcenter.demo_login import demo_login_path
from workcenter.security import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(monkeypatch, settings):
    settings.DEBUG = True
    monkeypatch.setenv(DEMO_LOGIN_ENV, "1")


def _assert_friendly(response, status: int, says: str):
    body = response.content.decode()
    assert response.status_code == status
    assert "URLconf" not in body and "technical" not in body.lower() and "Page not found at" not in body
    assert says in body
    assert re.search(r'<a [^>]*href="/accounts/login/"', body), "links to the sign-in page"
    assert "/static/dashboard/dashboard.css" in body  # styled like the other pages
    # the Content-Security-Policy refuses inline code: none on the page
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body)
    assert "<style" not in body and " style=" not in body
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_a_used_demo_link_answers_404_with_a_way_to_sign_in(demo):
    user = User.objects.create_user("lead", password="pw")
    path = demo_login_path(user)
    assert Client().get(path).status_code == 302  # the first visit signs in
    # when
    again = Client().get(path)
    # then
    _assert_friendly(again, 404, "already used")


@pytest.mark.parametrize("path", [
    "/accounts/demo-login/!!!/x/",           # not base64
    "/accounts/demo-login/OTk5OTk/abc-123/",  # no such user (pk 99999)
    "/accounts/demo-login/YWJj/abc-123/",     # not a user id at all ("abc")
])
def test_a_bad_demo_link_answers_404_with_a_way_to_sign_in(demo, path):
    _assert_friendly(Client().get(path), 404, "not valid")


def test_a_forged_token_for_a_real_user_is_refused_the_same_way(demo):
    user = User.objects.create_user("lead", password="pw")
    forged = demo_login_path(user).rstrip("/").rsplit("/", 1)[0] + "/abc-0123456789abcdef/"
    response = Client().get(forged)
    _assert_friendly(response, 404, "already used")
    assert "_auth_user_id" not in Client().session


def test_outside_the_demo_the_link_answers_404_with_a_way_to_sign_in(monkeypatch, settings):
    settings.DEBUG = True
    monkeypatch.delenv(DEMO_LOGIN_ENV, raising=False)
    user = User.objects.create_user("lead", password="pw")
    _assert_friendly(Client().get(demo_login_path(user)), 404, "manage.py demo")
