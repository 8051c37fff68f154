"""Runs with known timestamps for the browser tests of durations and the timeline: a store whose
clock the test moves (claims hold long leases so a submission minutes later on that clock is not
stale), every call made on the store thread, and the page's duration rule in Python."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.conftest import Clock, completed, make_graph
from workcenter import services
from workcenter.models import Event, Run, WorkItem

LONG_LEASE_MS = 10 * 3600 * 1000


def format_duration(ms: float) -> str:
    """common.js formatDuration, for the expected texts."""
    s = max(0, int(ms // 1000))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {(s % 3600) // 60:02d} m"
    return f"{s // 86400} d {(s % 86400) // 3600} h"


def ms_between(a: datetime, b: datetime) -> float:
    return (b - a) / timedelta(milliseconds=1)


class TimedStore:
    """Service calls at the clock's time, on the store thread. The clock starts `ago` before the
    real time, so that every stamp lies in the browser's past."""

    def __init__(self, bg, ago: timedelta = timedelta(hours=1)):
        start = (datetime.now(timezone.utc) - ago).replace(microsecond=0)
        self.clock = Clock(start)
        self.bg = bg

    def at(self, seconds: float) -> datetime:
        """Move the clock to `seconds` after its start (never backwards)."""
        target = self.start + timedelta(seconds=seconds)
        assert target >= self.clock.t, "the clock only moves forward"
        self.clock.t = target
        return target

    @property
    def start(self) -> datetime:
        return self._start

    def graph(self, stages, **kw):
        from tests.conftest import Store

        item = self.bg(make_graph, Store(self.clock), stages, **kw)
        self._start = item.created_at  # offsets count from the item's creation
        return item

    def claim(self, item_id, stage, boot="boot-timing-0001"):
        def run():
            claim = services.action_claim(owner_boot_id=boot, lease_ms=LONG_LEASE_MS, now=self.clock())
            assert claim is not None and claim.work_item.pk == item_id and claim.action.stage_id == stage, claim
            return claim
        return self.bg(run)

    def submit(self, claim, result):
        return self.bg(services.run_submit, run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
                       lease_epoch=claim.run.lease_epoch, result=result, now=self.clock())

    def complete(self, claim, **extra):
        return self.submit(claim, completed(**extra))

    def interrupt(self, claim):
        return self.bg(services.run_interrupt, run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
                       lease_epoch=claim.run.lease_epoch, reason="worker stopped", now=self.clock())

    def retry(self, item_id, answer=None):
        return self.bg(services.work_item_retry, item_id=item_id, answer=answer, actor="user:lead", now=self.clock())

    def runs(self, item_id):
        return self.bg(lambda: list(Run.objects.filter(work_item_id=item_id).order_by("started_at")))

    def item(self, item_id):
        return self.bg(WorkItem.objects.get, pk=item_id)

    def events(self, item_id):
        return self.bg(lambda: list(Event.objects.filter(work_item_id=item_id).order_by("id")))


def console_errors(page) -> list[str]:
    """Collect the page's console errors (script errors are the page fixture's)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def box(locator, tries: int = 40) -> dict:
    """The locator's bounding box; retried while a live re-render swaps the element."""
    for _ in range(tries):
        b = locator.bounding_box()
        if b:
            return b
        locator.page.wait_for_timeout(50)
    raise AssertionError(f"not visible: {locator}")
