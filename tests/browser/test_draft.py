"""A draft on the work-item page: an empty graph drawn as an empty state without script errors,
started from the page by a lead, and no Start button for someone who may only look."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from tests.conftest import Clock, Store

from .conftest import PASSWORD, screenshot, wait_for_js, wait_live
from .live import WAIT_MS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(transactional_db):
    return Store(Clock())


def watch_console(page) -> list[str]:
    """Console messages of type error and uncaught page errors, as they arrive."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    return problems


def transforms(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('#graph [transform], #graph g.node')]
        .map(el => (el.getAttribute('transform') || '') + ' ' + (el.style.transform || ''))""")


def open_draft(page, daphne_server, item_id):
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    wait_live(page)
    wait_for_js(page, "() => !document.getElementById('graph-empty').hidden")


def test_a_draft_shows_an_empty_state_without_console_errors(page, daphne_server, bg, store):
    problems = watch_console(page)
    item = bg(store.linear, start=False)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_draft(page, daphne_server, item.id)
    page.wait_for_timeout(500)  # the ticker and the stream's hello have run
    assert not problems, problems
    bad = [t for t in transforms(page) if "Infinity" in t or "NaN" in t]
    assert not bad, bad
    assert page.locator("#graph-empty").inner_text() == "Not started — no stages yet."
    assert page.locator("#graph g.node").count() == 0
    screenshot(page, "draft-empty-1280.png")


def test_a_draft_started_from_the_page_becomes_ready_with_its_first_stage(page, daphne_server, bg, store):
    problems = watch_console(page)
    item = bg(store.linear, start=False)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_draft(page, daphne_server, item.id)
    start = page.locator("#btn-start")
    assert start.is_visible()
    screenshot(page, "draft-before-start-1280.png")
    start.click()
    page.wait_for_selector('#item-status[data-status="ready"]')
    page.wait_for_selector("#graph g.node")
    actions = bg(store.actions, item.id)
    assert len(actions) == 1
    first = actions[0]
    nodes = page.evaluate("""() => [...document.querySelectorAll('#graph g.node')]
        .map(g => [g.dataset.stage, g.dataset.status])""")
    assert nodes == [[first.effective_stage_id, "ready"]], nodes
    wait_for_js(page, "() => document.getElementById('graph-empty').hidden")
    assert not start.is_visible()
    bad = [t for t in transforms(page) if "Infinity" in t or "NaN" in t]
    assert not bad, bad
    screenshot(page, "draft-after-start-1280.png")
    assert not problems, problems


def test_a_view_only_user_sees_no_start_button(browser, daphne_server, bg, store):
    item = bg(store.linear, start=False)
    viewer = User.objects.create_user("viewer", password=PASSWORD)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter",
                                                          codename="view_workitem"))
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        pg = context.new_page()
        pg.set_default_timeout(WAIT_MS)
        problems = watch_console(pg)
        pg.goto(f"{daphne_server.url}/accounts/login/")
        pg.fill("#id_username", "viewer")
        pg.fill("#id_password", PASSWORD)
        pg.click("button[type=submit]")
        pg.wait_for_url(f"{daphne_server.url}/")
        open_draft(pg, daphne_server, item.id)
        assert pg.locator("#btn-start").count() == 0
        assert pg.locator("#item-status").get_attribute("data-status") == "draft"
        assert not problems, problems
    finally:
        context.close()
