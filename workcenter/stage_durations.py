"""How long a stage usually takes: the figures behind the work-item page's "longer than usual" alarm
(a graph node's `usual_duration_s` and `overdue_after_s`, docs/api.md; the rule in docs/dashboard.md).

The rule, per (workflow template, stage id):

* history: the durations (`ended_at - started_at`) of the newest `PER_STAGE` completed runs of that
  workflow and stage, across items, among the newest `WINDOW` ended runs of the store (whatever
  their outcome);
* no figure with fewer than `MIN_RUNS` of them;
* usual = their 90th percentile (nearest rank), rounded up to a whole second (at least 1 s);
* overdue after max(`OVERDUE_FACTOR` × usual, usual + `OVERDUE_MARGIN_S`).

The read: one statement for every stage at once, the newest ended runs by `ended_at` (the
wc_run_ended index, read backwards, `WINDOW` rows at most; the outcome is looked at here, since a
condition on it would have the planner take a status index and sort every completed run) with
their action's stage and their item's workflow template (primary-key joins). Its result is kept per process for `TTL_S`
seconds, aligned to the clock's minute so that the processes of a deployment change their figures
at about the same moment (a node's figures are part of the pushed state, whose rev every process
must compute alike). An item read then costs a dictionary lookup per running node.
"""
from __future__ import annotations

import math
import threading
import time
from collections import defaultdict

from .models import Run, RunStatus

WINDOW = 2000  # the newest ended runs of the store the figures are made from
PER_STAGE = 50  # of those, the newest of each (workflow, stage)
MIN_RUNS = 5
PERCENTILE = 0.9
OVERDUE_FACTOR = 3
OVERDUE_MARGIN_S = 30
TTL_S = 60

_lock = threading.Lock()
_figures: dict[tuple[str, str], tuple[int, int]] = {}
_until = 0.0  # time.time() when the figures are read again
reads = 0  # times the history was read (observability and tests)


def usual(durations: list[float]) -> tuple[int, int] | None:
    """(usual seconds, overdue after seconds) of some completed runs' durations, or None when they
    are too few (the module doc's rule)."""
    if len(durations) < MIN_RUNS:
        return None
    ordered = sorted(durations)
    p90 = ordered[max(0, math.ceil(PERCENTILE * len(ordered)) - 1)]
    typical = max(1, math.ceil(p90 - 1e-9))
    return typical, max(OVERDUE_FACTOR * typical, typical + OVERDUE_MARGIN_S)


def read() -> dict[tuple[str, str], tuple[int, int]]:
    """{(workflow template, stage id): (usual s, overdue after s)} from the store, now (one read)."""
    global reads
    rows = (Run.objects.filter(ended_at__isnull=False).order_by("-ended_at")
            .values_list("status", "started_at", "ended_at", "action__stage_id", "action__type",
                         "work_item__workflow_template")[:WINDOW])
    history: dict[tuple[str, str], list[float]] = defaultdict(list)
    for status, started, ended, stage_id, action_type, workflow in rows:
        if status != RunStatus.COMPLETED:
            continue
        durations = history[(workflow, stage_id or action_type)]
        if len(durations) < PER_STAGE:  # newest first: the newest PER_STAGE of each
            durations.append(max(0.0, (ended - started).total_seconds()))
    reads += 1
    return {key: figures for key, durations in history.items() if (figures := usual(durations)) is not None}


def figures() -> dict[tuple[str, str], tuple[int, int]]:
    """The figures of every stage with a history, read at most once per `TTL_S` (module doc)."""
    global _figures, _until
    now = time.time()
    if now < _until:
        return _figures
    with _lock:
        if now >= _until:
            _figures = read()
            _until = (now // TTL_S + 1) * TTL_S
    return _figures


def forget() -> None:
    """Drop what this process keeps: the next `figures()` reads the store (tests)."""
    global _until
    _until = 0.0
