"""Log search (GET /logs/search) on the database's own index (PostgreSQL trigram, SQLite FTS5
trigram): the runs whose logs hold a text, with their item, stage and the lines around each match;
the list's filters; a text taken literally; among 1,000 runs' logs, the one line is found (the
time is printed)."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from workcenter.models import Run, RunLog, RunLogChunk, WorkItem

from .test_run_logs import append

pytestmark = pytest.mark.django_db


def search(api, expect=200, **params):
    r = api.get("/logs/search", params)
    assert r.status_code == expect, r.content
    return r.json()


def started(api, title, **create):
    api.create(title=title, goal="g", **create)
    return api.claim(f"boot-{title}")


def test_search_finds_the_run_that_printed_a_text_with_the_lines_around_it(api, viewer):
    build = started(api, "Build")
    tests = started(api, "Tests")
    append(api, build, "$ make\n", "compiling main.c\nlinking\n")
    append(api, tests, "collected 12 items\n", "tests/test_io.py F\n"
           "E   ModuleNotFoundError: No module named 'yaml'\n  at tests/test_io.py:3\n  in import\ndone\n",
           stream="stderr")
    # a viewer searches, in another case than printed
    out = search(viewer, q="modulenotfounderror")
    assert [r["run_id"] for r in out["runs"]] == [tests["run"]["id"]] and out["truncated"] is False
    run = out["runs"][0]
    assert run["work_item"] == {"id": tests["work_item"]["id"], "title": "Tests", "status": "running"}
    assert run["stage_id"] == tests["action"]["stage_id"] and run["run_status"] == "running"
    (match,) = run["matches"]
    assert match["seq"] == 2 and match["stream"] == "stderr"
    assert match["line"] == "E   ModuleNotFoundError: No module named 'yaml'"
    assert match["before"] == ["collected 12 items", "tests/test_io.py F"] and match["after"] == ["  at tests/test_io.py:3", "  in import"]
    # a text in both runs' logs: both, newest match first
    append(api, build, "collected 3 items\n")
    assert [r["run_id"] for r in search(api, q="collected")["runs"]] == [build["run"]["id"], tests["run"]["id"]]
    # nothing: an empty answer
    assert search(api, q="segfault")["runs"] == []


def test_search_takes_the_list_filters_and_its_text_literally(api):
    first = started(api, "First")
    second = started(api, "Second")
    WorkItem.objects.filter(pk=first["work_item"]["id"]).update(workflow_template="research")  # a workflow of its own
    append(api, first, "100% done_ok \"quoted\" path\\to\n")
    append(api, second, "100 percent done\n")
    # LIKE's and FTS5's own characters are plain text
    for q in ("100%", "done_ok", '"quoted"', "path\\to"):
        assert [r["run_id"] for r in search(api, q=q)["runs"]] == [first["run"]["id"]], q
    # by the item's status and workflow, and by when the text was printed
    api.post(f"/work-items/{second['work_item']['id']}/cancel")
    assert [r["work_item"]["id"] for r in search(api, q="100", status="cancelled")["runs"]] == [second["work_item"]["id"]]
    assert [r["work_item"]["id"] for r in search(api, q="100", workflow="research")["runs"]] == [first["work_item"]["id"]]
    # a time with an offset PostgreSQL would refuse is taken in UTC
    assert len(search(api, q="100", since="0986-01-30T03:20:32+21:03")["runs"]) == 2
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    assert search(api, q="100", since=later)["runs"] == []
    assert len(search(api, q="100", until=later)["runs"]) == 2


@pytest.mark.parametrize("params, field", [({"q": "ab"}, "q"), ({"q": "x" * 201}, "q"), ({}, "q"),
                                           ({"q": "abc", "status": "nope"}, "status"),
                                           ({"q": "abc", "limit": 0}, "limit"),
                                           ({"q": "abc", "since": "yesterday"}, "since"),
                                           ({"q": "abc", "since": "1700000000"}, "since"),
                                           ({"q": "abc", "until": "0001-01-01T00:00:00+05:00"}, "until")])
def test_a_bad_search_is_refused_with_the_error_body(api, params, field):
    out = search(api, expect=422, **params)
    assert out["code"] == "invalid_input" and field in out["message"], out


def test_one_line_among_a_thousand_runs_logs_is_found(api):
    # given 1,000 runs, each with a log of 20 chunks of 10 lines (200,000 lines), one line printed once
    claim = started(api, "Many")
    template = Run.objects.get(pk=claim["run"]["id"])
    now = timezone.now()
    runs = [Run(**{**{f.attname: getattr(template, f.attname) for f in Run._meta.concrete_fields},
                   "id": f"{template.pk}-{i:04d}", "status": "failed"}) for i in range(999)]
    Run.objects.bulk_create(runs)
    runs.append(template)
    RunLog.objects.bulk_create([RunLog(run_id=r.pk, next_seq=21, kept_bytes=0, updated_at=now) for r in runs])
    text = "".join(f"step {n}: compiled module_{n}.py in 0.{n}s\n" for n in range(10))
    for start in range(0, len(runs), 100):
        RunLogChunk.objects.bulk_create([
            RunLogChunk(run_id=r.pk, seq=s, stream="stdout", at=now, text=text, size=len(text))
            for r in runs[start:start + 100] for s in range(1, 21)])
    needle_run = runs[617]
    RunLogChunk.objects.filter(run_id=needle_run.pk, seq=13).update(
        text="step 0: ok\nTraceback (most recent call last):\nKeyError: 'frobnicate-42'\nstep 3: ok\n")
    # when the line is searched for
    started_at = time.perf_counter()
    out = search(api, q="frobnicate-42")
    took_ms = (time.perf_counter() - started_at) * 1000
    print(f"\nlog search on {connection.vendor}: 1 line among {len(runs)} runs, "
          f"{RunLogChunk.objects.count()} chunks: {took_ms:.1f} ms")
    # then it is found, in its run, with its neighbours
    assert [r["run_id"] for r in out["runs"]] == [needle_run.pk]
    (match,) = out["runs"][0]["matches"]
    assert match["seq"] == 13 and match["line"] == "KeyError: 'frobnicate-42'"
    assert match["before"] == ["step 0: ok", "Traceback (most recent call last):"] and match["after"] == ["step 3: ok", "step 0: compiled module_0.py in 0.0s"]
