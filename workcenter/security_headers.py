"""The security headers of every answer, including the ones made outside Django's middleware chain.

Django's `SecurityMiddleware` (`X-Content-Type-Options`, `Referrer-Policy`,
`Cross-Origin-Opener-Policy`, HSTS over HTTPS), `XFrameOptionsMiddleware` (`X-Frame-Options`) and
this project's Content-Security-Policy (workcenter/security.py, HTML only) add them to whatever
passes through the chain. Some answers never do: the body limit's 413 (workcenter/handlers.py,
sent before the body is read, and workcenter/middleware.py, which runs before the others), a
refused Host, the ASGI-level `/healthz` (workcenter/health.py) and static files
(workcenter/staticfiles.py). Those call `secure` here, which runs the same middleware's response
step on them, so the headers follow the settings exactly as they do for every other answer.
"""
from __future__ import annotations

import io

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from .security import ContentSecurityPolicyMiddleware


def _not_called(request):
    raise AssertionError("only the response step of the middleware runs here")


def secure(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """`response` with the headers the security middleware of MIDDLEWARE would have added."""
    response = XFrameOptionsMiddleware(_not_called).process_response(request, response)
    response = ContentSecurityPolicyMiddleware(lambda _request: response)(request)
    return SecurityMiddleware(_not_called).process_response(request, response)


def request_of(scope: dict) -> HttpRequest:
    """A request for `scope` that reads no body (enough to say whether it came over HTTPS)."""
    try:
        return ASGIRequest(scope, io.BytesIO())
    except UnicodeDecodeError:  # a path or query Django cannot decode: answered as plain HTTP
        return HttpRequest()


def secure_scope(scope: dict, response: HttpResponse) -> HttpResponse:
    return secure(request_of(scope), response)


def security_headers(scope: dict, content_type: str) -> list[tuple[bytes, bytes]]:
    """The headers (ASGI form) that the security middleware adds to an answer of `content_type`."""
    response = secure_scope(scope, HttpResponse(content_type=content_type))
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.items()
            if name.lower() != "content-type"]


def asgi_headers(response: HttpResponse) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
