"""What a worker runs. An executor has `execute(task, report, stop) -> result dict` (API.md §3 submit body
without the fence). `load_executor("dotted.path.Class", **options)` builds one for `workcenter_worker --executor`."""
from __future__ import annotations

import inspect

from django.utils.module_loading import import_string

DEFAULT_EXECUTOR = "workcenter.executors.simulated.SimulatedExecutor"
SHELL_EXECUTOR = "workcenter.executors.shell.ShellExecutor"


class ExecutorConfigError(ValueError):
    """The worker cannot start with this executor or its configuration (the message says why)."""


def load_executor(path: str | None = None, **kwargs):
    path = path or DEFAULT_EXECUTOR
    if "." not in path or not all(path.split(".")):
        raise ExecutorConfigError(f"executor must be a dotted path: {path}")
    try:
        cls = import_string(path)
    except ImportError as exc:  # a missing module, or a module without that name
        raise ExecutorConfigError(f"cannot load executor {path}: {exc}") from None
    if not isinstance(cls, type):
        return cls
    if kwargs:
        try:
            inspect.signature(cls).bind_partial(**kwargs)
        except TypeError:
            raise ExecutorConfigError(f"executor {path} takes no option(s) {', '.join(sorted(kwargs))}") from None
    return cls(**kwargs)


def acceptance_checks(criteria, status: str = "passed", evidence: str = "verified") -> list[dict]:
    return [{"criterion": c, "status": status, "evidence": f"{evidence}: {c}"} for c in criteria or []]
