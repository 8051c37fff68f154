"""The workers seen lately (the dashboard's Workers page, `GET /api/v1/workers`), from their runs.

A worker is known by the boot id its runs carry; nothing else is stored about it. Seen in the last
hour: it holds a run now, or one of its runs ended in the last hour. For each: the runs it holds
(item, stage, lease epoch, when the lease was last renewed and how long it is), the runs it finished
and failed in the last hour, and when it was last seen (its latest claim, renewal or end).

"The last hour" is counted in whole minutes: it starts at the minute boundary at or before an hour
ago (`window_start`), so the figures change with the clock once a minute, not with every run that
ends an hour ago.

`renewing` is False when one of its held runs has gone more than half its lease without a renewal
(a worker renews every lease/3: a live one never gets there; a stopped or hung one does within half
a lease) — the page computes the same from the timestamps with its own clock, so it marks a worker
the moment that happens, between two updates.

Bounded reads. A `Tracker` holds the figures: `load` reads them in two reads, neither of them a
walk over the hour's runs in Python: the running runs (index wc_run_status_expires; as many as the
workers hold) and one aggregate of the runs ended in the window, per boot id, outcome and minute
(covered by the index wc_run_ended). `refresh` then brings them up to date from the runs changed
since the previous refresh, one read over two indexes: running runs renewed (or claimed) since
(wc_run_status_renewed) and runs ended since (wc_run_ended).
With nothing changed that read finds no row. Each refresh reads `MARGIN` further back than the
previous one started (a transaction stamps its time before it commits) and skips the ends it has
counted; every `RECONCILE` it also reads the ids of the running runs, so a held run that went away
without a fresh `ended_at` in reach (its item deleted, a commit slower than the margin) leaves the
page too; every `RELOAD` it loads again. `refresh` answers the workers whose figures changed (the
diff the Workers stream pushes, dashboard/workers_stream.py). `GET /api/v1/workers` is a `load`.
"""
from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta, timezone

from django.db import connection
from django.db.models import Count, Max, Q
from django.db.models.functions import TruncMinute

from . import clock
from .choices import RunStatus
from .models import Run

WINDOW = timedelta(hours=1)
FAILED = (RunStatus.FAILED, RunStatus.RETRYABLE, RunStatus.INTERRUPTED)
MARGIN = timedelta(seconds=3)  # how much further back than the previous refresh a refresh reads
RECONCILE = 30.0  # seconds between two reads of the running runs' ids
RELOAD = 600.0  # seconds between two loads
HELD_FIELDS = ("id", "owner_boot_id", "status", "lease_epoch", "started_at", "ended_at", "expires_at", "renewed_at",
               "work_item__id", "work_item__title", "action__id", "action__stage_id", "action__type")


def window_start(now):
    """The start of "the last hour": the minute boundary at or before an hour ago."""
    return now.replace(second=0, microsecond=0) - WINDOW


def _held_runs(query: Q | None = None):
    return (Run.objects.filter(query or Q()).select_related("work_item", "action").only(*HELD_FIELDS).order_by())


def changed_runs(since):
    """The runs claimed, renewed or ended after `since` (wc_run_status_renewed, wc_run_ended)."""
    return _held_runs(Q(status=RunStatus.RUNNING, renewed_at__gt=since) | Q(ended_at__gt=since))


class ChangeProbe:
    """Whether any run changed after a time: `changed_runs(since)` reduced to one id, its SQL
    compiled by the ORM once per connection and then only executed (a compile costs most of a
    refresh that finds nothing: ~0.8 of 0.9 ms on SQLite).

    On SQLite a commit by any process writes the database file or its write-ahead log, so while
    neither file's size and modification time moved there is nothing to read: a `stat` of each
    (microseconds) instead of a statement (a few tenths of a millisecond of CPU, most of an idle
    refresh). The statement still runs at least every `QUIET_MAX` seconds: a modification time
    is as fine as the kernel's clock tick, two commits within one tick may leave it as it was."""

    SENTINEL = datetime(2000, 1, 1, tzinfo=timezone.utc)
    QUIET_MAX = 10.0

    def __init__(self) -> None:
        self.compiled: dict = {}  # connection vendor -> (sql, params, positions of `since`)
        self.files = None  # SQLite: the file's (path, size, mtime) when the statement last ran
        self.ran = float("-inf")  # time.monotonic() of the statement's last run
        self.skipped = 0  # refreshes the files' stat answered (observability and tests)
        self.paths = None  # SQLite: the write-ahead log's and the database's paths

    def _files(self):
        """(size, mtime) of the write-ahead log, where there is one (a commit appends to it), else
        of the database file."""
        for path in self.paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            return path, st.st_size, st.st_mtime_ns
        return None

    def quiet(self) -> bool:
        """True when no commit can have happened since the statement last ran (SQLite's files)."""
        if self.paths is None:  # the same database in every thread: looked up once
            name = str(connection.settings_dict["NAME"])
            self.paths = (name + "-wal", name) if connection.vendor == "sqlite" else ()
        if not self.paths:
            return False
        files = self._files()
        if files == self.files and time.monotonic() - self.ran < self.QUIET_MAX:
            self.skipped += 1
            return True
        self.files = files  # before the statement: a commit after this stat moves them again
        return False

    def __call__(self, since) -> bool:
        self.ran = time.monotonic()
        compiled = self.compiled.get(connection.vendor)
        if compiled is None:
            sql, params = changed_runs(self.SENTINEL).values_list("id")[:1].query.sql_with_params()
            marker = connection.ops.adapt_datetimefield_value(self.SENTINEL)
            compiled = self.compiled[connection.vendor] = (sql, list(params),
                                                           [i for i, p in enumerate(params) if p == marker])
        sql, params, positions = compiled
        params = list(params)
        for i in positions:
            params[i] = connection.ops.adapt_datetimefield_value(since)
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone() is not None


def ended_since(start, *, by_minute: bool = True):
    """Per boot id, outcome (and minute), the runs ended since `start`: (boot id, status, minute,
    count, latest end), from the index wc_run_ended alone; without `by_minute` the minute is
    `start` (one group per boot id and outcome, no per-row date arithmetic)."""
    runs = Run.objects.filter(ended_at__gte=start).order_by()
    if not by_minute:
        return [(boot, status, start, n, last) for boot, status, n, last in runs.values_list("owner_boot_id", "status")
                .annotate(n=Count("ended_at"), last=Max("ended_at"))]
    return (runs.annotate(minute=TruncMinute("ended_at", tzinfo=timezone.utc))
            .values_list("owner_boot_id", "status", "minute")
            .annotate(n=Count("ended_at"), last=Max("ended_at")))


def _held(run) -> dict:
    renewed = run.renewed_at or run.started_at
    return {"run_id": run.pk, "work_item_id": run.work_item.pk, "title": run.work_item.title,
            "stage_id": run.action.effective_stage_id, "lease_epoch": run.lease_epoch, "renewed_at": renewed,
            "expires_at": run.expires_at, "lease_ms": max(0, int((run.expires_at - renewed).total_seconds() * 1000))}


class Worker:
    """One boot id: the runs it holds, its ends per minute, when it was last seen."""

    __slots__ = ("boot_id", "held", "minutes", "last_seen")

    def __init__(self, boot_id: str) -> None:
        self.boot_id = boot_id
        self.held: dict[str, dict] = {}  # run id -> HeldRunOut
        self.minutes: dict = {}  # minute -> [finished, failed]
        self.last_seen = None

    def seen(self, at) -> None:
        if at is not None and (self.last_seen is None or at > self.last_seen):
            self.last_seen = at

    def ended(self, minute, status: str, n: int = 1) -> None:
        if status == RunStatus.COMPLETED or status in FAILED:
            counts = self.minutes.setdefault(minute, [0, 0])
            counts[0 if status == RunStatus.COMPLETED else 1] += n

    def visible(self, start) -> bool:
        return bool(self.held) or (self.last_seen is not None and self.last_seen >= start)

    def row(self, now) -> dict:
        held = sorted(self.held.values(), key=lambda h: h["renewed_at"])
        renewing = all((now - h["renewed_at"]).total_seconds() * 1000 <= h["lease_ms"] / 2 for h in held)
        return {"boot_id": self.boot_id, "held": held, "finished_1h": sum(c[0] for c in self.minutes.values()),
                "failed_1h": sum(c[1] for c in self.minutes.values()), "last_seen": self.last_seen,
                "renewing": renewing}


def _minute(at):
    return at.replace(second=0, microsecond=0)


class Tracker:
    """The figures of the Workers page, kept up to date by `refresh` (see the module doc). Its
    methods may be called from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.workers: dict[str, Worker] = {}
        self.start = None  # the window's start at the last load or refresh
        self.next_minute = 0.0  # time.time() at which the window moves next
        self.mark = None  # a refresh reads the runs changed after this
        self.counted: dict[str, object] = {}  # ended runs read after `mark`: run id -> ended_at
        self.sent: dict[str, dict] = {}  # boot id -> the row of the last refresh (or load)
        self.version = 0  # counts the refreshes that changed something
        self.loaded = float("-inf")  # time.monotonic() of the last load
        self.reconciled = float("-inf")
        self.reads = 0  # database reads (observability and tests)
        self.probe = ChangeProbe()

    # --- reading ----------------------------------------------------------------------------------

    def load(self, now=None, *, by_minute: bool = True) -> None:
        """Read the figures anew; without `by_minute` (a one-off snapshot) the hour's ends are not
        kept per minute, and a later `refresh` must not follow."""
        with self.lock:
            self._load(now or clock.now(), by_minute)

    def _load(self, now, by_minute: bool = True) -> None:
        start = window_start(now)
        workers: dict[str, Worker] = {}
        for run in _held_runs(Q(status=RunStatus.RUNNING)):
            w = workers.get(run.owner_boot_id) or workers.setdefault(run.owner_boot_id, Worker(run.owner_boot_id))
            w.held[run.pk] = _held(run)
            w.seen(w.held[run.pk]["renewed_at"])
        for boot_id, status, minute, n, last in ended_since(start, by_minute=by_minute):
            w = workers.get(boot_id) or workers.setdefault(boot_id, Worker(boot_id))
            w.ended(minute, status, n)
            w.seen(last)
        mark = now - MARGIN
        # the ends the aggregate counted that the next refresh reads again
        counted = dict(Run.objects.filter(ended_at__gt=mark).order_by().values_list("id", "ended_at"))
        self.reads += 3
        self.workers, self.start, self.mark, self.counted = workers, start, mark, counted
        self.next_minute = (start + WINDOW + timedelta(minutes=1)).timestamp()  # when the window moves
        self.loaded = self.reconciled = time.monotonic()
        self.sent = {b: w.row(now) for b, w in workers.items() if w.visible(start)}
        self.version += 1

    def snapshot(self, now=None) -> dict:
        """`{now, workers}` (WorkersOut) as known now, most recently seen first."""
        with self.lock:
            now = now or clock.now()
            start = window_start(now)
            rows = [w.row(now) for w in self.workers.values() if w.visible(start)]
            rows.sort(key=lambda r: r["last_seen"], reverse=True)
            return {"now": now, "workers": rows, "version": self.version}

    def refresh(self, now=None) -> dict | None:
        """Read what changed since the last refresh; `{now, workers: [changed rows], gone: [boot
        ids], version}` when some worker's figures changed, else None."""
        with self.lock:
            if (now is None and self.mark is not None and self.probe.quiet()
                    and time.time() < self.next_minute and time.monotonic() - self.loaded <= RELOAD):
                return None  # nothing committed, the same minute: the cheapest refresh
            now = now or clock.now()
            if self.mark is None or time.monotonic() - self.loaded > RELOAD:
                before = self.sent
                self._load(now)
                return self._diff(now, before, set(before) | set(self.sent))
            dirty: set[str] = set()
            since, self.mark = self.mark, now - MARGIN
            if self.probe(since):  # most refreshes find nothing: one compiled statement says so
                for run in changed_runs(since):
                    self._apply(run, dirty)
                self.reads += 1
            self.reads += 1
            self.counted = {k: v for k, v in self.counted.items() if v > self.mark}
            if time.monotonic() - self.reconciled > RECONCILE:
                self._reconcile(dirty)
            start = window_start(now)
            if start != self.start:  # a minute went by: the window's first minute leaves it
                self.start = start
                self.next_minute = (start + WINDOW + timedelta(minutes=1)).timestamp()
                for w in self.workers.values():
                    w.minutes = {m: c for m, c in w.minutes.items() if m >= start}
                dirty.update(self.workers)
            if not dirty:
                return None
            return self._diff(now, self.sent, dirty)

    def _apply(self, run, dirty: set) -> None:
        w = self.workers.get(run.owner_boot_id)
        if w is None:
            w = self.workers[run.owner_boot_id] = Worker(run.owner_boot_id)
        if run.ended_at is not None:
            if self.counted.get(run.pk) == run.ended_at:
                return
            self.counted[run.pk] = run.ended_at
            w.held.pop(run.pk, None)
            if run.ended_at >= self.start:
                w.ended(_minute(run.ended_at), run.status)
            w.seen(run.ended_at)
        elif run.status == RunStatus.RUNNING:
            held = _held(run)
            if w.held.get(run.pk) == held:
                return
            w.held[run.pk] = held
            w.seen(held["renewed_at"])
        elif w.held.pop(run.pk, None) is None:
            return
        dirty.add(w.boot_id)

    def _reconcile(self, dirty: set) -> None:
        """The held runs that are no longer running are read by id (their end is counted if it was
        not); running runs not held are read too."""
        self.reconciled = time.monotonic()
        running = dict(Run.objects.filter(status=RunStatus.RUNNING).order_by().values_list("id", "renewed_at"))
        self.reads += 1
        held = {run_id: (w, h) for w in self.workers.values() for run_id, h in w.held.items()}
        stale = [run_id for run_id, (w, h) in held.items()
                 if run_id not in running or (running[run_id] or h["renewed_at"]) != h["renewed_at"]]
        missing = [run_id for run_id in running if run_id not in held]
        if not stale and not missing:
            return
        found = {run.pk: run for run in _held_runs(Q(pk__in=stale + missing))}
        self.reads += 1
        for run_id in stale:
            if run_id not in found:  # gone with its item
                w = held[run_id][0]
                w.held.pop(run_id, None)
                dirty.add(w.boot_id)
        for run in found.values():
            self._apply(run, dirty)

    def _diff(self, now, before: dict, boots) -> dict | None:
        rows, gone = [], []
        for boot_id in boots:
            w = self.workers.get(boot_id)
            row = w.row(now) if w is not None and w.visible(self.start) else None
            if row is None:
                self.workers.pop(boot_id, None)  # not visible: it holds nothing
                if self.sent.pop(boot_id, None) is not None or boot_id in before:
                    gone.append(boot_id)
                continue
            if before.get(boot_id) == row and boot_id in self.sent:
                continue
            self.sent[boot_id] = row
            rows.append(row)
        if not rows and not gone:
            return None
        self.version += 1
        rows.sort(key=lambda r: r["last_seen"], reverse=True)
        return {"now": now, "workers": rows, "gone": sorted(gone), "version": self.version}


def workers_seen(now=None) -> dict:
    """`GET /api/v1/workers`: one load (two bounded reads)."""
    tracker = Tracker()
    tracker.load(now, by_minute=False)
    return tracker.snapshot(now)
