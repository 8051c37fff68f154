"""Websocket fixtures: users with or without the view permission, their credentials, and an
async runner (the tests are plain functions; each scenario runs on one event loop)."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from dashboard.stream.publisher import publisher
from workcenter.asgi import application
from workcenter.auth import api_token_create

TIMEOUT = 5


@pytest.fixture(autouse=True)
def channel_publisher():
    """The dashboard app registers the publisher at startup; other tests may have swapped it."""
    publisher.register()
    async_to_sync(get_channel_layer().flush)()
    yield
    publisher.register()


@pytest.fixture(autouse=True)
def no_overview_push(settings):
    """The list stream's overview messages (dashboard/stream/live_state.py) are off: these tests count
    the stream's event messages; the overview's own tests turn them on."""
    settings.WORKCENTER_STREAM_OVERVIEW = False
    yield
    publisher.overview.cancel()  # none due after the test


@pytest.fixture(autouse=True)
def no_heartbeat(settings):
    """No heartbeats (dashboard/stream/heartbeat.py): these tests count the messages a stream sends;
    the heartbeat's own tests turn them on."""
    settings.WORKCENTER_STREAM_HEARTBEAT_S = 0
    yield


@pytest.fixture
def viewer_token(viewer):
    return api_token_create(user=viewer, name="ws")[1]


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def run(scenario):
    """Run an async scenario to completion from a sync test."""
    return async_to_sync(scenario)()


async def open_stream(path: str, headers=None, expect_hello: bool = True):
    """Connect; returns (communicator, hello)."""
    comm = WebsocketCommunicator(application, path, headers=headers or [])
    connected, _ = await comm.connect(timeout=TIMEOUT)
    assert connected
    hello = await comm.receive_json_from(timeout=TIMEOUT) if expect_hello else None
    if expect_hello:
        assert hello["type"] == "hello", hello
    return comm, hello


async def close_code(comm) -> int:
    """The first output must be the close: nothing else may be sent before it."""
    out = await comm.receive_output(timeout=TIMEOUT)
    assert out["type"] == "websocket.close", out
    return out["code"]


async def receive_all(comm, n: int) -> list[dict]:
    return [await comm.receive_json_from(timeout=TIMEOUT) for _ in range(n)]
