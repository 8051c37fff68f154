"""What a page offers is what the API and the admin allow: the boot config's `may` is computed by
the permission each control's API operation declares (dashboard/views.py OPERATION_PERMISSIONS,
held here against workcenter/api.py's routes) and by the admin's own checks for Release."""
import json
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from dashboard.views import OPERATION_PERMISSIONS
from workcenter.api import api

pytestmark = pytest.mark.django_db


def route_permission(method: str, path: str) -> str | None:
    for _prefix, router in api._routers:
        view = router.path_operations.get(path)
        for op in view.operations if view else []:
            if method in op.methods:
                return op.auth_callbacks[0].permission
    raise AssertionError(f"no API route {method} {path}")


@pytest.mark.parametrize("control", sorted(OPERATION_PERMISSIONS))
def test_each_control_is_offered_by_the_permission_its_api_route_checks(control):
    method, path, permission = OPERATION_PERMISSIONS[control]
    assert route_permission(method, path) == permission


def _user(username, *codenames, **flags):
    user = User.objects.create_user(username, password="pw", **flags)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def _may(user, path="/workers/"):
    c = Client()
    c.force_login(user)
    html = c.get(path).content.decode()
    return json.loads(re.search(r'<script id="wc-config" type="application/json">(.*?)</script>', html).group(1))["may"]


ITEM_OPERATIONS = {"create", "start", "retry", "edit", "cancel", "guide", "bulk"}


def test_a_viewer_may_do_nothing_a_lead_everything_but_release_an_admin_everything():
    viewer = _user("viewer", "view_workitem")
    lead = _user("lead", "view_workitem", "change_workitem")
    admin = _user("admin", is_staff=True, is_superuser=True)
    assert _may(viewer) == {**dict.fromkeys(ITEM_OPERATIONS, False), "release": False}
    assert _may(lead) == {**dict.fromkeys(ITEM_OPERATIONS, True), "release": False}
    assert _may(admin) == {**dict.fromkeys(ITEM_OPERATIONS, True), "release": True}


def test_release_needs_what_the_admin_asks_staff_the_runs_list_and_the_repair():
    # staff with the repair permission but not the runs' view permission: the admin has no runs list for them
    blind = _user("blind", "view_workitem", "change_workitem", is_staff=True)
    assert _may(blind)["release"] is False
    # staff who may see runs but not repair: no Release action in the admin
    looker = _user("looker", "view_workitem", "view_run", is_staff=True)
    assert _may(looker)["release"] is False
    repairer = _user("repairer", "view_workitem", "change_workitem", "view_run", is_staff=True)
    assert _may(repairer)["release"] is True
