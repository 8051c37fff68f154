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
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix


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

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        loop = asyncio.get_running_loop()
        try:
            # run_in_executor does not carry the context; sync_to_async does (script prefix, locals)
            response = await sync_to_async(self.respond, thread_sensitive=False, executor=self.executor)(scope, body_file)
            try:
                await self.send_response(response, send)
            finally:
                if response.streaming:  # sent from its iterator: close (request_finished) only now
                    await loop.run_in_executor(self.executor, response.close)
        finally:
            body_file.close()

    def respond(self, scope, body_file):
        """The WSGI request cycle for one request, on a pool thread."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        response._handler_class = self.__class__
        if not response.streaming:
            # the content is bytes by now: close (request_finished, connection checks) on this
            # thread, the one whose database connection the request used
            response.close()
        return response
