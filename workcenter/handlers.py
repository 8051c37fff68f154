"""Django's request cycle under ASGI in one thread hop, on threads that keep their DB connection.

Django's own `ASGIHandler` runs a sync project badly: every request gets a fresh thread
(`ThreadSensitiveContext`), so the thread-local database connection is opened and dropped per
request whatever CONN_MAX_AGE says, and the async-mode middleware chain hops between the event
loop and that thread about 17 times per request (each middleware's process_request and
process_response, both signals, the view, response.close). Measured on this project (SQLite,
in-process, no server): 0.3 ms for a 404 through the sync handler, 3 ms through ASGIHandler;
an authenticated GET 2 ms against 9 ms. Through daphne on PostgreSQL (a connection per request):
claim p50 36 ms with ASGIHandler, 24 ms with this handler, 15 ms for the same call in-process.

`SyncASGIHandler` reads the body on the event loop, then runs what WSGI would run — request_started,
the sync middleware chain and view, the response's close (request_finished) — as one call on a
small fixed pool of threads. Those threads live as long as the process, so with CONN_MAX_AGE each
keeps one database connection, checked and recycled by `close_old_connections` at the same request
boundaries as under WSGI. Streaming responses are sent by Django's ASGI code and closed afterwards.

It also bounds what a request may make the process hold: a body over WORKCENTER_MAX_BODY_BYTES is
answered with 413 (the API's error body, `extra.limit_bytes`) before it is read when its
`Content-Length` says so, else as soon as the bytes received pass the limit (a body sent without a
length). Django's own check (DATA_UPLOAD_MAX_MEMORY_SIZE) only counts a declared length, and only
once a view reads the body. Those answers never pass through the middleware chain, so they are
given its security headers here (workcenter/security_headers.py).
"""
from __future__ import annotations

import asyncio
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

from .instruments import HTTP_IN_FLIGHT
from .security_headers import secure_scope

logger = logging.getLogger("django.request")


class BodyTooLarge(Exception):
    pass


def get_asgi_application() -> SyncASGIHandler:
    """`django.core.asgi.get_asgi_application`, with this handler."""
    django.setup(set_prefix=False)
    return SyncASGIHandler()


class SyncASGIHandler(ASGIHandler):
    """An ASGI callable for a project whose middleware and views are sync (see the module doc)."""

    def __init__(self, threads: int | None = None) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        threads = threads or settings.WORKCENTER_HTTP_THREADS
        self.executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="wc-http")
        from . import middleware  # imports the API's models: only once django.setup() has run

        self.errors = middleware

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):
        limit = settings.WORKCENTER_MAX_BODY_BYTES
        try:
            if _declared_length(scope) > limit:
                raise BodyTooLarge()
            body_file = await self.read_body(receive, limit)
        except RequestAborted:
            return
        except BodyTooLarge:
            await self.send_response(self.too_large(scope, limit), send)
            return
        set_script_prefix(get_script_prefix(scope))
        loop = asyncio.get_running_loop()
        try:
            # run_in_executor does not carry the context; sync_to_async does (script prefix, locals)
            HTTP_IN_FLIGHT.inc()
            try:
                response = await sync_to_async(self.respond, thread_sensitive=False, executor=self.executor)(scope, body_file)
            finally:
                HTTP_IN_FLIGHT.dec()
            try:
                await self.send_response(response, send)
            finally:
                if response.streaming:  # sent from its iterator: close (request_finished) only now
                    await loop.run_in_executor(self.executor, response.close)
        finally:
            body_file.close()

    async def read_body(self, receive, limit: int):
        """The body, in a file that rolls over to disk; BodyTooLarge as soon as it passes `limit`."""
        body_file = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body_file.close()
                raise RequestAborted()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                body_file.close()
                raise BodyTooLarge()
            body_file.write(chunk)
            if not message.get("more_body", False):
                break
        body_file.seek(0)
        return body_file

    def too_large(self, scope, limit: int):
        logger.warning("Request body too large: %s", scope.get("path"), extra={"status_code": 413})
        # answered before the middleware chain, so its security headers are added here
        return secure_scope(scope, self.errors.error_response(*self.errors.body_too_large(limit)))

    def respond(self, scope, body_file):
        """The WSGI request cycle for one request, on a pool thread."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        elif self.errors.json_path(scope["path"]):
            # Django built no request (a query string that is not UTF-8), so no middleware ran
            response = secure_scope(scope, self.errors.json_error_page(response, path=scope["path"],
                                                                       method=scope["method"]))
        response._handler_class = self.__class__
        if not response.streaming:
            # the content is bytes by now: close (request_finished, connection checks) on this
            # thread, the one whose database connection the request used
            response.close()
        return response


def _declared_length(scope) -> int:
    """The request's Content-Length, -1 when it has none (or none that parses)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return -1
