"""Test-only fault hook (DOMAIN §2.7): named points inside the longer transactions.

Tests set `hooks.fault_hook` (or use `inject_fault`) to raise or wait at a point and prove that
nothing of the transaction was committed, or hold it open there. The points are FAULT_POINTS;
tests/test_architecture.py checks that the services call each of them, and only them.
"""
from __future__ import annotations

import contextlib
from typing import Callable

# name: where the services call it
FAULT_POINTS = {
    "claim_candidate_read": "a claim, its candidate read, before it is checked and written (services/claims.py)",
    "after_claim_update": "a claim, its run, action and event written (services/claims.py)",
    "after_run_update": "a submission, its run and action written, before the item advances (services/runs.py)",
    "before_event": "a submission, the item advanced, before its event (services/runs.py)",
    "after_interrupt_run_update": "an interruption, its run written, before its action (services/runs.py)",
}

fault_hook: Callable[[str], None] | None = None


def fault_point(name: str) -> None:
    if fault_hook is not None:
        fault_hook(name)


@contextlib.contextmanager
def inject_fault(point: str, exc: BaseException | None = None):
    if point not in FAULT_POINTS:
        raise ValueError(f"no fault point is named {point!r}: {', '.join(FAULT_POINTS)}")
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
