"""Every page and dialog offers what the person may do and nothing else. Three people walk the
list, the item page (a failed item, a running one, a draft), the Workers page and every dialog:
a viewer (view only), a lead (view and change, not staff) and an admin (superuser). For each
control the walk records whether the page offers it, then asks the API (or the admin, for
Release) as that person whether it would take it: offered ⇔ allowed, for every control.

The API probes send bodies the API refuses as malformed (422) or a state it refuses (409), so
an allowed probe changes nothing: ninja checks the permission before it reads the body."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User

from .conftest import PASSWORD, ThreadedStore, screenshot, wait_for_js, wait_live
from .timing import console_errors

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [
    {"id": "survey", "type": "research"},
    {"id": "implement", "deps": ["survey"], "type": "implement"},
    {"id": "docs", "deps": ["survey"], "type": "write"},
]
BOOT = "boot-walk-7c1d"


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(seconds=30))


@pytest.fixture
def people(lead):
    """viewer: view only; lead (the browser fixtures' lead: view, change, run actions; not staff); admin."""
    viewer = User.objects.create_user("walk-viewer", password=PASSWORD)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter",
                                                          codename="view_workitem"))
    User.objects.create_superuser("walk-admin", password=PASSWORD)
    assert not lead.is_staff
    return {"viewer": "walk-viewer", "lead": "lead", "admin": "walk-admin"}


@pytest.fixture
def items(store):
    """failed: implement failed, docs still running on BOOT (the Workers page shows it held);
    running: a linear item whose triage runs (guidance is offered on it); draft: not started."""
    failed = store.graph(STAGES, title="Walk: failed build")
    store.complete(store.claim_item(failed.pk, stage="survey"))
    store.claim_item(failed.pk, stage="docs", boot=BOOT)
    store.submit(store.claim_item(failed.pk, stage="implement"), {"outcome": "failed", "error": "compiler crashed"})
    assert store.item(failed.pk).status == "needs_attention"
    running = store.create(title="Walk: running triage")
    store.claim_item(running.pk, boot=BOOT)
    draft = store.graph([{"id": "survey", "type": "research"}], title="Walk: draft", status="draft")
    return {"failed": store.item(failed.pk), "running": store.item(running.pk), "draft": draft}


def sign_in(browser, server, username):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")
    return page


PROBE = """async ([method, path, body]) => {
  const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";
  const r = await fetch("/api/v1" + path, { method, credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify(body) });
  return r.status;
}"""


def api_allows(page, method, path, body) -> bool:
    status = page.evaluate(PROBE, [method, path, body])
    assert status in (403, 409, 422), (method, path, status)  # refused for the person, or for the body/state
    return status != 403


def probes(items):
    f, r, d = items["failed"].pk, items["running"].pk, items["draft"].pk
    return {
        "create": ("POST", "/work-items", {"title": 5}),
        "bulk": ("POST", "/work-items/bulk", {"operation": "nothing"}),
        "start": ("POST", f"/work-items/{f}/start", {}),  # not a draft: 409 when allowed
        "retry": ("POST", f"/work-items/{f}/retry", {"answer": 5}),
        "edit": ("PATCH", f"/work-items/{f}", {"expected_revision": "one"}),
        "cancel": ("POST", f"/work-items/{f}/cancel", {"expected_state_token": "one"}),
        "guide": ("POST", f"/work-items/{r}/guidance", {"revision": "one"}),
        "_draft": d,
    }


def no_stray_words(page, where):
    """A control left out must leave nothing behind: no "null" or "undefined" written in its place."""
    words = set(page.locator("main").inner_text().split())
    assert not words & {"null", "undefined", "NaN"}, (where, words & {"null", "undefined", "NaN"})


def visible(page, selector) -> bool:
    loc = page.locator(selector)
    return loc.count() > 0 and loc.first.is_visible()


def open_and_close(page, opener, dialog, ready, error):
    """Open a dialog, wait for what it computes, check it shows no refusal, close it."""
    page.click(opener)
    page.wait_for_selector(f"{dialog}[open]")
    wait_for_js(page, ready)
    assert page.locator(error).is_hidden(), page.locator(error).inner_text()
    page.keyboard.press("Escape")
    page.wait_for_selector(f"{dialog}:not([open])", state="attached")


def walk(page, server, items, who) -> dict[str, bool]:
    """What the pages offer this person, opening every dialog offered."""
    offered: dict[str, bool] = {}
    f, r, d = items["failed"], items["running"], items["draft"]
    # the list: New work item, the selection and its bulk dialogs
    page.goto(f"{server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{f.pk}"]')
    wait_live(page)
    offered["create"] = visible(page, "#new-item-open")
    offered["bulk"] = page.locator(f'#items tr[data-id="{f.pk}"] input.row-select').count() == 1
    assert offered["bulk"] == (page.locator("#select-all").count() == 1)
    if offered["create"]:
        open_and_close(page, "#new-item-open", "#new-item", "true", "#new-item-error")
    if offered["bulk"]:
        page.locator(f'#items tr[data-id="{f.pk}"] input.row-select').check()
        for op in ("retry", "cancel"):
            open_and_close(page, f"#bulk-{op}", "#bulk-dialog",
                           "document.querySelectorAll('#bulk-rows .bulk-row').length === 1", "#bulk-error")
        page.click("#bulk-clear")
    no_stray_words(page, "list")
    screenshot(page, f"permissions-list-{who}-1280.png")
    # the failed item: Retry, Edit contract, Cancel and their dialogs
    page.goto(f"{server.url}/work-items/{f.pk}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    wait_for_js(page, "document.querySelector('#item-status').dataset.status === 'needs_attention'")
    offered["retry"] = visible(page, "#btn-retry")
    offered["edit"] = visible(page, "#btn-edit")
    offered["cancel"] = visible(page, "#btn-cancel")
    assert visible(page, "#needs-answer") == offered["retry"]  # the banner's own Retry… button
    if offered["retry"]:
        open_and_close(page, "#btn-retry", "#retry-dialog",
                       "!document.querySelector('#retry-confirm').disabled", "#retry-error")
    if offered["edit"]:
        open_and_close(page, "#btn-edit", "#edit-dialog", "true", "#edit-error")
    if offered["cancel"]:
        open_and_close(page, "#btn-cancel", "#cancel-dialog",
                       "!document.querySelector('#cancel-confirm').disabled", "#cancel-error")
    wait_for_js(page, "!document.querySelector('#needs-banner').hidden")
    no_stray_words(page, "item")
    screenshot(page, f"permissions-item-{who}-1280.png")
    # the running item: guidance in the current stage's panel
    page.goto(f"{server.url}/work-items/{r.pk}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    page.click('#graph g.node[data-stage="triage"]')
    page.wait_for_selector("#panel:not([hidden]) #panel-body .facts")
    offered["guide"] = visible(page, "form.guidance")
    # the draft: Start
    page.goto(f"{server.url}/work-items/{d.pk}/")
    page.wait_for_selector("#graph g.node")
    wait_for_js(page, "document.querySelector('#item-status').dataset.status === 'draft'")
    offered["start"] = visible(page, "#btn-start")
    # the Workers page: Release… beside the run BOOT holds
    page.goto(f"{server.url}/workers/")
    page.wait_for_selector(f'#workers tr[data-boot="{BOOT}"]')
    offered["release"] = page.locator(f'#workers tr[data-boot="{BOOT}"] a.release-link').count() > 0
    # nothing else leads to the admin: the top bar's Admin link is the admin's own door (staff)
    offered["admin"] = visible(page, '.topnav a[href="/admin/"]')
    no_stray_words(page, "workers")
    screenshot(page, f"permissions-workers-{who}-1280.png")
    return offered


def admin_allows_release(page, server, items) -> bool:
    """The admin's answer to this person: the runs list opens and offers the Release repair."""
    run_id = page.locator(f'#workers tr[data-boot="{BOOT}"] .renew').first.get_attribute("data-run")
    response = page.goto(f"{server.url}/admin/workcenter/run/?q={run_id}")
    if response.status != 200 or "/admin/login/" in page.url:
        return False
    return page.locator('select[name="action"] option[value="release_runs"]').count() == 1


EXPECTED = {
    "viewer": dict.fromkeys(("create", "bulk", "retry", "edit", "cancel", "guide", "start", "release", "admin"), False),
    "lead": {**dict.fromkeys(("create", "bulk", "retry", "edit", "cancel", "guide", "start"), True),
             "release": False, "admin": False},
    "admin": dict.fromkeys(("create", "bulk", "retry", "edit", "cancel", "guide", "start", "release", "admin"), True),
}


@pytest.mark.parametrize("who", ["viewer", "lead", "admin"])
def test_every_page_and_dialog_offers_exactly_what_the_api_and_the_admin_allow(browser, daphne_server, people,
                                                                               items, who):
    page = sign_in(browser, daphne_server, people[who])
    errors = console_errors(page)
    try:
        offered = walk(page, daphne_server, items, who)
        assert not errors, errors  # the walk itself: no refusal, no script error (the probes below log their 403s)
        asked = probes(items)
        allowed = {name: api_allows(page, *asked[name]) for name in
                   ("create", "bulk", "retry", "edit", "cancel", "guide", "start")}
        allowed["release"] = admin_allows_release(page, daphne_server, items)
        response = page.goto(f"{daphne_server.url}/admin/")
        allowed["admin"] = response.status == 200 and "/admin/login/" not in page.url
        assert offered == allowed, {k: (offered[k], allowed[k]) for k in offered if offered[k] != allowed[k]}
        assert offered == EXPECTED[who]
    finally:
        page.context.close()
