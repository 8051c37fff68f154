"""The dashboard's pages (UI.md): thin shells that load the JSON API and the live stream in the browser.

The pages render no store data themselves beyond the item's existence: everything on screen comes
from /api/v1/ and /ws/ so there is one read path and the page can never disagree with the API.
"""
from __future__ import annotations

import os

from django.contrib import admin
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import urlsafe_base64_decode

from workcenter import inbox, selectors
from workcenter.auth import CHANGE, VIEW, user_has_perm
from workcenter.constants import DEMO_LOGIN_ENV
from workcenter.demo_login import demo_login_tokens
from workcenter.errors import NotFound
from workcenter.models import Run
from workcenter.security import CONTENT_SECURITY_POLICY

# What each control of the pages does, and the permission its API operation declares
# (workcenter/api.py: `auth=api_auth(...)`; tests/dashboard/test_page_permissions.py holds the two
# together). A page offers a control only when the person holds it: never one the API refuses.
OPERATION_PERMISSIONS = {
    "create": ("POST", "/work-items", CHANGE),
    "start": ("POST", "/work-items/{item_id}/start", CHANGE),
    "retry": ("POST", "/work-items/{item_id}/retry", CHANGE),
    "edit": ("PATCH", "/work-items/{item_id}", CHANGE),
    "cancel": ("POST", "/work-items/{item_id}/cancel", CHANGE),
    "guide": ("POST", "/work-items/{item_id}/guidance", CHANGE),
    "bulk": ("POST", "/work-items/bulk", CHANGE),
}


def may_release(request: HttpRequest) -> bool:
    """The admin's own checks for its Release repair of a run (workcenter/admin.py): the admin site
    lets the person in (active staff), the runs' list is visible to them, and the repair is theirs."""
    run_admin = admin.site._registry.get(Run)
    return bool(run_admin is not None and admin.site.has_permission(request)
                and run_admin.has_view_or_change_permission(request)
                and "release_runs" in run_admin.get_actions(request))


def page_permissions(request: HttpRequest) -> dict:
    """{control: bool} for the page's boot config: what this person may do, by the same checks
    the API (auth.user_has_perm) and the admin make."""
    user = request.user
    may = {name: user_has_perm(user, permission) for name, (_, _, permission) in OPERATION_PERMISSIONS.items()}
    may["release"] = may_release(request)
    return may


def _page_config(request: HttpRequest, **extra) -> dict:
    user = request.user
    may = page_permissions(request)
    return {
        "username": user.get_username(),
        "may": may,
        # any of the item operations (retry, cancel, edit, start, guidance): one permission today
        "can_change": all(may[k] for k in ("start", "retry", "edit", "cancel", "guide")),
        "api_base": "/api/v1",
        # the nav badge's figure as the page opens (items waiting or needing attention); the pages
        # with the list's stream keep it live from the pushed overview (static/dashboard/common.js)
        "inbox_count": inbox.inbox_count(),
        # notifications on for this person (their choice, GET /api/v1/me/settings) and theirs to act
        # on: every page then announces new questions and failures (static/dashboard/inbox-notify.js)
        "notify": may["retry"] and inbox.person_settings(user)["browser_notifications"],
        **extra,
    }


@login_required
@permission_required(VIEW, raise_exception=True)
def work_item_list_page(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/list.html", {"config": _page_config(request)})


@login_required
@permission_required(VIEW, raise_exception=True)
def work_item_page(request: HttpRequest, item_id: str) -> HttpResponse:
    try:
        item = selectors.work_item_get(item_id)
    except NotFound:
        raise Http404(f"no work item {item_id}") from None
    return render(request, "dashboard/item.html", {
        "item": item,
        "config": _page_config(request, item_id=item.pk),
    })


@login_required
@permission_required(VIEW, raise_exception=True)
def workers_page(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/workers.html", {"config": _page_config(request)})


@login_required
@permission_required(VIEW, raise_exception=True)
def logs_page(request: HttpRequest) -> HttpResponse:
    """Search every run's log (GET /api/v1/logs/search): the runs that printed a text, with the
    lines around each match, each opening its item's page at that run's log."""
    return render(request, "dashboard/logs.html", {"config": _page_config(request)})


@login_required
@permission_required(VIEW, raise_exception=True)
def inbox_page(request: HttpRequest) -> HttpResponse:
    """Every waiting stage and every item that needs attention (GET /api/v1/inbox), live; a
    person who may change work items answers, retries and cancels in place, and may ask for
    browser notifications (their choice: GET/PUT /api/v1/me/settings)."""
    # the inbox announces from its own reads (its Notifier), not from a second watch
    return render(request, "dashboard/inbox.html", {"config": _page_config(request, notify=False)})


_DEMO_LINK_PAGES = {
    # reason: (status, heading, explanation)
    "off": (404, "No demo sign-in here",
            "One-time sign-in links only work on the web server that manage.py demo starts."),
    "unknown": (404, "This sign-in link is not valid",
                "The link is incomplete or was not made by this demo; check that it was copied whole."),
    "used": (404, "This sign-in link was already used",
             "A demo sign-in link works once: signing in with it, or signing in again later, retires it "
             "(a link that was altered is refused the same way)."),
}


def _demo_link_page(request: HttpRequest, reason: str) -> HttpResponse:
    status, heading, explanation = _DEMO_LINK_PAGES[reason]
    response = render(request, "dashboard/demo_link.html",
                      {"reason": reason, "heading": heading, "explanation": explanation}, status=status)
    # a page of the product, not one of Django's debug pages: it keeps the policy with debug on too
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


def demo_login(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """One-time sign-in printed by `manage.py demo`. A used, forged or unknown link answers 404 with
    a page that says why and links to the sign-in page (never Django's debug 404, which the demo's
    debug mode would otherwise show)."""
    if os.environ.get(DEMO_LOGIN_ENV) != "1":
        return _demo_link_page(request, "off")
    try:
        user = get_user_model().objects.get(pk=urlsafe_base64_decode(uidb64).decode())
    except (ValueError, TypeError, OverflowError, get_user_model().DoesNotExist):
        return _demo_link_page(request, "unknown")
    if not user.is_active or not demo_login_tokens.check_token(user, token):
        # the token is bound to last_login: a link that was used no longer matches
        return _demo_link_page(request, "used")
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("dashboard:list")
