"""The service layer: every write of DOMAIN.md. Each public function is one transaction."""
from .claims import action_claim  # noqa: F401
from .integration import (  # noqa: F401
    integration_acquire,
    integration_finish,
    integration_rollback,
    integration_set_workspace,
)
from .recovery import runs_recover  # noqa: F401
from .repairs import action_edit, action_mark_failed, action_reset, run_release  # noqa: F401
from .runs import run_interrupt, run_progress, run_renew, run_set_snapshots, run_submit  # noqa: F401
from .work_items import (  # noqa: F401
    work_item_cancel,
    work_item_create,
    work_item_guide,
    work_item_retry,
    work_item_retry_preview,
    work_item_start,
    work_item_update,
)
