"""The inbox (/inbox/): every waiting stage and every item needing attention, live; answers given in
place, each item fenced by what the page read (a question answered meanwhile is refused alone, with
why); a viewer sees it all and is offered nothing; browser notifications, opt-in per person."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from workcenter import services
from workcenter.models import Action, PersonSettings, WorkItem

from . import test_needs_me
from .conftest import PASSWORD, log_in, screenshot, wait_for_js, wait_live, wait_until
from .live import WAIT_MS
from .test_axe import Audit
from .test_needs_me import graph_two_waiting, linear_waiting, shots

pytestmark = pytest.mark.django_db(transaction=True)

# the needs-me fixtures: a store whose stages have waited a while, and no console or page error
store, problems = test_needs_me.store, test_needs_me.problems


def failed_item(store, title="Compile fails"):
    item = store.graph([{"id": "compile", "type": "implement", "max_attempts": 1}, {"id": "ship", "deps": ["compile"]}],
                       title=title)
    store.submit(store.claim_item(item.pk, stage="compile"), {"outcome": "failed", "error": "compiler crashed: out of memory"})
    return store.item(item.pk)


def open_inbox(page, daphne_server, rows, width=1280, scheme="light"):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 800 if width > 1000 else 900})
    page.goto(f"{daphne_server.url}/inbox/")
    wait_rows(page, rows)
    wait_live(page)


def wait_rows(page, n):
    wait_for_js(page, "(n) => document.querySelectorAll('#inbox tr.inbox-row').length === n", n)


def row(page, item_id, stage):
    return page.locator(f'#inbox tr.inbox-row[data-item="{item_id}"][data-stage="{stage}"]')


def groups(page):
    return page.eval_on_selector_all("#inbox tbody.inbox-item", "els => els.map(e => e.dataset.item)")


def answered(action_id):
    return Action.objects.get(pk=action_id).context[-1]["answer"]


def test_the_inbox_lists_questions_and_failures_oldest_first_and_follows_them_live(
        page, daphne_server, store, http_api, problems):
    linear, l_claim = linear_waiting(store, "Which database should the service use: PostgreSQL or SQLite?")
    graph, db, region = graph_two_waiting(store)
    broken = failed_item(store)
    store.create(title="Nothing to do here")
    open_inbox(page, daphne_server, 4)
    assert groups(page) == [linear.pk, graph.pk, broken.pk]
    assert row(page, linear.pk, "triage").locator(".row-text").inner_text() == \
        "Which database should the service use: PostgreSQL or SQLite?"
    assert row(page, graph.pk, "ask-db").locator(".row-text").inner_text() == "Which database?"
    assert row(page, graph.pk, "ask-region").locator(".row-text").inner_text() == "Which region should it run in?"
    failure = row(page, broken.pk, "compile")
    assert failure.get_attribute("data-kind") == "failure"
    assert failure.locator(".row-text").inner_text() == "compiler crashed: out of memory"
    assert "Attempt 1" in failure.inner_text() and "min ago" in failure.locator(".row-since").inner_text()
    assert page.locator("#inbox-summary").inner_text() == "3 questions and 1 item needing attention, across 3 items."
    # the nav badge and the tab title count the items that need someone
    assert page.locator("#nav-inbox-count").inner_text() == "3"
    assert page.title() == "(3) Inbox · Work Center"
    shots(page, "inbox")
    # live: a new question arrives, and one is answered elsewhere
    late, _ = linear_waiting(store, "Ship on Friday?")
    wait_rows(page, 5)
    assert groups(page)[-1] == late.pk
    wait_for_js(page, "() => document.title === '(4) Inbox · Work Center'")
    status, _ = http_api.call("POST", f"/work-items/{linear.pk}/retry", {"answer": "PostgreSQL"})
    assert status == 200
    wait_rows(page, 4)
    assert linear.pk not in groups(page)
    wait_for_js(page, "() => document.getElementById('nav-inbox-count').textContent === '3'")
    # the other pages carry the badge too, kept live by the list's stream
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector("#items tr")
    assert page.locator("#nav-inbox-count").inner_text() == "3"
    assert page.title() == "(3) Work items · Work Center"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_inbox_has_no_serious_accessibility_violation(page, daphne_server, store, scheme):
    linear_waiting(store)
    failed_item(store)
    open_inbox(page, daphne_server, 2, scheme=scheme)
    audit = Audit(page, scheme)
    audit.check("inbox")
    page.set_viewport_size({"width": 800, "height": 900})
    audit.check("inbox at 800 px")
    assert not audit.blocking(), audit.blocking()


def test_two_stages_of_a_graph_item_and_one_of_another_are_answered_in_place_from_the_keyboard(
        page, daphne_server, store, problems):
    linear, l_claim = linear_waiting(store, "Which database?")
    graph, db, region = graph_two_waiting(store)
    open_inbox(page, daphne_server, 3)
    page.locator("body").click(position={"x": 5, "y": 300})
    answers = ["SQLite", "PostgreSQL 16", "eu-west-1"]
    for i, text in enumerate(answers):
        page.keyboard.press("j")
        page.keyboard.press("a")
        focused = page.evaluate("() => document.activeElement.closest('tr').dataset.key")
        assert focused == [f"{linear.pk}/triage", f"{graph.pk}/ask-db", f"{graph.pk}/ask-region"][i]
        page.keyboard.type(text)
        if i < 2:
            page.keyboard.press("Escape")
            assert page.evaluate("() => document.activeElement.tagName") == "TR"
    assert page.locator("#inbox-send-count").inner_text() == "3 answers typed"
    screenshot(page, "inbox-answering-1280-light.png")
    page.keyboard.press("Enter")
    wait_rows(page, 0)
    assert page.locator("#inbox-empty").is_visible()
    # each answer went to its own stage: the graph's two reset in place, the linear item retried
    assert (answered(db.action.pk), answered(region.action.pk)) == ("PostgreSQL 16", "eu-west-1")
    assert WorkItem.objects.get(pk=graph.pk).status == "ready"
    newest = Action.objects.filter(work_item_id=linear.pk).order_by("-sequence").first()
    assert newest.pk != l_claim.action.pk and newest.context[-1]["answer"] == "SQLite"
    assert WorkItem.objects.get(pk=linear.pk).status == "ready"


def test_a_question_answered_meanwhile_is_refused_alone_with_its_reason(
        page, daphne_server, store, http_api, problems):
    graph, db, region = graph_two_waiting(store)
    linear, _ = linear_waiting(store, "Which database?")
    open_inbox(page, daphne_server, 3)
    row(page, graph.pk, "ask-db").locator("textarea").fill("PostgreSQL 16")
    row(page, graph.pk, "ask-region").locator("textarea").fill("eu-west-1")
    row(page, linear.pk, "triage").locator("textarea").fill("SQLite")
    # the send leaves with what the page read; the linear item is answered elsewhere first
    sent: list = []

    def answer_elsewhere_first(route, request):
        sent.append(request.post_data_json)
        status, _ = http_api.call("POST", f"/work-items/{linear.pk}/retry", {"answer": "MySQL"})
        assert status == 200
        route.continue_()

    page.route("**/api/v1/work-items/bulk", answer_elsewhere_first)
    row(page, linear.pk, "triage").locator("textarea").press("Enter")
    result = page.locator(f'#inbox tr.inbox-row[data-item="{linear.pk}"] .row-result[data-result="refused"]')
    result.wait_for()
    assert result.inner_text().startswith("Refused: retried by user:lead since the preview; nothing was done to it.")
    # the other item's answers went through; the refused one's text is kept, its row marked
    wait_until(page, lambda: WorkItem.objects.get(pk=graph.pk).status == "ready")
    assert (answered(db.action.pk), answered(region.action.pk)) == ("PostgreSQL 16", "eu-west-1")
    wait_for_js(page, f"() => !document.querySelector('#inbox tbody[data-item=\"{graph.pk}\"]')")
    stale = row(page, linear.pk, "triage")
    assert stale.get_attribute("data-stale") == "true"
    assert stale.locator("textarea").input_value() == "SQLite"
    assert sent[0]["answers"][graph.pk] and sent[0]["expected_state_tokens"][linear.pk] > 0
    assert answered(Action.objects.filter(work_item_id=linear.pk).order_by("-sequence").first().pk) == "MySQL"
    shots(page, "inbox-refused")
    # a question answered elsewhere while its answer is being typed: marked before anything is sent
    page.unroute("**/api/v1/work-items/bulk")
    stale.locator("button", has_text="Dismiss").click()
    other, _ = linear_waiting(store, "Which region?")
    wait_rows(page, 1)
    row(page, other.pk, "triage").locator("textarea").fill("eu-central-1")
    status, _ = http_api.call("POST", f"/work-items/{other.pk}/retry", {"answer": "us-east-1"})
    assert status == 200
    page.wait_for_selector(f'#inbox tr.inbox-row[data-item="{other.pk}"][data-stale="true"]')
    # marked at once, and told why as soon as the retry's event arrives (it may come after the read)
    reason = row(page, other.pk, "triage").locator(".row-stale")
    wait_until(page, lambda: "Not sent: answered meanwhile by lead" in reason.inner_text())


def test_failed_items_are_retried_and_cancelled_with_the_bulk_preview(page, daphne_server, store, problems):
    one = failed_item(store, "Fails first")
    two = failed_item(store, "Fails second")
    open_inbox(page, daphne_server, 2)
    page.locator(f'#inbox tbody[data-item="{one.pk}"] input.row-select').check()
    page.locator(f'#inbox tbody[data-item="{two.pk}"] input.row-select').check()
    assert page.locator("#bulk-count").inner_text() == "2 selected"
    page.click("#bulk-retry")
    page.wait_for_selector('#bulk-rows .bulk-row[data-allowed="true"] >> nth=1')
    page.fill("#bulk-reason", "flaky runner")
    page.click("#bulk-submit")
    page.wait_for_selector('#bulk-rows .bulk-row[data-result="ok"] >> nth=1')
    page.click("#bulk-dismiss")
    wait_rows(page, 0)
    assert {WorkItem.objects.get(pk=i).status for i in (one.pk, two.pk)} == {"ready"}
    # a failure row's own Cancel… (c from the keyboard) previews that item alone
    three = failed_item(store, "Fails third")
    wait_rows(page, 1)
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("j")
    page.keyboard.press("c")
    page.wait_for_selector('#bulk-rows .bulk-row[data-allowed="true"]')
    assert page.locator("#bulk-title").inner_text() == "Cancel 1 work item"
    page.fill("#bulk-reason", "not needed")
    page.click("#bulk-submit")
    page.wait_for_selector('#bulk-rows .bulk-row[data-result="ok"]')
    assert WorkItem.objects.get(pk=three.pk).status == "cancelled"


def test_a_viewer_sees_the_inbox_and_is_offered_nothing(browser, daphne_server, store):
    viewer = User.objects.create_user("inbox-viewer", password=PASSWORD)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="workcenter",
                                                          codename="view_workitem"))
    graph, _db, _region = graph_two_waiting(store)
    broken = failed_item(store)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        log_in(page, daphne_server.url, "inbox-viewer")
        open_inbox(page, daphne_server, 3)
        assert row(page, graph.pk, "ask-db").locator(".row-text").inner_text() == "Which database?"
        assert row(page, broken.pk, "compile").locator(".row-text").inner_text() == "compiler crashed: out of memory"
        for selector in ("#inbox textarea", "#inbox input", "#inbox .row-actions button", "#notify-toggle",
                         "#bulk-bar", "#bulk-dialog", "#inbox-send"):
            assert page.locator(selector).count() == 0, selector
        assert "answer" not in page.locator(".inbox-keys").inner_text()
        page.keyboard.press("j")
        page.keyboard.press("a")  # nothing to answer with
        assert page.evaluate("() => document.activeElement.tagName") == "TR"
        shots(page, "inbox-viewer")
    finally:
        context.close()
    assert not errors, errors


# --- browser notifications --------------------------------------------------------------------------

# The test's own stand-in for the browser's Notification (never the page's code): it records each
# notification made and answers the permission the test sets, else the browser's.
CAPTURE = """(() => {
  const Real = window.Notification;
  const made = [];
  let override = null;
  class Recorded {
    constructor(title, options = {}) { this.title = title; this.body = options.body; this.tag = options.tag; made.push(this); }
    close() {}
    static get permission() { return override || Real.permission; }
    static requestPermission() { return Promise.resolve(override || Real.permission); }
  }
  Object.defineProperty(window, "Notification", { value: Recorded, configurable: true, writable: true });
  Object.defineProperty(window, "testNotifications", { value: { made, set: (p) => { override = p; } } });
})();"""


def notifications(page) -> list[dict]:
    return page.evaluate("() => window.testNotifications.made.map(n => ({title: n.title, body: n.body, tag: n.tag}))")


@pytest.fixture
def notified_page(browser, daphne_server, lead):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.grant_permissions(["notifications"], origin=daphne_server.url)
    context.add_init_script(CAPTURE)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    log_in(page, daphne_server.url, "lead")
    yield page
    context.close()
    assert not errors, errors


def test_notify_me_is_kept_per_person_and_a_new_question_notifies_once_but_not_for_my_own(
        notified_page, daphne_server, store, lead, bg):
    page = notified_page
    broken = failed_item(store)
    open_inbox(page, daphne_server, 1)
    # the browser has not said yes yet: asking shows the prompt to allow it
    page.evaluate("() => window.testNotifications.set('default')")
    toggle = page.locator("#notify-toggle")
    wait_for_js(page, "() => !document.getElementById('notify-toggle').disabled")
    assert toggle.get_attribute("aria-pressed") == "false"
    toggle.click()
    page.wait_for_selector("#notify-prompt:not([hidden])")
    assert toggle.get_attribute("aria-pressed") == "true"
    assert PersonSettings.objects.get(user=lead).browser_notifications is True
    shots(page, "inbox-notify-prompt")
    page.evaluate("() => window.testNotifications.set(null)")  # the browser's own answer: granted
    page.click("#notify-allow")
    page.wait_for_selector("#notify-prompt", state="hidden")
    # the choice is the person's: a fresh load of the page reads it back
    page.reload()
    wait_rows(page, 1)
    wait_for_js(page, "() => document.getElementById('notify-toggle').getAttribute('aria-pressed') === 'true'")
    wait_live(page)
    assert notifications(page) == []
    # a worker asks a question: one notification naming the item and the stage
    graph = store.graph([{"id": "ask-db"}, {"id": "ask-region"}], title="Two questions, one minute")
    db = store.claim_item(graph.pk, stage="ask-db")
    region = store.claim_item(graph.pk, stage="ask-region")
    store.submit(db, {"outcome": "waiting", "waiting_reason": "Which database?"})
    wait_rows(page, 2)
    wait_until(page, lambda: len(notifications(page)) >= 1)
    (note,) = notifications(page)
    assert note["title"] == "Question: Two questions, one minute"
    assert note["body"] == "ask-db asks: Which database?" and note["tag"] == f"wc-inbox-{graph.pk}"
    # the same item asks again within the minute: no second notification
    store.submit(region, {"outcome": "waiting", "waiting_reason": "Which region?"})
    wait_rows(page, 3)
    # the person's own doing (a worker run in their name) raises none either
    mine = store.linear(title="My own question")
    claim = store.claim_item(mine.pk)
    bg(services.run_submit, run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
       lease_epoch=claim.run.lease_epoch, result={"outcome": "waiting", "waiting_reason": "Asked by me"},
       actor="user:lead", now=store.now())
    wait_rows(page, 4)
    # a failure elsewhere does notify (and the one pending event of each change is in by now)
    failed_item(store, "Fails while I watch")
    wait_rows(page, 5)
    wait_until(page, lambda: len(notifications(page)) >= 2)
    page.wait_for_timeout(300)
    made = notifications(page)
    assert [n["title"] for n in made] == ["Question: Two questions, one minute", "Needs attention: Fails while I watch"]
    assert made[1]["body"] == "compile failed: compiler crashed: out of memory"
    # clicking the notification opens the inbox at its row
    page.evaluate("() => window.testNotifications.made[0].onclick()")
    wait_for_js(page, f"() => location.hash === '#{graph.pk}/ask-db'")
    assert row(page, graph.pk, "ask-db").get_attribute("class").split().count("current") == 1
    assert broken.pk in groups(page)


def test_every_other_page_notifies_a_person_who_turned_it_on_and_opens_the_inbox_at_the_row(
        notified_page, daphne_server, store, lead):
    page = notified_page
    failed_item(store, "Failed before the page opened")  # what was there already is not news
    PersonSettings.objects.create(user=lead, browser_notifications=True)
    page.goto(f"{daphne_server.url}/workers/")
    # the page's watch has read the inbox once, its baseline (what was there is not news)
    wait_for_js(page, "() => performance.getEntriesByType('resource').some(e => e.name.includes('/api/v1/inbox'))")
    page.wait_for_timeout(300)
    assert page.locator("#nav-inbox-count").inner_text() == "1"
    assert notifications(page) == []
    graph = store.graph([{"id": "ask-db"}], title="Asked while I look at the workers")
    store.submit(store.claim_item(graph.pk, stage="ask-db"), {"outcome": "waiting", "waiting_reason": "Which database?"})
    wait_until(page, lambda: len(notifications(page)) >= 1)
    (note,) = notifications(page)
    assert note["title"] == "Question: Asked while I look at the workers"
    assert note["body"] == "ask-db asks: Which database?"
    wait_for_js(page, "() => document.getElementById('nav-inbox-count').textContent === '2'")
    page.evaluate("() => window.testNotifications.made[0].onclick()")
    page.wait_for_url(f"**/inbox/#{graph.pk}/ask-db")
    wait_rows(page, 2)
    wait_for_js(page, "(sel) => document.querySelector(sel)?.classList.contains('current')",
                f'#inbox tr.inbox-row[data-item="{graph.pk}"][data-stage="ask-db"]')
    # a person who did not turn them on gets no watch at all
    PersonSettings.objects.filter(user=lead).update(browser_notifications=False)
    page.goto(f"{daphne_server.url}/workers/")
    page.wait_for_load_state("networkidle")
    assert page.evaluate("() => performance.getEntriesByType('resource').some(e => e.name.endsWith('inbox-notify.js'))") \
        is False
