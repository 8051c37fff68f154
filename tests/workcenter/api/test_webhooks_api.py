"""`/api/v1/webhooks`: admins manage webhooks, the secret is shown once, bad input is a 422 that
writes nothing, people without the webhook permissions are refused."""
from __future__ import annotations

import pytest
from django.test import override_settings

from workcenter.models import Webhook, WebhookDelivery

from .support import error_of

URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def admin(make_user, token_api):
    return token_api(make_user("hooks-admin", "view_webhook", "change_webhook", "change_workitem", "view_workitem"))


@pytest.fixture(autouse=True)
def _local_receivers_allowed():
    with override_settings(WORKCENTER_WEBHOOK_ALLOW_HOSTS="127.0.0.1"):
        yield


def test_create_shows_the_secret_once_and_the_list_never(admin):
    r = admin.post("/webhooks", {"name": "chat", "url": URL, "event_types": ["preset:needs_me"], "payload": "chat"})
    assert r.status_code == 201, r.content
    made = r.json()
    assert made["secret"].startswith("whsec_") and made["event_types"] == [
        "action.waiting", "action.retry_exhausted", "action.failed", "action.marked_failed"]
    listed = admin.get("/webhooks").json()["webhooks"]
    assert [h["id"] for h in listed] == [made["id"]] and listed[0]["secret"] is None
    assert admin.get(f"/webhooks/{made['id']}").json()["secret"] is None
    rotated = admin.patch(f"/webhooks/{made['id']}", {"rotate_secret": True}).json()
    assert rotated["secret"] not in (None, made["secret"])


def test_deliveries_are_listed_and_one_can_be_sent_again(admin):
    hook = admin.post("/webhooks", {"name": "all", "url": URL, "event_types": ["work_item.created"]}).json()
    admin.create()
    (delivery,) = admin.get(f"/webhooks/{hook['id']}/deliveries").json()["deliveries"]
    assert delivery["status"] == "pending" and delivery["attempts"] == 0
    WebhookDelivery.objects.filter(pk=delivery["id"]).update(status="delivered")
    again = admin.post(f"/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver")
    assert again.status_code == 200 and again.json()["status"] == "pending"
    error_of(admin.post(f"/webhooks/{hook['id']}/deliveries/999999/redeliver"), 404, "not_found")


@pytest.mark.parametrize("body, field", [
    ({"name": "x", "url": "http://10.0.0.7/hook", "event_types": ["work_item.created"]}, "url"),
    ({"name": "x", "url": URL, "event_types": ["run.exploded"]}, "event_types"),
    ({"name": "x", "url": URL, "event_types": []}, "event_types"),
    ({"name": " ", "url": URL, "event_types": ["work_item.created"]}, "name"),
    ({"name": "x", "url": URL, "event_types": ["work_item.created"], "payload": "xml"}, "payload"),
    ({"name": "x", "url": URL, "event_types": ["work_item.created"], "secret": "mine"}, "secret"),
])
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(admin, body, field):
    body = error_of(admin.post("/webhooks", body), 422, "invalid_input")
    assert field in str(body["extra"]["errors"])
    assert Webhook.objects.count() == 0


def test_pausing_and_deleting(admin):
    hook = admin.post("/webhooks", {"name": "all", "url": URL, "event_types": ["work_item.created"]}).json()
    assert admin.patch(f"/webhooks/{hook['id']}", {"active": False}).json()["active"] is False
    assert admin.client.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204
    error_of(admin.get(f"/webhooks/{hook['id']}"), 404, "not_found")


def test_people_without_the_webhook_permissions_are_refused(api, viewer, anonymous):
    body = {"name": "x", "url": URL, "event_types": ["work_item.created"]}
    error_of(api.post("/webhooks", body), 403, "permission_denied")  # may change work items, not webhooks
    error_of(viewer.get("/webhooks"), 403, "permission_denied")
    error_of(anonymous.get("/webhooks"), 401, "not_authenticated")
    assert Webhook.objects.count() == 0
