"""The admin's Webhooks pages as an admin sees them, at 1280 and 800 px, light and dark: the add
form, the secret shown once after the add, the list with a paused webhook's notice and the
deliveries with their attempts and answers. Nothing scrolls sideways."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from workcenter import clock
from workcenter.models import Webhook, WebhookDelivery
from workcenter.services import webhooks

from .conftest import ThreadedStore, screenshot
from .test_widths import admin_page  # noqa: F401 (the fixture: a superuser's signed-in page)

pytestmark = pytest.mark.django_db(transaction=True)

FITS = """() => ({page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth})"""


def fits(page):
    fit = page.evaluate(FITS)
    assert fit["scroll"] <= fit["page"], fit


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg)


@pytest.fixture
def hooks(store):
    """A paused webhook with deliveries: one delivered, one failing for a day (503), one waiting."""
    with override_settings(WORKCENTER_WEBHOOK_ALLOW_HOSTS="127.0.0.1"):
        ops = webhooks.webhook_create(name="ops-alerts", url="http://127.0.0.1:9/ops", event_types=["work_item.created"])
    for title in ("Ship the importer", "Rotate the keys", "Nightly backup"):
        store.linear(title=title)
    sent, failing, _ = WebhookDelivery.objects.filter(webhook=ops).order_by("event_id")
    now = clock.now()
    WebhookDelivery.objects.filter(pk=sent.pk).update(status="delivered", attempts=1, last_status_code=200,
                                                      last_attempt_at=now, delivered_at=now)
    WebhookDelivery.objects.filter(pk=failing.pk).update(
        attempts=41, failures=41, last_status_code=503, last_error="HTTP 503 Service Unavailable",
        last_attempt_at=now, first_failed_at=now - timedelta(hours=25), next_attempt_at=now + timedelta(minutes=15))
    Webhook.objects.filter(pk=ops.pk).update(
        active=False, paused_at=now,
        paused_reason=f"paused {now:%Y-%m-%d %H:%M} UTC: its deliveries have failed since yesterday (last: 503)")
    return ops


def test_the_webhooks_pages_fit_and_show_the_secret_once(admin_page, daphne_server, hooks):  # noqa: F811
    # one test for both schemes: the add is made once (a second test's add would log it with the
    # server's content type ids of before the first test's flush)
    page = admin_page
    # the add form: the presets above the event catalogue
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{daphne_server.url}/admin/workcenter/webhook/add/")
    page.fill("#id_name", "team-chat")
    page.fill("#id_url", "https://93.184.215.14/hooks/team-chat")  # a public address: no lookup, no send here
    page.check("input[name=event_types][value='preset:needs_me']")
    page.select_option("#id_payload", "chat")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 800):
            page.set_viewport_size({"width": width, "height": 900})
            fits(page)
            screenshot(page, f"admin-webhook-add-{width}-{scheme}.png")
    page.click("input[name=_save]")
    page.wait_for_selector("text=shown this once")
    made = Webhook.objects.get(name="team-chat")
    assert made.secret in page.inner_text("body")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 800):
            page.set_viewport_size({"width": width, "height": 800})
            screenshot(page, f"admin-webhook-secret-{width}-{scheme}.png")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 800):
            page.set_viewport_size({"width": width, "height": 800})
            page.goto(f"{daphne_server.url}/admin/workcenter/webhook/")
            page.wait_for_selector("#result_list tbody tr")
            text = page.inner_text("body")
            assert "failed since yesterday" in text and "resume them in order" in text
            assert made.secret not in text  # shown once
            fits(page)
            screenshot(page, f"admin-webhooks-{width}-{scheme}.png")
            page.goto(f"{daphne_server.url}/admin/workcenter/webhookdelivery/?webhook__id__exact={hooks.pk}")
            page.wait_for_selector("#result_list tbody tr")
            assert page.locator("#result_list tbody tr").count() == 3
            assert "503" in page.inner_text("#result_list")
            fits(page)
            screenshot(page, f"admin-webhook-deliveries-{width}-{scheme}.png")
