"""One error type for the domain; the API maps `code` to an HTTP status in one place (API.md §0).

The messages carry the keywords of DOMAIN §17 that clients and tests match on.
"""
from __future__ import annotations

from typing import Any


class WorkcenterError(Exception):
    code = "invalid_state"

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.extra = dict(extra or {})
        if code:
            self.code = code

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "extra": self.extra}


class BadRequest(WorkcenterError):
    """A request the API cannot read: not JSON, not UTF-8, nested too deeply."""

    code = "bad_request"


class NotFound(WorkcenterError):
    code = "not_found"


class InvalidInput(WorkcenterError):
    """A field fails validation; `extra.errors` names the fields (snake_case)."""

    code = "invalid_input"

    def __init__(self, message: str, *, fields: list[str] | None = None, extra: dict[str, Any] | None = None):
        extra = dict(extra or {})
        if fields is not None:
            extra.setdefault("errors", [{"field": f, "message": message} for f in fields])
        super().__init__(message, extra=extra)


class InvalidState(WorkcenterError):
    code = "invalid_state"


class RevisionConflict(WorkcenterError):
    code = "revision_conflict"


class StateChanged(WorkcenterError):
    """The item moved (an event: a claim, a failure, a retry, …) since the preview whose state
    token the caller sent; the message says what happened, `extra.state_token` is the token now."""

    code = "state_changed"


class StaleRun(WorkcenterError):
    """A worker call whose fence (DOMAIN §6.1) fails. Message contains 'stale'."""

    code = "stale_run"


class ReservationActive(WorkcenterError):
    code = "reservation_active"

    def __init__(self, message: str = "integration finalization currently owns the Action lease", **kw):
        super().__init__(message, **kw)


class FenceLost(WorkcenterError):
    """A guarded update failed after earlier writes in the same transaction: roll back (DOMAIN §2.7)."""

    code = "stale_run"


class PlanError(Exception):
    """A triage plan violation (DOMAIN §4.4); turned into a failed run, never an HTTP error."""


class WorkflowError(WorkcenterError):
    """An invalid workflow definition (DOMAIN §4.1)."""

    code = "invalid_input"
