"""How loaded the machine is right now, for the few tests whose bound is a time.

A time a test waits for ("woken well before its deadline", "the first rows within a second")
is an upper bound on a figure the benchmarks measure, and a test that holds only on an idle
machine is a flaky test. `slowdown()` measures how much longer than its own CPU time a short
busy loop of this thread takes now: 1.0 on an idle machine, about the number of runnable
threads per core beside CPU hogs (the processes a test starts, chromium included, wait in the
same run queue). `within(seconds, cap)` scales a bound by it, never past `cap`: the bound that
still tells the behaviour under test apart from its fallback (a deadline, a periodic retry).
"""
from __future__ import annotations

import time


def slowdown(sample_s: float = 0.05) -> float:
    """Wall time ÷ CPU time of a `sample_s` busy loop on this thread (≥ 1)."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu0 < sample_s:
        pass
    return max(1.0, (time.perf_counter() - wall0) / max(time.thread_time() - cpu0, 1e-9))


def within(seconds: float, cap: float) -> float:
    """`seconds` on an idle machine, scaled by the slowdown of now, at most `cap`."""
    return min(cap, seconds * slowdown())
