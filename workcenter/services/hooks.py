"""Test-only fault hook (DOMAIN §2.7): named points inside the longer transactions.

Tests set `hooks.fault_hook` (or use `inject_fault`) to raise at a point and prove that nothing
of the transaction was committed. Points: after_run_update, before_event (finalize),
after_interrupt_run_update (interrupt), after_claim_update (claim), after_reset (graph reset).
"""
from __future__ import annotations

import contextlib
from typing import Callable

fault_hook: Callable[[str], None] | None = None


def fault_point(name: str) -> None:
    if fault_hook is not None:
        fault_hook(name)


@contextlib.contextmanager
def inject_fault(point: str, exc: BaseException | None = None):
    global fault_hook
    previous = fault_hook

    def hook(name: str) -> None:
        if name == point:
            raise exc if exc is not None else RuntimeError(f"injected fault at {point}")

    fault_hook = hook
    try:
        yield
    finally:
        fault_hook = previous
