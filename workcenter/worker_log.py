"""A run's log on its way from the worker to the store (`POST /runs/{id}/log`, API reference).

An executor writes text as it comes (`Report.log`, or the shell executor's lines); a `LogSender`
per run queues it and sends it in batches from a thread of its own, at most one request per
`FLUSH_S` however fast the command prints, in the order written. Consecutive text of one stream
written between two sends travels as one chunk (a chunk's time is when its first text was
written), split at the store's chunk size. A send refused as stale (the lease is gone) ends the
sender: nothing more is sent for that run. One that fails at the connection is tried again, the
batch kept in front of what came after it; what waits is bounded (`MAX_PENDING_BYTES`, the oldest
is dropped first and a worker line says how much). When the run ends the worker `close`s the
sender, which sends what is left before the run's outcome is submitted (for as long as the store
keeps taking it).

This module imports no Django code (see workcenter/worker.py).
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Callable

logger = logging.getLogger("workcenter.worker")

FLUSH_S = 0.25  # at most four appends per second per run
MAX_CHUNK_CHARS = 65_536  # the store's chunk limit
MAX_BATCH_CHUNKS = 500  # the store's limit of one append
MAX_BATCH_CHARS = 256 * 1024  # keeps a request well under the server's body limit (1 MiB by default)
MAX_PENDING_BYTES = 4 * 1024 * 1024  # what may wait while the store is out of reach
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0
STREAMS = ("stdout", "stderr", "worker")


def _cut_at_line(text: str, room: int, *, whole: bool = False) -> int:
    """How much of `text` goes into a chunk with `room` characters left: all of it when it fits,
    else up to its last line end within the room, so that lines keep to one chunk (a line longer
    than a chunk is cut at the chunk's size). `whole`: the chunk ends a line, so it may take none
    of `text` (a new chunk then starts) rather than a line's beginning."""
    if len(text) <= room:
        return len(text)
    end = text.rfind("\n", 0, room) + 1
    return end if end or whole else room


class LogSender:
    """The log of one run, sent by `store.log(run, chunks)`: True when appended, False when the
    fence refused it (the lease is gone)."""

    def __init__(self, store, run: dict, *, transient: Callable[[BaseException], bool], flush_s: float = FLUSH_S,
                 on_thread_end: Callable[[], None] | None = None):
        self.store, self.run, self.flush_s = store, run, flush_s
        self._transient = transient  # the worker's rule: a failure worth trying again
        self._send = getattr(store, "log", None)  # a store without logs: what is written is dropped
        self._on_thread_end = on_thread_end
        self._pending: list[dict] = []  # {stream, text, at}, in order
        self._pending_chars = 0
        self._dropped_chars = 0  # dropped while waiting (the bound), not yet said in the log
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._closing = False
        self.stopped = self._send is None  # nothing more is sent (lease lost, or no log route)
        self._thread: threading.Thread | None = None
        self.sent_chunks = 0
        self.requests = 0

    # --- writing --------------------------------------------------------------------------------
    def write(self, text: str, stream: str = "worker") -> bool:
        """Queue `text` (any size: split at the chunk limit). False once the run's log sends no more."""
        if self.stopped or self._closing:
            return False
        if not isinstance(text, str) or not text:
            return True
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {', '.join(STREAMS)}")
        text = text.replace("\x00", "\ufffd")
        now = datetime.now(timezone.utc)
        with self._lock:
            last = self._pending[-1] if self._pending else None
            if last is not None and last["stream"] == stream and len(last["text"]) < MAX_CHUNK_CHARS:
                joined = _cut_at_line(text, MAX_CHUNK_CHARS - len(last["text"]), whole=last["text"].endswith("\n"))
                last["text"] += text[:joined]
                self._pending_chars += joined
                text = text[joined:]
            while text:
                cut = _cut_at_line(text, MAX_CHUNK_CHARS)
                self._pending.append({"stream": stream, "text": text[:cut], "at": now})
                self._pending_chars += cut
                text = text[cut:]
            self._bound()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"log-{self.run['id'][:8]}", daemon=True)
                self._thread.start()
            self._ready.notify()
        return True

    def _bound(self) -> None:
        """Drop the oldest waiting text past MAX_PENDING_BYTES (characters, near enough), under the lock."""
        while self._pending_chars > MAX_PENDING_BYTES and len(self._pending) > 1:
            first = self._pending.pop(0)
            self._pending_chars -= len(first["text"])
            self._dropped_chars += len(first["text"])

    # --- sending --------------------------------------------------------------------------------
    def _take(self) -> list[dict]:
        """The next batch, under the lock: the first chunks within the batch limits, after a worker
        line saying what the bound dropped, if anything."""
        batch, chars = [], 0
        while self._pending and len(batch) < MAX_BATCH_CHUNKS and (
                not batch or chars + len(self._pending[0]["text"]) <= MAX_BATCH_CHARS):
            chunk = self._pending.pop(0)
            chars += len(chunk["text"])
            batch.append(chunk)
        self._pending_chars -= chars
        if self._dropped_chars:
            note = f"[the worker dropped {self._dropped_chars} characters of output it could not send in time]\n"
            batch.insert(0, {"stream": "worker", "text": note, "at": datetime.now(timezone.utc)})
            self._dropped_chars = 0
        return batch

    def _put_back(self, batch: list[dict]) -> None:
        with self._lock:
            self._pending[:0] = batch
            self._pending_chars += sum(len(c["text"]) for c in batch)
            self._bound()

    def _loop(self) -> None:
        delay = RETRY_FIRST_S
        last_send = 0.0
        try:
            while True:
                with self._lock:
                    while not self._pending and not self._dropped_chars and not self._closing and not self.stopped:
                        self._ready.wait()
                    if self.stopped or (self._closing and not self._pending and not self._dropped_chars):
                        return
                    pause = last_send + self.flush_s - time.monotonic()
                    if pause > 0 and not self._closing:
                        self._ready.wait(pause)  # more text joins the batch meanwhile
                        continue
                    batch = self._take()
                last_send = time.monotonic()
                if self._deliver(batch):
                    delay = RETRY_FIRST_S
                    continue
                if self.stopped:
                    return
                self._put_back(batch)
                with self._lock:
                    if self._closing and time.monotonic() >= self._progress_at + self._patience:
                        return  # closing, and the store has taken nothing for `patience` seconds
                    self._ready.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        finally:
            if self._on_thread_end is not None:
                self._on_thread_end()

    _progress_at = 0.0  # monotonic time of the last batch the store took (or of the close)
    _patience = 10.0

    def _deliver(self, batch: list[dict]) -> bool:
        """Send one batch: True when stored (or refused for good, and dropped), False to try again."""
        self.requests += 1
        try:
            appended = self._send(self.run, batch)
        except Exception as exc:
            if self._transient(exc):
                logger.warning("log of run %s: append failed (%s: %s); trying again", self.run["id"],
                               type(exc).__name__, exc)
                return False
            status = getattr(exc, "status", None)
            if status in (404, 405):  # a server without run logs: this worker's logs go nowhere
                logger.warning("log of run %s: the server does not store run logs (%s)", self.run["id"], exc)
                self.stopped = True
                return False
            logger.error("log of run %s: append refused (%s); %d chunk(s) dropped", self.run["id"], exc, len(batch))
            return True
        if not appended:  # the lease is gone: nothing more is sent for this run
            logger.info("log of run %s: the lease is gone, the log sends no more", self.run["id"])
            self.stopped = True
            return False
        self.sent_chunks += len(batch)
        self._progress_at = time.monotonic()
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Send what is left, then end the thread: for as long as the store keeps taking batches (a
        backlog behind a slow server is sent whole), giving up once it has taken nothing for
        `timeout` seconds (out of reach: the rest is lost with the run's end)."""
        with self._lock:
            self._closing = True
            self._patience = timeout
            self._progress_at = time.monotonic()
            thread = self._thread
            self._ready.notify()
        while thread is not None and thread.is_alive():
            thread.join(0.5)
            if time.monotonic() > self._progress_at + timeout + 1.0:  # one request may hang that long
                self.abandon()
                thread.join(1.0)
                return

    def abandon(self) -> None:
        """The run's lease is gone: send nothing more."""
        with self._lock:
            self.stopped = True
            self._pending.clear()
            self._ready.notify()


class Report:
    """What an executor is given: call it with a progress dict (`report({...})`, True while the run
    holds its lease), and `report.log(text, stream)` to append output to the run's log (stream
    "stdout", "stderr" or "worker", the default; False once the log sends no more)."""

    def __init__(self, progress: Callable[[dict], bool], sender: LogSender):
        self._progress = progress
        self.sender = sender

    def __call__(self, progress: dict) -> bool:
        return self._progress(progress)

    def log(self, text: str, stream: str = "worker") -> bool:
        return self.sender.write(text, stream)


def log_to(report, text: str, stream: str = "worker") -> bool:
    """`report.log(text, stream)` for an executor handed any report callable (a test's may have no log)."""
    log = getattr(report, "log", None)
    return bool(log(text, stream)) if log is not None else False
