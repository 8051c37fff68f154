"""What loading the ASGI application does to the web process (workcenter/serving.py): the two
Twisted per-request costs removed (the same answers, daphne's own access log still written), no
credential of a query string in that access log, and the start-up heap frozen out of the garbage
collector's way."""
import gc
import io
import sys
from http import client as http_client

from daphne.access import AccessLogGenerator
from daphne.http_protocol import HTTPFactory
from daphne.server import Server
from twisted.web import http

import workcenter.asgi  # noqa: F401  (applies them, as daphne loading the application does)
from tests.live import free_port, start_daphne, stop_process, wait_until
from workcenter.serving import REDACTED, redact_access_log, redact_path, trim_server_overheads


def test_content_type_parse_is_memoised_with_the_same_answers():
    parse = http._parseContentType
    assert hasattr(parse, "cache_info")
    for raw, kind in [(b"application/json", b"application/json"),
                      (b"Application/JSON; charset=utf-8", b"application/json"),
                      (b"multipart/form-data; boundary=xyz", b"multipart/form-data"),
                      (b"application/x-www-form-urlencoded", b"application/x-www-form-urlencoded"),
                      (b"garbage", b"text/plain")]:
        assert parse(raw) == kind == parse.__wrapped__(raw)
    before = parse.cache_info().hits
    parse(b"application/json")
    assert parse.cache_info().hits == before + 1
    trim_server_overheads()  # applying twice wraps once
    assert http._parseContentType is parse


def test_twisteds_access_line_is_dropped():
    assert HTTPFactory.log is not http.HTTPFactory.log
    factory = HTTPFactory(server=None)
    factory._logFile = io.StringIO()
    factory.log(object())  # Twisted's would format a combined-log line from the request
    assert factory._logFile.getvalue() == ""


def test_a_real_daphne_still_writes_its_own_access_log(django_db_setup, django_db_blocker, tmp_path):
    # daphne at its default verbosity logs each request itself, whatever the content type
    log = tmp_path / "daphne.log"
    port = free_port()
    with django_db_blocker.unblock(), open(log, "wb") as out:
        proc = start_daphne(port, {"DJANGO_DEBUG": "1", "WORKCENTER_LOG_LEVEL": "WARNING"}, stdout=out)
    try:
        conn = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
        for ctype, body in [("application/json", b"{}"), ("application/x-www-form-urlencoded", b"a=1")]:
            conn.request("POST", "/api/v1/claims", body=body, headers={"Content-Type": ctype})
            response = conn.getresponse()
            response.read()
            assert response.status == 401
        conn.close()
        assert wait_until(lambda: log.read_text().count('"POST /api/v1/claims" 401') == 2, 10)
    finally:
        stop_process(proc)


def test_the_start_up_heap_is_frozen_with_the_urlconf_loaded():
    # loading the application froze what start-up made (the URLconf and what it imports among it),
    # so a full collection walks only what requests made since
    assert "workcenter.api" in sys.modules and "workcenter.urls" in sys.modules
    assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()


SECRET = "wc_0a1b2c3d_Zk9-x_Q2vR7TtY0uIoPlKjHgFdSaMnBvCxZ1234567"


def test_redact_path_hides_credential_parameters_and_any_token():
    assert REDACTED == "[redacted]"
    for raw, logged in [
        ("/api/v1/claims", "/api/v1/claims"),
        ("/api/v1/events?after_id=5&limit=10", "/api/v1/events?after_id=5&limit=10"),
        (f"/ws/work-items/?token={SECRET}&after_id=3", "/ws/work-items/?token=[redacted]&after_id=3"),
        ("/x?access_token=abc&ticket=def&Api-Key=ghi&password=jkl", "/x?access_token=[redacted]&ticket=[redacted]"
                                                                   "&Api-Key=[redacted]&password=[redacted]"),
        ("/x?%74oken=abc&TOKEN=def&refresh_token=ghi", "/x?%74oken=[redacted]&TOKEN=[redacted]&refresh_token=[redacted]"),
        ("/x?token=&session_id=s1&search=a+b", "/x?token=&session_id=s1&search=a+b"),  # nothing to hide; filters kept
        (f"/x?t={SECRET}", "/x?t=wc_0a1b2c3d_[redacted]"),  # a token under any name keeps only its prefix
        (f"/x?{SECRET}", "/x?wc_0a1b2c3d_[redacted]"),
        (f"/api/v1/{SECRET}/x", "/api/v1/wc_0a1b2c3d_[redacted]/x"),
        (f"/x?a=token%3D{SECRET}", "/x?a=token%3Dwc_0a1b2c3d_[redacted]"),
    ]:
        assert redact_path(raw) == logged, raw
        assert "Zk9-x" not in redact_path(raw)


def test_daphnes_access_log_lines_are_redacted():
    redact_access_log()  # applying twice wraps once
    assert Server.log_action.redacts and Server.log_action.__wrapped__.__name__ == "log_action"
    out = io.StringIO()
    server = Server.__new__(Server)  # only its action logger is used
    server.action_logger = AccessLogGenerator(out)
    details = {"path": f"/api/v1/claims?token={SECRET}", "status": 401, "method": "POST",
               "client": "127.0.0.1:5", "time_taken": 0.01, "size": 10}
    server.log_action("http", "complete", details)
    server.log_action("websocket", "connecting", {"path": f"/ws/work-items/?token={SECRET}", "client": None})
    lines = out.getvalue().splitlines()
    assert '"POST /api/v1/claims?token=[redacted]" 401 10' in lines[0]
    assert '"WSCONNECTING /ws/work-items/?token=[redacted]"' in lines[1]
    assert details["path"].endswith(SECRET)  # the caller's details are not changed
