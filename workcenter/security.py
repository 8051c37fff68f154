"""Production safety: the settings a serving process refuses, their deploy checks, and the
Content-Security-Policy of every page.

Refusal (workcenter/settings.py says which processes refuse and why the others don't): with
debug off, a process that serves the site must not sign with the development key (anyone can
read it in this repository and forge sessions, CSRF tokens and password-reset links with it) or
a key too weak to guess at, and must name the hosts it answers to (`*` lets any Host header
through: cache poisoning and password-reset links to a foreign host). `manage.py check --deploy`
reports the same problems (workcenter.E001, workcenter.E002). Nor may it honour the demo's
one-time sign-in links (workcenter.E003): they sign in the demo's published accounts.

Content-Security-Policy: the pages load scripts, styles, images and fonts from this origin only,
run no inline script or style, and talk to this origin only (the API by fetch, the live stream
by websocket: CSP 3 lets 'self' match ws: and wss: on the page's own host and port). Page
configuration travels in `<script type="application/json">` blocks (templates/dashboard/_boot.html,
ninja's Swagger settings), which a browser never executes, so script-src needs no exception;
Django's admin (5.2) and ninja's Swagger UI page satisfy the same policy (tests/browser/
test_production.py). Scripts may still set element styles through the CSSOM (`el.style.x`),
which CSP does not govern; what it blocks is markup: `style="..."` attributes and `<style>`.
With debug on, Django's own error pages (inline script and style) are sent without the header.
"""
from __future__ import annotations

import os

from django.conf import settings
from django.core.checks import Error, Tags, register

from .constants import DEMO_LOGIN_ENV

DEVELOPMENT_SECRET_KEY = "workcenter-development-key-change-me-in-production"
SECRET_KEY_MIN_LENGTH = 50  # Django's own bar (check --deploy security.W009)
SECRET_KEY_MIN_UNIQUE = 5

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


def configuration_problems() -> list[tuple[str, str]]:
    """What a production (debug off) server must not run with, as (check id, message) pairs,
    each message naming the environment variable to set."""
    problems = []
    key = settings.SECRET_KEY
    if key == DEVELOPMENT_SECRET_KEY:
        problems.append(("workcenter.E001", (
            "DJANGO_SECRET_KEY is not set, so the development key would sign sessions and CSRF tokens; "
            "anyone can read it in the source. Set DJANGO_SECRET_KEY to a long random value, e.g. the "
            "output of: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'")))
    elif len(key) < SECRET_KEY_MIN_LENGTH or len(set(key)) < SECRET_KEY_MIN_UNIQUE:
        problems.append(("workcenter.E001", (
            f"DJANGO_SECRET_KEY is too weak: use at least {SECRET_KEY_MIN_LENGTH} random characters, e.g. "
            "the output of: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'")))
    hosts = settings.ALLOWED_HOSTS
    if not hosts:
        problems.append(("workcenter.E002", (
            "DJANGO_ALLOWED_HOSTS is empty: set it to the host names this server answers to, "
            "comma-separated (e.g. DJANGO_ALLOWED_HOSTS=workcenter.example.com)")))
    elif "*" in hosts:
        problems.append(("workcenter.E002", (
            "DJANGO_ALLOWED_HOSTS=* accepts any Host header: set it to the host names this server "
            "answers to, comma-separated (e.g. DJANGO_ALLOWED_HOSTS=workcenter.example.com)")))
    if os.environ.get(DEMO_LOGIN_ENV) == "1":
        problems.append(("workcenter.E003", (
            f"{DEMO_LOGIN_ENV}=1 turns on the demo's one-time sign-in links, which `manage.py demo` "
            f"prints for its published accounts: unset {DEMO_LOGIN_ENV} (the demo sets it, with debug on, "
            "for the server it starts)")))
    return problems


class InsecureProductionSettings(SystemExit):
    """Raised when a serving process starts on unsafe production settings: the process ends with
    the messages (not a traceback) and exit code 1."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        lines = "\n".join(f"  - {m}" for m in messages)
        super().__init__(f"Work Center refuses to serve with debug off (DJANGO_DEBUG=0) on these settings:\n"
                         f"{lines}\n(For a local trial, `manage.py demo` or DJANGO_DEBUG=1 runs with debug on.)")


def refuse_insecure_production() -> None:
    """Called as a serving process starts (workcenter/asgi.py): with debug off, any problem
    ends the process."""
    if settings.DEBUG:
        return
    problems = configuration_problems()
    if problems:
        raise InsecureProductionSettings([message for _, message in problems])


@register(Tags.security, deploy=True)
def check_production_settings(app_configs=None, **kwargs):
    return [Error(message, id=check_id) for check_id, message in configuration_problems()]


class ContentSecurityPolicyMiddleware:
    """Sets the policy above on every HTML response that has none (module doc)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" in response:
            return response
        if not response.get("Content-Type", "").startswith("text/html"):
            return response
        if settings.DEBUG and response.status_code >= 400:
            return response  # Django's debug pages: inline script and style
        response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response
