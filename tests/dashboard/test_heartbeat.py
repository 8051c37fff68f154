"""Heartbeats (dashboard/stream/heartbeat.py): every stream socket — the list's, an item's, the
Workers page's — hears `{"type": "heartbeat"}` every `WORKCENTER_STREAM_HEARTBEAT_S` seconds, its
hello says the interval, and the loop's one timer stops with the last socket."""
from __future__ import annotations

import asyncio
import time

import pytest
from channels.db import database_sync_to_async

from dashboard.stream.heartbeat import heartbeat
from workcenter import services

from .conftest import TIMEOUT, open_stream, run

pytestmark = pytest.mark.django_db(transaction=True)

BEAT = 0.4


def bearer(token: str):
    return [(b"authorization", f"Bearer {token}".encode())]


@pytest.fixture
def beating(settings):
    settings.WORKCENTER_STREAM_HEARTBEAT_S = BEAT
    yield


def test_every_stream_hears_heartbeats_and_its_hello_names_the_interval(beating, viewer_token):
    item = services.work_item_create(title="Beat", goal="g", work_item_type="software-change", actor="test")

    async def scenario():
        opened = [await open_stream(path, headers=bearer(viewer_token))
                  for path in ("/ws/work-items/", f"/ws/work-items/{item.pk}/", "/ws/workers/")]
        try:
            for _, hello in opened:
                assert hello["heartbeat_s"] == BEAT
            started = time.monotonic()
            for comm, _ in opened:
                for _ in range(2):
                    assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "heartbeat"}
            # two beats each, and not in a burst: at least one interval passed
            assert time.monotonic() - started >= BEAT
        finally:
            for comm, _ in opened:
                await comm.disconnect()
        await asyncio.sleep(BEAT * 2.5)  # the loop's timer sees no socket left and ends
        loop = asyncio.get_running_loop()
        assert loop not in heartbeat._tasks

    run(scenario)


def test_a_heartbeat_does_not_disturb_the_events(beating, viewer_token):
    """An event committed between heartbeats arrives as it would without them."""

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        try:
            assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "heartbeat"}
            await database_sync_to_async(services.work_item_create)(
                title="Between beats", goal="g", work_item_type="software-change", actor="test")
            kinds = []
            while "event" not in kinds:
                kinds.append((await comm.receive_json_from(timeout=TIMEOUT))["type"])
            assert set(kinds) <= {"heartbeat", "event"}
        finally:
            await comm.disconnect()

    run(scenario)


def test_no_heartbeat_when_turned_off(settings, viewer_token):
    settings.WORKCENTER_STREAM_HEARTBEAT_S = 0

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        try:
            assert "heartbeat_s" not in hello
            assert await comm.receive_nothing(timeout=0.5)
        finally:
            await comm.disconnect()

    run(scenario)
