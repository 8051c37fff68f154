"""The service layer: every write of DOMAIN.md. Each public function is one transaction.

`from workcenter.services import action_claim` names a service without knowing its module.
The names resolve when first used (PEP 562), so importing one module of this package (the pure
`workflows` or `normalize`, say) does not load every service with it.
"""
from importlib import import_module

_SERVICES = {
    "claims": ("action_claim", "claim_attempt"),
    "integration": ("integration_acquire", "integration_finish", "integration_rollback", "integration_set_workspace"),
    "recovery": ("runs_recover",),
    "repairs": ("action_edit", "action_mark_failed", "action_reset", "run_release"),
    "runs": ("run_interrupt", "run_progress", "run_renew", "run_set_snapshots", "run_submit", "run_unseen_claim"),
    "work_items": ("work_item_cancel", "work_item_create", "work_item_guide", "work_item_retry",
                   "work_item_retry_preview", "work_item_start", "work_item_update"),
}
_MODULE_OF = {name: module for module, names in _SERVICES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
