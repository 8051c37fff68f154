"""The run log as a lead sees it, at 1280 and 800 px, light and dark: a running run's log growing in
the item page's panel, a finished run's log, and the Logs page's search result, whose link opens the
item at that run's log with the text found. Nothing scrolls sideways."""
from __future__ import annotations

from datetime import timedelta

import pytest

from workcenter.services.run_logs import run_log_append

from .conftest import ThreadedStore, screenshot, wait_for_js, wait_live

pytestmark = pytest.mark.django_db(transaction=True)

FITS = "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
BUILD = ["$ python -m pip install -e .", "Successfully installed workcenter-0.1", "$ python -m pytest -q tests/unit",
         "collected 412 items", "tests/unit/test_store.py ........................................ [ 10%]",
         "tests/unit/test_claims.py ...................................... [ 19%]",
         "tests/unit/test_graph.py ....................................... [ 29%]"]
IMPORT = ["$ python manage.py import_nightly --since yesterday", "reading 1,204 rows from exports/2026-12-06.csv",
          "Traceback (most recent call last):", '  File "importer/run.py", line 12, in <module>',
          "    import yaml", "ModuleNotFoundError: No module named 'yaml'"]


def append(claim, lines, stream="stdout"):
    run = claim.run
    run_log_append(run_id=run.pk, owner_boot_id=run.owner_boot_id, lease_epoch=run.lease_epoch,
                   chunks=[{"stream": stream, "text": "".join(f"{line}\n" for line in lines)}])


def shots(page, name: str, ready: str) -> None:
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 800):
            page.set_viewport_size({"width": width, "height": 800})
            page.wait_for_selector(ready)
            assert page.evaluate(FITS), f"{name} scrolls sideways at {width} px"
            screenshot(page, f"{name}-{width}-{scheme}.png")
    page.emulate_media(color_scheme="light")


def test_live_and_finished_logs_and_a_search_that_opens_the_match(page, daphne_server, bg):
    store = ThreadedStore(bg, behind=timedelta(seconds=1))  # the real clock: the runs' leases are live
    build = store.graph([{"id": "compile"}, {"id": "test", "deps": ["compile"]}], title="Build the release")
    compiled = store.claim_item(build.pk, stage="compile")
    bg(append, compiled, ["$ make", "cc -O2 -c store.c", "ld -o workcenter store.o"])
    store.complete(compiled)
    testing = store.claim_item(build.pk, stage="test")
    bg(append, testing, BUILD)
    bg(append, testing, ["warning: tests/unit/test_graph.py::test_big is slow (4.2 s)"], "stderr")
    nightly = store.linear(title="Nightly import")
    importing = store.claim_item(nightly.pk)
    bg(append, importing, IMPORT[:-1])
    bg(append, importing, IMPORT[-1:], "stderr")
    store.submit(importing, {"outcome": "failed", "error": "ModuleNotFoundError: No module named 'yaml'"})

    # a running run's log follows what it prints
    page.goto(f"{daphne_server.url}/work-items/{build.pk}/")
    wait_live(page)
    page.click('#graph g.node[data-stage="test"]')
    page.wait_for_selector("#run-log .log-status.live")
    wait_for_js(page, f"() => document.querySelectorAll('#run-log .log-line').length === {len(BUILD) + 1}")
    more = [f"tests/unit/test_{name}.py ......................................... [{pct}%]"
            for name, pct in (("api", 41), ("stream", 55), ("workers", 68), ("webhooks", 80))]
    bg(append, testing, more)
    wait_for_js(page, f"() => document.querySelectorAll('#run-log .log-line').length === {len(BUILD) + 1 + len(more)}")
    assert page.locator("#run-log .log-line").last.inner_text() == more[-1]
    assert page.locator('#run-log .log-line[data-stream="stderr"]').count() == 1
    shots(page, "run-log-live", "#run-log .log-status.live")

    # a finished run's log opens at its end
    page.goto(f"{daphne_server.url}/work-items/{nightly.pk}/")
    wait_live(page)
    page.click("#graph g.node")
    page.wait_for_selector("#run-log .log-line >> text=ModuleNotFoundError")
    assert page.locator("#run-log .log-status").inner_text() == "ended"
    shots(page, "run-log-finished", "#run-log .log-status:not(.live)")

    # the Logs page finds the run that printed the text, with the lines around it
    page.goto(f"{daphne_server.url}/logs/")
    page.fill("#log-q", "modulenotfound")
    page.press("#log-q", "Enter")
    page.wait_for_selector(".log-result")
    results = page.locator(".log-result")
    assert results.count() == 1
    assert results.first.locator(".log-result-title").inner_text() == "Nightly import"
    assert results.first.locator("mark").inner_text() == "ModuleNotFound"
    assert "import yaml" in results.first.locator(".log-match-lines").inner_text()
    assert "q=modulenotfound" in page.url  # the search is in the address
    shots(page, "log-search", ".log-result")
    # its link opens the item at that run's log, the match found
    page.click(".log-result-title")
    page.wait_for_selector("#run-log .log-line.hit-current")
    assert "ModuleNotFoundError" in page.locator("#run-log .log-line.hit-current").inner_text()
    assert page.locator("#run-log .log-find-count").inner_text() == "1 of 1"
