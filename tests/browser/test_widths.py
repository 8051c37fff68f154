"""The list and the Workers page at 1280 and 800 px, light and dark: the title keeps the room (the
type tag and the stage's status word give way first, and never mid-word), and no Workers column is
clipped ("Last seen" included). Screenshots of each into artifacts/screenshots/."""
from __future__ import annotations

from datetime import timedelta

import pytest

from django.contrib.auth.models import User

from workcenter.models import WorkItem

from .conftest import PASSWORD, ThreadedStore, log_in, screenshot, wait_live
from .live import WAIT_MS

pytestmark = pytest.mark.django_db(transaction=True)

LONG_TITLE = "Migrate the billing exports to the new warehouse schema and backfill March"
STAGES = [
    {"id": "survey", "type": "research"},
    {"id": "implement", "deps": ["survey"], "type": "implement"},
    {"id": "review", "deps": ["implement"], "type": "review"},
]

# what a cell shows of its text: clipped when the text is wider than the box that holds it
CLIPPED = """(selector) => [...document.querySelectorAll(selector)]
    .filter(el => el.getClientRects().length && el.scrollWidth > el.clientWidth + 1)
    .map(el => el.textContent.trim())"""


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg, behind=timedelta(minutes=3))


def typed(bg, item, work_item_type):
    bg(lambda: WorkItem.objects.filter(pk=item.pk).update(
        workflow_snapshot={"execution_mode": "graph", "work_item_type": work_item_type}))
    return item


@pytest.fixture
def rows(store, bg):
    running = typed(bg, store.graph(STAGES, title=LONG_TITLE), "software-change")
    store.complete(store.claim_item(running.pk, stage="survey"))
    store.claim_item(running.pk, stage="implement", boot="boot-3f2a9c71-5d1e-4c1b-9a77-0e1f2a3b4c5d")
    other = typed(bg, store.graph(STAGES, title="Summarise the incident reports of the week for the on-call review"),
                  "analysis")
    store.claim_item(other.pk, stage="survey", boot="boot-77d0e1aa-2b3c-4d5e-8f90-112233445566")
    store.create(title="Short one", work_item_type="documentation")
    return {"running": running, "other": other}


def widths(page, item_id):
    return page.evaluate("""(id) => {
        const row = document.querySelector(`#items tr[data-id="${id}"]`);
        const a = row.querySelector('.col-title a'), tag = row.querySelector('.col-title .tag');
        const stage = row.querySelector('.stage-cell'), word = row.querySelector('.stage-status');
        const cell = row.querySelector('td.col-stage').getBoundingClientRect();
        return {title: a.getBoundingClientRect().width, titleText: a.scrollWidth, tag: tag ? tag.getBoundingClientRect().width : 0,
                stageClipped: stage.scrollWidth > stage.clientWidth + 1 || word.getBoundingClientRect().right > cell.right,
                word: word.getBoundingClientRect().width, wordText: word.scrollWidth, charPx: a.scrollWidth / a.textContent.length,
                table: document.querySelector('table.items').getBoundingClientRect().right, page: document.documentElement.clientWidth};
    }""", item_id)


def _open_live(page, url: str, ready: str, width: int, scheme: str, shot: str) -> None:
    """`url` at `width` × 800 in `scheme`, once `ready` is drawn and the stream is live; a screenshot."""
    page.set_viewport_size({"width": width, "height": 800})
    page.emulate_media(color_scheme=scheme)
    page.goto(url)
    page.wait_for_selector(ready)
    wait_live(page)
    screenshot(page, shot)

@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 800])
def test_list_gives_the_title_the_room(page, daphne_server, rows, width, scheme):
    _open_live(page, f"{daphne_server.url}/", f'#items tr[data-id="{rows["other"].pk}"]', width, scheme,
               f"widths-list-{width}-{scheme}.png")
    w = widths(page, rows["running"].pk)
    print(width, scheme, {k: round(v, 1) if isinstance(v, float) else v for k, v in w.items()})
    assert w["table"] <= w["page"]  # the table never overflows the page
    chars = w["title"] / w["charPx"]
    assert chars >= (40 if width == 1280 else 24), w  # about 12 characters before
    assert w["title"] > 2 * w["tag"], w  # the tag yields first
    assert not w["stageClipped"] and w["wordText"] <= w["word"] + 1, w  # "running", never "runni…"
    assert page.evaluate(CLIPPED, "#items .stage-cell, #items .badge, #items .col-time") == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 800])
def test_workers_page_fits(page, daphne_server, rows, width, scheme):
    _open_live(page, f"{daphne_server.url}/workers/", "#workers tr[data-boot]", width, scheme,
               f"widths-workers-{width}-{scheme}.png")
    fit = page.evaluate("""() => ({table: document.querySelector('table.workers').getBoundingClientRect().right,
        page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth})""")
    print(width, scheme, fit)
    assert fit["table"] <= fit["page"] and fit["scroll"] <= fit["page"], fit
    assert page.evaluate(CLIPPED, "table.workers th, table.workers td, table.workers td *") == []


@pytest.fixture
def admin_page(browser, daphne_server, transactional_db):
    User.objects.create_superuser("root", "root@example.com", PASSWORD)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    log_in(pg, daphne_server.url, "root", admin=True)
    yield pg
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_admin_runs_list_fits_1280_one_line_a_run(admin_page, daphne_server, rows, scheme):
    page = admin_page
    page.emulate_media(color_scheme=scheme)
    page.goto(f"{daphne_server.url}/admin/workcenter/run/")
    page.wait_for_selector("#result_list tbody tr")
    fit = page.evaluate("""() => {
        const rows = [...document.querySelectorAll('#result_list tbody tr')].map(r => r.getBoundingClientRect().height);
        const cells = [...document.querySelectorAll('#result_list tbody td, #result_list tbody th')];
        const line = parseFloat(getComputedStyle(cells[0]).lineHeight) || 16;
        const box = document.querySelector('.results') || document.querySelector('#result_list');
        return {rows, line, right: document.querySelector('#result_list').getBoundingClientRect().right,
                box: box.getBoundingClientRect().right, boxScroll: box.scrollWidth - box.clientWidth,
                page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
                headers: [...document.querySelectorAll('#result_list thead th')].map(th => th.textContent.trim())};
    }""")
    print(scheme, fit)
    screenshot(page, f"admin-runs-1280-{scheme}.png")
    # started/ended on screen: neither the page nor the results box scrolls sideways
    assert fit["scroll"] <= fit["page"] and fit["right"] <= fit["box"] + 1 and fit["boxScroll"] <= 1, fit
    assert max(fit["rows"]) < 2.5 * fit["line"] + 16, fit  # one line a run (was 4-5)
    assert {"work item", "stage", "worker", "epoch", "last renewal", "started", "ended"} <= {
        h.lower() for h in fit["headers"]}
    # the Release confirmation names what it acts on
    page.check("#result_list tbody tr:first-child input.action-select")
    page.select_option("select[name=action]", "release_runs")
    page.click("button[name=index]")
    page.wait_for_selector("table.repair-objects")
    text = page.inner_text("table.repair-objects")
    screenshot(page, f"admin-release-confirm-{scheme}.png")
    assert all(w in text.lower() for w in ("work item", "lease epoch", "last renewal", " s ago", "boot-")), text
