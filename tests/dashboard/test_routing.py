"""Who the stream's caller is (dashboard/routing.py): the token offered as a subprotocol, beside the
header, the query string and the session cookie that tests/dashboard/test_consumers.py covers."""
from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from dashboard.routing import BEARER_SUBPROTOCOL, stream_token
from workcenter.asgi import application
from workcenter.auth import api_token_create

from .conftest import TIMEOUT, close_code, run, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def connect(path: str, subprotocols: list[str], headers=None):
    """(communicator, accepted subprotocol); the handshake must be accepted."""
    comm = WebsocketCommunicator(application, path, headers=headers or [], subprotocols=subprotocols)
    connected, subprotocol = await comm.connect(timeout=TIMEOUT)
    assert connected
    return comm, subprotocol


def test_the_token_as_subprotocol_opens_the_stream_answered_with_the_bearer_name_only(viewer_token):
    async def scenario():
        for path in ("/ws/work-items/", "/ws/work-items/?after_id=0"):
            comm, subprotocol = await connect(path, [BEARER_SUBPROTOCOL, viewer_token])
            assert subprotocol == "workcenter.bearer"  # never the token
            hello = await comm.receive_json_from(timeout=TIMEOUT)
            assert hello["type"] == "hello" and hello["last_event_id"] == 0
            await comm.disconnect()
    run(scenario)


def test_a_bad_or_missing_subprotocol_token_closes_4401_without_session_fallback(viewer):
    cookie = [(b"cookie", session_cookie(viewer))]

    async def scenario():
        for offered in ([BEARER_SUBPROTOCOL, "wc_nope_nope"], [BEARER_SUBPROTOCOL], ["wc_x_y", BEARER_SUBPROTOCOL]):
            comm, subprotocol = await connect("/ws/work-items/", offered, headers=cookie)
            # answered with the offered name, so a browser gets to read the close code
            assert subprotocol == BEARER_SUBPROTOCOL
            assert await close_code(comm) == 4401
            assert await comm.receive_nothing()
    run(scenario)


def test_refusals_and_unknown_routes_answer_the_bearer_subprotocol(db, viewer_token):
    nobody = User.objects.create_user("nobody")
    _, nobody_token = api_token_create(user=nobody, name="no-view")

    async def scenario():
        for path, token, code in [("/ws/work-items/", nobody_token, 4403),
                                  ("/ws/nope/", viewer_token, 4404),
                                  ("/ws/work-items/no-such-item/", viewer_token, 4404),
                                  ("/ws/work-items/?after_id=x", viewer_token, 4400)]:
            comm, subprotocol = await connect(path, [BEARER_SUBPROTOCOL, token])
            assert subprotocol == BEARER_SUBPROTOCOL
            assert await close_code(comm) == code, path
    run(scenario)


def test_other_subprotocols_are_neither_credentials_nor_answered(viewer_token):
    async def scenario():
        comm, subprotocol = await connect("/ws/work-items/", ["chat", viewer_token])
        assert subprotocol is None
        assert await close_code(comm) == 4401
    run(scenario)


def test_stream_token_order_header_then_subprotocol_then_query():
    def scope(headers=(), subprotocols=(), query=b""):
        return {"headers": list(headers), "subprotocols": list(subprotocols), "query_string": query}

    header = [(b"authorization", b"Bearer wc_a_header")]
    offered = [BEARER_SUBPROTOCOL, "wc_b_protocol"]
    assert stream_token(scope(header, offered, b"token=wc_c_query")) == "wc_a_header"
    assert stream_token(scope((), offered, b"token=wc_c_query")) == "wc_b_protocol"
    assert stream_token(scope((), ["chat"], b"token=wc_c_query")) == "wc_c_query"
    assert stream_token(scope((), [BEARER_SUBPROTOCOL], b"token=wc_c_query")) == ""  # malformed: no fallback
    assert stream_token(scope((), ["chat"])) is None
