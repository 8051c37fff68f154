"""axe-core finds no serious or critical accessibility violation on any page or dialog, light and dark.

axe-core (tests/browser/vendor/axe-core-<version>/, from the npm registry; the product does not ship
it) is evaluated in each page through DevTools, which the pages' Content-Security-Policy does not
govern, and runs on the whole document with its default WCAG 2.x A/AA rules, contrast included.
Pages: the list, its New work item dialog and its bulk Retry and Cancel dialogs; the work item
page with the graph tab, the Timeline tab and the side panel open, its Retry and Cancel dialogs;
the Workers page; the list, the Workers page and the item page (panel open) again at 800 px.
Each is checked once the page is live and its transitions have finished. The violations found on
each page are printed (-s shows them), all of them, then the test fails on the serious and
critical ones.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from workcenter import services

from .conftest import ThreadedStore, wait_for_js, wait_live

pytestmark = pytest.mark.django_db(transaction=True)

VENDOR = Path(__file__).parent / "vendor"
AXE = next(VENDOR.glob("axe-core-*/axe.min.js"))
BLOCKING = ("serious", "critical")

STAGES = [
    {"id": "survey", "type": "research", "max_attempts": 3},
    {"id": "implement", "deps": ["survey"], "type": "implement", "max_attempts": 3},
    {"id": "docs", "deps": ["survey"], "type": "write", "max_attempts": 3},
    {"id": "review", "deps": ["implement", "docs"], "type": "review", "max_attempts": 3},
]

# every finite transition over (row flashes, slide-ins): contrast is measured on the settled page
SETTLED = """() => document.getAnimations().every(a => a.playState !== 'running'
    || !isFinite(a.effect.getComputedTiming().endTime))"""

RUN = """async () => {
    const result = await axe.run(document, {resultTypes: ['violations']});
    return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.map(n => ({target: n.target.join(' '), summary: n.failureSummary}))}));
}"""


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(minutes=5))


@pytest.fixture
def items(store, bg):
    """An item that needs attention with a running sibling (retry stops it), one running, one done,
    one cancelled, one waiting on a question: every status colour the list and the graph draw."""
    failed = store.graph(STAGES, title="Failed build with a running sibling")
    store.complete(store.claim_item(failed.pk, stage="survey"))
    store.claim_item(failed.pk, stage="docs", boot="boot-3f2a9c71")
    store.submit(store.claim_item(failed.pk, stage="implement"), {"outcome": "failed", "error": "compiler crashed"})
    running = store.graph(STAGES, title="Running survey")
    store.claim_item(running.pk, stage="survey", boot="boot-77d0e1aa")
    done = store.graph([{"id": "only", "type": "research"}], title="Done item")
    store.complete(store.claim_item(done.pk))
    cancelled = store.create(title="Cancelled item")
    bg(services.work_item_cancel, item_id=cancelled.pk, actor="user:lead", reason="not needed")
    waiting = store.graph(STAGES, title="Waiting on a question")
    store.submit(store.claim_item(waiting.pk, stage="survey"),
                 {"outcome": "waiting", "waiting_reason": "Which database should the export read?"})
    return {"failed": failed, "running": running, "done": done, "cancelled": cancelled, "waiting": waiting}


class Audit:
    """The violations of every page checked, printed as they are found."""

    def __init__(self, page, scheme: str):
        self.page, self.scheme = page, scheme
        self.found: dict[str, list[dict]] = {}
        self.source = AXE.read_text(encoding="utf-8")

    def check(self, name: str) -> None:
        page = self.page
        wait_for_js(page, SETTLED, timeout=10_000)
        if not page.evaluate("() => typeof window.axe === 'object'"):
            page.evaluate(self.source)  # once per document
        violations = page.evaluate(RUN)
        self.found[f"{self.scheme} {name}"] = violations
        blocking = [v for v in violations if v["impact"] in BLOCKING]
        kinds = ", ".join(f"{v['id']}/{v['impact']}" for v in violations) or "-"
        print(f"axe {self.scheme:5} {name:28} serious/critical {len(blocking):2}  (all {len(violations)}: {kinds})")
        for v in blocking:
            for n in v["nodes"][:6]:
                print(f"    {v['id']}: {n['target']} — {n['summary'].splitlines()[-1].strip()}")

    def blocking(self) -> dict[str, list[str]]:
        return {name: [f"{v['id']} ({len(v['nodes'])}): {v['nodes'][0]['target']}" for v in found
                       if v["impact"] in BLOCKING]
                for name, found in self.found.items() if any(v["impact"] in BLOCKING for v in found)}


def close_dialog(page, dialog_id: str) -> None:
    page.keyboard.press("Escape")
    wait_for_js(page, "(id) => !document.getElementById(id).open", dialog_id)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_or_critical_violations(page, daphne_server, items, scheme):
    page.emulate_media(color_scheme=scheme)
    audit = Audit(page, scheme)
    base = daphne_server.url

    # the list, its New work item dialog, its bulk dialogs
    page.goto(f"{base}/")
    page.wait_for_selector(f'#items tr[data-id="{items["cancelled"].pk}"]')
    wait_live(page)
    audit.check("list")
    page.click("#new-item-open")
    wait_for_js(page, "() => document.getElementById('new-item').open")
    audit.check("list: new item dialog")
    close_dialog(page, "new-item")
    for key in ("failed", "running", "waiting"):
        page.check(f'#items tr[data-id="{items[key].pk}"] input.row-select')
    page.wait_for_selector("#bulk-bar:not([hidden])")
    audit.check("list: bulk bar")
    page.click("#bulk-retry")
    wait_for_js(page, "() => document.querySelectorAll('#bulk-rows .bulk-row').length === 3")
    audit.check("list: bulk retry dialog")
    close_dialog(page, "bulk-dialog")
    page.click("#bulk-cancel")
    wait_for_js(page, "() => document.querySelectorAll('#bulk-rows .bulk-row').length === 3")
    audit.check("list: bulk cancel dialog")
    close_dialog(page, "bulk-dialog")

    # the item page: graph, side panel, Timeline, its dialogs
    page.goto(f"{base}/work-items/{items['failed'].pk}/")
    page.wait_for_selector('#graph g.node[data-stage="implement"]')
    wait_live(page)
    audit.check("item: graph")
    page.click('#graph g.node[data-stage="implement"]')
    page.wait_for_selector("#panel:not([hidden])")
    audit.check("item: graph, panel open")
    page.click("#tab-runs")
    page.wait_for_selector("#runs-view:not([hidden]) .tl-row")
    audit.check("item: timeline, panel open")
    page.click("#tab-graph")
    page.click("#btn-retry")
    page.wait_for_selector("#retry-reset-line")
    audit.check("item: retry dialog")
    close_dialog(page, "retry-dialog")
    page.click("#btn-cancel")
    wait_for_js(page, "() => document.getElementById('cancel-dialog').open")
    audit.check("item: cancel dialog")
    close_dialog(page, "cancel-dialog")

    # a waiting item: its banner, and the Retry dialog asking for the answer
    page.goto(f"{base}/work-items/{items['waiting'].pk}/")
    page.wait_for_selector('#graph g.node[data-stage="survey"]')
    page.wait_for_selector("#needs-banner:not([hidden])")
    wait_live(page)
    audit.check("waiting item: banner")
    page.click("#btn-retry")
    wait_for_js(page, "() => document.getElementById('retry-dialog').open")
    page.wait_for_selector("#retry-answers:not([hidden])")
    audit.check("waiting item: answer dialog")
    close_dialog(page, "retry-dialog")

    # the Workers page (two workers hold a run)
    page.goto(f"{base}/workers/")
    page.wait_for_selector('#workers tr[data-boot="boot-77d0e1aa"]')
    wait_live(page)
    audit.check("workers")

    # the narrow layouts (the list's stage words below their names, the Workers' two-line headings)
    page.set_viewport_size({"width": 800, "height": 900})
    audit.check("workers at 800 px")
    page.goto(f"{base}/")
    page.wait_for_selector(f'#items tr[data-id="{items["cancelled"].pk}"]')
    wait_live(page)
    audit.check("list at 800 px")
    page.goto(f"{base}/work-items/{items['failed'].pk}/")
    page.wait_for_selector('#graph g.node[data-stage="implement"]')
    wait_live(page)
    page.click('#graph g.node[data-stage="implement"]')
    page.wait_for_selector("#panel:not([hidden])")
    audit.check("item at 800 px, panel open")

    assert not audit.blocking(), audit.blocking()
