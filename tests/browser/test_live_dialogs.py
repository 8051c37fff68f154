"""Dialogs that never go stale (UI.md): an open Retry/Answer, Edit or Cancel dialog follows the live
stream, says what changed before the lead confirms, and never overwrites what the lead typed."""
from __future__ import annotations

from datetime import timedelta

import pytest

from workcenter import services
from workcenter.models import Action, Run, WorkItem

from .conftest import ThreadedStore, screenshot, wait_for_js
from .test_needs_me import WAITED_S, open_item, shots
from .live import WAIT_MS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(seconds=WAITED_S))


class Problems(list):
    """Console errors and page errors of the page; `expected` lists the console lines a test
    provokes on purpose (the browser logs every 4xx answer of a fetch)."""

    expected: tuple[str, ...] = ()


@pytest.fixture
def problems(page):
    seen = Problems()
    page.on("console", lambda m: seen.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"pageerror: {e}"))
    yield seen
    unexpected = [p for p in seen if p not in seen.expected]
    assert not unexpected, unexpected


def notice(page, dialog):
    return page.locator(f"#{dialog}-notice .notice-text")


def test_an_open_retry_dialog_says_when_the_item_was_retried_elsewhere(page, daphne_server, store, http_api, problems):
    item = store.graph([{"id": "compile", "type": "implement"}, {"id": "ship", "deps": ["compile"]}], title="Retried twice")
    store.submit(store.claim_item(item.pk, stage="compile"), {"outcome": "failed", "error": "flaky network"})
    open_item(page, daphne_server, item.pk)
    page.click("#btn-retry")
    page.wait_for_selector("#retry-reset-line")
    assert page.locator("#retry-confirm").is_enabled()
    assert page.locator("#retry-notice").is_hidden()
    # when someone else retries the item while the dialog is open
    status, _ = http_api.call("POST", f"/work-items/{item.pk}/retry", {})
    assert status == 200
    # then the dialog says so, before the lead confirms, and there is nothing left to confirm
    wait_for_js(page, "() => /retried elsewhere \\(by lead\\) and is now ready — nothing to retry/"
                      ".test(document.querySelector('#retry-notice .notice-text').textContent)", timeout=WAIT_MS)
    assert page.locator("#retry-notice").is_visible()
    assert page.locator("#retry-confirm").is_disabled()
    assert page.locator("#retry-preview").inner_text() == "Nothing to retry now."
    assert page.locator("#graph g.node.outlined").count() == 0
    assert page.locator("#retry-dialog").is_visible()
    shots(page, "stale-retry")
    # the stage fails again: the dialog offers the retry again and says so
    store.submit(store.claim_item(item.pk, stage="compile"), {"outcome": "failed", "error": "flaky network again"})
    wait_for_js(page, "() => !document.getElementById('retry-confirm').disabled", timeout=WAIT_MS)
    assert "the item needs a retry again" in notice(page, "retry").inner_text()


def test_the_retry_dialog_sends_the_state_it_showed_and_a_change_it_missed_is_refused(
        page, daphne_server, store, bg, problems):
    item = store.graph([{"id": "compile", "type": "implement", "max_attempts": 1}, {"id": "docs", "type": "write"}],
                       title="Edited unseen")
    compile_ = store.claim_item(item.pk, stage="compile")
    docs = store.claim(lease_ms=3_600_000)  # the store's clock is behind: a lease that outlives the test
    assert docs.action.stage_id == "docs"
    store.submit(compile_, {"outcome": "failed", "error": "flaky network"})
    assert WorkItem.objects.get(pk=item.pk).status == "needs_attention"
    open_item(page, daphne_server, item.pk)
    sent: list = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/retry") else None)
    page.click("#btn-retry")
    page.wait_for_selector("#retry-reset-line")
    # the dialog's next look is held up while an admin edits the failed stage: it still shows the old state
    held: list = []
    hold = {"on": True}
    page.route("**/api/v1/work-items/*/retry-preview*",
               lambda route, request: held.append(route) if hold["on"] else route.continue_())
    bg(services.action_edit, action_id=compile_.action.pk, reason="a clearer instruction", actor="admin:ops",
       instruction="compile with the fixed network settings")
    wait_held(page, held, 1)
    problems.expected = ("console: Failed to load resource: the server responded with a status of 409 (Conflict)",)
    page.click("#retry-confirm")
    error = page.locator("#retry-error")
    error.wait_for(state="visible")
    assert error.inner_text() == ("Retry refused: stage compile was edited by admin:ops since the preview; "
                                  "nothing was done. "
                                  "The dialog now shows the item as it is: confirm again if you still want to.")
    assert WorkItem.objects.get(pk=item.pk).status == "needs_attention"
    assert set(sent[0]) == {"expected_state_token"}
    # the held looks let through: the dialog shows the retry of now, and sends the token of now
    hold["on"] = False
    for route in held:
        route.continue_()
    wait_for_js(page, "() => !document.getElementById('retry-confirm').disabled")
    page.click("#retry-confirm")
    page.wait_for_selector("#retry-dialog", state="hidden")
    assert WorkItem.objects.get(pk=item.pk).status == "ready"
    assert sent[1]["expected_state_token"] > sent[0]["expected_state_token"]


def test_a_stage_that_starts_waiting_appears_in_the_open_answer_dialog_and_typed_answers_stay(
        page, daphne_server, store, problems):
    item = store.graph([{"id": "ask-db"}, {"id": "ask-region"}, {"id": "build", "deps": ["ask-db", "ask-region"]}],
                       title="A second question arrives")
    db = store.claim_item(item.pk, stage="ask-db")
    region = store.claim_item(item.pk, stage="ask-region")
    store.submit(db, {"outcome": "waiting", "waiting_reason": "Which database?"})
    open_item(page, daphne_server, item.pk)
    page.click("#btn-retry")
    boxes = page.locator("#retry-answer-list fieldset.answer")
    boxes.first.wait_for()
    assert boxes.count() == 1
    first = boxes.nth(0).locator("textarea")
    first.fill("PostgreSQL")
    page.evaluate("document.querySelector('#retry-answer-list textarea').__typedHere = true")
    # when the running sibling asks too, while the lead is typing
    store.submit(region, {"outcome": "waiting", "waiting_reason": "Which region?"})
    # then its question appears with its own answer box; what the lead typed is untouched
    boxes.nth(1).wait_for(timeout=WAIT_MS)
    assert boxes.nth(1).get_attribute("data-stage") == "ask-region"
    assert boxes.nth(1).locator(".answer-question").inner_text() == "Which region?"
    assert "ask-region is now waiting too" in notice(page, "retry").inner_text()
    assert first.input_value() == "PostgreSQL"
    assert page.evaluate("document.querySelector('#retry-answer-list textarea').__typedHere === true")
    assert first.evaluate("el => el === document.activeElement")
    wait_for_js(page, "() => /ask-region/.test(document.getElementById('retry-reset-line').textContent)")
    assert page.locator("#retry-confirm").inner_text() == "Send 2 answers & retry"
    boxes.nth(1).locator("textarea").fill("eu-west-1")
    page.click("#retry-confirm")
    page.wait_for_selector("#retry-dialog", state="hidden")
    assert Action.objects.get(pk=db.action.pk).context[-1]["answer"] == "PostgreSQL"
    assert Action.objects.get(pk=region.action.pk).context[-1]["answer"] == "eu-west-1"
    assert WorkItem.objects.get(pk=item.pk).status == "ready"


def test_the_edit_dialog_says_when_the_revision_moved_and_keeps_what_the_lead_typed(
        page, daphne_server, store, http_api, problems):
    item = store.create(title="Edit me", goal="The old goal", criteria=["it works"])
    open_item(page, daphne_server, item.pk)
    page.click("#btn-edit")
    page.wait_for_selector("#edit-dialog[open]")
    assert page.locator("#edit-revision").inner_text() == "1"
    page.fill("#edit-title-input", "My better title")
    # when the goal is changed elsewhere (a contract change: revision 1 → 2)
    status, _ = http_api.call("PATCH", f"/work-items/{item.pk}", {"goal": "The goal from elsewhere"})
    assert status == 200
    wait_for_js(page, "() => !document.getElementById('edit-notice').hidden", timeout=WAIT_MS)
    assert notice(page, "edit").inner_text() == "Revision 1 → 2: goal changed by lead."
    # nothing the lead sees is overwritten silently
    assert page.locator("#edit-title-input").input_value() == "My better title"
    assert page.locator("#edit-goal").input_value() == "The old goal"
    shots(page, "edit-revision-notice")
    # saving against the old revision is refused, plainly
    problems.expected = ("console: Failed to load resource: the server responded with a status of 409 (Conflict)",)
    page.click("#edit-save")
    error = page.locator("#edit-error")
    error.wait_for(state="visible")
    assert "Save refused: the item changed meanwhile (it is at revision 2 now, you edited revision 1)" in error.inner_text()
    assert WorkItem.objects.get(pk=item.pk).title == "Edit me"
    # loading the new values fills what the lead did not edit and keeps what they did
    page.click("#edit-reload")
    assert page.locator("#edit-goal").input_value() == "The goal from elsewhere"
    assert page.locator("#edit-title-input").input_value() == "My better title"
    assert page.locator("#edit-revision").inner_text() == "2"
    assert notice(page, "edit").inner_text() == "Loaded revision 2. Kept your edits of the title."
    page.click("#edit-save")
    page.wait_for_selector("#edit-dialog", state="hidden")
    saved = WorkItem.objects.get(pk=item.pk)
    assert (saved.title, saved.goal, saved.revision) == ("My better title", "The goal from elsewhere", 2)


def test_the_cancel_dialog_says_when_the_item_was_cancelled_meanwhile(page, daphne_server, store, bg, problems):
    item = store.create(title="Cancel me")
    open_item(page, daphne_server, item.pk)
    page.click("#btn-cancel")
    page.wait_for_selector("#cancel-dialog[open]")
    page.wait_for_selector("#cancel-running-line")  # what a cancel would stop (nothing here)
    assert page.locator("#cancel-running-line").inner_text() == "No running work will be stopped."
    assert page.locator("#cancel-confirm").is_enabled()
    bg(services.work_item_cancel, item_id=item.pk, actor="user:someone-else")
    wait_for_js(page, "() => !document.getElementById('cancel-notice').hidden", timeout=WAIT_MS)
    assert notice(page, "cancel").inner_text() == "Updated: the item was cancelled meanwhile — nothing to cancel."
    assert page.locator("#cancel-confirm").is_disabled()
    screenshot(page, "stale-cancel-1280-light.png")


def test_the_cancel_dialog_shows_what_it_stops_and_sends_the_state_it_showed(page, daphne_server, store, problems):
    item = store.graph([{"id": "build", "type": "implement"}, {"id": "docs", "type": "write"}],
                       title="Cancel while it runs")
    build = store.claim_item(item.pk, stage="build", boot="boot-7c1d0a22")
    open_item(page, daphne_server, item.pk)
    sent: list = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/cancel") else None)
    page.click("#btn-cancel")
    line = page.locator("#cancel-running-line")
    line.wait_for()
    assert line.inner_text() == "Running work that will be stopped: build (worker boot-7c1…)."
    # a worker claims the other stage while the dialog is open: the dialog follows and says so
    docs = store.claim_item(item.pk, stage="docs", boot="boot-9e44b010")
    wait_for_js(page, "() => /docs/.test(document.getElementById('cancel-running-line').textContent)", timeout=WAIT_MS)
    assert line.inner_text() == ("Running work that will be stopped: build (worker boot-7c1…), "
                                 "docs (worker boot-9e4…).")
    assert notice(page, "cancel").inner_text() == "Updated: the running work to stop changed (below)."
    # the dialog's next look is held up while build fails: it still shows the old state
    held: list = []
    hold = {"on": True}
    page.route("**/api/v1/work-items/bulk-preview",
               lambda route, request: held.append(route) if hold["on"] else route.continue_())
    store.submit(build, {"outcome": "failed", "error": "compiler crashed"})
    wait_held(page, held, 1)
    # when the lead confirms what the dialog shows, the server refuses: the item moved since
    problems.expected = ("console: Failed to load resource: the server responded with a status of 409 (Conflict)",)
    page.click("#cancel-confirm")
    error = page.locator("#cancel-error")
    error.wait_for(state="visible")
    assert error.inner_text() == ("Cancel refused: a run of stage build failed since the preview; nothing was done. "
                                  "The dialog now shows the item as it is: confirm again if you still want to.")
    assert WorkItem.objects.get(pk=item.pk).status != "cancelled"
    assert sent[0] == {"expected_state_token": sent[0]["expected_state_token"]}
    # the dialog looks again (the held reads let through): what it stops now, and the token of now
    hold["on"] = False
    for route in held:
        route.continue_()
    wait_for_js(page, "() => !document.getElementById('cancel-confirm').disabled")
    assert line.inner_text() == "Running work that will be stopped: docs (worker boot-9e4…)."
    page.click("#cancel-confirm")
    page.wait_for_selector("#cancel-dialog", state="hidden")
    assert WorkItem.objects.get(pk=item.pk).status == "cancelled"
    assert sent[1]["expected_state_token"] > sent[0]["expected_state_token"]
    assert Run.objects.get(pk=docs.run.pk).status == "cancelled"


def wait_held(page, held: list, n: int) -> None:
    """Until the page has sent `n` of the requests a route holds."""
    for _ in range(200):
        if len(held) >= n:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{len(held)} requests held, expected at least {n}")
