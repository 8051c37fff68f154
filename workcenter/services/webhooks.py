"""Webhooks and their deliveries: what a person (admin, API) and the sender (`deliver_webhooks`)
write. The deliveries themselves are written by events.event_append, in the event's transaction.

A delivery is pending until a receiver answered 2xx; every attempt is recorded on its row. The
sender sends a webhook's deliveries in event order: a failed head is tried again after
`domain.webhooks.retry_delay` while the ones behind it wait; a head failing for
`PAUSE_AFTER` pauses its webhook, with the reason on the webhook, until a person resumes it.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from .. import db
from ..db.guards import DELIVERY_ANY, DELIVERY_AS_CLAIMED, DELIVERY_PENDING, WEBHOOK_ACTIVE
from ..domain import webhooks as rules
from ..errors import InvalidInput, NotFound
from ..event_types import EventType
from ..models import Webhook, WebhookDelivery
from .common import resolve_now, store_transaction

EDITABLE = ("name", "url", "event_types", "payload", "workflow", "active")


def clean_fields(fields: dict) -> dict:
    """`fields` checked and in their stored form; InvalidInput names the first bad one."""
    out = dict(fields)
    if "event_types" in out:
        out["event_types"] = rules.event_types_of(out["event_types"], [t.value for t in EventType])
        out["type_match"] = rules.type_match(out["event_types"])
    if "name" in out:
        name = (out["name"] or "").strip()
        if not name or len(name) > 200:
            raise InvalidInput("name is required (at most 200 characters)", fields=["name"])
        out["name"] = name
    if "url" in out:
        url = (out["url"] or "").strip()
        refusal = None if len(url) <= 2000 else "the URL is longer than 2,000 characters"
        refusal = refusal or rules.target_refusal(url, rules.allowed_hosts(settings.WORKCENTER_WEBHOOK_ALLOW_HOSTS))
        if refusal:
            raise InvalidInput(f"url refused: {refusal}", fields=["url"])
        out["url"] = url
    if "payload" in out and out["payload"] not in rules.PAYLOADS:
        raise InvalidInput(f"payload must be one of {', '.join(rules.PAYLOADS)}", fields=["payload"])
    if "workflow" in out:
        out["workflow"] = (out["workflow"] or "").strip()
        if len(out["workflow"]) > 200:
            raise InvalidInput("workflow is at most 200 characters", fields=["workflow"])
    if "active" in out and not isinstance(out["active"], bool):
        raise InvalidInput("active must be true or false", fields=["active"])
    return out


def webhook_create(*, name: str, url: str, event_types: list[str], payload: str = "full", workflow: str = "",
                   active: bool = True, now: datetime | None = None) -> Webhook:
    """A new webhook with a fresh signing secret (the caller shows it once). It receives the
    events committed from now on."""
    fields = clean_fields({"name": name, "url": url, "event_types": event_types, "payload": payload,
                     "workflow": workflow, "active": active})
    with store_transaction():
        now = resolve_now(now)
        hook = Webhook(**fields, secret=rules.new_secret(), created_at=now, updated_at=now)
        hook.save(force_insert=True)
        return hook


def webhook_update(webhook_id: str, *, now: datetime | None = None, **changes) -> Webhook:
    """Change what a webhook receives or where; `active=True` resumes a paused one (its waiting
    deliveries go out at once, in order). `rotate_secret=True` gives it a new secret."""
    rotate = changes.pop("rotate_secret", False)
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}", fields=sorted(unknown))
    fields = clean_fields(changes)
    with store_transaction():
        now = resolve_now(now)
        hook = _locked(webhook_id)
        for key, value in fields.items():
            setattr(hook, key, value)
        if fields.get("active") is True and hook.paused_at is not None:
            hook.paused_at, hook.paused_reason = None, ""
            # due now and no longer failing; a delivery sent meanwhile by a sender needs nothing
            pending = list(hook.deliveries.filter(status="pending").values_list("pk", flat=True))
            db.update_if(DELIVERY_PENDING.rows(pending), {"next_attempt_at": now, "first_failed_at": None, "failures": 0})
        if rotate:
            hook.secret = rules.new_secret()
        hook.updated_at = now
        hook.save()
        return hook


def webhook_delete(webhook_id: str) -> None:
    """The webhook and its deliveries, sent or not."""
    with store_transaction():
        _locked(webhook_id).delete()


def _locked(webhook_id: str) -> Webhook:
    hook = Webhook.objects.select_for_update().filter(pk=webhook_id).first()
    if hook is None:
        raise NotFound(f"no webhook has the id {webhook_id}", extra={"id": webhook_id})
    return hook


def delivery_redeliver(delivery_id: int, *, now: datetime | None = None) -> WebhookDelivery:
    """Send a delivery again (a person asks): pending, due now. It takes its place by its event:
    before the webhook's later deliveries."""
    with store_transaction():
        now = resolve_now(now)
        delivery = WebhookDelivery.objects.filter(pk=delivery_id).first()
        if delivery is None:
            raise NotFound(f"no delivery has the id {delivery_id}", extra={"id": delivery_id})
        values = {"status": "pending", "next_attempt_at": now, "claimed_until": None, "first_failed_at": None,
                  "failures": 0, "delivered_at": None}
        db.update(DELIVERY_ANY.row(delivery.pk), values)
        for key, value in values.items():
            setattr(delivery, key, value)
        return delivery


# --- the sender's writes ----------------------------------------------------------------------

def delivery_claim(delivery_id: int, claimed_until, hold: timedelta, now: datetime) -> datetime | None:
    """SQLite: claim a head for one attempt, as read (`claimed_until`); returns the claim's end, or
    None when another sender took it first. (PostgreSQL holds the row's lock instead.)"""
    until = now + hold
    return until if db.update_if(DELIVERY_AS_CLAIMED.row(delivery_id, claimed_until), {"claimed_until": until}) else None


def delivery_record(head: dict, *, claimed_until, ok: bool, status_code: int | None, error: str, now: datetime,
                    tries: int = 1, writes=None) -> datetime | None:
    """The outcome of `tries` attempts in a row on a delivery (`head`: the row the sender claimed;
    all but the last failed): delivered, or due again after the backoff; a head failing since
    `PAUSE_AFTER` pauses its webhook. `writes`: the sender's write batch (PostgreSQL sends a
    batch's outcomes in one statement; the held row locks keep its fences). Returns when the
    delivery is due again: None once delivered, or when the claim was lost meanwhile (SQLite:
    another sender took the head after its claim ran out)."""
    failed = tries - 1 if ok else tries
    values: dict = {"attempts": head["attempts"] + tries, "last_attempt_at": now, "last_status_code": status_code,
                    "last_error": error[:2000], "claimed_until": None}
    pause = None
    if ok:
        values.update(status="delivered", delivered_at=now, failures=head["failures"] + failed)
    else:
        failures = head["failures"] + failed
        first = head["first_failed_at"] or now
        values.update(failures=failures, first_failed_at=first,
                      next_attempt_at=now + timedelta(seconds=rules.retry_delay(failures)))
        if now - first >= rules.PAUSE_AFTER:
            pause = (f"paused {now:%Y-%m-%d %H:%M} UTC: its deliveries have failed since {first:%Y-%m-%d %H:%M} UTC "
                     f"(last: {error[:200] or status_code})")
    fence = DELIVERY_AS_CLAIMED.row(head["id"], claimed_until)
    if writes is not None:
        writes.update(fence, values)
    elif not db.update_if(fence, values):
        return None
    if pause:
        db.update_if(WEBHOOK_ACTIVE.row(head["webhook_id"]),
                     {"active": False, "paused_at": now, "paused_reason": pause, "updated_at": now})
        return None
    return values.get("next_attempt_at")


def delivery_release(delivery_id: int, claimed_until) -> bool:
    """SQLite: let go of a claim unused (the head before it failed: it waits in order again)."""
    return db.update_if(DELIVERY_AS_CLAIMED.row(delivery_id, claimed_until), {"claimed_until": None})
