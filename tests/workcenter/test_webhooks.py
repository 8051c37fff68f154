"""Webhooks against a real local HTTP receiver: the outbox is written with the event (a rolled-back
transaction sends nothing), every selected event arrives once, in event order, signed so that an
independent implementation of the Standard Webhooks scheme verifies it; a failure is retried with
the same `webhook-id`; redirects and private targets are refused; a webhook failing for a day pauses.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from tests.conftest import Clock, Store
from workcenter import clock
from workcenter.errors import InvalidInput
from workcenter.event_types import EventType
from workcenter.events import event_append
from workcenter.models import Event, Webhook, WebhookDelivery
from workcenter.services import webhooks as hooks
from workcenter.webhook_sender import Sender


class Receiver:
    """A local HTTP server that records every request and answers with the codes queued in
    `answers` (then 200)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.answers: list[int] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    code = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()},
                                              "body": body, "code": code, "path": self.path})
                self.send_response(code)
                if code in (301, 302, 307):
                    self.send_header("Location", "http://example.org/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if 200 <= r["code"] < 300]


@pytest.fixture
def receiver():
    r = Receiver()
    with override_settings(WORKCENTER_WEBHOOK_ALLOW_HOSTS="127.0.0.1"):
        yield r
    r.server.shutdown()


def verify(secret: str, headers: dict, body: bytes) -> bool:
    """The Standard Webhooks check, written from the scheme's description (not the product's code)."""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = headers["webhook-id"].encode() + b"." + headers["webhook-timestamp"].encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    if abs(time.time() - int(headers["webhook-timestamp"])) > 300:
        return False
    return any(hmac.compare_digest(expected, part.split(",", 1)[1])
               for part in headers["webhook-signature"].split() if part.startswith("v1,"))


def drain(sender: Sender | None = None, *, seconds: float = 10) -> Sender:
    """Run sender steps until nothing is pending and due (failed heads wait out their backoff)."""
    sender = sender or Sender(threads=1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sender.horizon.read_at = 0  # read the settled id again: the test wrote just now
        if not sender.step() and not WebhookDelivery.objects.filter(status="pending").exists():
            return sender
        time.sleep(0.01)
    raise AssertionError(f"deliveries still pending: {list(WebhookDelivery.objects.filter(status='pending').values())}")


ALL_TYPES = [t.value for t in EventType]


def test_every_selected_event_arrives_once_in_order_with_a_valid_signature(store, receiver):
    hook = hooks.webhook_create(name="all", url=receiver.url, event_types=ALL_TYPES)
    item = store.linear(criteria=["works"])
    store.complete(store.claim(), ["works"])
    store.complete(store.claim(), ["works"])
    expected = list(Event.objects.filter(work_item_id=item.pk).order_by("id").values_list("id", "type"))
    assert len(expected) >= 4
    drain()
    got = receiver.delivered()
    assert all(verify(hook.secret, r["headers"], r["body"]) for r in got)
    bodies = [json.loads(r["body"]) for r in got]
    assert [(b["data"]["event"]["id"], b["type"]) for b in bodies] == expected  # once each, in event order
    assert len({r["headers"]["webhook-id"] for r in got}) == len(expected)
    first = bodies[0]["data"]
    assert first["work_item"]["id"] == item.pk and first["link"].endswith(f"/work-items/{item.pk}/")
    # a tampered body or another secret fails the same check
    assert not verify(hook.secret, got[0]["headers"], got[0]["body"] + b" ")
    assert not verify(hooks.webhook_create(name="x", url=receiver.url, event_types=ALL_TYPES).secret,
                      got[0]["headers"], got[0]["body"])


def test_only_the_selected_types_and_workflow_are_written_to_the_outbox(store, receiver):
    hooks.webhook_create(name="needs me", url=receiver.url, event_types=["preset:needs_me"])
    hooks.webhook_create(name="other workflow", url=receiver.url, event_types=ALL_TYPES, workflow="no-such-flow")
    item = store.create()
    claim = store.claim()
    store.submit(claim, {"outcome": "waiting", "summary": "stuck", "waiting_reason": "Which database?"})
    rows = list(WebhookDelivery.objects.values_list("webhook__name", "event_id"))
    waiting = Event.objects.get(work_item_id=item.pk, type="action.waiting")
    assert rows == [("needs me", waiting.id)]
    drain()
    (request,) = receiver.delivered()
    assert json.loads(request["body"])["data"]["event"]["data"]["reason"] == "Which database?"


def test_a_rolled_back_transaction_sends_nothing(store, receiver):
    hooks.webhook_create(name="all", url=receiver.url, event_types=ALL_TYPES)
    item = store.create(start=False)
    drain()
    sent = len(receiver.requests)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        event_append(work_item_id=item.pk, type="work_item.updated", data={"revision": 2, "changed_fields": ["goal"]},
                     now=clock.now())
        assert WebhookDelivery.objects.filter(status="pending").count() == 1  # written with the event
        raise Boom
    assert not WebhookDelivery.objects.filter(status="pending").exists()
    drain()
    assert len(receiver.requests) == sent == 1


def test_a_failed_delivery_is_sent_again_with_the_same_id_and_the_next_waits_behind_it(store, receiver):
    hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created", "run.claimed"])
    receiver.answers = [500, 503]
    store.create()
    store.claim()  # created, claimed: two deliveries
    drain()
    codes = [(r["headers"]["webhook-id"], r["code"]) for r in receiver.requests]
    first, second = (str(d.pk) for d in WebhookDelivery.objects.order_by("event_id"))
    assert codes == [(first, 500), (first, 503), (first, 200), (second, 200)]
    head = WebhookDelivery.objects.get(pk=first)
    assert (head.status, head.attempts, head.failures, head.last_status_code) == ("delivered", 3, 2, 200)


def test_redirects_are_not_followed(store, receiver):
    hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    receiver.answers = [302]
    store.create(start=False)
    drain()
    assert [r["code"] for r in receiver.requests] == [302, 200]  # the 302 was a failure, retried here
    assert all(r["path"] == "/hook" for r in receiver.requests)  # never to the Location


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://[::1]:9/",
                                 "http://169.254.169.254/latest/meta-data", "http://localhost:9/",
                                 "ftp://example.org/", "http://user:pw@example.org/"])
def test_private_targets_and_other_schemes_are_refused(db, url):
    with pytest.raises(InvalidInput) as refused:
        hooks.webhook_create(name="x", url=url, event_types=ALL_TYPES)
    assert refused.value.extra["errors"][0]["field"] == "url"
    assert Webhook.objects.count() == 0


def test_a_target_no_longer_allowed_is_refused_when_sending(store, receiver):
    hook = hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    store.create(start=False)
    with override_settings(WORKCENTER_WEBHOOK_ALLOW_HOSTS=""):
        Sender(threads=1).step()
    delivery = WebhookDelivery.objects.get(webhook=hook)
    assert receiver.requests == [] and delivery.status == "pending" and "refused" in delivery.last_error


def test_a_webhook_failing_for_a_day_pauses_and_resumes_in_order(store, receiver):
    hook = hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    store.create(start=False)
    store.create(start=False)
    head = WebhookDelivery.objects.order_by("event_id").first()
    WebhookDelivery.objects.filter(pk=head.pk).update(first_failed_at=clock.now() - timedelta(hours=25), failures=40)
    receiver.answers = [500]
    Sender(threads=1).step()
    hook.refresh_from_db()
    assert hook.active is False and "failed since" in hook.paused_reason
    assert Sender(threads=1).step() is False  # a paused webhook sends nothing
    hooks.webhook_update(hook.pk, active=True)
    drain()
    assert [r["code"] for r in receiver.requests] == [500, 200, 200]
    assert WebhookDelivery.objects.filter(status="delivered").count() == 2


def test_the_chat_preset_is_a_text_with_the_item_and_a_link(store, receiver):
    hooks.webhook_create(name="chat", url=receiver.url, event_types=["action.waiting"], payload="chat")
    item = store.create(title="Ship the importer")
    store.submit(store.claim(), {"outcome": "waiting", "summary": "stuck", "waiting_reason": "Which database?"})
    drain()
    (request,) = receiver.delivered()
    text = json.loads(request["body"])["text"]
    assert "Ship the importer" in text and "Which database?" in text and f"/work-items/{item.pk}/" in text


def test_unknown_event_types_are_refused(db):
    with pytest.raises(InvalidInput, match="unknown event types: run.exploded"):
        hooks.webhook_create(name="x", url="https://example.org/", event_types=["run.exploded"])


def test_a_redelivery_sends_a_delivered_one_again(store, receiver):
    hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    store.create(start=False)
    drain()
    delivery = WebhookDelivery.objects.get()
    hooks.delivery_redeliver(delivery.pk)
    drain()
    assert [r["headers"]["webhook-id"] for r in receiver.requests] == [str(delivery.pk)] * 2


@pytest.mark.django_db(transaction=True)
def test_a_head_another_sender_holds_is_left_alone_until_it_lets_go(receiver):
    """PostgreSQL: the other sender holds the head's row lock (its attempt's transaction); SQLite:
    its claim, until the claim runs out (a sender that died)."""
    store = Store(Clock(clock.now()))
    hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    store.create(start=False)
    delivery = WebhookDelivery.objects.get()
    held, release = threading.Event(), threading.Event()

    def other_sender():
        try:
            with transaction.atomic():
                WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    if connection.vendor == "postgresql":
        holder = threading.Thread(target=other_sender)
        holder.start()
        assert held.wait(10)
    else:
        assert hooks.delivery_claim(delivery.pk, None, timedelta(seconds=30), clock.now()) is not None
    assert Sender(threads=1).step() is False  # held by a sender that has not answered
    if connection.vendor == "postgresql":
        release.set()
        holder.join()
    else:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(claimed_until=clock.now() - timedelta(seconds=1))
    drain()
    assert len(receiver.delivered()) == 1


def test_the_readme_s_verify_function_accepts_a_delivery_and_refuses_a_tampered_one(store, receiver):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    code = readme.split("## The inbox and webhooks", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 (the README's own snippet, as a reader would paste it)
    hook = hooks.webhook_create(name="all", url=receiver.url, event_types=["work_item.created"])
    store.create(start=False)
    drain()
    (request,) = receiver.delivered()
    assert namespace["verify"](hook.secret, request["headers"], request["body"])
    assert not namespace["verify"](hook.secret, request["headers"], request["body"].replace(b"}", b" }", 1))
