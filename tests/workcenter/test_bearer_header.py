"""One reading of the `Authorization` header (workcenter.auth.bearer_token) for every door: the HTTP
API (TokenAuth), GET /metrics and /healthz, and the websocket upgrade (dashboard/routing.py). No
header: the session counts. `Bearer <token>` (the scheme in any case, spaces around and between):
the token. Anything else present: refused, 401 (a websocket: closed with 4401), never the session."""
from __future__ import annotations

import pytest
from django.test import Client

from dashboard.routing import stream_token
from tests.dashboard.conftest import close_code, open_stream, run, session_cookie
from workcenter import health
from workcenter.auth import MalformedAuthorization, api_token_create, bearer_token

pytestmark = pytest.mark.django_db(transaction=True)

# present but unusable: `{token}` is a valid token of a user who may view, so only the header's
# shape refuses it
MALFORMED = [
    "",
    "   ",
    "Bearer",
    "Bearer  ",
    "Basic x",
    "Basic YWxpY2U6cHc=",
    "Token {token}",
    "Bearer{token}",
    "Bearer\t{token}",
    "Bearer {token} trailing",
    "Bearer {token},Bearer {token}",
    "Bearer wc_x garbage",
]
# well formed: the scheme in any case, one or more spaces, blanks around (RFC 6750 §2.1)
WELL_FORMED = ["Bearer {token}", "bearer {token}", "BEARER {token}", "Bearer  {token}", "  Bearer {token}  "]


@pytest.fixture
def token(viewer):
    return api_token_create(user=viewer, name="doors")[1]


@pytest.fixture
def signed_in(viewer):
    """A client with the viewer's session: a refused header must not fall back to it."""
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture(autouse=True)
def _no_probe_thread(monkeypatch):
    monkeypatch.setattr(health.probe, "ensure_started", lambda: None)


def test_the_parser_answers_no_header_a_token_or_malformed():
    assert bearer_token(None) is None
    for header in WELL_FORMED:
        assert bearer_token(header.format(token="wc_ab_cd")) == "wc_ab_cd", header
    assert bearer_token("bearer wc_x") == "wc_x"  # well formed; the lookup refuses the token
    for header in MALFORMED:
        with pytest.raises(MalformedAuthorization):
            bearer_token(header.format(token="wc_ab_cd"))


def test_the_api_refuses_a_malformed_header_with_401_despite_the_session(signed_in, token):
    assert signed_in.get("/api/v1/work-items").status_code == 200  # the session alone is enough
    for header in MALFORMED + ["bearer wc_x"]:
        r = signed_in.get("/api/v1/work-items", HTTP_AUTHORIZATION=header.format(token=token))
        assert r.status_code == 401, header
        assert r.json()["code"] == "not_authenticated", header
    for header in WELL_FORMED:
        r = Client().get("/api/v1/work-items", HTTP_AUTHORIZATION=header.format(token=token))
        assert r.status_code == 200, header


def test_metrics_refuse_a_malformed_header_with_401_and_health_says_the_status_only(signed_in, token, settings):
    settings.WORKCENTER_METRICS_TOKEN = "scrape-secret-123"
    health.probe.probe_once()
    assert signed_in.get("/metrics").status_code == 200
    for header in MALFORMED + ["bearer wc_x", "Bearer  scrape-secret-123 x"]:
        r = signed_in.get("/metrics", HTTP_AUTHORIZATION=header.format(token=token))
        assert r.status_code == 401, header
        assert r.json()["code"] == "not_authenticated", header
        # a health check does not fail for a bad credential, nor say more than the status
        r = signed_in.get("/healthz", HTTP_AUTHORIZATION=header.format(token=token))
        assert r.status_code in (200, 503) and set(r.json()) == {"status"}, header
    for header in WELL_FORMED + ["bearer scrape-secret-123", "Bearer  scrape-secret-123"]:
        r = Client().get("/metrics", HTTP_AUTHORIZATION=header.format(token=token))
        assert r.status_code == 200, header


def test_the_stream_closes_4401_on_a_malformed_header_despite_the_session(viewer, token):
    cookie = [(b"cookie", session_cookie(viewer))]

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/", headers=cookie)  # the session alone is enough
        await comm.disconnect()
        for header in MALFORMED + ["bearer wc_x"]:
            raw = header.format(token=token).encode("latin-1")
            comm, _ = await open_stream("/ws/work-items/", headers=[(b"authorization", raw)] + cookie,
                                        expect_hello=False)
            assert await close_code(comm) == 4401, header
        for header in WELL_FORMED:
            raw = header.format(token=token).encode("latin-1")
            comm, hello = await open_stream("/ws/work-items/", headers=[(b"authorization", raw)])
            assert hello["type"] == "hello", header
            await comm.disconnect()
    run(scenario)


def test_the_stream_reads_the_header_as_the_api_does_and_never_falls_back():
    def scope(header=None, query=b""):
        headers = [] if header is None else [(b"authorization", header.encode("latin-1"))]
        return {"headers": headers, "subprotocols": [], "query_string": query}

    assert stream_token(scope()) is None  # nothing given: the session counts
    for header in WELL_FORMED:
        assert stream_token(scope(header.format(token="wc_ab_cd"), b"token=wc_q_q")) == "wc_ab_cd", header
    for header in MALFORMED:
        # "" is "no credentials": neither ?token= nor the session is tried
        assert stream_token(scope(header.format(token="wc_ab_cd"), b"token=wc_q_q")) == "", header
    assert stream_token(scope(query=b"token=")) == ""  # an empty ?token= is present too
