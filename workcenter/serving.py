"""What the web process does once its ASGI application is loaded (workcenter/asgi.py): no secret in
its access log (redact_access_log, below), the start-up heap frozen out of the garbage
collector's way (freeze_startup_heap), and two per-request costs of daphne's HTTP stack (Twisted)
that buy nothing, removed. Those two, measured with py-spy on a daphne process serving the
worker protocol (4 clients, PostgreSQL): together about 6 % of the process's CPU.

* Twisted parses every POST's `Content-Type` with the standard library's e-mail header parser
  (`twisted.web.http._parseContentType`, to find form submissions) — 4 % of the process. The
  answer depends on the header's bytes alone and clients send the same few values, so it is
  memoised (bounded: at most 256 distinct headers are kept).
* Twisted's `HTTPFactory.log` formats a combined-log-format line for every request and hands it
  to Twisted's log, which daphne points at nowhere (verbosity ≤ 1) or at the standard logging
  beside its own access log (higher verbosity) — 1.6 % of the process. That line also carries
  the query string as sent, credentials included. Daphne's access log (`--access-log`, or stdout
  at verbosity ≥ 1) is written by daphne itself, redacted as below.

And one thing Twisted gets wrong: its table of reason phrases (`twisted.web.http.RESPONSES`) stops
at the codes of RFC 2616, so a 422 went out as `HTTP/1.1 422 Unknown Status` (an ASGI answer
carries a status code only; the server writes the phrase). standard_reason_phrases fills in the
standard phrase (RFC 9110, from the standard library's HTTPStatus) of every code it lacks.

Each is applied only if the attribute it replaces exists, so a Twisted or daphne release that
renames them is served as it ships (for the redaction, tests/e2e/test_access_log_secrets.py then
fails: a release that logs elsewhere must be looked at before it is used).
"""
from __future__ import annotations

import functools
import gc
import re
from http import HTTPStatus
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
# Query parameters whose values are credentials (compared lower-cased, `-` read as `_`): API.md
# §4's `?token=`, what other clients and proxies name theirs, Django's cookie names.
SECRET_QUERY_KEYS = frozenset({
    "token", "access_token", "auth_token", "api_token", "bearer", "ticket", "api_key", "apikey", "key",
    "secret", "client_secret", "password", "passwd", "authorization", "auth", "sessionid", "csrftoken",
    "csrfmiddlewaretoken", "signature", "sig"})
SECRET_QUERY_SUFFIXES = ("token", "secret", "password", "ticket", "_key")
# A token of workcenter/auth.py anywhere in the line (`wc_<prefix>_<secret>`, under another
# parameter name or in the path): the prefix stays (it names the token, as listings do).
TOKEN_SHAPE = re.compile(r"wc_([0-9a-f]{1,32})_[A-Za-z0-9_-]+")


def trim_server_overheads() -> None:
    try:  # local: the web process imports Twisted; workers and commands never do
        from twisted.web import http
    except ImportError:  # not running under daphne/Twisted
        return
    standard_reason_phrases(http)
    parse = getattr(http, "_parseContentType", None)
    if parse is not None and not hasattr(parse, "cache_info"):
        http._parseContentType = functools.lru_cache(maxsize=256)(parse)
    try:  # local, as above: daphne is only present where it serves
        from daphne.http_protocol import HTTPFactory
    except ImportError:
        return
    if "log" not in HTTPFactory.__dict__ and hasattr(HTTPFactory, "log"):
        HTTPFactory.log = _no_twisted_access_line


def standard_reason_phrases(http) -> None:
    """The status line of every code says its standard phrase (`422 Unprocessable Content`, `429 Too
    Many Requests`), never Twisted's `Unknown Status`; codes Twisted knows keep its phrase. `http`
    is `twisted.web.http`, imported by trim_server_overheads, which calls this."""
    for status in HTTPStatus:
        # 422: RFC 9110 §15.5.21 renamed it; the standard library (3.11) still says "Unprocessable Entity"
        phrase = "Unprocessable Content" if status == HTTPStatus.UNPROCESSABLE_ENTITY else status.phrase
        http.RESPONSES.setdefault(status.value, phrase.encode("ascii"))


def _no_twisted_access_line(self, request) -> None:
    """Twisted's own access-log line, dropped (daphne writes the access log)."""


def secret_query_key(key: str) -> bool:
    name = unquote_plus(key).strip().lower().replace("-", "_")
    return name in SECRET_QUERY_KEYS or name.endswith(SECRET_QUERY_SUFFIXES)


def redact_path(path: str) -> str:
    """`path?query` as an access log may show it: the values of credential parameters replaced
    by `[redacted]`, and any API token's secret too, wherever it appears; the rest unchanged
    (as sent, not decoded)."""
    if "?" not in path and "wc_" not in path:
        return path
    base, sep, query = path.partition("?")
    if query:
        pairs = query.split("&")
        for i, pair in enumerate(pairs):
            key, eq, value = pair.partition("=")
            if eq and value and secret_query_key(key):
                pairs[i] = f"{key}={REDACTED}"
        query = "&".join(pairs)
    return TOKEN_SHAPE.sub(lambda m: f"wc_{m[1]}_{REDACTED}", base + sep + query)


def redact_access_log() -> None:
    """Every access-log entry daphne writes goes through `Server.log_action` (the `--access-log`
    file or stdout, and the lines of daphne's `runserver`): its `path` is redacted there first.

    Why: daphne logs an HTTP request's path with its query string, so a client that sends its
    token as `?token=` (API.md §4 names it for websockets; a confused client may try it on the
    HTTP API too, which refuses it with 401) would leave the secret in the log. A websocket's
    line carries no query string, but is redacted all the same."""
    try:  # local: daphne is only present where it serves
        from daphne.server import Server
    except ImportError:
        return
    log_action = Server.__dict__.get("log_action")
    if log_action is None or getattr(log_action, "redacts", False):
        return

    @functools.wraps(log_action)
    def redacted_log_action(self, protocol, action, details):
        path = details.get("path")
        if isinstance(path, str):
            details = {**details, "path": redact_path(path)}
        return log_action(self, protocol, action, details)

    redacted_log_action.redacts = True
    Server.log_action = redacted_log_action


def freeze_startup_heap() -> None:
    """Load what the first requests would load, collect once, and freeze what is left (gc.freeze):
    the cyclic garbage collector then never walks the server's start-up heap again.

    Why: a daphne process holds a few hundred thousand long-lived objects (Django, ninja and
    pydantic's models, Twisted, the URLconf, the admin). Every full (generation 2) collection
    walks all of them while it holds the GIL: 60–90 ms on this project's benchmark machine, a few
    times a minute under load. Every request thread stops for that long — a claim holding its
    candidate's row locks among them, so other workers see the candidate as taken and wait too.
    Frozen, they are skipped by every collection (objects made later are collected as usual).
    The price: start-up objects that later become cyclic garbage are never freed; start-up makes
    modules, classes and caches, which live as long as the process anyway.
    """
    from django.urls import get_resolver  # local: called once the ASGI application is built
    _ = get_resolver().url_patterns  # imports the URLconf: the API, the admin, the dashboard's views
    gc.collect()
    gc.freeze()
