"""A person's own dashboard settings (PersonSettings: one row per user, written on their first
choice). Not part of the work store's history: no event, nothing published."""
from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from ..models import PersonSettings
from .common import store_transaction

FIELDS = ("browser_notifications",)


def person_settings_set(*, user, changes: dict[str, Any]) -> dict:
    """Store `changes` ({field: value}, fields of FIELDS, booleans) for `user`; answers every
    setting as stored. Anything else is refused (InvalidInput) before anything is written."""
    if not changes:
        raise InvalidInput("name at least one setting to change: " + ", ".join(FIELDS), fields=["body"])
    unknown = [k for k in changes if k not in FIELDS]
    if unknown:
        raise InvalidInput(f"unknown setting: {', '.join(sorted(unknown))}", fields=unknown)
    for field, value in changes.items():
        if not isinstance(value, bool):
            raise InvalidInput(f"{field} must be true or false", fields=[field])
    with store_transaction():
        row, _ = PersonSettings.objects.select_for_update().get_or_create(user_id=user.pk)
        for field, value in changes.items():
            setattr(row, field, value)
        row.save()
    return {field: getattr(row, field) for field in FIELDS}
