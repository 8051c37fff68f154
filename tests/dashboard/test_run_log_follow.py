"""Following a run's log on an item's stream (dashboard/stream/run_log_follow.py): the panel's
follow receives the chunks as they are stored, in this process or another one (the in-memory
layer), ends when the run does, and nothing of a log reaches a socket that does not follow it."""
from __future__ import annotations

import asyncio
import time

import pytest
from channels.db import database_sync_to_async

from workcenter import services
from workcenter.services.run_logs import run_log_append

from .conftest import TIMEOUT, open_stream, run
from .test_pump import bearer, manage_shell

pytestmark = pytest.mark.django_db(transaction=True)

db_call = database_sync_to_async


def claimed(title="Logged"):
    """A started item's claimed run, on the real clock (another process appends to it too)."""
    item = services.work_item_create(title=title, goal="g", work_item_type="research", acceptance_criteria=["ok"])
    claim = services.action_claim(owner_boot_id="log-follow-boot", lease_ms=120_000)
    assert claim is not None and claim.work_item.pk == item.pk
    return item, claim.run


def append(run_, *texts, stream="stdout"):
    return run_log_append(run_id=run_.pk, owner_boot_id=run_.owner_boot_id, lease_epoch=run_.lease_epoch,
                          chunks=[{"stream": stream, "text": t} for t in texts])


async def follow(comm, run_id, after_seq=None):
    message = {"type": "log.follow", "run_id": run_id}
    if after_seq is not None:
        message["after_seq"] = after_seq
    await comm.send_json_to(message)


async def next_log(comm) -> dict:
    """The next `log` message (the item's event messages pass by)."""
    while True:
        message = await comm.receive_json_from(timeout=TIMEOUT)
        if message["type"] == "log":
            return message


async def no_log(comm, seconds: float) -> bool:
    """Nothing of a log arrives for `seconds` (event messages may)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await comm.receive_nothing(timeout=0.05):  # (a receive that times out ends the application)
            continue
        message = await comm.receive_json_from(timeout=TIMEOUT)
        assert message["type"] != "log", message
    return True


def texts(message) -> list[str]:
    return [c["text"] for c in message["chunks"]]


def test_a_follow_receives_the_log_as_it_is_stored_and_nothing_after_unfollow(viewer_token):
    item, run_ = claimed()
    append(run_, "before\n")

    async def scenario():
        page, _ = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        listing, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        # when the page follows the run's log
        await follow(page, run_.pk)
        first = await page.receive_json_from(timeout=TIMEOUT)
        # then it first gets what is stored, live
        assert first["type"] == "log" and first["run_id"] == run_.pk and first["live"] is True
        assert texts(first) == ["before\n"] and first["chunks"][0]["seq"] == 1 and first["older"] is False
        # and each append as it commits, in order
        for i in range(3):
            started = time.monotonic()
            await db_call(append)(run_, f"line {i}\n", "more\n")
            got = await page.receive_json_from(timeout=TIMEOUT)
            assert texts(got) == [f"line {i}\n", "more\n"] and got["live"] is True
            assert time.monotonic() - started < 1.0
        # a page that follows nothing (the list) gets nothing of it
        assert await listing.receive_nothing(timeout=0.3)
        # after unfollowing, nothing more comes
        await page.send_json_to({"type": "log.unfollow"})
        await asyncio.sleep(0.1)
        await db_call(append)(run_, "unseen\n")
        assert await page.receive_nothing(timeout=0.5)
        await page.disconnect()
        await listing.disconnect()
    run(scenario)


def test_a_follow_resumes_after_a_number_and_ends_with_the_run(viewer_token):
    item, run_ = claimed()
    append(run_, "one\n", "two\n", "three\n")

    async def scenario():
        page, _ = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        await follow(page, run_.pk, after_seq=2)
        assert texts(await page.receive_json_from(timeout=TIMEOUT)) == ["three\n"]
        # when the run ends (its worker sent its log first)
        await db_call(append)(run_, "last\n")
        assert texts(await page.receive_json_from(timeout=TIMEOUT)) == ["last\n"]
        await db_call(services.run_submit)(run_id=run_.pk, owner_boot_id=run_.owner_boot_id,
                                           lease_epoch=run_.lease_epoch,
                                           result={"outcome": "failed", "error": "stopped here"})
        # then the last message says it is no longer live, and nothing follows
        end = await next_log(page)
        assert end["live"] is False and end["run_status"] == "failed" and end["chunks"] == []
        assert await no_log(page, 0.5)
        # a finished run's log opens at its end, not live
        await follow(page, run_.pk)
        whole = await next_log(page)
        assert texts(whole) == ["one\n", "two\n", "three\n", "last\n"] and whole["live"] is False
        assert await no_log(page, 0.3)
        await page.disconnect()
    run(scenario)


def test_another_processs_appends_reach_the_follow_on_the_in_memory_layer(viewer_token):
    item, run_ = claimed()

    async def scenario():
        page, _ = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        await follow(page, run_.pk)
        assert (await page.receive_json_from(timeout=TIMEOUT))["chunks"] == []
        # when a process beside the database (a local-store worker) appends
        await asyncio.to_thread(manage_shell, (
            "from workcenter.services.run_logs import run_log_append\n"
            f"run_log_append(run_id={run_.pk!r}, owner_boot_id={run_.owner_boot_id!r}, lease_epoch={run_.lease_epoch},"
            " chunks=[{'stream': 'stderr', 'text': 'from elsewhere\\n'}])\n"))
        started = time.monotonic()
        # then the follow reads it within its poll
        got = await page.receive_json_from(timeout=TIMEOUT)
        assert got["chunks"][0]["stream"] == "stderr" and texts(got) == ["from elsewhere\n"]
        assert time.monotonic() - started < 1.0
        await page.disconnect()
    run(scenario)


def test_a_follow_of_another_items_run_or_a_bad_message_is_refused_or_ignored(viewer_token):
    item, _ = claimed("Mine")
    _, theirs = claimed("Theirs")

    async def scenario():
        page, _ = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        await follow(page, theirs.pk)
        assert await page.receive_json_from(timeout=TIMEOUT) == {"type": "log", "run_id": theirs.pk,
                                                                  "error": "not_found"}
        for bad in ({"type": "log.follow"}, {"type": "log.follow", "run_id": theirs.pk, "after_seq": -1},
                    {"type": "log.follow", "run_id": theirs.pk, "after_seq": True}, {"type": "other"}, [1, 2]):
            await page.send_json_to(bad)
        await page.send_to(text_data="not json")
        await page.send_to(text_data='{"type": "log.follow", "run_id": "' + "x" * 2000 + '"}')
        assert await page.receive_nothing(timeout=0.5)
        # the list stream follows no log
        listing, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await follow(listing, theirs.pk)
        assert await listing.receive_nothing(timeout=0.5)
        await page.disconnect()
        await listing.disconnect()
    run(scenario)
