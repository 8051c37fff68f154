"""Two per-request costs of daphne's HTTP stack (Twisted) that buy nothing, removed when the ASGI
application is loaded (workcenter/asgi.py). Measured with py-spy on a daphne process serving the
worker protocol (4 clients, PostgreSQL): together about 6 % of the process's CPU.

* Twisted parses every POST's `Content-Type` with the standard library's e-mail header parser
  (`twisted.web.http._parseContentType`, to find form submissions) — 4 % of the process. The
  answer depends on the header's bytes alone and clients send the same few values, so it is
  memoised (bounded: at most 256 distinct headers are kept).
* Twisted's `HTTPFactory.log` formats a combined-log-format line for every request and hands it
  to Twisted's log, which daphne points at nowhere (verbosity ≤ 1) or at the standard logging
  beside its own access log (higher verbosity) — 1.6 % of the process. Daphne's access log
  (`--access-log`, or stdout at verbosity ≥ 1) is untouched: it is written by daphne itself.

Each is applied only if the attribute it replaces exists, so a Twisted or daphne release that
renames them is served as it ships.
"""
from __future__ import annotations

import functools


def trim_server_overheads() -> None:
    try:  # local: the web process imports Twisted; workers and commands never do
        from twisted.web import http
    except ImportError:  # not running under daphne/Twisted
        return
    parse = getattr(http, "_parseContentType", None)
    if parse is not None and not hasattr(parse, "cache_info"):
        http._parseContentType = functools.lru_cache(maxsize=256)(parse)
    try:  # local, as above: daphne is only present where it serves
        from daphne.http_protocol import HTTPFactory
    except ImportError:
        return
    if "log" not in HTTPFactory.__dict__ and hasattr(HTTPFactory, "log"):
        HTTPFactory.log = _no_twisted_access_line


def _no_twisted_access_line(self, request) -> None:
    """Twisted's own access-log line, dropped (daphne writes the access log)."""
