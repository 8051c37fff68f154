"""Websocket routes (API.md §4) and who the caller is.

Credentials, as on the HTTP API: `Authorization: Bearer <token>` on the upgrade request, else
`?token=<token>`, else the session cookie. A token that is present but unusable is "no
credentials" (4401), never a fallback to the session.

Cross-site websocket hijacking: a browser sends the session cookie along with any page's
websocket, and always sends `Origin`. So the session counts only when `Origin` is absent
(non-browser clients send none, and hold no victim's cookie) or names this very host (the
`Host` header, as Django's CSRF check does) or one of `CSRF_TRUSTED_ORIGINS`. We don't use
`AllowedHostsOriginValidator`: it refuses every client without an Origin as soon as
ALLOWED_HOSTS is not `*`, and with `*` (the development default) it accepts every site.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.middleware import BaseMiddleware
from channels.routing import URLRouter
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.urls import path, re_path

from workcenter.auth import api_token_user

from .consumers import WorkItemStreamConsumer



class UnknownRouteConsumer(AsyncWebsocketConsumer):
    """Any other websocket path: accepted, then closed with 4404, as an unknown item is. Without
    it the router raises "No route found" and daphne answers the upgrade with a 500."""

    async def connect(self):
        await self.accept()
        await self.close(code=4404)


websocket_urlpatterns = [
    path("ws/work-items/", WorkItemStreamConsumer.as_asgi()),
    path("ws/work-items/<str:item_id>/", WorkItemStreamConsumer.as_asgi()),
    re_path(r"", UnknownRouteConsumer.as_asgi()),
]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def stream_token(scope) -> str | None:
    """The bearer token of the upgrade request: header first, then `?token=`. `""` for a
    present but malformed header (it must not fall back to the session)."""
    header = _header(scope, b"authorization")
    if header is not None:
        scheme, _, raw = header.strip().partition(" ")
        return raw.strip() if scheme.lower() == "bearer" else ""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return values[-1].strip() if values else None


def same_origin(scope) -> bool:
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    origin = origin.strip().lower()
    host = (_header(scope, b"host") or "").strip().lower()
    if host and origin in (f"http://{host}", f"https://{host}"):
        return True
    return origin in {o.lower() for o in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])}


class StreamAuthMiddleware(BaseMiddleware):
    """Sits inside AuthMiddlewareStack: replaces the session user by the token's user when a
    token is given, and drops a session that a foreign page tried to use."""

    async def __call__(self, scope, receive, send):
        scope = dict(scope)
        token = stream_token(scope)
        if token is not None:
            user = await database_sync_to_async(api_token_user)(token) if token else None
            scope["user"] = user or AnonymousUser()
        elif not same_origin(scope):
            scope["user"] = AnonymousUser()
        return await super().__call__(scope, receive, send)


websocket_application = AuthMiddlewareStack(StreamAuthMiddleware(URLRouter(websocket_urlpatterns)))
