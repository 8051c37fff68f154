"""Reading a run's log (services/run_logs.py writes it): a page of chunks after a number (following
the log as it grows), before one (older output, read on scrolling up), or its end (where a
finished run's log opens); the whole log as text (the download); and the search across runs
(`search`: which runs printed a text, with the lines around each match)."""
from __future__ import annotations

from datetime import datetime
from typing import Iterator

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from . import db
from .errors import InvalidInput, NotFound
from .models import Action, Run, RunLog, RunLogChunk

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


# --- search ---------------------------------------------------------------------------------------

SEARCH_MIN, SEARCH_MAX = 3, 200  # characters of a search (the trigram indexes need three)
SEARCH_RUNS = 20  # runs in an answer, by default
SEARCH_CHUNKS_PER_RUN = 5  # chunks read per run answered, at most: their matching lines are shown
MATCHES_PER_RUN = 5
NEIGHBOURS = 2  # lines shown before and after a matching line (from the chunks around it too)
LINE_CHARS = 500  # a line shown is cut here


def _match_param(q: str) -> str:
    """The parameter of `run_log_match`: a LIKE pattern (PostgreSQL) or an FTS5 phrase (SQLite)."""
    if connection.vendor == "postgresql":
        return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return '"' + q.replace('"', '""') + '"'


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…"


def _matches(chunk, q: str, previous: str = "", following: str = "") -> list[dict]:
    """The lines of a chunk that hold `q` (case-insensitive), each with its neighbours: the lines
    around it, in the chunk or the run's chunks just before and after it (`previous`, `following`)."""
    before_lines, own, after_lines = previous.splitlines(), chunk.text.splitlines(), following.splitlines()
    lines = before_lines + own + after_lines
    folded = q.casefold()
    out = []
    for i in range(len(before_lines), len(before_lines) + len(own)):
        if folded in lines[i].casefold():
            out.append({"seq": chunk.seq, "stream": chunk.stream, "at": chunk.at, "line": _cut(lines[i]),
                        "before": [_cut(x) for x in lines[max(0, i - NEIGHBOURS):i]],
                        "after": [_cut(x) for x in lines[i + 1:i + 1 + NEIGHBOURS]]})
    if not out:  # the text spans a line break (never within one line): the chunk's first line
        i = len(before_lines)
        out.append({"seq": chunk.seq, "stream": chunk.stream, "at": chunk.at, "line": _cut(own[0] if own else ""),
                    "before": [_cut(x) for x in lines[max(0, i - NEIGHBOURS):i]],
                    "after": [_cut(x) for x in lines[i + 1:i + 1 + NEIGHBOURS]]})
    return out


def _neighbour_texts(chunks) -> dict[tuple[str, int], str]:
    """The texts of the chunks just before and after each of `chunks` in its run: one read."""
    pairs = {(c.run_id, c.seq + d) for c in chunks for d in (-1, 1)} - {(c.run_id, c.seq) for c in chunks}
    if not pairs:
        return {}
    where = Q()
    for run_id, seq in pairs:
        where |= Q(run_id=run_id, seq=seq)
    return {(r, n): t for r, n, t in RunLogChunk.objects.filter(where).values_list("run_id", "seq", "text")}


def search(q: str, *, statuses: list[str] | None = None, workflow: str | None = None,
           since: datetime | None = None, until: datetime | None = None, limit: int = SEARCH_RUNS) -> dict:
    """The runs whose logs hold `q` (case-insensitive), newest match first, filtered like the list
    (the item's status and workflow) and by when the text was printed: each with its item, stage
    and the matching lines with their neighbours. One indexed read finds the chunks (the trigram
    index of either database, `run_log_match`), two more their runs' items and actions."""
    q = q.strip() if isinstance(q, str) else ""
    if not SEARCH_MIN <= len(q) <= SEARCH_MAX:
        raise InvalidInput(f"q must be {SEARCH_MIN} to {SEARCH_MAX} characters", fields=["q"])
    chunks = RunLogChunk.objects.filter(id__in=RawSQL(db.sql("run_log_match"), [_match_param(q)]))
    if statuses:
        chunks = chunks.filter(run__work_item__status__in=statuses)
    if workflow:
        chunks = chunks.filter(run__work_item__workflow_template=workflow)
    if since is not None:
        chunks = chunks.filter(at__gte=since)
    if until is not None:
        chunks = chunks.filter(at__lt=until)
    wanted = limit * SEARCH_CHUNKS_PER_RUN
    found = list(chunks.select_related("run", "run__work_item").order_by("-id")[:wanted + 1])
    truncated = len(found) > wanted
    runs: dict[str, dict] = {}
    shown = found[:wanted]
    texts = {(c.run_id, c.seq): c.text for c in shown}
    texts.update(_neighbour_texts(shown))
    for chunk in shown:
        entry = runs.get(chunk.run_id)
        if entry is None:
            if len(runs) == limit:
                truncated = True
                continue
            run, item = chunk.run, chunk.run.work_item
            entry = runs[chunk.run_id] = {
                "run_id": run.pk, "run_status": run.status, "started_at": run.started_at, "action_id": run.action_id,
                "stage_id": None, "work_item": {"id": item.pk, "title": item.title, "status": item.status},
                "matches": []}
        if len(entry["matches"]) < MATCHES_PER_RUN:
            around = texts.get((chunk.run_id, chunk.seq - 1), ""), texts.get((chunk.run_id, chunk.seq + 1), "")
            entry["matches"].extend(_matches(chunk, q, *around)[:MATCHES_PER_RUN - len(entry["matches"])])
    stages = {a.pk: a.effective_stage_id for a in Action.objects.filter(pk__in={e["action_id"] for e in runs.values()})}
    for entry in runs.values():
        entry["stage_id"] = stages.get(entry["action_id"])
        entry["matches"].sort(key=lambda m: m["seq"])
    return {"q": q, "runs": list(runs.values()), "truncated": truncated}
