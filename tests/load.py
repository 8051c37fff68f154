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


def _cpu_counts() -> tuple[int, int, int]:
    """(runnable tasks now, total CPU ticks, stolen ticks) from /proc/stat."""
    running = total = steal = 0
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu "):
                ticks = [int(x) for x in line.split()[1:]]
                total, steal = sum(ticks[:8]), ticks[7] if len(ticks) > 7 else 0
            elif line.startswith("procs_running"):
                running = int(line.split()[1])
    return running, total, steal


class LoadWatch:
    """How loaded the machine was over a span of a test, from the kernel's own counts: the mean
    number of runnable tasks per core (at least 1, sampled every `every_s` by a sleeping thread:
    no busy loop, no lock held) divided by the share of CPU time the hypervisor left this machine
    (its steal). 1.0 on an idle machine. A time measured inside the span — a page's layout, the
    longest main-thread task, a push reaching the screen — waited in the same run queue, so its
    bound is scaled by the load of that span (`within`), not by a sample taken before or after.

        with LoadWatch() as load:
            ...measure...
        assert took < load.within(0.3, cap=1.5)
    """

    def __init__(self, every_s: float = 0.05):
        import os
        import threading

        self.every_s = every_s
        self.cores = os.cpu_count() or 1
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-watch", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(_cpu_counts()[0] - 1)  # less this thread, running as it reads

    def __enter__(self) -> "LoadWatch":
        self._start = _cpu_counts()
        self.samples.append(self._start[0] - 1)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._end = _cpu_counts()

    @property
    def factor(self) -> float:
        queued = max(1.0, sum(self.samples) / len(self.samples) / self.cores)
        ticks = self._end[1] - self._start[1]
        stolen = (self._end[2] - self._start[2]) / ticks if ticks > 0 else 0.0
        return queued / max(0.25, 1.0 - stolen)

    def within(self, seconds: float, cap: float) -> float:
        """`seconds` on an idle machine, scaled by the span's load (and by the slowdown of now,
        if that is more), at most `cap`."""
        return min(cap, seconds * max(self.factor, slowdown()))
