"""`/api/v1/webhooks`: the webhooks and their deliveries (docs/webhooks.md). Reading them takes
`workcenter.view_webhook`, changing them `workcenter.change_webhook` (an admin's: a superuser has
both). The signing secret is in the answer of the create (and of a secret rotation) only."""
from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Annotated, Literal, Optional

from django.http import HttpResponse
from ninja import Field, Query, Router, Schema
from pydantic import Strict

from . import clock, render
from .auth import api_auth
from .domain import webhooks as rules
from .errors import NotFound
from .event_types import EventType
from .models import Webhook, WebhookDelivery
from .schemas_in import WS_CLASS, InputSchema, NonBlankText, PathId, StrictBool, Text
from .schemas_out import ERRORS as SIGNED_IN_ERRORS, ErrorOut
from .services import webhooks as services

VIEW_WEBHOOKS = "workcenter.view_webhook"
CHANGE_WEBHOOKS = "workcenter.change_webhook"
ERRORS = {**SIGNED_IN_ERRORS, 404: ErrorOut}

webhooks = Router(tags=["webhooks"])

EVENT_TYPE_NAMES = [t.value for t in EventType] + [f"preset:{name}" for name in rules.PRESETS]
EventTypes = list[Literal[tuple(EVENT_TYPE_NAMES)]]  # type: ignore[valid-type]
# http(s), a host, no user name or password: what the server refuses beyond that (a private or
# unresolvable host) depends on the network and WORKCENTER_WEBHOOK_ALLOW_HOSTS, not on the text
URL_PATTERN = rf"^https?://[^{WS_CLASS}\u0000/?#@:\[\]]+(:[0-9]{{1,5}})?([/?#][^{WS_CLASS}\u0000]*)?$"
Url = Annotated[str, Strict(), Field(pattern=URL_PATTERN, max_length=2000)]
_TYPES_DOC = ("event types of the catalogue (docs/concepts.md), or presets: `preset:needs_me` (waiting, failed) "
              "and `preset:finished` (completed, cancelled)")


class WebhookIn(InputSchema):
    name: NonBlankText
    url: Url = Field(description="http(s); loopback, link-local and private targets are refused "
                                          "unless named in WORKCENTER_WEBHOOK_ALLOW_HOSTS")
    event_types: EventTypes = Field(min_length=1, description=_TYPES_DOC)
    payload: Literal["full", "chat"] = "full"
    workflow: Text = Field("", description="only items of this workflow template; empty: every item")
    active: StrictBool = True


class WebhookPatchIn(InputSchema):
    name: Optional[NonBlankText] = None
    url: Optional[Url] = None
    event_types: Optional[EventTypes] = Field(None, min_length=1, description=_TYPES_DOC)
    payload: Optional[Literal["full", "chat"]] = None
    workflow: Optional[Text] = None
    active: Optional[StrictBool] = Field(None, description="false pauses; true resumes (pending deliveries go "
                                                           "out at once, in order)")
    rotate_secret: Optional[StrictBool] = Field(None, description="true: a new secret, in this answer only")


class WebhookOut(Schema):
    id: str
    name: str
    url: str
    event_types: list[str]
    payload: str
    workflow: str
    active: bool
    paused_reason: str
    paused_at: Optional[datetime]
    created_at: datetime
    updated_at: datetime
    pending: int
    oldest_pending_at: Optional[datetime]
    secret: Optional[str] = Field(None, description="only in the answer that created it")


class WebhookListOut(Schema):
    webhooks: list[WebhookOut]


class DeliveryOut(Schema):
    id: int
    event_id: int
    status: str
    attempts: int
    failures: int
    next_attempt_at: datetime
    last_attempt_at: Optional[datetime]
    last_status_code: Optional[int]
    last_error: str
    created_at: datetime
    delivered_at: Optional[datetime]


class DeliveryListOut(Schema):
    deliveries: list[DeliveryOut]


class DeliveryQuery(InputSchema):
    status: Optional[Literal["pending", "delivered"]] = None
    limit: int = Field(50, ge=1, le=500)


def _out(hook: Webhook, *, secret: bool = False) -> dict:
    pending = hook.deliveries.filter(status="pending")
    oldest = pending.order_by("created_at").values_list("created_at", flat=True).first()
    fields = {k: getattr(hook, k) for k in ("id", "name", "url", "event_types", "payload", "workflow", "active",
                                            "paused_reason", "paused_at", "created_at", "updated_at")}
    return {**fields, "pending": pending.count(), "oldest_pending_at": oldest, "secret": hook.secret if secret else None}


def _get(webhook_id: str) -> Webhook:
    hook = Webhook.objects.filter(pk=webhook_id).first()
    if hook is None:
        raise NotFound(f"no webhook has the id {webhook_id}", extra={"id": webhook_id})
    return hook


@webhooks.get("/webhooks", response={200: WebhookListOut, **ERRORS}, auth=api_auth(VIEW_WEBHOOKS))
def webhook_list(request):
    return {"webhooks": [_out(h) for h in Webhook.objects.order_by("created_at", "id")]}


@webhooks.post("/webhooks", response={201: WebhookOut, **ERRORS}, auth=api_auth(CHANGE_WEBHOOKS))
def webhook_create(request, payload: WebhookIn):
    """A new webhook; the answer carries its signing secret, shown this once."""
    hook = services.webhook_create(**payload.model_dump())
    return render.response(WebhookOut, SimpleNamespace(**_out(hook, secret=True)), 201)


@webhooks.get("/webhooks/{webhook_id}", response={200: WebhookOut, **ERRORS}, auth=api_auth(VIEW_WEBHOOKS))
def webhook_get(request, webhook_id: PathId):
    return _out(_get(webhook_id))


@webhooks.patch("/webhooks/{webhook_id}", response={200: WebhookOut, **ERRORS}, auth=api_auth(CHANGE_WEBHOOKS))
def webhook_update(request, webhook_id: PathId, payload: WebhookPatchIn):
    changes = {k: v for k, v in payload.model_dump(exclude_unset=True).items() if v is not None}
    hook = services.webhook_update(webhook_id, **changes)
    return _out(hook, secret=bool(changes.get("rotate_secret")))


@webhooks.delete("/webhooks/{webhook_id}", response={204: None, **ERRORS}, auth=api_auth(CHANGE_WEBHOOKS))
def webhook_delete(request, webhook_id: PathId):
    services.webhook_delete(webhook_id)
    return HttpResponse(status=204)


@webhooks.get("/webhooks/{webhook_id}/deliveries", response={200: DeliveryListOut, **ERRORS},
              auth=api_auth(VIEW_WEBHOOKS))
def webhook_deliveries(request, webhook_id: PathId, params: Query[DeliveryQuery]):
    """The webhook's deliveries, newest first."""
    qs = _get(webhook_id).deliveries.order_by("-id")
    if params.status:
        qs = qs.filter(status=params.status)
    return {"deliveries": list(qs[: params.limit])}


@webhooks.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", response={200: DeliveryOut, **ERRORS},
               auth=api_auth(CHANGE_WEBHOOKS))
def delivery_redeliver(request, webhook_id: PathId, delivery_id: int):
    """Send a delivery again: pending and due now, before the webhook's later deliveries."""
    if not WebhookDelivery.objects.filter(pk=delivery_id, webhook_id=webhook_id).exists():
        raise NotFound(f"webhook {webhook_id} has no delivery {delivery_id}", extra={"id": delivery_id})
    return services.delivery_redeliver(delivery_id, now=clock.now())
