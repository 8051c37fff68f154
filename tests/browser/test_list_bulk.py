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
    assert text[a.pk].startswith("resets ") and "stops docs — worker boot-3f2…, epoch 1" in text[a.pk], text[a.pk]
    assert text[ready.pk].startswith("Not possible: "), text
    assert page.locator(f'#bulk-rows .bulk-row[data-id="{ready.pk}"]').get_attribute("data-allowed") == "false"
    assert page.locator("#bulk-submit").inner_text() == "Retry 3 items"
    assert page.locator("#bulk-answer-wrap").is_hidden()  # no row waits for an answer
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
