"""Static files at the ASGI level: `/static/...` is answered from WhiteNoise's file index before
Django's request cycle, so a file never takes one of the HTTP threads (workcenter/handlers.py)
or their database connections, and its content is read off the event loop in chunks.

WhiteNoise (6.x) is a WSGI application and a sync Django middleware; under ASGI its middleware's
file response is a sync iterator that Django reads whole, with a warning, on every request. So
this app uses WhiteNoise for what it is good at, the index: which URL is which file, the
compressed variant a client accepts, ETag / Last-Modified / 304, Range, Cache-Control, MIME
types (WHITENOISE_* settings apply), and sends the file itself.

Where the files come from (settings.py, "Static files"): debug on, the app directories, looked
up on every request (edits show at once, no collectstatic); debug off, STATIC_ROOT as
`manage.py collectstatic` left it, indexed once at start, or the app directories (indexed once,
uncompressed, with a warning) while STATIC_ROOT holds nothing.
"""
from __future__ import annotations

import asyncio
import logging
import os

from django.conf import settings
from whitenoise.middleware import WhiteNoiseMiddleware

from .security_headers import security_headers

logger = logging.getLogger("workcenter.staticfiles")

CHUNK = 64 * 1024


def collected(root) -> bool:
    """Whether collectstatic has filled `root`."""
    try:
        with os.scandir(root) as entries:
            return any(True for _ in entries)
    except (FileNotFoundError, NotADirectoryError, TypeError):
        return False


class _Settings:
    """Django's settings with a few of WhiteNoise's overridden (WhiteNoiseMiddleware reads its
    configuration from the settings object it is given)."""

    def __init__(self, **overrides):
        self._overrides = overrides

    def __getattr__(self, name):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(settings, name)


def file_index() -> WhiteNoiseMiddleware:
    if settings.DEBUG:
        # the app directories only: an old collectstatic copy must not shadow a deleted file
        return WhiteNoiseMiddleware(settings=_Settings(WHITENOISE_USE_FINDERS=True, WHITENOISE_AUTOREFRESH=True,
                                                       STATIC_ROOT=None))
    if collected(settings.STATIC_ROOT):
        return WhiteNoiseMiddleware(settings=_Settings(WHITENOISE_USE_FINDERS=False, WHITENOISE_AUTOREFRESH=False))
    logger.warning("static files: %s holds no collected files; serving them from the app directories, "
                   "uncompressed. Run `manage.py collectstatic --noinput` as part of the deployment.",
                   settings.STATIC_ROOT)
    return WhiteNoiseMiddleware(settings=_Settings(WHITENOISE_USE_FINDERS=True, WHITENOISE_AUTOREFRESH=False,
                                                   STATIC_ROOT=None))


def _request_headers(scope) -> dict[str, str]:
    """The request headers as WhiteNoise reads them (WSGI / Django META names)."""
    meta = {}
    for key, value in scope.get("headers", []):
        name = "HTTP_" + key.decode("latin-1").upper().replace("-", "_")
        value = value.decode("latin-1")
        meta[name] = f"{meta[name]},{value}" if name in meta else value
    return meta


class StaticFilesApp:
    """ASGI middleware: serves the static files it knows, passes everything else to `app`."""

    def __init__(self, app, index: WhiteNoiseMiddleware | None = None):
        self.app = app
        self.index = index or file_index()
        self.prefix = self.index.static_prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            static_file = await self._find(scope["path"])
            if static_file is not None:
                return await self._serve(static_file, scope, send)
        return await self.app(scope, receive, send)

    async def _find(self, path: str):
        if self.index.autorefresh:  # looks at the file system
            return await asyncio.get_running_loop().run_in_executor(None, self.index.find_file, path)
        return self.index.files.get(path)

    async def _serve(self, static_file, scope, send) -> None:
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(None, static_file.get_response, scope["method"],
                                              _request_headers(scope))
        headers = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in response.headers]
        content_type = next((str(v) for k, v in response.headers if k.lower() == "content-type"), "")
        headers.extend(security_headers(scope, content_type))  # as Django's answers carry
        await send({"type": "http.response.start", "status": int(response.status), "headers": headers})
        file = response.file
        if file is None:
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            while True:
                chunk = await loop.run_in_executor(None, file.read, CHUNK)
                if not chunk:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            file.close()
