"""End to end: a finished run's result is never lost. Real worker processes (`manage.py
workcenter_worker` over HTTP) submit while the web process (daphne) is killed with SIGKILL and
started again; and while the answers to some submissions are lost after the server applied them
(a proxy forwards the request, then closes the connection instead of relaying the answer).
Afterwards every action was worked on once, and has one completed run."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from django.contrib.auth.models import Permission, User

from tests.live import ROOT, database_url, free_port, start_daphne, stop_process, wait_until
from workcenter import services
from workcenter.auth import api_token_create
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.domain import workflows

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_MS = 40_000  # generous: on a loaded machine a daphne restart took 10 s and more, and a
# submission is retried for one lease after the store last confirmed the run
EXECUTOR = "tests.e2e.recording_executor.RecordingExecutor"


def _token() -> str:
    user = User.objects.create_user(f"robot-{User.objects.count()}")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="submit-retry")[1]


def _items(n: int) -> list[str]:
    """Linear items triage → implement → review (no deliver stage: nothing here is delivered)."""
    workflow = dict(workflows.default_workflows()[0])
    workflow["stages"] = [s for s in workflow["stages"] if s["type"] != "deliver"]
    return [services.work_item_create(title=f"Retry {i}", goal="Keep every result", acceptance_criteria=["works"],
                                      workflow=workflow, trusted=True, start=True, actor="test").pk
            for i in range(n)]


class Workers:
    """Worker processes over HTTP, each with its own journal and log file."""

    def __init__(self, tmp_path, base: str, token: str):
        self.tmp, self.base, self.token = tmp_path, base, token
        self.executions = tmp_path / "executions.log"
        self.executions.touch()
        self.procs: list[tuple[subprocess.Popen, object]] = []

    def start(self, i: int, concurrency: int, *, log_name: str | None = None, seconds: float = 0.4) -> None:
        env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1",
               "WORKCENTER_TEST_EXECUTIONS": str(self.executions), "WORKCENTER_TEST_EXECUTION_SECONDS": str(seconds)}
        log = open(self.tmp / (log_name or f"worker-{i}.log"), "w")
        proc = subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--server", self.base,
                                 "--token", self.token, "--concurrency", str(concurrency), "--lease-ms", str(LEASE_MS),
                                 "--poll-ms", "200", "--wait-ms", "2000", "--executor", EXECUTOR,
                                 "--journal-dir", str(self.tmp / f"journal-{i}")],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((proc, log))

    def start_again(self, i: int, concurrency: int) -> None:
        """Worker `i` once more (its journal), logging to worker-<i>-again.log."""
        self.start(i, concurrency, log_name=f"worker-{i}-again.log")

    def stop(self) -> None:
        for proc, _ in self.procs:
            stop_process(proc, timeout=20)
        for _, log in self.procs:
            log.close()

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.tmp.glob("worker-*.log")))

    def started(self) -> set[str]:
        """The runs an executor began to work on."""
        path = self.tmp / "executions.log.started"
        return set(path.read_text().split()) if path.exists() else set()

    def executed(self) -> Counter:
        return Counter(line.split()[0] for line in self.executions.read_text().splitlines() if line.strip())


def _all_done(ids) -> bool:
    return WorkItem.objects.filter(pk__in=ids, status="done").count() == len(ids)


def _completed_runs() -> int:
    return Run.objects.filter(status="completed").count()


def _assert_each_action_worked_on_once(ids, workers: Workers) -> None:
    actions = list(Action.objects.filter(work_item_id__in=ids))
    executed = workers.executed()
    # every action was worked on exactly once: no finished result was dropped and done again
    assert {a.pk for a in actions} == set(executed), (len(actions), len(executed))
    assert set(executed.values()) == {1}, [k for k, v in executed.items() if v > 1]
    runs = list(Run.objects.filter(work_item_id__in=ids))
    completed = Counter(r.action_id for r in runs if r.status == "completed")
    assert all(a.status == "completed" and completed[a.pk] == 1 for a in actions)
    # and each completion was applied once: one completion event per action, one claim event per run
    assert Event.objects.filter(work_item_id__in=ids, type__in=["action.completed", "work_item.completed"]).count() \
        == len(actions)
    assert Event.objects.filter(work_item_id__in=ids, type="run.claimed").count() == len(runs)


def test_results_survive_the_web_process_being_killed_and_started_again(tmp_path):
    token = _token()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
    ids = _items(8)
    workers = Workers(tmp_path, base, token)
    t0 = time.monotonic()
    try:
        workers.start(0, 3)
        workers.start(1, 3)
        # kill the web process twice while runs are in hand, each time starting it again a second later
        for completed in (4, 12):
            assert wait_until(lambda n=completed: _completed_runs() >= n, 40), _completed_runs()
            assert wait_until(lambda: Run.objects.filter(status="running").exists(), 10)
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            time.sleep(1.0)
            server = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
        # a claim whose answer died with the server waits out its lease before it is recovered
        assert wait_until(lambda: _all_done(ids), LEASE_MS / 1000 + 45), dict(
            WorkItem.objects.values_list("title", "status"))
    finally:
        workers.stop()
        stop_process(server)
    print(f"\n{len(ids)} items done in {time.monotonic() - t0:.1f} s across two web process kills")
    logs = workers.logs()
    assert "sending it again" in logs, logs[-3000:]  # submissions met the dead server, and were retried
    assert " ERROR " not in logs and "Traceback" not in logs, logs[-3000:]
    _assert_each_action_worked_on_once(ids, workers)
    # no run other than the completed ones was ever worked on (a claim whose answer died with the
    # server is interrupted by recovery unworked, at worst)
    others = Run.objects.filter(work_item_id__in=ids).exclude(status="completed")
    assert set(others.values_list("status", flat=True)) <= {"interrupted"}
    assert not set(others.values_list("pk", flat=True)) & {
        line.split()[1] for line in workers.executions.read_text().splitlines()}


class LosingProxy:
    """TCP in front of the server; the answers to the first submission of each of the first `drops`
    runs are lost: the request reaches the server, which applies it, then the connection closes
    instead of relaying the answer."""

    def __init__(self, target: int, drops: int):
        self.target, self.drops = target, drops
        self.seen: set[bytes] = set()  # runs whose submission came by
        self.dropped: list[bytes] = []
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        losing = threading.Event()

        def back():
            try:
                while data := upstream.recv(65536):
                    if losing.is_set():
                        return  # the server answered (it has committed): the answer never arrives
                    client.sendall(data)
            except OSError:
                pass
            finally:
                _close(client)
                _close(upstream)

        threading.Thread(target=back, daemon=True).start()
        try:
            while data := client.recv(65536):
                line = data.split(b"\r\n", 1)[0]
                if line.startswith(b"POST ") and b"/submit " in line:
                    run_id = line.split(b"/runs/", 1)[1].split(b"/", 1)[0]
                    with self.lock:
                        if run_id not in self.seen and len(self.dropped) < self.drops:
                            self.dropped.append(run_id)
                            losing.set()
                        self.seen.add(run_id)
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)

    def close(self) -> None:
        self.listener.close()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def test_a_submission_whose_answer_was_lost_is_answered_as_applied_when_sent_again(tmp_path):
    token = _token()
    port = free_port()
    server = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
    proxy = LosingProxy(port, drops=3)
    ids = _items(3)
    workers = Workers(tmp_path, f"http://127.0.0.1:{proxy.port}", token)
    try:
        workers.start(0, 1)  # one worker, one run at a time: every claim it makes is the lost answers' one
        assert wait_until(lambda: _all_done(ids), 45), dict(WorkItem.objects.values_list("title", "status"))
    finally:
        workers.stop()
        proxy.close()
        stop_process(server)
    assert len(proxy.dropped) == 3
    logs = workers.logs()
    # the three submissions were sent again and accepted: the server answered them as applied
    assert len(re.findall(r"submit of run \S+ accepted at attempt 2", logs)) == 3, logs[-3000:]
    assert " ERROR " not in logs and "Traceback" not in logs, logs[-3000:]
    _assert_each_action_worked_on_once(ids, workers)
    # nothing ran twice, and no claim was left behind: one run per action, none interrupted
    runs = Run.objects.filter(work_item_id__in=ids)
    assert set(Counter(runs.values_list("action_id", flat=True)).values()) == {1}
    assert set(runs.values_list("status", flat=True)) == {"completed"}


def test_a_result_journalled_by_a_killed_worker_is_submitted_by_the_next_one(tmp_path):
    token = _token()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
    ids = _items(2)
    workers = Workers(tmp_path, base, token)
    journal = tmp_path / "journal-0"
    try:
        # given a worker whose finished run cannot reach the killed web process (killed while the
        # worker works on a run it holds: not while a claim's answer is on its way)
        workers.start(0, 1, seconds=1.0)
        first = workers.procs[0][0]
        assert wait_until(lambda: set(Run.objects.filter(status="running").values_list("pk", flat=True))
                          & workers.started(), 30)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        assert wait_until(lambda: "sending it again" in workers.logs(), 20), workers.logs()
        # when that worker is killed too, with the result in its journal
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert len([n for n in os.listdir(journal) if n.endswith(".json")]) == 1
        held = Run.objects.get(status="running")
        # and the web process and a new worker (a new boot id, the same journal) start
        server = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
        workers.start_again(0, 1)
        assert wait_until(lambda: _all_done(ids), 45), dict(WorkItem.objects.values_list("title", "status"))
    finally:
        workers.stop()
        stop_process(server)
    # then the journalled result was applied once, with the killed worker's fence, and nothing ran twice
    logs = (tmp_path / "worker-0-again.log").read_text()
    assert "sending 1 journalled submission(s) again" in logs, logs[-3000:]
    held.refresh_from_db()
    assert held.status == "completed"
    assert [n for n in os.listdir(journal) if n.endswith(".json")] == []
    _assert_each_action_worked_on_once(ids, workers)
    runs = Run.objects.filter(work_item_id__in=ids)
    assert set(Counter(runs.values_list("action_id", flat=True)).values()) == {1}
