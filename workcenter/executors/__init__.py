"""What a worker runs. An executor has `execute(task, report, stop) -> result dict` (API.md §3 submit body
without the fence). `load_executor("dotted.path.Class")` builds one for `workcenter_worker --executor`."""
from __future__ import annotations

import importlib

DEFAULT_EXECUTOR = "workcenter.executors.simulated.SimulatedExecutor"


def load_executor(path: str | None = None, **kwargs):
    path = path or DEFAULT_EXECUTOR
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ValueError(f"executor must be a dotted path: {path}")
    cls = getattr(importlib.import_module(module_name), attr)
    return cls(**kwargs) if isinstance(cls, type) else cls


def acceptance_checks(criteria, status: str = "passed", evidence: str = "verified") -> list[dict]:
    return [{"criterion": c, "status": status, "evidence": f"{evidence}: {c}"} for c in criteria or []]
