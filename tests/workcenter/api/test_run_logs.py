"""A run's log through the worker protocol: chunks append in order and read back by page; a stale
fence appends nothing; a chunk over the limit (and a body over the request limit) is refused
with the error body and nothing written; the per-run cap drops the oldest and says how much."""
from __future__ import annotations

import pytest

from workcenter.models import RunLog, RunLogChunk

from .conftest import fence

pytestmark = pytest.mark.django_db


@pytest.fixture
def claim(api):
    api.create(title="Build the release", goal="Ship it")
    return api.claim("boot-log")


def append(api, claim, *texts, stream="stdout", expect=200, **fields):
    r = api.post(f"/runs/{claim['run']['id']}/log",
                 {**fence(claim), "chunks": [{"stream": stream, "text": t} for t in texts], **fields})
    assert r.status_code == expect, r.content
    return r.json()


def read(api, claim, **params):
    r = api.get(f"/runs/{claim['run']['id']}/log", params)
    assert r.status_code == 200, r.content
    return r.json()


def test_chunks_append_in_order_and_read_back_by_page(api, claim):
    first = append(api, claim, "$ make\n", "cc -c main.c\n")
    assert first == {"next_seq": 3, "kept_bytes": 20, "dropped_bytes": 0, "dropped_chunks": 0}
    append(api, claim, "main.c:3: warning: unused x\n", stream="stderr")
    append(api, claim, *[f"line {i}\n" for i in range(10)])
    log = read(api, claim)
    assert [c["seq"] for c in log["chunks"]] == list(range(1, 14))
    assert [c["stream"] for c in log["chunks"][:4]] == ["stdout", "stdout", "stderr", "stdout"]
    assert log["chunks"][0]["text"] == "$ make\n" and log["older"] is False
    assert log["run_status"] == "running" and log["work_item_id"] == claim["work_item"]["id"]
    # following the log: what came after a number; scrolling up: the last ones before one
    assert [c["seq"] for c in read(api, claim, after=11)["chunks"]] == [12, 13]
    older = read(api, claim, before=6, limit=2)
    assert [c["seq"] for c in older["chunks"]] == [4, 5] and older["older"] is True
    # its end, as a finished run's log opens
    tail = read(api, claim, limit=3)
    assert [c["seq"] for c in tail["chunks"]] == [11, 12, 13] and tail["older"] is True
    # the whole log as text
    r = api.get(f"/runs/{claim['run']['id']}/log.txt")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain")
    assert b"".join(r.streaming_content if r.streaming else [r.content]).decode().startswith(
        "$ make\ncc -c main.c\nmain.c:3: warning")


def test_a_stale_fence_appends_nothing(api, claim):
    append(api, claim, "first\n")
    r = api.post(f"/runs/{claim['run']['id']}/log",
                 {"owner_boot_id": "boot-log", "lease_epoch": claim["run"]["lease_epoch"] + 1,
                  "chunks": [{"stream": "stdout", "text": "from a worker that lost its lease\n"}]})
    assert r.status_code == 409 and r.json()["code"] == "stale_run"
    r = api.post(f"/runs/{claim['run']['id']}/log",
                 {"owner_boot_id": "boot-other", "lease_epoch": claim["run"]["lease_epoch"],
                  "chunks": [{"stream": "stdout", "text": "from another worker\n"}]})
    assert r.status_code == 409
    api.complete(claim)
    append(api, claim, "after the submission\n", expect=409)
    assert list(RunLogChunk.objects.values_list("text", flat=True)) == ["first\n"]
    assert RunLog.objects.get().next_seq == 2


def test_a_chunk_over_the_limit_is_refused_and_nothing_is_written(api, claim, settings):
    r = api.post(f"/runs/{claim['run']['id']}/log",
                 {**fence(claim), "chunks": [{"stream": "stdout", "text": "ok\n"},
                                             {"stream": "stdout", "text": "x" * 65_537}]})
    assert r.status_code == 422 and r.json()["code"] == "invalid_input"
    assert set(r.json()) == {"code", "message", "extra"}
    # a body past the request limit: 413, before it is read
    settings.WORKCENTER_MAX_BODY_BYTES = 64 * 1024
    big = [{"stream": "stdout", "text": "y" * 60_000}, {"stream": "stdout", "text": "z" * 60_000}]
    r = api.post(f"/runs/{claim['run']['id']}/log", {**fence(claim), "chunks": big})
    assert r.status_code == 413 and r.json()["code"]
    for bad in ([], [{"stream": "stdin", "text": "x"}], [{"stream": "stdout", "text": ""}],
                [{"stream": "stdout", "text": "x", "at": "2026-12-07T10:00:00"}]):
        r = api.post(f"/runs/{claim['run']['id']}/log", {**fence(claim), "chunks": bad})
        assert r.status_code == 422, (bad, r.content)
    assert RunLogChunk.objects.count() == 0 and RunLog.objects.count() == 0
    # a time with any offset JSON allows is stored in UTC
    r = api.post(f"/runs/{claim['run']['id']}/log",
                 {**fence(claim), "chunks": [{"stream": "stdout", "text": "x", "at": "2026-10-18T03:44:46-18:02"}]})
    assert r.status_code == 200, r.content
    assert read(api, claim)["chunks"][0]["at"].startswith("2026-10-18T21:46:46")


def test_the_cap_drops_the_oldest_chunks_and_says_how_much(api, claim, settings):
    settings.WORKCENTER_RUN_LOG_MAX_BYTES = 1024
    for i in range(10):
        append(api, claim, f"{i:03d} " + "." * 195 + "\n")  # 200 bytes a chunk
    log = read(api, claim)
    assert [c["seq"] for c in log["chunks"]] == [6, 7, 8, 9, 10]
    assert log["kept_bytes"] == 1000 and log["dropped_bytes"] == 1000 and log["dropped_chunks"] == 5
    assert log["older"] is False
    text = api.get(f"/runs/{claim['run']['id']}/log.txt").content.decode()
    assert text.startswith("[5 older chunks (1000 bytes) were dropped: the log keeps its last 1000 bytes]\n005 ")
    # a chunk of several bytes a character counts its bytes
    append(api, claim, "é" * 100)
    assert read(api, claim)["kept_bytes"] <= 1024


def test_a_viewer_reads_a_log_and_may_not_append(api, viewer, claim):
    append(api, claim, "hello\n")
    assert viewer.get(f"/runs/{claim['run']['id']}/log").json()["chunks"][0]["text"] == "hello\n"
    r = viewer.post(f"/runs/{claim['run']['id']}/log", {**fence(claim), "chunks": [{"stream": "stdout", "text": "x"}]})
    assert r.status_code == 403
    assert viewer.get("/runs/no-such-run/log").status_code == 404
    # both: the chunks in between
    assert [c["seq"] for c in read(api, claim, after=0, before=2)["chunks"]] == [1]
