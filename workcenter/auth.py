"""Who may call the API (API.md §1): bearer tokens for programs, the Django session for browsers.

A token reads `wc_<prefix>_<secret>`; only the SHA-256 of the secret is stored, the prefix finds
the row and names the token in listings. Every operation declares one permission; the auth
callables below authenticate *and* check it, so a route can never forget the check:
no or bad credentials ⇒ 401 `not_authenticated`, a known user without the permission ⇒ 403
`permission_denied`.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from . import db
from .errors import WorkcenterError
from .models import ApiToken

TOKEN_SCHEME = "wc"
PREFIX_BYTES = 4  # 8 hex characters
SECRET_BYTES = 32
LAST_USED_RESOLUTION = timedelta(minutes=1)  # don't write the token row on every request

VIEW = "workcenter.view_workitem"
CHANGE = "workcenter.change_workitem"
RUN_ACTIONS = "workcenter.run_actions"
DEFINE_WORKFLOWS = "workcenter.define_workflows"

SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


class NotAuthenticated(WorkcenterError):
    code = "not_authenticated"


class PermissionDenied(WorkcenterError):
    code = "permission_denied"


class MalformedAuthorization(NotAuthenticated):
    """An `Authorization` header is present but says no bearer token."""


# --- the Authorization header --------------------------------------------------------------------

# RFC 6750 §2.1: `Bearer 1*SP b64token`; the scheme, as every HTTP auth scheme, in any case
# (RFC 9110 §11.1). The token is one word: its characters are the token lookup's to judge.
_BEARER = re.compile(r"bearer +(\S+)", re.IGNORECASE)


def bearer_token(header: str | None) -> str | None:
    """The one reading of an `Authorization` header value, for the API (TokenAuth), /metrics and
    /healthz (workcenter/metrics.py; workcenter/health.py at the ASGI level) and the websocket
    upgrade (dashboard/routing.py):

    * None (no header): no token; the caller's other credentials count (the session);
    * `Bearer <token>` (any case, spaces around and between): the token;
    * anything else present (empty, another scheme such as `Basic`, `Bearer` alone, two words
      after it): raises MalformedAuthorization. A present but unusable header is refused (401,
      or a close with 4401 on a websocket), never a fallback to the session.
    """
    if header is None:
        return None
    match = _BEARER.fullmatch(header.strip(" \t"))
    if match is None:
        raise MalformedAuthorization("invalid Authorization header: expected 'Bearer <token>'")
    return match.group(1)


# --- tokens ------------------------------------------------------------------------------------

def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def split_token(raw: str) -> tuple[str, str] | None:
    """`wc_<prefix>_<secret>` ⇒ (prefix, secret); None when the shape is wrong."""
    scheme, sep, rest = (raw or "").strip().partition("_")
    prefix, sep2, secret = rest.partition("_")
    if scheme != TOKEN_SCHEME or not sep or not sep2 or not prefix or not secret:
        return None
    return prefix, secret


def api_token_create(*, user, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the full token, which is never stored."""
    prefix = secrets.token_hex(PREFIX_BYTES)
    while ApiToken.objects.filter(prefix=prefix).exists():
        prefix = secrets.token_hex(PREFIX_BYTES)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    token = ApiToken.objects.create(user=user, name=name or "", prefix=prefix, token_hash=token_hash(secret))
    return token, f"{TOKEN_SCHEME}_{prefix}_{secret}"


def api_token_revoke(*, label_or_prefix: str, now=None) -> list[ApiToken]:
    """Revoke the live tokens whose name or prefix is `label_or_prefix` (a full token names its
    prefix). Returns the revoked rows."""
    key = (label_or_prefix or "").strip()
    parts = split_token(key)
    if parts is not None:
        key = parts[0]
    if not key:
        return []
    now = now or timezone.now()
    tokens = list(ApiToken.objects.filter(Q(name=key) | Q(prefix=key), revoked_at__isnull=True).order_by("pk"))
    if tokens:
        ApiToken.objects.filter(pk__in=[t.pk for t in tokens]).update(revoked_at=now)
        for t in tokens:
            t.revoked_at = now
    return tokens


MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
def api_token_user(raw: str, *, permission: str | None = None):
    """The active user of a live token, or None. Touches `last_used_at` at most once a minute.

    With `permission`, the same query also answers whether the user holds it (recorded for
    `user_has_perm`): one query per API call instead of three (token, user permissions, group
    permissions). Only when ModelBackend is the sole backend; otherwise `has_perm` decides."""
    parts = split_token(raw)
    if parts is None:
        return None
    prefix, secret = parts
    digest = token_hash(secret)
    fast = permission is not None and list(settings.AUTHENTICATION_BACKENDS) == [MODEL_BACKEND]
    now = timezone.now()
    params = [connection.ops.adapt_datetimefield_value(now - LAST_USED_RESOLUTION)]
    if fast:
        app_label, _, codename = permission.partition(".")
        params += [app_label, codename]
    params.append(prefix)
    # one fixed statement on the hot path's cursor (prepared on PostgreSQL; the ORM took 1.1 ms
    # per request to compile the equivalent query, whose execution takes 0.03 ms); the user row
    # is built as the ORM loads it
    rows = db.read_all([("token_user_permission" if fast else "token_user", params)])[0]
    if not rows:
        return None
    row = rows[0]
    user_row = db.user_row()
    n = len(user_row.fields)
    token_id, token_digest, touch, holds = row[n:]
    if not hmac.compare_digest(token_digest, digest):
        return None
    user = user_row.build_many([row[:n]])[0]
    if not user.is_active:
        return None
    if fast:
        user.checked_permissions = {permission: bool(user.is_superuser or holds)}
    if touch:
        ApiToken.objects.filter(pk=token_id).update(last_used_at=now)
    return user


# --- ninja auth callables ----------------------------------------------------------------------

def user_has_perm(user, permission: str) -> bool:
    """`user.has_perm`, unless the token lookup already answered it for this request."""
    checked = getattr(user, "checked_permissions", None)
    if checked and permission in checked:
        return checked[permission]
    return user.has_perm(permission)


def require_permission(user, permission: str | None) -> None:
    if permission and not user_has_perm(user, permission):
        raise PermissionDenied(f"permission denied: {permission} is required",
                               extra={"permission": permission})


class TokenAuth(HttpBearer):
    """`Authorization: Bearer wc_…`. A present but unusable header is a 401, never a fallback
    to the session."""

    def __init__(self, permission: str | None) -> None:
        self.permission = permission
        super().__init__()
        self.meta_key = "HTTP_" + self.header.upper().replace("-", "_")

    def __call__(self, request: HttpRequest):
        # META, not request.headers: that mapping of every header is built on first use, about
        # 0.1 ms a request on the worker's hot path, and nothing else here needs it
        token = bearer_token(request.META.get(self.meta_key))  # malformed: MalformedAuthorization, a 401
        return None if token is None else self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str):
        user = api_token_user(token, permission=self.permission)
        if user is None:
            raise NotAuthenticated("invalid, revoked or unknown API token")
        require_permission(user, self.permission)
        return user


class SessionAuth(APIKeyCookie):
    """Django's session (ninja's `django_auth`), with CSRF enforced for unsafe methods once the
    user is known: an anonymous request is a 401, not a CSRF 403."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, permission: str | None) -> None:
        self.permission = permission
        super().__init__(csrf=True)

    def __call__(self, request: HttpRequest):
        return self.authenticate(request, request.COOKIES.get(self.param_name))

    def authenticate(self, request: HttpRequest, key):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and not getattr(request, "_ninja_csrf_exempt", False):
            if check_csrf(request) is not None:
                raise PermissionDenied("CSRF verification failed: send the csrftoken cookie's value "
                                       "in the X-CSRFToken header", extra={"reason": "csrf"})
        require_permission(user, self.permission)
        return user


def api_auth(permission: str) -> list:
    """Token first (programs), then the session (browsers)."""
    return [TokenAuth(permission), SessionAuth(permission)]


def actor_of(request: HttpRequest) -> str:
    """DOMAIN §11.3: `user:<username>` for people and their tokens."""
    return f"user:{request.auth.get_username()}"
