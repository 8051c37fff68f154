""""Needs me" unmistakable: the work item page's banner names every waiting stage, its question and
how long it has waited (live), or the failed stage and why; the answer dialog lists every waiting
stage with its own answer and one confirm answers them all; the list's "needs me" rows say what
they wait for, and the list fits 800 px."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from workcenter.models import Action, Run, WorkItem

from .conftest import ThreadedStore, screenshot, wait_for_js, wait_live

pytestmark = pytest.mark.django_db(transaction=True)

WAITED_S = 95  # the store's clock runs this far behind the wall clock: the stages have waited that long


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(seconds=WAITED_S))


@pytest.fixture
def problems(page):
    """Console errors and page errors of the test's page; none may appear."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"pageerror: {e}"))
    yield seen
    assert not seen, seen


def linear_waiting(store, question="Which database should the service use: PostgreSQL or SQLite?"):
    item = store.linear(title="Linear item that asks")
    claim = store.claim_item(item.pk)
    store.submit(claim, {"outcome": "waiting", "waiting_reason": question})
    return store.item(item.pk), claim


TWO_ASK = [{"id": "ask-db", "type": "research"}, {"id": "ask-region", "type": "research"},
           {"id": "build", "deps": ["ask-db", "ask-region"], "type": "implement"}]


def graph_two_waiting(store):
    item = store.graph(TWO_ASK, title="Graph item with two questions")
    db = store.claim_item(item.pk, stage="ask-db")
    region = store.claim_item(item.pk, stage="ask-region")
    store.submit(db, {"outcome": "waiting", "waiting_reason": "Which database?"})
    store.submit(region, {"outcome": "waiting", "waiting_reason": "Which region should it run in?"})
    assert store.item(item.pk).status == "waiting"
    return store.item(item.pk), db, region


def open_item(page, daphne_server, item_id, width=1280, scheme="light"):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 800 if width > 1000 else 900})
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)


def waited_seconds(text: str) -> int:
    m = re.search(r"waiting (?:(\d+) m )?(\d+) s", text)
    assert m, text
    return int(m[1] or 0) * 60 + int(m[2])


def shots(page, topic):
    """The page at 1280 and 800 px, light and dark."""
    for width in (1280, 800):
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.set_viewport_size({"width": width, "height": 800 if width > 1000 else 900})
            page.wait_for_timeout(120)
            screenshot(page, f"{topic}-{width}-{scheme}.png")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})


def test_a_waiting_linear_item_shows_which_stage_asks_what_and_for_how_long(page, daphne_server, store, problems):
    question = "Which database should the service use: PostgreSQL or SQLite?"
    item, claim = linear_waiting(store, question)
    # by design the action that asked is completed and the item waiting (DOMAIN §7.4)
    assert Action.objects.get(pk=claim.action.pk).status == "completed" and item.status == "waiting"
    open_item(page, daphne_server, item.pk)
    banner = page.locator("#needs-banner")
    banner.wait_for(state="visible")
    assert banner.get_attribute("data-status") == "waiting"
    # the stage is named, as the graph names it, with its own question
    stage = page.locator(f'#graph g.node[data-id="{claim.action.pk}"] .node-name, '
                         f'#graph g.node[data-stage="{claim.action.effective_stage_id}"] .node-name').first.text_content()
    row = banner.locator(f'.needs-stage[data-action-id="{claim.action.pk}"]')
    assert row.locator(".needs-stage-name").inner_text() == stage
    assert row.locator(".needs-text").inner_text() == question
    assert "Waiting for your answer" in banner.locator(".needs-title").inner_text()
    # and the graph draws the stage that asked waiting, not completed
    asked = page.locator(f'#graph g.node[data-stage="{claim.action.effective_stage_id}"]')
    assert asked.get_attribute("data-status") == "waiting"
    assert "node shows completed" not in banner.inner_text()
    # how long: from the waiting run's end, and live
    ended = Run.objects.get(pk=claim.run.pk).ended_at
    first = waited_seconds(row.locator(".needs-since").inner_text())
    expected = (datetime.now(timezone.utc) - ended).total_seconds()
    assert abs(first - expected) <= 3, (first, expected)
    wait_for_js(page, f"() => /waiting .*s/.test(document.querySelector('#needs-banner .needs-since').textContent) && "
                      f"document.querySelector('#needs-banner .needs-since').textContent !== {row.locator('.needs-since').inner_text()!r}",
                timeout=3000)
    assert waited_seconds(row.locator(".needs-since").inner_text()) > first
    # the banner sits between the header and the graph, and colours by the waiting status variable
    boxes = page.evaluate("""() => ['.item-head', '#needs-banner', '#workspace'].map(s =>
        document.querySelector(s).getBoundingClientRect().top)""")
    assert boxes[0] < boxes[1] < boxes[2]
    colours = page.evaluate("""() => [getComputedStyle(document.querySelector('#needs-banner')).borderLeftColor,
        getComputedStyle(document.documentElement).getPropertyValue('--st-waiting').trim()]""")
    assert colours[0] != "rgba(0, 0, 0, 0)"
    assert page.locator("#needs-answer").inner_text() == "Answer…"
    shots(page, "needs-banner-linear")
    # Answer… opens the dialog with that one question; the answer lands in the new action's context
    page.click("#needs-answer")
    box = page.locator("#retry-answer-list fieldset.answer")
    box.wait_for()
    assert box.count() == 1 and box.locator(".answer-question").inner_text() == question
    page.wait_for_selector("#retry-reset-line")
    box.locator("textarea").fill("PostgreSQL")
    page.click("#retry-confirm")
    page.wait_for_selector("#retry-dialog", state="hidden")
    banner.wait_for(state="hidden")
    newest = Action.objects.filter(work_item_id=item.pk).order_by("-sequence").first()
    assert newest.pk != claim.action.pk and newest.context[-1]["answer"] == "PostgreSQL"
    assert newest.context[-1]["waiting_reason"] == question


def test_a_graph_item_banner_lists_every_waiting_stage_with_its_own_question(page, daphne_server, store, problems):
    item, db, region = graph_two_waiting(store)
    open_item(page, daphne_server, item.pk)
    banner = page.locator("#needs-banner")
    banner.wait_for(state="visible")
    rows = banner.locator(".needs-stage")
    assert rows.count() == 2
    assert [rows.nth(i).get_attribute("data-stage") for i in range(2)] == ["ask-db", "ask-region"]
    assert rows.nth(0).locator(".needs-text").inner_text() == "Which database?"
    assert rows.nth(1).locator(".needs-text").inner_text() == "Which region should it run in?"
    assert "2 stages ask" in banner.locator(".needs-title").inner_text()
    for i in range(2):
        assert waited_seconds(rows.nth(i).locator(".needs-since").inner_text()) >= WAITED_S - 5
    assert page.locator("#needs-answer").inner_text() == "Answer all…"
    shots(page, "needs-banner-graph")


def test_a_failed_stage_is_named_with_its_error_and_the_retry_button(page, daphne_server, store, problems):
    item = store.graph([{"id": "compile", "type": "implement"}, {"id": "ship", "deps": ["compile"]}], title="Fails")
    claim = store.claim_item(item.pk, stage="compile")
    store.submit(claim, {"outcome": "failed", "error": "compiler crashed: out of memory"})
    open_item(page, daphne_server, item.pk)
    banner = page.locator("#needs-banner")
    banner.wait_for(state="visible")
    assert banner.get_attribute("data-status") == "needs_attention"
    assert "compile failed" in banner.locator(".needs-title").inner_text()
    row = banner.locator('.needs-stage[data-stage="compile"]')
    assert row.get_attribute("data-kind") == "failed"
    assert row.locator(".needs-text").inner_text() == "compiler crashed: out of memory"
    assert page.locator("#needs-answer").inner_text() == "Retry…"
    # the button opens the retry dialog; a retry clears the banner, live
    page.click("#needs-answer")
    page.wait_for_selector("#retry-reset-line")
    page.click("#retry-confirm")
    page.wait_for_selector("#retry-dialog", state="hidden")
    banner.wait_for(state="hidden")
    assert store.item(item.pk).status == "ready"


def test_one_dialog_answers_two_waiting_stages_each_with_its_own_answer(page, daphne_server, store, problems):
    item, db, region = graph_two_waiting(store)
    n_actions = Action.objects.filter(work_item_id=item.pk).count()
    open_item(page, daphne_server, item.pk)
    page.click("#needs-answer")
    boxes = page.locator("#retry-answer-list fieldset.answer")
    boxes.nth(1).wait_for()
    assert boxes.count() == 2
    assert [boxes.nth(i).get_attribute("data-stage") for i in range(2)] == ["ask-db", "ask-region"]
    assert boxes.nth(0).locator(".answer-question").inner_text() == "Which database?"
    assert boxes.nth(1).locator(".answer-question").inner_text() == "Which region should it run in?"
    assert "(required)" in boxes.nth(0).inner_text()
    page.wait_for_selector("#retry-reset-line")
    reset = page.locator("#retry-reset-line").inner_text()
    for stage in ("ask-db", "ask-region", "build"):
        assert stage in reset
    assert "(3 stages)" in reset
    # one answer missing: refused in words, nothing sent
    boxes.nth(0).locator("textarea").fill("PostgreSQL 16")
    page.click("#retry-confirm")
    assert "ask-region" in page.locator("#retry-error").inner_text()
    assert store.item(item.pk).status == "waiting"
    boxes.nth(1).locator("textarea").fill("eu-west-1")
    shots(page, "answer-dialog-two-stages")
    page.click("#retry-confirm")
    page.wait_for_selector("#retry-dialog", state="hidden")
    # both stages reset in place, each with its own answer in its replacement context
    a_db, a_region = Action.objects.get(pk=db.action.pk), Action.objects.get(pk=region.action.pk)
    assert (a_db.status, a_db.context[-1]["waiting_reason"], a_db.context[-1]["answer"]) == (
        "ready", "Which database?", "PostgreSQL 16")
    assert (a_region.status, a_region.context[-1]["waiting_reason"], a_region.context[-1]["answer"]) == (
        "ready", "Which region should it run in?", "eu-west-1")
    assert Action.objects.filter(work_item_id=item.pk).count() == n_actions
    # the item is not waiting any more, and the page says so live
    assert WorkItem.objects.get(pk=item.pk).status == "ready"
    page.locator("#needs-banner").wait_for(state="hidden")
    page.wait_for_selector('#graph g.node[data-stage="ask-db"][data-status="ready"]')
    page.wait_for_selector('#graph g.node[data-stage="ask-region"][data-status="ready"]')
    assert page.locator('#events li[data-type="work_item.retried"]').count() == 2


# --- the list -----------------------------------------------------------------------------------

LONG_TITLE = ("Migrate the billing service's nightly reconciliation job to the new ledger schema "
              "and keep the old reports working until finance signs off")


def test_needs_me_rows_say_what_they_wait_for_and_the_list_fits_800_px(page, daphne_server, store, problems):
    waiting, _ = linear_waiting(store, "Which database should the service use: PostgreSQL or SQLite?")
    two, _db, _region = graph_two_waiting(store)
    broken = store.graph([{"id": "compile", "type": "implement"}], title=LONG_TITLE)
    store.submit(store.claim_item(broken.pk, stage="compile"), {"outcome": "failed", "error": "compiler crashed: out of memory"})
    calm = store.create(title="Nothing to do here")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{calm.pk}"]')
    wait_live(page)

    def line(item_id):
        return page.locator(f'#items tr[data-id="{item_id}"] .attention-line')

    assert line(waiting.pk).inner_text().startswith("?triage asks: “Which database should the service use") or \
        "asks: “Which database should the service use" in line(waiting.pk).inner_text()
    assert line(waiting.pk).get_attribute("data-kind") == "waiting"
    assert "ask-db asks: “Which database?”" in line(two.pk).inner_text()
    assert "(+1 more stage waiting)" in line(two.pk).inner_text()
    assert "compile failed: compiler crashed: out of memory" in line(broken.pk).inner_text()
    assert line(calm.pk).count() == 0
    # the shortcut keeps exactly those rows
    page.click("#needs-me")
    wait_for_js(page, "() => document.querySelectorAll('#items tr').length === 3")
    shots(page, "list-needs-me")
    # at 800 px: no horizontal overflow, and a long title is one line (ellipsis), light and dark
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size({"width": 800, "height": 900})
        page.wait_for_timeout(100)
        sizes = page.evaluate("""() => ({scroll: document.documentElement.scrollWidth,
            client: document.documentElement.clientWidth,
            table: document.querySelector('table.items').getBoundingClientRect().right})""")
        assert sizes["scroll"] <= sizes["client"] and sizes["table"] <= sizes["client"], sizes
        title = page.locator(f'#items tr[data-id="{broken.pk}"] .col-title a')
        metrics = title.evaluate("""a => ({h: a.getBoundingClientRect().height,
            lh: parseFloat(getComputedStyle(a).lineHeight) || 20, clipped: a.scrollWidth > a.clientWidth})""")
        assert metrics["h"] <= metrics["lh"] * 1.5 and metrics["clipped"], metrics
        screenshot(page, f"list-800-{scheme}.png")
