"""A run's log: ordered chunks of its output, appended by the run's worker under its lease.

An append is a worker call like progress: the (run_id, owner_boot_id, lease_epoch) triple with a
live lease (DOMAIN §6.1; `load_lease` locks the run's rows), and a failed fence writes nothing.
The log's head (`RunLog`) numbers the chunks; its update is guarded by the number the append read
(`RUN_LOG_AT_SEQ`). Past the per-run cap (`WORKCENTER_RUN_LOG_MAX_BYTES`) the oldest chunks are
deleted in the same transaction and the head counts what went. A log is no event: it is not in
the event stream and moves no status; after the commit its followers (the item pages that show
the run, dashboard/stream/run_log_follow.py) are told it grew.
"""
from __future__ import annotations

from datetime import datetime, timezone

from django.conf import settings

from .. import db
from ..db.guards import RUN_LOG_AT_SEQ
from ..errors import InvalidInput
from ..events import publish_run_log_on_commit
from ..models import RunLog, RunLogChunk
from .common import load_lease, resolve_now, store_transaction
from .runs import check_triple

STREAMS = ("stdout", "stderr", "worker")
MAX_CHUNK_CHARS = 65_536  # one chunk; a line longer than this arrives as several
MAX_CHUNKS = 500  # one append


def clean_chunks(chunks) -> list[dict]:
    """The chunks of an append as stored: {stream, text, at}. NUL, which no database stores in
    text, becomes U+FFFD (a command's output may hold any byte; the worker decodes it)."""
    if not isinstance(chunks, list) or not 1 <= len(chunks) <= MAX_CHUNKS:
        raise InvalidInput(f"chunks must be a list of 1 to {MAX_CHUNKS} chunks", fields=["chunks"])
    out = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict):
            raise InvalidInput("each chunk is an object {stream, text, at?}", fields=[f"chunks[{i}]"])
        stream, text, at = chunk.get("stream"), chunk.get("text"), chunk.get("at")
        if stream not in STREAMS:
            raise InvalidInput(f"chunks[{i}].stream must be one of {', '.join(STREAMS)}", fields=[f"chunks[{i}].stream"])
        if not isinstance(text, str) or not text or len(text) > MAX_CHUNK_CHARS:
            raise InvalidInput(f"chunks[{i}].text must be 1 to {MAX_CHUNK_CHARS} characters",
                               fields=[f"chunks[{i}].text"])
        if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
            raise InvalidInput(f"chunks[{i}].at must be a time with its zone", fields=[f"chunks[{i}].at"])
        if at is not None:
            try:  # stored in UTC: PostgreSQL refuses an offset past ±15:59, which JSON may carry
                at = at.astimezone(timezone.utc)
            except (OverflowError, ValueError):
                raise InvalidInput(f"chunks[{i}].at is out of range", fields=[f"chunks[{i}].at"]) from None
        out.append({"stream": stream, "text": text.replace("\x00", "\ufffd"), "at": at})
    return out


def run_log_append(*, run_id: str, owner_boot_id: str, lease_epoch: int, chunks: list,
                   now: datetime | None = None) -> RunLog | None:
    """Append `chunks` to the run's log, in order, numbered after the last; then drop the oldest
    chunks while the log keeps more than the cap. Returns the log's head, or None when the fence
    (a live lease of this owner and epoch) fails, in which case nothing is written."""
    check_triple(run_id, owner_boot_id, lease_epoch)
    cleaned = clean_chunks(chunks)
    with store_transaction():
        now = resolve_now(now)
        lease, _ = load_lease(run_id, owner_boot_id, lease_epoch, now, require_live=True)
        if lease is None:
            return None
        log = RunLog.objects.filter(run_id=run_id).first()
        if log is None:
            log = RunLog(run_id=run_id, updated_at=now)
            log.save(force_insert=True)  # under the run's lock: no other append of this run is here
        first = log.next_seq
        rows = [RunLogChunk(run_id=run_id, seq=first + i, stream=c["stream"], at=c["at"] or now, text=c["text"],
                            size=len(c["text"].encode("utf-8", "surrogatepass"))) for i, c in enumerate(cleaned)]
        RunLogChunk.objects.bulk_create(rows)
        kept = log.kept_bytes + sum(r.size for r in rows)
        dropped_bytes, dropped_chunks = _drop_oldest(run_id, kept)
        values = {"next_seq": first + len(rows), "kept_bytes": kept - dropped_bytes,
                  "dropped_bytes": log.dropped_bytes + dropped_bytes,
                  "dropped_chunks": log.dropped_chunks + dropped_chunks, "updated_at": now}
        db.update(RUN_LOG_AT_SEQ.row(run_id, first), values)
        for key, value in values.items():
            setattr(log, key, value)
        publish_run_log_on_commit(run_id, log.next_seq)
        return log


def _drop_oldest(run_id: str, kept: int) -> tuple[int, int]:
    """Delete the run's oldest chunks until at most the cap is kept: (bytes, chunks) deleted."""
    cap = settings.WORKCENTER_RUN_LOG_MAX_BYTES
    if kept <= cap:
        return 0, 0
    over, pks, size = kept - cap, [], 0
    for pk, chunk_size in RunLogChunk.objects.filter(run_id=run_id).order_by("seq").values_list("pk", "size").iterator():
        if size >= over:
            break
        pks.append(pk)
        size += chunk_size
    RunLogChunk.objects.filter(pk__in=pks).delete()
    return size, len(pks)
