"""Workspace records and integration reservations (DOMAIN §10)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import db
from ..db.guards import ACTION_OF_LEASE, RUN_OF_LEASE
from ..models import Action, WorkspaceMode
from ..domain import rules
from ..clock import iso_ms
from . import common
from .common import resolve_now, store_transaction

MIN_RESERVATION_MS = 10_000
DEFAULT_RESERVATION_MS = 300_000


@dataclass
class Reservation:
    action: Action
    token: str
    expires_at: datetime


def _fenced(run_id, owner_boot_id, lease_epoch, action_id, now, *, require_live):
    lease, _ = common.load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=require_live)
    if lease is None or (action_id is not None and lease.action.pk != action_id):
        return None
    return lease


def integration_set_workspace(*, action_id: str | None, run_id: str, owner_boot_id: str, lease_epoch: int,
                              workspace: dict, now: datetime | None = None) -> Action | None:
    """Store the integration workspace of the active run's action, mode forced to integrate."""
    with store_transaction():
        now = resolve_now(now)
        lease = _fenced(run_id, owner_boot_id, lease_epoch, action_id, now, require_live=True)
        if lease is None or not isinstance(workspace, dict):
            return None
        if not db.update_if(ACTION_OF_LEASE.row(lease.action.pk, run_id, lease_epoch),
                            {"workspace": workspace, "workspace_mode": WorkspaceMode.INTEGRATE}):
            return None
        lease.action.workspace, lease.action.workspace_mode = workspace, WorkspaceMode.INTEGRATE
        return lease.action


def integration_acquire(*, action_id: str | None, run_id: str, owner_boot_id: str, lease_epoch: int,
                        reservation_ms: int | None = DEFAULT_RESERVATION_MS, now: datetime | None = None) -> Reservation | None:
    """Reserve the prepared integration for finalization; the run's lease moves to the same expiry."""
    common.check_duration(reservation_ms, "reservation_ms", allow_none=True)
    with store_transaction():
        now = resolve_now(now)
        lease = _fenced(run_id, owner_boot_id, lease_epoch, action_id, now, require_live=True)
        if lease is None:
            return None
        action = lease.action
        ws = action.workspace if isinstance(action.workspace, dict) else None
        integ = ws.get("integration") if ws else None
        if action.workspace_mode != WorkspaceMode.INTEGRATE or not isinstance(integ, dict) or integ.get("status") != "prepared":
            return None
        ms = max(MIN_RESERVATION_MS, int(reservation_ms or DEFAULT_RESERVATION_MS))
        expires = now + timedelta(milliseconds=ms)
        token = secrets.token_hex(16)
        new_ws = dict(ws)
        new_ws["integration"] = dict(integ, reservation={
            "token": token, "run_id": run_id, "owner_boot_id": owner_boot_id,
            "lease_epoch": lease_epoch, "expires_at": iso_ms(expires),
        })
        db.update(ACTION_OF_LEASE.row(action.pk, run_id, lease_epoch), {"workspace": new_ws})
        # the reservation renews the lease: the page's "no heartbeat" clock restarts with it
        db.update(RUN_OF_LEASE.row(run_id, owner_boot_id, lease_epoch), {"expires_at": expires, "renewed_at": now})
        action.workspace = new_ws
        return Reservation(action=action, token=token, expires_at=expires)


def _reservation_matches(action: Action, run_id, owner_boot_id, lease_epoch, token, now) -> bool:
    res = rules.reservation_of(action)
    return bool(
        res
        and isinstance(token, str)
        and res.get("token") == token
        and res.get("run_id") == run_id
        and res.get("owner_boot_id") == owner_boot_id
        and res.get("lease_epoch") == lease_epoch
        and rules.has_live_reservation(action, now)
    )


def integration_finish(*, action_id: str | None, run_id: str, owner_boot_id: str, lease_epoch: int, token: str,
                       workspace: dict, now: datetime | None = None) -> Action | None:
    """Store the finalized workspace; fence ignores lease expiry, checks the live reservation."""
    return _settle(action_id, run_id, owner_boot_id, lease_epoch, token, workspace if isinstance(workspace, dict) else None, now)


def integration_rollback(*, action_id: str | None, run_id: str, owner_boot_id: str, lease_epoch: int, token: str,
                         now: datetime | None = None) -> Action | None:
    """Drop the integration record (workspace = null) under the same fence as finish."""
    return _settle(action_id, run_id, owner_boot_id, lease_epoch, token, None, now)


def _settle(action_id, run_id, owner_boot_id, lease_epoch, token, workspace, now):
    with store_transaction():
        now = resolve_now(now)
        lease = _fenced(run_id, owner_boot_id, lease_epoch, action_id, now, require_live=False)
        if lease is None or not _reservation_matches(lease.action, run_id, owner_boot_id, lease_epoch, token, now):
            return None
        if not db.update_if(ACTION_OF_LEASE.row(lease.action.pk, run_id, lease_epoch),
                            {"workspace": workspace, "workspace_mode": WorkspaceMode.INTEGRATE}):
            return None
        lease.action.workspace, lease.action.workspace_mode = workspace, WorkspaceMode.INTEGRATE
        return lease.action
