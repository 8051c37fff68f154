"""Reading a run's log (services/run_logs.py writes it): a page of chunks after a number (following
the log as it grows), before one (older output, read on scrolling up), or its end (where a
finished run's log opens); and the whole log as text (the download)."""
from __future__ import annotations

from typing import Iterator

from .errors import NotFound
from .models import Run, RunLog, RunLogChunk

PAGE = 200
MAX_PAGE = 1000


def _run(run_id: str) -> Run:
    run = Run.objects.filter(pk=run_id).only("id", "status", "work_item_id", "action_id").first()
    if run is None:
        raise NotFound(f"no run has the id {run_id}", extra={"id": run_id})
    return run


def run_log_page(run_id: str, *, after: int | None = None, before: int | None = None, limit: int = PAGE) -> dict:
    """Up to `limit` chunks in order: those numbered above `after` (and below `before`, if given), or the last ones below
    `before`, or (neither) the last ones of the log. With what the log dropped, and whether
    older chunks are kept (`older`: read them with `before` = the first chunk's number)."""
    run = _run(run_id)
    limit = max(1, min(MAX_PAGE, limit))
    chunks = RunLogChunk.objects.filter(run_id=run_id)
    if after is not None:
        window = chunks.filter(seq__gt=after) if before is None else chunks.filter(seq__gt=after, seq__lt=before)
        page = list(window.order_by("seq")[:limit])
    else:
        below = chunks if before is None else chunks.filter(seq__lt=before)
        page = list(below.order_by("-seq")[:limit])[::-1]
    head = RunLog.objects.filter(run_id=run_id).first()
    first = page[0].seq if page else (after + 1 if after is not None else before or 1)
    return {
        "run_id": run.pk, "work_item_id": run.work_item_id, "action_id": run.action_id, "run_status": run.status,
        "chunks": [{"seq": c.seq, "stream": c.stream, "at": c.at, "text": c.text} for c in page],
        "next_seq": head.next_seq if head else 1,
        "kept_bytes": head.kept_bytes if head else 0,
        "dropped_bytes": head.dropped_bytes if head else 0,
        "dropped_chunks": head.dropped_chunks if head else 0,
        "older": chunks.filter(seq__lt=first).exists(),
    }


def run_log_text(run_id: str) -> Iterator[str]:
    """The whole log kept, as text: a line saying what was dropped first, then every chunk."""
    _run(run_id)
    head = RunLog.objects.filter(run_id=run_id).first()
    if head is not None and head.dropped_chunks:
        yield (f"[{head.dropped_chunks} older chunks ({head.dropped_bytes} bytes) were dropped: "
               f"the log keeps its last {head.kept_bytes} bytes]\n")
    for text in RunLogChunk.objects.filter(run_id=run_id).order_by("seq").values_list("text", flat=True).iterator():
        yield text
