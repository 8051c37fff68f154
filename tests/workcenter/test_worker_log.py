"""A run's log from the worker: the shell executor's lines as a command prints them, the sender's
batches (in order, a few requests a second, stopped by a lost lease) against the real store, and a
real shell worker process whose command's output lands in the run's log."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.workcenter.test_shell_executor import item_with_stage, only_run, worker, write_commands
from workcenter import services
from workcenter.executors.shell import read_lines
from workcenter.local_store import LocalStore
from workcenter.models import RunLogChunk
from workcenter.worker import transient
from workcenter.worker_log import LogSender, Report

pytestmark = pytest.mark.django_db(transaction=True)


def spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def test_lines_come_as_printed_with_their_stream_and_an_open_line_after_its_wait():
    # given a command that prints to both streams, then leaves a line open for a while
    code = ("import sys, time\n"
            "out = sys.stdout.buffer\n"
            "out.write(b'one\\n'); out.flush(); sys.stderr.write('warn\\n'); sys.stderr.flush()\n"
            "out.write(b'50%'); out.flush(); time.sleep(1.2)\n"
            "out.write(' 100%\\ncaf\\u00e9 \\x00\\n'.encode()); out.flush()\n")
    proc = spawn(code)
    started = time.monotonic()
    seen = []
    # when its pipes are read
    for stream, text in read_lines({"stdout": proc.stdout, "stderr": proc.stderr}, line_wait_s=0.3):
        seen.append((stream, text, round(time.monotonic() - started, 1)))  # (the time: for a failure's message)
    proc.wait(10)
    # then each stream's text comes whole and in order, NUL replaced, the open line as far as it
    # went after its wait, before the line ended
    assert "".join(t for s, t, _ in seen if s == "stdout") == "one\n50% 100%\ncafé \ufffd\n"
    assert [t for s, t, _ in seen if s == "stderr"] == ["warn\n"]
    assert ("stdout", "50%") in [(s, t) for s, t, _ in seen], seen  # on its own: sent before the line ended


def claimed(tmp_path):
    item_with_stage(tmp_path, "greet")
    claim = services.action_claim(owner_boot_id="log-test-boot", lease_ms=30_000)
    assert claim is not None
    run = claim.run
    return {"id": run.pk, "owner_boot_id": run.owner_boot_id, "lease_epoch": run.lease_epoch}


def stored(run_id: str) -> list[tuple[str, str]]:
    return list(RunLogChunk.objects.filter(run_id=run_id).order_by("seq").values_list("stream", "text"))


def test_the_sender_batches_what_is_written_in_order_at_a_few_requests_a_second(tmp_path):
    # given a run's sender over the real store
    run = claimed(tmp_path)
    sender = LogSender(LocalStore(), run, transient=transient)
    report = Report(lambda progress: True, sender)
    # when an executor writes 2,000 lines over about a second, with a stream change now and then
    for i in range(2000):
        assert report.log(f"line {i}\n", "stderr" if i % 500 == 499 else "stdout")
        if i % 200 == 0:
            time.sleep(0.1)
    sender.close()
    # then every line is stored, in order, with its stream, in a few requests
    text = "".join(t for _, t in stored(run["id"]))
    assert text == "".join(f"line {i}\n" for i in range(2000))
    assert [t for s, t in stored(run["id"]) if s == "stderr"] == [f"line {i}\n" for i in (499, 999, 1499, 1999)]
    assert sender.requests <= 8, sender.requests


def test_a_sender_whose_lease_is_gone_sends_no_more(tmp_path):
    # given a sender whose run lost its lease (its fence is stale: another epoch)
    run = claimed(tmp_path)
    sender = LogSender(LocalStore(), {**run, "lease_epoch": run["lease_epoch"] + 1}, transient=transient)
    # when text is written
    sender.write("lost\n", "stdout")
    sender.close()
    # then nothing is stored and the sender says it sends no more
    assert stored(run["id"]) == []
    assert sender.stopped and sender.write("more\n") is False


class Flaky:
    """The real store, out of reach for its first `failures` appends (a ConnectionError)."""

    def __init__(self, failures: int):
        self.store, self.failures, self.calls = LocalStore(), failures, 0

    def log(self, run, chunks):
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("the store is out of reach")
        return self.store.log(run, chunks)


def test_a_sender_keeps_what_failed_at_the_connection_and_sends_it_first(tmp_path):
    # given a store out of reach for the first two appends
    run = claimed(tmp_path)
    store = Flaky(2)
    sender = LogSender(store, run, transient=transient)
    # when lines are written before, during and after the outage
    done = threading.Event()

    def write():
        for i in range(30):
            sender.write(f"{i}\n", "stdout")
            time.sleep(0.05)
        done.set()

    threading.Thread(target=write).start()
    assert done.wait(30)
    sender.close()
    # then all of them are stored once, in order
    assert "".join(t for _, t in stored(run["id"])) == "".join(f"{i}\n" for i in range(30))
    assert store.calls >= 3


def test_a_shell_worker_sends_its_commands_output_to_the_runs_log(tmp_path):
    # given a command that prints 100 lines over a second, some on stderr
    work = tmp_path / "work"
    work.mkdir()
    code = ("import sys, time\n"
            "for i in range(100):\n"
            "    print(f'line {i}', file=sys.stderr if i % 25 == 24 else sys.stdout, flush=True); time.sleep(0.01)\n")
    commands = write_commands(tmp_path / "commands.json", {"chatty": [sys.executable, "-c", code]})
    item = item_with_stage(work, "chatty")
    # when a real shell worker runs it
    done = worker("--commands", commands)
    assert done.returncode == 0, done.stderr
    run = only_run(item)
    assert run.status == "completed", run.error
    # then the run's log holds every line, in order, each from its stream
    chunks = stored(run.pk)
    lines = "".join(t for _, t in chunks).splitlines()
    assert sorted(lines, key=lambda s: int(s.split()[1])) == [f"line {i}" for i in range(100)]
    assert {t for s, t in chunks if s == "stderr"} <= {f"line {i}\n" for i in (24, 49, 74, 99)}
    assert "".join(t for s, t in chunks if s == "stderr") == "".join(f"line {i}\n" for i in (24, 49, 74, 99))
    assert len(chunks) < 40, chunks  # batched: not one chunk per line


class Slow:
    """The real store, each append taking `seconds` longer (a server under load)."""

    def __init__(self, seconds: float):
        self.store, self.seconds, self.calls = LocalStore(), seconds, 0

    def log(self, run, chunks):
        self.calls += 1
        time.sleep(self.seconds)
        return self.store.log(run, chunks)


def test_a_closing_sender_sends_a_backlog_whole_while_the_store_keeps_taking_it(tmp_path):
    # given a slow store and a backlog of several requests' worth (about 1.5 MB of output)
    run = claimed(tmp_path)
    store = Slow(0.4)
    sender = LogSender(store, run, transient=transient)
    line = "x" * 99 + "\n"
    for _ in range(15_000):
        sender.write(line, "stdout")
    # when the run ends, with a patience shorter than the whole backlog takes
    started = time.monotonic()
    sender.close(timeout=1.0)
    # then the sender went on while the store took batches, and every line is stored
    assert time.monotonic() - started > 1.0 and store.calls >= 5
    assert "".join(t for _, t in stored(run["id"])) == line * 15_000


def test_lines_keep_to_one_chunk_unless_longer_than_a_chunk(tmp_path):
    # given lines written faster than the sender sends, more than a chunk's worth, and one very long line
    run = claimed(tmp_path)
    sender = LogSender(LocalStore(), run, transient=transient)
    lines = [f"line {i:05d} " + "." * 90 + "\n" for i in range(2_000)]  # 200,000 characters
    for line in lines:
        sender.write(line, "stdout")
    sender.write("y" * 70_000 + "\n", "stdout")
    sender.close()
    # then every chunk but the long line's ends with a line's end, and the text is whole
    texts = [t for _, t in stored(run["id"])]
    assert "".join(texts) == "".join(lines) + "y" * 70_000 + "\n"
    assert all(t.endswith("\n") for t in texts[:-2]) and len(texts[-2]) == 65_536
