"""The worker loop (DOMAIN §13): recovery, claims, lease renewal, progress, submission, clean stop.

The loop talks to the store through a `WorkerStore`: `HttpStore` (here) calls the worker protocol
of API.md §3 on a remote server, `workcenter.local_store.LocalStore` calls the service layer in this
process (same database). Both return the API's JSON shapes, so executors see the same task either
way. This module imports no Django code: a worker against a remote server needs no database.
"""
from __future__ import annotations

import http.client
import json
import logging
import random
import re
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from .constants import RESPONSE_CAP
from .worker_log import LogSender, Report

logger = logging.getLogger("workcenter.worker")

STALE_PATTERN = re.compile(r"stale|cancelled|already finished", re.IGNORECASE)

# Answers that say "not now" rather than "no": a proxy without its server (502/503/504), a request
# timeout (408) and too many requests (429). A submission refused with one of these is sent again.
TRANSIENT_STATUSES = frozenset({408, 429, 502, 503, 504})
SUBMIT_RETRY_FIRST = 0.2  # seconds before the first resend of a submission; doubles up to
SUBMIT_RETRY_MAX = 5.0
CLAIM_BACKOFF_DEFAULT = 1.0  # seconds after a 429 on /claims without Retry-After
CLAIM_BACKOFF_MAX = 30.0


class StoreError(Exception):
    """The store refused a call: `code` the API's error code, `status` the HTTP status (None
    beside the database), `retry_after` the seconds of a Retry-After header."""

    def __init__(self, message: str, code: str = "error", status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.code = code
        self.status = status
        self.retry_after = retry_after


def transient(exc: BaseException) -> bool:
    """A failure at the connection (the request may or may not have been applied), or an answer
    of TRANSIENT_STATUSES: the call can be made again."""
    if isinstance(exc, StoreError):
        return exc.status in TRANSIENT_STATUSES
    return isinstance(exc, (OSError, http.client.HTTPException))  # ConnectionError, timeouts included


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:  # an HTTP date: not worth parsing, the default applies
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class WorkerStore(Protocol):
    def recover(self, boot_id: str) -> int: ...
    def claim(self, boot_id: str, lease_ms: int, wait_ms: int = 0) -> dict | None: ...
    def renew(self, run: dict, lease_ms: int) -> bool: ...
    def progress(self, run: dict, progress: dict) -> bool: ...
    def log(self, run: dict, chunks: list[dict]) -> bool: ...
    def submit(self, run: dict, result: dict, claim_next: tuple[str, int] | None = None) -> dict: ...
    def interrupt(self, run: dict, reason: str, final_progress: dict | None) -> bool: ...
    def thread_done(self) -> None: ...


def _dropped(sock) -> bool:
    """An idle keep-alive socket that is readable was closed by the server (or is out of step)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class HttpStore:
    """The worker protocol over HTTP (API.md §3) with a bearer token.

    Calls reuse keep-alive connections (a connection costs the server more than the call): idle
    ones wait in a small pool shared by the loop and run threads, one call per connection at a
    time. Like urllib3, a pooled connection the server has closed is noticed before it is reused
    (its socket turns readable), so a POST is never sent twice."""

    MAX_IDLE = 8

    def __init__(self, base_url: str, token: str, timeout: float = 30.0):
        self.base = base_url.rstrip("/")
        if not self.base.endswith("/api/v1"):
            self.base += "/api/v1"
        self.token = token
        self.timeout = timeout
        parts = urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._address = (parts.hostname, parts.port)
        self._path = parts.path
        self.scope = self.base  # what a journal entry belongs to (workcenter.worker_journal)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json"}
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.claim_next = True  # the server takes `claim_next` on a submission (until it refuses it)
        self.long_poll = True  # the server takes `wait_ms` on a claim (until it refuses it)
        self._waiting: set = set()  # connections of long-poll claims in flight

    def _acquire(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.sock is not None and not _dropped(conn.sock):
                    return conn
                conn.close()
        host, port = self._address
        return self._connection_class(host, port, timeout=self.timeout)

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _call(self, path: str, body: dict, waiting: bool = False) -> tuple[int, Any]:
        data = json.dumps(body).encode("utf-8")
        conn = self._acquire()
        if waiting:
            with self._lock:
                self._waiting.add(conn)
        try:
            conn.request("POST", self._path + path, body=data, headers=self._headers)
            resp = conn.getresponse()
            raw = resp.read()
        except BaseException:
            conn.close()
            raise
        finally:
            if waiting:
                with self._lock:
                    self._waiting.discard(conn)
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        if resp.status >= 400:
            try:
                payload = json.loads(raw or b"{}")
            except ValueError:
                payload = {}
            if not isinstance(payload, dict):
                payload = {}
            raise StoreError(payload.get("message") or f"HTTP {resp.status} {resp.reason}",
                             payload.get("code") or str(resp.status), resp.status,
                             _retry_after(resp.getheader("Retry-After")))
        return resp.status, (orjson.loads(raw) if raw else None)  # claim/submit bodies are ~25 KB

    @staticmethod
    def _fence(run):
        return {"owner_boot_id": run["owner_boot_id"], "lease_epoch": run["lease_epoch"]}

    def recover(self, boot_id):
        return self._call("/recoveries", {"owner_boot_id": boot_id, "expired_only": True})[1]["recovered"]

    def claim(self, boot_id, lease_ms, wait_ms=0):
        """Claim one action; with `wait_ms` a long poll (the server answers when an action becomes
        claimable, or 204 at the deadline). A server that does not know `wait_ms` refuses it with
        422 before doing anything: the claim is sent again without it, and the worker polls from
        then on (`long_poll` False)."""
        body = {"owner_boot_id": boot_id, "lease_ms": lease_ms}
        if wait_ms and self.long_poll:
            try:
                status, answer = self._call("/claims", {**body, "wait_ms": wait_ms}, waiting=True)
                return None if status == 204 else answer
            except StoreError as exc:
                if exc.code != "invalid_input" or "wait_ms" not in str(exc):
                    raise
                self.long_poll = False
                logger.info("the server does not know wait_ms: polling for claims instead")
        status, answer = self._call("/claims", body)
        return None if status == 204 else answer

    def abort_waits(self) -> None:
        """End the long-poll claims in flight now (the worker is stopping): their sockets are shut."""
        with self._lock:
            waiting = list(self._waiting)
        for conn in waiting:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def renew(self, run, lease_ms):
        try:
            self._call(f"/runs/{run['id']}/renew", {**self._fence(run), "lease_ms": lease_ms})
            return True
        except StoreError as exc:
            if exc.code == "stale_run":
                return False
            raise

    def progress(self, run, progress):
        try:
            self._call(f"/runs/{run['id']}/progress", {**self._fence(run), **progress})
            return True
        except StoreError as exc:
            if exc.code == "stale_run":
                return False
            raise

    def log(self, run, chunks):
        """Append chunks ({stream, text, at: an aware datetime}) to the run's log; False when stale."""
        body = {**self._fence(run), "chunks": [{"stream": c["stream"], "text": c["text"], "at": c["at"].isoformat()}
                                               for c in chunks]}
        try:
            self._call(f"/runs/{run['id']}/log", body)
            return True
        except StoreError as exc:
            if exc.code == "stale_run":
                return False
            raise

    def submit(self, run, result, claim_next=None):
        """Submit; with `claim_next` (boot id, lease ms) the answer's `next` is the next claim, made
        in the same request. A server that does not know `claim_next` refuses it with 422 before
        doing anything: the submission is sent again without it, and from then on never with it
        (the worker's loop claims on its own, as it always did)."""
        # The store keeps the first 65,536 characters of a response (DOMAIN §12.3): sending more
        # would only risk the server's body limit (a 413) and lose the outcome with it.
        response = result.get("response")
        if isinstance(response, str) and len(response) > RESPONSE_CAP:
            result = {**result, "response": response[:RESPONSE_CAP]}
        body = {**self._fence(run), **result}
        if claim_next is not None and self.claim_next:
            try:
                return self._call(f"/runs/{run['id']}/submit",
                                  {**body, "claim_next": {"owner_boot_id": claim_next[0], "lease_ms": claim_next[1]}})[1]
            except StoreError as exc:
                if exc.code != "invalid_input" or "claim_next" not in str(exc):
                    raise
                self.claim_next = False
                logger.info("the server does not know claim_next: claiming with separate requests")
        return self._call(f"/runs/{run['id']}/submit", body)[1]

    def interrupt(self, run, reason, final_progress):
        body = {**self._fence(run), "reason": reason}
        if final_progress is not None:
            body["final_progress"] = final_progress
        return self._call(f"/runs/{run['id']}/interrupt", body)[1]["interrupted"]

    def thread_done(self) -> None:
        """Nothing to release per thread: the pool outlives the worker's threads."""


class Executor(Protocol):
    """`report(progress)` reports progress; `report.log(text, stream)` appends to the run's log
    (workcenter/worker_log.py)."""
    def execute(self, task: dict, report: Report, stop: threading.Event) -> dict: ...


class RunAborted(Exception):
    """Raised by executors when `stop` is set; the run then submits nothing."""


@dataclass
class ActiveRun:
    task: dict
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    last_progress: dict | None = None
    abort_reason: str | None = None
    settling: bool = False  # its result is in hand and being submitted: a stop leaves it alone
    lease_lost: bool = False  # a renewal was refused as stale: the lease is gone
    kick: threading.Event = field(default_factory=threading.Event)  # ends a submission's backoff early
    log: LogSender | None = None  # the run's log on its way to the store, while it executes
    # when the store last confirmed the lease (the claim's answer, a renewal), monotonic: one lease
    # after it the lease has ended on the server too, and a submission can no longer be applied
    confirmed_at: float = field(default_factory=time.monotonic)


class Worker:
    """One worker process: a boot id, a tick loop and up to `concurrency` runs in threads.

    A finished run's submission is sent until the store answers it: a failure at the connection
    (or a 502/503/504/408/429) is retried with backoff, the lease renewed meanwhile, until the
    store accepts it, refuses it, or a renewal says the lease is gone. With a `journal`
    (workcenter.worker_journal) it is on disk until then, and a worker that starts sends what
    an earlier process left there before it recovers or claims."""

    def __init__(self, store: WorkerStore, executor: Executor, *, concurrency: int = 3, lease_ms: int = 60_000,
                 poll_ms: int = 2_000, boot_id: str | None = None, wait_ms: int = 20_000, journal=None):
        self.store = store
        self.executor = executor
        self.concurrency = concurrency if isinstance(concurrency, int) and 1 <= concurrency <= 12 else 3
        self.lease_ms = lease_ms
        self.poll_ms = poll_ms
        # a store that long-polls (HttpStore) waits in its claim; otherwise the loop polls every poll_ms
        self.wait_ms = wait_ms if 0 <= wait_ms <= 30_000 else 20_000
        self.boot_id = boot_id or str(uuid.uuid4())
        self.journal = journal
        self.state = "running"
        self.active: dict[str, ActiveRun] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.completed = 0
        self.once = False
        self._next_recovery = 0.0  # monotonic time of the tick's next recovery
        self._claims_after = 0.0  # monotonic time before which the server asked for no claim (429)

    # --- the loop ---------------------------------------------------------------------------
    def status(self) -> dict:
        return {"enabled": self.state == "running", "active_runs": len(self.active), "owner_boot_id": self.boot_id}

    def run_forever(self, *, once: bool = False) -> None:
        logger.info("worker %s started (concurrency %s)", self.boot_id, self.concurrency)
        self.once = once  # one tick: its runs, and no next claims after them
        self._resubmit_journal()
        self._recover()
        while self.state == "running":
            long_polled = self.tick(wait=not once)
            if once:
                self._wait_all()
                break
            # after a long poll that found nothing the next one starts at once (a short pause
            # keeps a misbehaving proxy that answers at once from turning this into a busy loop)
            pause = 0.05 if long_polled else self.poll_ms / 1000
            self.wake.wait(max(pause, self._claims_after - time.monotonic()))
            self.wake.clear()

    def tick(self, wait: bool = False) -> bool:
        """Claim until the worker is full or nothing is claimable; with `wait`, a store that
        long-polls waits in its last claim. True when it did (the loop need not sleep)."""
        if self.state != "running":
            return False
        # recovery (DOMAIN §13's tick) at most once per renewal interval: with one request per
        # action (claim_next) a tick follows every run that settles, and a recovery request each
        # time would double the requests; an expired lease is at least that old anyway
        now = time.monotonic()
        if now >= self._next_recovery:
            self._next_recovery = now + max(1_000, self.lease_ms // 3) / 1000
            self._recover()
        if time.monotonic() < self._claims_after:
            return False
        while self.state == "running" and len(self.active) < self.concurrency:
            wait_ms = self.wait_ms if wait and getattr(self.store, "long_poll", False) else 0
            try:
                task = self.store.claim(self.boot_id, self.lease_ms, wait_ms)
            except Exception as exc:
                if isinstance(exc, StoreError) and exc.status == 429:
                    self._back_off_claims(exc.retry_after)
                elif self.state == "running" and transient(exc):
                    logger.warning("claim failed (%s: %s); trying again", type(exc).__name__, exc)
                elif self.state == "running":
                    logger.exception("claim failed")
                return False
            if task is None:
                return bool(wait_ms) and getattr(self.store, "long_poll", False)
            if self.state != "running":  # claimed as the worker began to stop: give it back
                self._give_back(task["run"])
                return False
            self._start(task)
        return False

    def _back_off_claims(self, retry_after: float | None) -> None:
        """The server has too many claims waiting (429): none before Retry-After seconds (bounded),
        plus jitter so that the workers it turned away do not all come back at once."""
        delay = CLAIM_BACKOFF_DEFAULT if retry_after is None else min(max(retry_after, 0.05), CLAIM_BACKOFF_MAX)
        delay *= random.uniform(1.0, 1.25)
        self._claims_after = time.monotonic() + delay
        logger.debug("the server asked for no claims for %.1f s", delay)

    def _recover(self) -> int:
        try:
            n = self.store.recover(self.boot_id)
        except Exception as exc:
            if transient(exc):  # the store is out of reach: the next tick tries again
                logger.warning("recovery failed (%s: %s)", type(exc).__name__, exc)
            else:
                logger.exception("recovery failed")
            return 0
        if n:
            logger.info("recovered %s run(s)", n)
        return n

    def _start(self, task: dict, *, registered: bool = False) -> None:
        run = task["run"]
        with self.lock:
            if not registered and run["id"] in self.active:  # held already: a store's guess of a lost claim
                return
            active = self.active.get(run["id"]) if registered else None
            if active is None:
                active = self.active[run["id"]] = ActiveRun(task=task)
        self._launch(active, threading.Thread(target=self._execute, args=(active,), name=f"run-{run['id'][:8]}",
                                              daemon=True))

    def _launch(self, active: ActiveRun, thread: threading.Thread) -> None:
        """Start `thread` as `active`'s, under the lock: _wait_all, which joins the threads it reads
        under the lock, never meets one assigned and not yet started (joining that raises)."""
        with self.lock:
            active.thread = thread
            thread.start()

    def _renew_loop(self, active: ActiveRun, done: threading.Event) -> None:
        """Renew every lease/3 until `done`. A renewal that fails at the connection is tried at the
        next interval; one refused as stale ends the run (executing: aborted; submitting: one last
        attempt tells an applied submission from a lost one)."""
        run = active.task["run"]
        interval = max(1_000, self.lease_ms // 3) / 1000
        try:
            while not done.wait(interval):
                try:
                    asked = time.monotonic()
                    ok = self.store.renew(run, self.lease_ms)
                    if ok:
                        active.confirmed_at = asked
                except Exception as exc:
                    if transient(exc) or active.settling:
                        logger.warning("renew of run %s failed (%s: %s); next in %.0f s", run["id"],
                                       type(exc).__name__, exc, interval)
                        continue
                    logger.exception("renew failed")
                    ok = False
                if not ok:
                    with self.lock:
                        active.lease_lost = True
                        if active.log is not None:
                            active.log.abandon()
                        if not active.settling:
                            active.abort_reason = "work_item_lease_lost"
                            active.stop.set()
                    active.kick.set()
                    self._recover()
                    return
        finally:
            self._thread_done()

    def _execute(self, active: ActiveRun) -> None:
        task, run = active.task, active.task["run"]
        done = threading.Event()  # ends the renewals: the run was submitted (or given up)

        def progress(progress: dict) -> bool:
            active.last_progress = dict(progress)
            if active.stop.is_set():
                return False
            try:
                return self.store.progress(run, progress)
            except Exception:
                logger.exception("progress failed")
                return False

        active.log = LogSender(self.store, run, transient=transient, on_thread_end=self._thread_done)
        report = Report(progress, active.log)
        renewer = threading.Thread(target=self._renew_loop, args=(active, done), daemon=True)
        renewer.start()
        following = None  # the next claim, made with the submission (one request per action)
        try:
            result = None
            try:
                result = self.executor.execute(task, report, active.stop)
            except RunAborted:
                result = None
            except Exception as exc:  # an executor crash becomes a retryable/failed outcome
                retryable = getattr(exc, "retryable", True)
                result = {"outcome": "retryable" if retryable else "failed", "error": str(exc) or repr(exc),
                          **(active.last_progress or {})}
            with self.lock:  # from here a stop leaves the run alone: its result is submitted (or journalled)
                active.settling = result is not None and not active.stop.is_set()
            if active.lease_lost:
                active.log.abandon()
            active.log.close(timeout=10.0 if active.settling else 2.0)  # the log is whole before the outcome
            if active.settling:
                following = self._settle(active, result)
        except Exception:
            logger.exception("submit of run %s failed", run["id"])
        finally:
            done.set()
            with self.lock:
                if not active.stop.is_set() or self.state == "running":
                    self.active.pop(run["id"], None)
                if following is not None and following["run"]["id"] in self.active:
                    following = None  # held already (an answer sent again may guess a claim this worker has)
                start = following is not None and self.state == "running"
                if start:  # takes this run's place: never above the concurrency
                    self.active[following["run"]["id"]] = ActiveRun(task=following)
            if start:
                self._start(following, registered=True)
            elif following is not None:  # claimed as the worker began to stop: give it back at once
                self._give_back(following["run"])
            self.wake.set()
            self._thread_done()

    # --- submission until answered ----------------------------------------------------------
    def _settle(self, active: ActiveRun, result: dict, *, journalled: bool = False,
                attempted: threading.Event | None = None) -> dict | None:
        """Submit `result` until the store answers it (journalled first, unless it comes from the
        journal); the entry goes once answered. Returns the answer's next claim, if any."""
        run = active.task["run"]
        if self.journal is not None and not journalled:
            try:
                self.journal.write(run, result)
            except Exception:  # a full disk, a result JSON cannot hold: the submission goes on regardless
                logger.exception("journal entry of run %s could not be written: its result is in memory only", run["id"])
        outcome, answer = self._submit_until_answered(active, result, claim_next=not journalled, attempted=attempted)
        if self.journal is not None:
            try:
                if outcome == "kept":
                    self.journal.release(run["id"])
                else:
                    self.journal.remove(run["id"])
            except OSError:
                logger.exception("journal entry of run %s could not be removed", run["id"])
        if outcome == "accepted":
            self.completed += 1
            return answer.get("next") if isinstance(answer, dict) else None
        if outcome == "refused":
            if isinstance(answer, StoreError) and STALE_PATTERN.search(str(answer)):
                logger.info("submit of run %s refused: %s", run["id"], answer)
            else:
                logger.error("submit of run %s failed: %s", run["id"], answer)
        elif outcome == "lost":
            logger.error("run %s lost its lease before its submission reached the store (%s)", run["id"], answer)
        else:
            logger.info("run %s: the store is out of reach as the worker stops; its result waits in the journal",
                        run["id"])
        return None

    def _submit_until_answered(self, active: ActiveRun, result: dict, *, claim_next: bool,
                               attempted: threading.Event | None) -> tuple[str, Any]:
        """("accepted", answer) | ("refused", error) | ("lost", error): the lease went while the
        store was out of reach | ("kept", error): the worker stops, the journal keeps it."""
        run = active.task["run"]
        delay, attempts = SUBMIT_RETRY_FIRST, 0
        while True:
            attempts += 1
            last = active.lease_lost  # the lease is gone: this attempt only tells applied from stale
            following = (self.boot_id, self.lease_ms) if claim_next and self.state == "running" and not self.once else None
            try:
                answer = self.store.submit(run, result, following)
            except Exception as exc:
                if not transient(exc):
                    return "refused", exc
                if last or time.monotonic() > active.confirmed_at + self.lease_ms / 1000:
                    return "lost", exc  # applied before (its answer lost) or never: the store cannot say now
                if self.state != "running" and self.journal is not None:
                    return "kept", exc
                if attempts == 1 or attempts % 10 == 0:
                    logger.warning("submit of run %s failed (%s: %s); sending it again (attempt %d)", run["id"],
                                   type(exc).__name__, exc, attempts + 1)
                active.kick.wait(delay * random.uniform(0.5, 1.0))
                active.kick.clear()
                delay = min(delay * 2, SUBMIT_RETRY_MAX)
                continue
            finally:
                if attempted is not None:
                    attempted.set()
            if attempts > 1:
                logger.info("submit of run %s accepted at attempt %d", run["id"], attempts)
            return "accepted", answer

    def _resubmit_journal(self) -> None:
        """Send the submissions an earlier process left in the journal, with their stored fences
        (live while their leases are), each on a thread of its own that renews the lease while it
        retries. Recovery runs only after each had its first answer: an entry whose lease expired
        is refused (and dropped), one whose submission the server applied already is answered as
        applied, so each is applied at most once, and a live one is not recovered meanwhile."""
        if self.journal is None:
            return
        try:
            entries = self.journal.orphans()
        except OSError:
            logger.exception("the journal could not be read")
            return
        if entries:
            logger.info("sending %d journalled submission(s) again", len(entries))
        firsts = []
        for entry in entries:
            run = entry["run"]
            active = ActiveRun(task={"run": run}, settling=True)
            first = threading.Event()
            with self.lock:
                self.active[run["id"]] = active
            self._launch(active, threading.Thread(target=self._settle_journalled, args=(active, entry["result"], first),
                                                  name=f"journal-{run['id'][:8]}", daemon=True))
            firsts.append(first)
        for first in firsts:
            first.wait(60)

    def _settle_journalled(self, active: ActiveRun, result: dict, first: threading.Event) -> None:
        run = active.task["run"]
        done = threading.Event()
        threading.Thread(target=self._renew_loop, args=(active, done), daemon=True).start()
        try:
            self._settle(active, result, journalled=True, attempted=first)
        except Exception:
            logger.exception("journalled submission of run %s failed", run["id"])
        finally:
            done.set()
            first.set()
            with self.lock:
                self.active.pop(run["id"], None)
            self.wake.set()
            self._thread_done()

    def _give_back(self, run: dict) -> None:
        try:
            self.store.interrupt(run, "Work Center worker stopped", None)
        except Exception:
            logger.exception("giving back run %s failed (its lease expires)", run["id"])

    def _thread_done(self) -> None:
        try:
            self.store.thread_done()
        except Exception:
            logger.exception("releasing a finished thread's store connection failed")

    def _wait_all(self) -> None:
        while True:
            with self.lock:
                threads = [a.thread for a in self.active.values() if a.thread]
            if not threads:
                return
            for t in threads:
                t.join()

    # --- stop -------------------------------------------------------------------------------
    def stop(self, reason: str = "Work Center watcher stopped") -> list[dict]:
        """Abort every active run, wait for them to settle, then interrupt each with its final
        progress. A run whose result is being submitted is not aborted: it finishes its
        submission (with a journal: until the store is out of reach, the entry stays)."""
        self.state = "stopping"
        self.wake.set()
        with self.lock:
            runs = list(self.active.values())
            for a in runs:
                if a.settling:
                    a.kick.set()
                    continue
                a.abort_reason = a.abort_reason or "watcher_stopped"
                a.stop.set()
        for a in runs:
            if a.thread:
                a.thread.join(timeout=30)
        report, errors = [], []
        for a in runs:
            if a.settling:
                continue
            run = a.task["run"]
            try:
                ok = self.store.interrupt(run, reason, a.last_progress)
            except Exception as exc:
                errors.append(f"{run['id']}: {exc}")
                ok = False
            report.append({"run_id": run["id"], "interrupted": bool(ok)})
        with self.lock:
            self.active.clear()
        self.state = "idle"
        if errors:
            raise RuntimeError("Could not persist one or more run interruptions: " + "; ".join(errors))
        return report
