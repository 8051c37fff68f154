"""Websocket routes (API.md §4) and who the caller is.

Credentials, in this order: `Authorization: Bearer <token>` on the upgrade request, else the
token as a subprotocol, else `?token=<token>`, else the session cookie. A token that is present
but unusable is "no credentials" (4401), never a fallback to the session.

The subprotocol form is for clients that cannot set headers (a browser's `new WebSocket(url,
["workcenter.bearer", token])`): they offer `Sec-WebSocket-Protocol: workcenter.bearer, <token>`,
the token being the value right after `workcenter.bearer` (a token `wc_<hex>_<urlsafe base64>`
is a valid RFC 6455 protocol name). The server answers `workcenter.bearer`, never the token, on
every route and also when it then closes with 4401/4403/4404 (a browser that offered a
subprotocol fails a handshake answered without one, and would never see the close code). Unlike
`?token=`, it stays out of URLs, so out of every access log (daphne's redacts the query string
anyway: workcenter/serving.py; a proxy's does not, unless configured as docs/deployment.md shows).

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

from workcenter.auth import MalformedAuthorization, api_token_user, bearer_token

from .stream.consumers import WorkItemStreamConsumer
from .workers_stream import WorkersStreamConsumer

BEARER_SUBPROTOCOL = "workcenter.bearer"


class UnknownRouteConsumer(AsyncWebsocketConsumer):
    """Any other websocket path: accepted, then closed with 4404, as an unknown item is. Without
    it the router raises "No route found" and daphne answers the upgrade with a 500."""

    async def connect(self):
        await self.accept()
        await self.close(code=4404)


websocket_urlpatterns = [
    path("ws/work-items/", WorkItemStreamConsumer.as_asgi()),
    path("ws/work-items/<str:item_id>/", WorkItemStreamConsumer.as_asgi()),
    path("ws/workers/", WorkersStreamConsumer.as_asgi()),
    re_path(r"", UnknownRouteConsumer.as_asgi()),
]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def stream_token(scope) -> str | None:
    """The bearer token of the upgrade request: header first (read as the HTTP API reads it,
    workcenter.auth.bearer_token), then the subprotocol, then `?token=`. None when there is none
    of them (the session counts); `""` for a present but malformed header, `workcenter.bearer`
    offered with no value after it or an empty `?token=` (none may fall back to the session)."""
    header = _header(scope, b"authorization")
    if header is not None:
        try:
            return bearer_token(header)
        except MalformedAuthorization:
            return ""
    offered = scope.get("subprotocols") or ()
    if BEARER_SUBPROTOCOL in offered:
        after = offered.index(BEARER_SUBPROTOCOL) + 1
        return offered[after].strip() if after < len(offered) else ""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True).get("token")
    return values[-1].strip() if values else None


def answering_bearer_subprotocol(send):
    """`send`, with `workcenter.bearer` as the subprotocol of the accept (unless the consumer
    chose one): the client offered it, so the handshake must name it."""
    async def answered(message):
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": BEARER_SUBPROTOCOL}
        await send(message)
    return answered


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
        if BEARER_SUBPROTOCOL in (scope.get("subprotocols") or ()):
            send = answering_bearer_subprotocol(send)
            # nothing after this sees the token among the offered subprotocols (or could echo it)
            scope["subprotocols"] = [BEARER_SUBPROTOCOL]
        if token is not None:
            user = await database_sync_to_async(api_token_user)(token) if token else None
            scope["user"] = user or AnonymousUser()
        elif not same_origin(scope):
            scope["user"] = AnonymousUser()
        return await super().__call__(scope, receive, send)


websocket_application = AuthMiddlewareStack(StreamAuthMiddleware(URLRouter(websocket_urlpatterns)))
