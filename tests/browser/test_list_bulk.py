"""Bulk retry from the list: select rows, preview once what each would reset and stop, confirm with
a reason; a row that changed between the preview and the confirm is refused alone, in words, and
the others go through."""
from __future__ import annotations

from datetime import timedelta

import pytest

from workcenter import services

from .conftest import ThreadedStore, screenshot, wait_for_js, wait_live

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [
    {"id": "survey", "type": "research", "max_attempts": 5},
    {"id": "implement", "deps": ["survey"], "type": "implement", "max_attempts": 5},
    {"id": "docs", "deps": ["survey"], "type": "write", "max_attempts": 5},
    {"id": "review", "deps": ["implement"], "type": "review", "max_attempts": 5},
]


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(minutes=5))


def failed_item(store, title, *, running_sibling=False):
    """survey done, implement failed: the item needs attention; with
    `running_sibling` docs is still running (a retry stops it)."""
    item = store.graph(STAGES, title=title)
    store.complete(store.claim_item(item.pk, stage="survey"))
    if running_sibling:
        store.claim_item(item.pk, stage="docs", boot="boot-3f2a9c71")
    claim = store.claim_item(item.pk, stage="implement")
    store.submit(claim, {"outcome": "failed", "error": "compiler crashed"})
    item = store.item(item.pk)
    assert item.status == "needs_attention", item.status
    return item


def row_box(page, item_id):
    return page.locator(f'#items tr[data-id="{item_id}"] input.row-select')


def test_bulk_retry_previews_each_row_and_refuses_alone_the_one_changed_meanwhile(page, daphne_server, store, bg):
    # given three items that need attention and one that was cancelled (nothing to retry)
    ready = store.create(title="Cancelled item, nothing to retry")
    bg(services.work_item_cancel, item_id=ready.pk, actor="user:lead", reason="not needed")
    a = failed_item(store, "Failed build A", running_sibling=True)
    b = failed_item(store, "Failed build B")
    c = failed_item(store, "Failed build C")
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{c.pk}"]')
    wait_live(page)
    bar = page.locator("#bulk-bar")
    assert bar.is_hidden()

    # when the lead selects them
    for item in (a, b, c, ready):
        row_box(page, item.pk).check()
    assert bar.is_visible()
    assert page.locator("#bulk-count").inner_text() == "4 selected"
    assert page.evaluate("document.querySelector('#select-all').indeterminate") is False  # all four loaded rows
    # and asks for a retry: one preview for the whole selection, per row what it does
    page.click("#bulk-retry")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row').length === 4")
    text = {item.pk: page.locator(f'#bulk-rows .bulk-row[data-id="{item.pk}"] .bulk-row-effect').inner_text()
            for item in (a, b, c, ready)}
    assert text[b.pk] == "resets implement, review (2 stages); stops no running work", text
    assert text[a.pk].startswith("resets ") and "stops docs — worker boot-3f2…" in text[a.pk], text[a.pk]
    assert text[ready.pk] == ("Not possible: the item is cancelled: only an item that is waiting or needs "
                              "attention can be retried."), text
    assert page.locator(f'#bulk-rows .bulk-row[data-id="{ready.pk}"]').get_attribute("data-allowed") == "false"
    assert page.locator("#bulk-submit").inner_text() == "Retry 3 items"
    assert "btn-primary" in page.locator("#bulk-submit").get_attribute("class")
    assert page.locator("#bulk-rows .bulk-answers").count() == 0  # no row waits for an answer
    page.fill("#bulk-reason", "Compiler fixed on the build hosts")
    screenshot(page, "list-bulk-preview.png")

    # while the dialog is open, B changes (its contract is edited elsewhere)
    before = store.item(b.pk).revision
    bg(services.work_item_update, item_id=b.pk, patch={"goal": "A goal edited while the preview was open"})
    assert store.item(b.pk).revision != before
    # when the lead confirms
    page.click("#bulk-submit")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row[data-result]').length === 3")
    # then B alone is refused, with its reason in words; A and C are retried
    result = {item.pk: page.locator(f'#bulk-rows .bulk-row[data-id="{item.pk}"]') for item in (a, b, c)}
    assert result[b.pk].get_attribute("data-result") == "refused"
    assert result[b.pk].locator(".bulk-row-effect").inner_text().startswith("Refused: changed since the preview")
    for item in (a, c):
        assert result[item.pk].get_attribute("data-result") == "ok"
        assert result[item.pk].locator(".bulk-row-effect").inner_text() == "Retried."
    assert page.locator("#bulk-intro").inner_text() == "Retried 2 items; 1 refused (see below)."
    screenshot(page, "list-bulk-result.png")
    assert {store.item(a.pk).status, store.item(c.pk).status} == {"ready"}
    assert store.item(b.pk).status != "ready" or store.item(b.pk).revision != before
    # the selection keeps what did not go through
    page.click("#bulk-dismiss")
    assert page.locator("#bulk-count").inner_text() == "2 selected"
    assert row_box(page, b.pk).is_checked() and row_box(page, ready.pk).is_checked()
    assert not row_box(page, a.pk).is_checked() and not row_box(page, c.pk).is_checked()
    for item in (a, c):
        wait_for_js(page, f"document.querySelector('#items tr[data-id=\"{item.pk}\"]').dataset.status === 'ready'")
    # Clear empties it; select-all takes every loaded row
    page.click("#bulk-clear")
    assert bar.is_hidden()
    page.check("#select-all")
    assert page.locator("#bulk-count").inner_text() == f"{page.locator('#items tr').count()} selected"


def test_bulk_dialog_asks_for_a_reason_before_it_sends_anything(page, daphne_server, store):
    item = failed_item(store, "Failed build D")
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{item.pk}"]')
    requests: list[str] = []
    row_box(page, item.pk).check()
    page.click("#bulk-cancel")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row').length === 1")
    assert page.locator("#bulk-rows .bulk-row .bulk-row-effect").inner_text().startswith("cancels the item")
    page.on("request", lambda r: requests.append(r.url) if r.resource_type != "websocket" else None)
    page.click("#bulk-submit")
    error = page.locator("#bulk-error")
    error.wait_for(state="visible")
    assert error.inner_text() == "Please give a reason."
    assert page.locator("#bulk-reason").get_attribute("aria-invalid") is not None
    assert requests == []
    page.keyboard.press("Escape")
    page.wait_for_selector("#bulk-dialog", state="hidden")
    assert store.item(item.pk).status == "needs_attention"


def test_bulk_cancel_refuses_alone_the_row_a_worker_claimed_after_the_preview(page, daphne_server, store):
    # given two items nobody runs yet: the preview says the cancel stops no running work
    a = store.graph([{"id": "survey", "type": "research"}], title="Claimed after the preview")
    b = store.graph([{"id": "survey", "type": "research"}], title="Draft, untouched", status="draft")
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{b.pk}"]')
    wait_live(page)
    sent: list = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/work-items/bulk") else None)
    for item in (a, b):
        row_box(page, item.pk).check()
    page.click("#bulk-cancel")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row').length === 2")
    effect = page.locator(f'#bulk-rows .bulk-row[data-id="{a.pk}"] .bulk-row-effect')
    assert effect.inner_text() == "cancels the item; stops no running work"
    # a worker claims A's stage while the dialog is open (its contract revision does not move)
    claim = store.claim_item(a.pk, stage="survey")
    assert store.item(a.pk).revision == 1
    page.fill("#bulk-reason", "Duplicates")
    page.click("#bulk-submit")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row[data-result]').length === 2")
    # then A alone is refused, saying what happened; B is cancelled; the run the lead never saw still runs
    assert page.locator(f'#bulk-rows .bulk-row[data-id="{a.pk}"]').get_attribute("data-result") == "refused"
    assert effect.inner_text() == ("Refused: stage survey was claimed since the preview; nothing was done to it. "
                                   "Select it again to see what a cancel would do now.")
    assert page.locator(f'#bulk-rows .bulk-row[data-id="{b.pk}"]').get_attribute("data-result") == "ok"
    assert page.locator("#bulk-intro").inner_text() == "Cancelled 1 item; 1 refused (see below)."
    assert store.item(a.pk).status == "running" and store.item(b.pk).status == "cancelled"
    assert store.runs(a.pk)[0].pk == claim.run.pk and store.runs(a.pk)[0].status == "running"
    # the request carried the state tokens the preview showed, beside the revisions
    assert set(sent[0]["expected_state_tokens"]) == {a.pk, b.pk}
    assert sent[0]["expected_revisions"] == {a.pk: 1, b.pk: 1}


def waiting_graph(store, title, questions):
    """A graph item whose stages (one per question) each asked a question: waiting."""
    stages = [{"id": stage, "type": "research"} for stage in questions] + [
        {"id": "ship", "deps": list(questions), "type": "deliver"}]
    item = store.graph(stages, title=title)
    claims = [store.claim_item(item.pk, stage=stage) for stage in questions]
    for claim, question in zip(claims, questions.values()):
        store.submit(claim, {"outcome": "waiting", "waiting_reason": question})
    assert store.item(item.pk).status == "waiting"
    return item


def test_bulk_retry_shows_each_waiting_stages_question_and_sends_each_answer_to_its_stage(page, daphne_server, store, bg):
    # given two waiting items — one asks at two stages, one at one — and one that failed
    two = waiting_graph(store, "Asks twice", {"db": "Which database?", "region": "Which region?"})
    one = waiting_graph(store, "Asks once", {"licence": "MIT or Apache-2.0?"})
    broken = failed_item(store, "Failed build E")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{broken.pk}"]')
    wait_live(page)
    sent: list = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/work-items/bulk") else None)
    for item in (two, one, broken):
        row_box(page, item.pk).check()
    page.click("#bulk-retry")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row').length === 3")
    # then each waiting row shows its stages' questions, each with its own answer box
    def questions(item):
        boxes = page.locator(f'#bulk-rows .bulk-row[data-id="{item.pk}"] fieldset.answer')
        return [(boxes.nth(i).get_attribute("data-stage"), boxes.nth(i).locator(".answer-question").inner_text())
                for i in range(boxes.count())]
    assert questions(two) == [("db", "Which database?"), ("region", "Which region?")]
    assert questions(one) == [("licence", "MIT or Apache-2.0?")]
    assert questions(broken) == []
    assert page.locator(f'#bulk-rows .bulk-row[data-id="{two.pk}"] .bulk-row-effect').inner_text().startswith(
        "answers 2 questions (below)")
    assert page.locator("#bulk-submit").inner_text() == "Send 3 answers & retry 3 items"
    # a question left unanswered is named before anything is sent
    page.fill("#bulk-reason", "Answered in the weekly")
    box = lambda item, stage: page.locator(f'#bulk-rows fieldset.answer[data-item="{item.pk}"][data-stage="{stage}"] textarea')  # noqa: E731
    box(two, "db").fill("PostgreSQL")
    box(one, "licence").fill("Apache-2.0")
    page.click("#bulk-submit")
    assert page.locator("#bulk-error").inner_text() == "Please give an answer to the question of region."
    assert box(two, "region").get_attribute("aria-invalid") is not None
    assert sent == []
    box(two, "region").fill("eu-west")
    assert page.locator("#bulk-error").is_hidden()  # typing the missing answer takes the refusal away
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 900})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            screenshot(page, f"list-bulk-answers-{width}-{scheme}.png")
    page.emulate_media(color_scheme="light")
    page.click("#bulk-submit")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row[data-result=\"ok\"]').length === 3")
    # each answer reached its own stage, in one request
    assert len(sent) == 1
    answers = {item_id: {a["action_id"]: a["answer"] for a in entries} for item_id, entries in sent[0]["answers"].items()}
    assert set(answers) == {two.pk, one.pk} and "answer" not in sent[0]
    given = {}
    for item in (two, one):
        for action in store.actions(item.pk):
            if action.status == "ready" and action.context and action.context[-1].get("answer"):
                given[(item.pk, action.stage_id)] = action.context[-1]["answer"]
    assert given == {(two.pk, "db"): "PostgreSQL", (two.pk, "region"): "eu-west", (one.pk, "licence"): "Apache-2.0"}
    assert {store.item(i.pk).status for i in (two, one, broken)} == {"ready"}


def test_bulk_cancel_reads_and_looks_like_the_item_pages_cancel(page, daphne_server, store):
    items = [store.graph([{"id": "survey", "type": "research"}], title=f"To cancel {k}") for k in range(5)]
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/")
    page.wait_for_selector(f'#items tr[data-id="{items[-1].pk}"]')
    for item in items:
        row_box(page, item.pk).check()
    page.click("#bulk-cancel")
    wait_for_js(page, "document.querySelectorAll('#bulk-rows .bulk-row').length === 5")
    submit = page.locator("#bulk-submit")
    assert submit.inner_text() == "Cancel 5 items"
    assert "btn-danger" in submit.get_attribute("class").split() and "btn-primary" not in submit.get_attribute("class")
    # the danger red: the colour the item page's "Cancel item" button is drawn in (--st-failed)
    colours = page.evaluate("""() => {
        const probe = document.createElement('span'); probe.style.color = 'var(--st-failed)'; document.body.append(probe);
        const red = getComputedStyle(probe).color; probe.remove();
        return [getComputedStyle(document.querySelector('#bulk-submit')).backgroundColor, red];
    }""")
    assert colours[0] == colours[1], colours
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        screenshot(page, f"list-bulk-cancel-1280-{scheme}.png")
