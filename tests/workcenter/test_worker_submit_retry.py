"""The worker keeps a finished run's submission until the store answers it (workcenter.worker):
resent with the same fence on connection failures and 502/503/504 with backoff, the lease renewed
meanwhile, given up when refused or when a renewal says the lease is gone; kept in a journal
across a worker restart; a 429 on /claims backs the claims off."""
from __future__ import annotations

import http.server
import json
import logging
import os
import threading
import time

import pytest

from workcenter import services
from workcenter import worker as worker_module
from workcenter.local_store import LocalStore
from workcenter.models import Event, Run
from workcenter.worker import HttpStore, StoreError, Worker
from workcenter.worker_journal import Journal

RESULT = {"outcome": "completed", "summary": "done", "evidence": ["did it"]}


def _task(n: int = 1, boot: str = "boot-old") -> dict:
    return {"work_item": {"id": f"item-{n}"}, "action": {"id": f"action-{n}"},
            "run": {"id": f"run-{n}", "owner_boot_id": boot, "lease_epoch": 7}}


class FakeStore:
    """A WorkerStore whose submissions fail `failures` times with `error` (a callable), then answer."""

    long_poll = False
    scope = "fake-store"

    def __init__(self, tasks=(), failures: int = 0, error=lambda: ConnectionRefusedError("refused"),
                 renew_ok: bool = True, fail_while=None):
        self.tasks = list(tasks)
        self.failures = failures
        self.error = error
        self.renew_ok = renew_ok
        self.fail_while = fail_while  # or: fail while this returns True
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def _log(self, *call):
        with self.lock:
            self.calls.append(call)

    def of(self, name: str) -> list[tuple]:
        with self.lock:
            return [c for c in self.calls if c[0] == name]

    def recover(self, boot_id):
        self._log("recover", boot_id)
        return 0

    def claim(self, boot_id, lease_ms, wait_ms=0):
        self._log("claim", boot_id)
        return self.tasks.pop(0) if self.tasks else None

    def renew(self, run, lease_ms):
        self._log("renew", run["id"], run["owner_boot_id"], run["lease_epoch"])
        return self.renew_ok

    def progress(self, run, progress):
        return True

    def submit(self, run, result, claim_next=None):
        self._log("submit", run["id"], run["owner_boot_id"], run["lease_epoch"], result["outcome"])
        with self.lock:
            fail = self.fail_while() if self.fail_while else self.failures > 0
            if not self.fail_while and fail:
                self.failures -= 1
        if fail:
            raise self.error()
        return {"run": {"id": run["id"], "status": result["outcome"]}, "next": None}

    def interrupt(self, run, reason, final_progress):
        self._log("interrupt", run["id"])
        return True

    def thread_done(self):
        pass


class Done:
    def execute(self, task, report, stop):
        return dict(RESULT)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(worker_module, "SUBMIT_RETRY_FIRST", 0.01)
    monkeypatch.setattr(worker_module, "SUBMIT_RETRY_MAX", 0.05)


def _run_once(store, **kw) -> Worker:
    w = Worker(store, Done(), concurrency=1, lease_ms=kw.pop("lease_ms", 60_000), boot_id="boot-old", **kw)
    w.run_forever(once=True)
    return w


@pytest.mark.parametrize("error", [lambda: ConnectionRefusedError("refused"), lambda: ConnectionResetError("reset"),
                                   lambda: TimeoutError("timed out"),
                                   lambda: StoreError("Bad Gateway", "502", 502),
                                   lambda: StoreError("Service Unavailable", "503", 503),
                                   lambda: StoreError("Gateway Timeout", "504", 504)])
def test_a_submission_that_fails_at_the_connection_is_sent_again_with_the_same_fence(error):
    store = FakeStore([_task()], failures=3, error=error)
    w = _run_once(store)
    submits = store.of("submit")
    assert submits == [("submit", "run-1", "boot-old", 7, "completed")] * 4
    assert w.completed == 1
    assert store.of("interrupt") == []


@pytest.mark.parametrize("error", [lambda: StoreError("bad outcome", "invalid_input", 422),
                                   lambda: StoreError("stale Run: it has already finished (interrupted)", "stale_run", 409),
                                   lambda: StoreError("boom", "internal_error", 500)])
def test_a_refused_submission_is_not_sent_again(error):
    store = FakeStore([_task()], failures=5, error=error)
    w = _run_once(store)
    assert len(store.of("submit")) == 1
    assert w.completed == 0


def test_the_lease_is_renewed_while_the_submission_is_retried():
    # the store is out of reach until the worker renewed the lease twice (renewal every second)
    store = FakeStore([_task()], error=lambda: ConnectionRefusedError("down"))
    store.fail_while = lambda: len([c for c in store.calls if c[0] == "renew"]) < 2
    # a 3 s lease: renewals every second (the shortest interval), the retries' limit at 3 s
    w = _run_once(store, lease_ms=3_000)
    assert store.of("renew")[:2] == [("renew", "run-1", "boot-old", 7)] * 2
    assert w.completed == 1
    assert len(store.of("submit")) >= 3


class Unreachable(FakeStore):
    """Out of reach for good: every submission and renewal fails at the connection."""

    def renew(self, run, lease_ms):
        self._log("renew", run["id"], run["owner_boot_id"], run["lease_epoch"])
        raise ConnectionRefusedError("down")


def test_the_retries_end_once_the_lease_has_run_out_unconfirmed():
    # nothing can be applied after the lease: a store out of reach for longer does not keep the
    # submission going for ever (it did: a thread retrying for minutes after its server was gone)
    store = Unreachable([_task()], failures=10 ** 6)
    t0 = time.monotonic()
    w = _run_once(store, lease_ms=1_000)
    assert 1.0 <= time.monotonic() - t0 < 6
    assert w.completed == 0
    assert len(store.of("submit")) >= 2


def test_a_renewal_refused_as_stale_ends_the_retries():
    store = FakeStore([_task()], failures=10 ** 6, renew_ok=False)
    t0 = time.monotonic()
    w = _run_once(store, lease_ms=3_000)  # the refused renewal (at 1 s) comes before the limit (3 s)
    assert time.monotonic() - t0 < 10
    assert len(store.of("renew")) == 1
    assert w.completed == 0
    # after the refused renewal there was one last attempt, and then no more
    last_renew = store.calls.index(store.of("renew")[0])
    assert [c[0] for c in store.calls[last_renew + 1:]].count("submit") == 1


def test_a_journalled_submission_is_sent_again_by_the_next_process_before_it_recovers(tmp_path):
    # given a worker that finished a run while the store was out of reach, and stopped
    down = FakeStore([_task()], failures=10 ** 6)
    first = Worker(down, Done(), concurrency=1, boot_id="boot-old", journal=Journal(str(tmp_path), down.scope))
    first.tick()
    assert _wait(lambda: len(down.of("submit")) >= 2)
    first.stop()
    entries = [n for n in os.listdir(tmp_path) if n.endswith(".json")]
    assert len(entries) == 1
    entry = json.loads((tmp_path / entries[0]).read_text())
    assert entry["run"] == {"id": "run-1", "owner_boot_id": "boot-old", "lease_epoch": 7}
    assert entry["result"]["outcome"] == "completed"
    # when a new process (another boot id) starts on the same journal and the store is back
    up = FakeStore()
    second = Worker(up, Done(), concurrency=1, boot_id="boot-new", journal=Journal(str(tmp_path), up.scope))
    second.run_forever(once=True)
    # then it sent the result with the stored fence before its recovery pass, and the entry is gone
    names = [c[0] for c in up.calls]
    assert names.index("submit") < names.index("recover")
    assert up.of("submit") == [("submit", "run-1", "boot-old", 7, "completed")]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".json")] == []
    assert second.completed == 1


def test_an_entry_a_live_worker_holds_is_left_alone_and_another_store_s_is_not_taken(tmp_path):
    mine = Journal(str(tmp_path), "http://a/api/v1")
    mine.write(_task(1)["run"], RESULT)
    other_store = Journal(str(tmp_path), "http://b/api/v1")
    assert other_store.orphans() == []
    beside = Journal(str(tmp_path), "http://a/api/v1")
    assert beside.orphans() == []  # held by `mine` (a live process)
    mine.release("run-1")  # as when its process ends
    taken = beside.orphans()
    assert [e["run"]["id"] for e in taken] == ["run-1"]
    beside.remove("run-1")
    assert [n for n in os.listdir(tmp_path) if n.endswith(".json")] == []


def test_a_journal_entry_is_removed_once_accepted(tmp_path):
    store = FakeStore([_task()], failures=2)
    w = _run_once(store, journal=Journal(str(tmp_path), store.scope))
    assert w.completed == 1 and len(store.of("submit")) == 3
    assert os.listdir(tmp_path) == []


def _wait(pred, timeout=10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


# --- claims turned away with 429 ----------------------------------------------------------------

class Crowded(FakeStore):
    def claim(self, boot_id, lease_ms, wait_ms=0):
        self._log("claim", boot_id)
        raise StoreError("too many claims are waiting", "too_many_waiting_claims", 429, 0.3)


def test_a_429_on_claims_backs_off_for_retry_after_without_error_logs(caplog):
    store = Crowded()
    w = Worker(store, Done(), concurrency=1, boot_id="boot-c")
    caplog.set_level(logging.DEBUG, logger="workcenter.worker")
    t0 = time.monotonic()
    assert w.tick() is False
    assert 0.3 <= w._claims_after - t0 <= 0.3 * 1.25 + 0.05
    assert w.tick() is False  # within Retry-After: no claim sent
    assert len(store.of("claim")) == 1
    assert _wait(lambda: time.monotonic() >= w._claims_after, 2)
    w.tick()
    assert len(store.of("claim")) == 2
    here = threading.current_thread().name  # other tests' leftover threads may log meanwhile
    assert [r for r in caplog.records if r.levelno >= logging.WARNING and r.threadName == here] == []


class _Answer(http.server.BaseHTTPRequestHandler):
    status, headers, body = 429, {"Retry-After": "2"}, {"code": "too_many_waiting_claims", "message": "wait",
                                                        "extra": {}}

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        raw = json.dumps(self.body).encode()
        self.send_response(self.status)
        for k, v in self.headers_out().items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def headers_out(self):
        return type(self).headers

    def log_message(self, *args):
        pass


def test_http_store_errors_carry_the_status_and_retry_after():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = HttpStore(f"http://127.0.0.1:{server.server_address[1]}", "token")
        with pytest.raises(StoreError) as exc:
            store.claim("boot-h", 30_000, 20_000)
        assert (exc.value.status, exc.value.retry_after, exc.value.code) == (429, 2.0, "too_many_waiting_claims")
        assert worker_module.transient(exc.value)
        assert not worker_module.transient(StoreError("no", "invalid_input", 422))
        assert worker_module.transient(ConnectionResetError())
    finally:
        server.shutdown()
        server.server_close()


# --- beside the database ------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_the_local_store_answers_a_resubmission_as_applied():
    services.work_item_create(title="Local", goal="g", work_item_type="research", acceptance_criteria=[], actor="t")
    local = LocalStore()
    task = local.claim("boot-L", 60_000)
    first = local.submit(task["run"], dict(RESULT))
    events = Event.objects.count()
    again = local.submit(task["run"], {"outcome": "failed", "error": "late"})
    assert again["run"] == first["run"] and again["run"]["status"] != "running"
    assert Event.objects.count() == events and Run.objects.get(pk=task["run"]["id"]).status == first["run"]["status"]


def test_a_next_claim_the_worker_holds_already_is_not_started_twice():
    # given two runs in hand, the second one still executing
    release = threading.Event()
    executed = []

    class Slow:
        def execute(self, task, report, stop):
            executed.append(task["run"]["id"])
            if task["run"]["id"] == "run-2":
                release.wait(10)
            return dict(RESULT)

    class Guessing(FakeStore):
        def submit(self, run, result, claim_next=None):
            super().submit(run, result, claim_next)
            # an answer sent again guesses the lost claim: here one the worker has
            return {"run": {"id": run["id"], "status": "completed"}, "next": _task(2) if run["id"] == "run-1" else None}

    store = Guessing([_task(1), _task(2)])
    w = Worker(store, Slow(), concurrency=2, boot_id="boot-old")
    w.tick()
    assert _wait(lambda: len(store.of("submit")) == 1)
    release.set()
    w._wait_all()
    assert sorted(executed) == ["run-1", "run-2"]
    assert w.completed == 2
