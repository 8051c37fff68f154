"""The admin's Webhooks pages: an add goes through the webhook services (their checks apply) and
shows the secret once; a paused webhook is announced on the list; deliveries are redelivered."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from workcenter.models import Webhook, WebhookDelivery
from workcenter.services import webhooks

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client():
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    with override_settings(WORKCENTER_WEBHOOK_ALLOW_HOSTS="127.0.0.1"):
        yield client


def _add(client, **fields):
    data = {"name": "chat", "url": "http://127.0.0.1:9/hook", "event_types": ["preset:needs_me"], "payload": "chat",
            "workflow": "", "active": "on", **fields}
    return client.post("/admin/workcenter/webhook/add/", data, follow=True)


def test_an_add_shows_the_secret_once(admin_client):
    page = _add(admin_client).content.decode()
    hook = Webhook.objects.get()
    assert hook.secret in page and "shown this once" in page
    assert hook.event_types == ["action.waiting", "action.retry_exhausted", "action.failed", "action.marked_failed"]
    assert hook.secret not in admin_client.get(f"/admin/workcenter/webhook/{hook.pk}/change/").content.decode()


def test_a_private_target_is_refused_on_the_form(admin_client):
    page = _add(admin_client, url="http://10.0.0.7/hook").content.decode()
    assert "url refused" in page and Webhook.objects.count() == 0


def test_a_paused_webhook_is_announced_and_deliveries_are_redelivered(admin_client, store):
    hook = webhooks.webhook_create(name="ops", url="http://127.0.0.1:9/hook", event_types=["work_item.created"])
    store.create(start=False)
    Webhook.objects.filter(pk=hook.pk).update(active=False, paused_reason="paused: failing since yesterday")
    listing = admin_client.get("/admin/workcenter/webhook/").content.decode()
    assert "paused: failing since yesterday" in listing and "resume them in order" in listing
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="delivered")
    admin_client.post("/admin/workcenter/webhookdelivery/", {"action": "redeliver", "_selected_action": [delivery.pk]})
    assert WebhookDelivery.objects.get().status == "pending"
