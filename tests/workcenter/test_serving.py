"""What loading the ASGI application does to the web process (workcenter/serving.py): the two
Twisted per-request costs removed (the same answers, daphne's own access log untouched), and the
start-up heap frozen out of the garbage collector's way."""
import gc
import io
import sys
from http import client as http_client

from daphne.http_protocol import HTTPFactory
from twisted.web import http

import workcenter.asgi  # noqa: F401  (applies them, as daphne loading the application does)
from tests.live import free_port, start_daphne, stop_process, wait_until
from workcenter.serving import trim_server_overheads


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
