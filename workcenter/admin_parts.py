"""The pieces every admin page of the store builds with: status badges, links between rows,
clipped text, and the view-only base of the store's read-mostly pages."""
from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from . import clock


def status_badge(status: str):
    """The dashboard's status colours (UI.md), from static/dashboard/admin.css (the
    Content-Security-Policy refuses style="" markup); the badge always carries its text label."""
    return format_html('<span class="wc-badge wc-{}">{}</span>', status, status.replace("_", " "))


def short(value: str | None) -> str:
    return (value or "")[:8]


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def change_link(model: str, pk: str | int | None, text: str | None = None):
    if pk in (None, ""):
        return "—"
    url = reverse(f"admin:workcenter_{model}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, text if text is not None else short(str(pk)))


def changelist_link(model: str, params: dict, text: str):
    url = reverse(f"admin:workcenter_{model}_changelist") + "?" + urlencode(params)
    return format_html('<a href="{}">{}</a>', url, text)


class ViewOnly:
    """No add, change or delete through the admin: the store is written by services only."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def when(value: datetime | None) -> str:
    return clock.iso_ms(value) if value else "—"


def when_short(value: datetime | None):
    """A list cell's time: "06:41:07" today, "12-05 06:41" on another day, the full time on hover."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    text = local.strftime("%H:%M:%S") if local.date() == timezone.localdate() else local.strftime("%m-%d %H:%M")
    return format_html('<time datetime="{}" title="{}">{}</time>', clock.iso_ms(value), when(value), text)
