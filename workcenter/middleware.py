"""Every answer on the API's paths is the API's error body (API.md §0), whatever part of Django
produced it.

`ApiErrorMiddleware` comes first in MIDDLEWARE and acts only on paths under `/api/v1/` and `/ws/`
(websocket routes reached over plain HTTP). Before the rest of the chain it refuses

* a `Host` that ALLOWED_HOSTS does not name (400 `bad_request`): left to CommonMiddleware, it
  becomes Django's HTML "Bad Request (400)" page, or the technical page with DEBUG on;
* a declared body (`Content-Length`) over WORKCENTER_MAX_BODY_BYTES (413 `request_too_large`),
  before anything reads it. The server-side limit, which also counts the bytes of a body sent
  without a length, is in workcenter/handlers.py; this check covers every other way in (the test
  client, a WSGI server).

Both refusals are given the security headers the rest of the chain would have added.

After the chain, any error response that is not JSON — Django's 404 and 500 pages and their DEBUG
versions, ninja's 405, a CSRF failure page — is replaced by the error body of its status, with the
same headers (the `Allow` of a 405, the security headers). Django has logged the failure by then.
"""
from __future__ import annotations

import logging
from http import HTTPStatus

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse, JsonResponse

from .api import CODE_BY_STATUS, body_too_large, error_body
from .security_headers import secure

JSON_PATHS = ("/api/v1/", "/ws/")

security_logger = logging.getLogger("django.security.DisallowedHost")


def json_path(path: str) -> bool:
    return path.startswith(JSON_PATHS)


def error_response(status: int, body: dict) -> JsonResponse:
    return JsonResponse(body, status=status)


def json_error_page(response: HttpResponse, *, path: str, method: str) -> HttpResponse:
    """`response` if it is not an error or already JSON, else the API error body of its status."""
    status = response.status_code
    if status < 400 or response.get("Content-Type", "").startswith("application/json"):
        return response
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    code = CODE_BY_STATUS.get(status) or phrase.lower().replace(" ", "_").replace("-", "_")
    extra: dict = {}
    if status == 404:
        message = f"no API route {path}"
    elif status == 405:
        allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
        message = f"method {method} is not allowed on {path} (allowed: {', '.join(allowed) or 'none'})"
        extra = {"allowed": allowed}
    elif status >= 500:
        message = "internal server error: the failure is logged on the server"
    else:
        message = phrase.lower()
    replaced = error_response(status, error_body(code, message, extra))
    for name, value in response.items():  # Allow, and what the other middleware added (security headers)
        if name.lower() not in ("content-type", "content-length"):
            replaced[name] = value
    replaced.cookies = response.cookies
    return replaced


class ApiErrorMiddleware:
    """Host and declared body size checked first, error pages turned into JSON (module doc)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not json_path(request.path_info):
            return self.get_response(request)
        refused = self.refuse(request)
        if refused is not None:
            return secure(request, refused)  # the middleware after this one never sees it
        return json_error_page(self.get_response(request), path=request.path, method=request.method)

    def refuse(self, request: HttpRequest) -> HttpResponse | None:
        try:
            request.get_host()
        except DisallowedHost as exc:
            # logged as Django logs it when CommonMiddleware refuses the host
            security_logger.error(str(exc), extra={"status_code": 400, "request": request})
            return error_response(400, error_body(
                "bad_request", "the Host header names a host this server does not serve (ALLOWED_HOSTS)"))
        declared = request.META.get("CONTENT_LENGTH")
        if declared:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                return error_response(400, error_body("bad_request", "invalid Content-Length header"))
            if length > settings.WORKCENTER_MAX_BODY_BYTES:
                return error_response(*body_too_large(settings.WORKCENTER_MAX_BODY_BYTES))
        return None
