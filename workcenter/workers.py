"""The workers seen lately (the dashboard's Workers page, `GET /api/v1/workers`), from their runs.

A worker is known by the boot id its runs carry; nothing else is stored about it. Seen in the last
hour: it holds a run now, or one of its runs started or ended in the last hour. For each: the runs
it holds (item, stage, lease epoch, when the lease was last renewed and how long it is), the runs it
finished and failed in the last hour, and when it was last seen (its latest start, renewal or end).

`renewing` is False when one of its held runs has gone more than half its lease without a renewal
(a worker renews every lease/3: a live one never gets there; a stopped or hung one does within half
a lease) — the page computes the same from the timestamps with its own clock, so it marks a worker
the moment that happens, between two reads.
"""
from __future__ import annotations

from datetime import timedelta

from django.db.models import Q

from . import clock
from .choices import RunStatus
from .models import Run

WINDOW = timedelta(hours=1)
FAILED = (RunStatus.FAILED, RunStatus.RETRYABLE, RunStatus.INTERRUPTED)


def workers_seen(now=None) -> dict:
    now = now or clock.now()
    since = now - WINDOW
    runs = (Run.objects.filter(Q(status=RunStatus.RUNNING) | Q(started_at__gte=since) | Q(ended_at__gte=since))
            .select_related("work_item", "action")
            .only("id", "owner_boot_id", "status", "lease_epoch", "started_at", "ended_at", "expires_at", "renewed_at",
                  "work_item__id", "work_item__title", "action__id", "action__stage_id", "action__type"))
    workers: dict[str, dict] = {}
    for run in runs:
        w = workers.setdefault(run.owner_boot_id, {"boot_id": run.owner_boot_id, "held": [], "finished_1h": 0,
                                                   "failed_1h": 0, "last_seen": None, "renewing": True})
        renewed = run.renewed_at or run.started_at
        seen = max(t for t in (run.started_at, renewed, run.ended_at) if t is not None)
        w["last_seen"] = seen if w["last_seen"] is None else max(w["last_seen"], seen)
        if run.status == RunStatus.RUNNING:
            lease_ms = max(0, int((run.expires_at - renewed).total_seconds() * 1000))
            w["held"].append({"run_id": run.pk, "work_item_id": run.work_item.pk, "title": run.work_item.title,
                              "stage_id": run.action.effective_stage_id, "lease_epoch": run.lease_epoch,
                              "renewed_at": renewed, "expires_at": run.expires_at, "lease_ms": lease_ms})
            if (now - renewed).total_seconds() * 1000 > lease_ms / 2:
                w["renewing"] = False
        elif run.ended_at is not None and run.ended_at >= since:
            if run.status == RunStatus.COMPLETED:
                w["finished_1h"] += 1
            elif run.status in FAILED:
                w["failed_1h"] += 1
    out = sorted(workers.values(), key=lambda w: w["last_seen"], reverse=True)
    for w in out:
        w["held"].sort(key=lambda h: h["renewed_at"])
    return {"now": now, "workers": out}
