"""The side panel reads what the pushed state leaves out and draws itself only when what it shows
changed: a run that ends while its stage is open shows its whole response, evidence and summary
(read once, when it ended); a relayout of the graph or an update of another stage leaves the
panel's elements as they are (a reader's scroll, selection and open sections stay)."""
from __future__ import annotations

import pytest

from tests.conftest import completed

from .conftest import ThreadedStore, wait_for_js, wait_live

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY = "Compared the three drivers. " + "The numbers hold on every platform. " * 12  # > 300 characters
RESPONSE = "## Findings\n" + "\n".join(f"- finding {i}: the driver behaves" for i in range(40))


def settled(page) -> None:
    """Two animation frames: what the page does on an answer it has received is done."""
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def mark_panel(page) -> None:
    page.evaluate("() => { document.querySelector('#panel-body').firstElementChild.dataset.mark = 'kept'; }")


def panel_kept(page) -> bool:
    return page.evaluate("() => document.querySelector('#panel-body').firstElementChild?.dataset.mark === 'kept'")


def test_a_run_that_ends_while_open_shows_its_whole_texts_and_the_panel_redraws_only_on_change(page, daphne_server, bg):
    store = ThreadedStore(bg)
    item = store.graph([{"id": "a"}, {"id": "b"}], title="Reads on open")
    other = store.claim_item(item.pk, stage="b")
    claim = store.claim_item(item.pk, stage="a")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    page.wait_for_selector('#graph g.node[data-stage="a"][data-status="running"]')
    wait_live(page)
    with page.expect_response(lambda r: r.url.endswith("/stages/a/runs")) as runs_read:
        page.click('#graph g.node[data-stage="a"]')  # the stage's runs are read once when it opens
    page.wait_for_selector("#panel:not([hidden]) li.run")
    wait_for_js(page, "() => !document.querySelector('#panel-body .instruction pre.muted')")
    runs_read.value.finished()
    settled(page)  # the read's answer drawn

    # nothing of stage a changes: a relayout and an update of stage b leave the panel as it is
    mark_panel(page)
    page.set_viewport_size({"width": 1100, "height": 800})
    page.wait_for_timeout(400)
    assert panel_kept(page), "a relayout drew the panel again"
    store.complete(other)
    page.wait_for_selector('#graph g.node[data-stage="b"][data-status="completed"]')
    page.wait_for_timeout(300)
    assert panel_kept(page), "an update of another stage drew the panel again"

    # stage a's run ends: the panel draws it again, and reads its whole texts
    store.submit(claim, completed(summary=SUMMARY, response=RESPONSE, evidence=["report: drivers.md"]))
    page.wait_for_selector('#panel-body li.run[data-status="completed"] .evidence')
    card = page.locator('#panel-body li.run[data-status="completed"]')
    assert "drivers.md" in card.locator(".evidence").inner_text()
    assert card.locator(".run-summary").inner_text().strip() == SUMMARY.strip()  # not cut at 300
    assert card.locator(".run-response pre").text_content() == RESPONSE
    assert not panel_kept(page)
