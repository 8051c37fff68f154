"""What the web process does once its ASGI application is loaded (workcenter/asgi.py): the start-up
heap frozen out of the garbage collector's way (freeze_startup_heap, below), and two per-request
costs of daphne's HTTP stack (Twisted) that buy nothing, removed. Those two, measured with py-spy
on a daphne process serving the worker protocol (4 clients, PostgreSQL): together about 6 % of the
process's CPU.

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
import gc


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
    get_resolver().url_patterns  # imports the URLconf: the API, the admin, the dashboard's views
    gc.collect()
    gc.freeze()
