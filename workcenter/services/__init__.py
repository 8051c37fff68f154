"""The service layer: every write of DOMAIN.md. Each public function is one transaction.

`from workcenter.services import action_claim` names a service without knowing its module. The
services build on the pure `workcenter.domain`, the models, `db` and `events`, and nothing
below them imports this package, so its face is plain imports.
"""
from .claims import action_claim, claim_attempt
from .integration import integration_acquire, integration_finish, integration_rollback, integration_set_workspace
from .recovery import runs_recover
from .repairs import action_edit, action_mark_failed, action_reset, run_release
from .runs import run_interrupt, run_progress, run_renew, run_set_snapshots, run_submit, run_unseen_claim
from .work_items import (
    work_item_cancel,
    work_item_create,
    work_item_guide,
    work_item_retry,
    work_item_retry_preview,
    work_item_start,
    work_item_update,
)

__all__ = [
    "action_claim", "action_edit", "action_mark_failed", "action_reset", "claim_attempt",
    "integration_acquire", "integration_finish", "integration_rollback", "integration_set_workspace",
    "run_interrupt", "run_progress", "run_release", "run_renew", "run_set_snapshots", "run_submit",
    "run_unseen_claim", "runs_recover", "work_item_cancel", "work_item_create", "work_item_guide",
    "work_item_retry", "work_item_retry_preview", "work_item_start", "work_item_update",
]
