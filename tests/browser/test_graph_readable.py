"""The stage graph reads at every size: node text is never drawn below 12 px on screen by the
automatic view, at 1280 × 800, 1366 × 768 and 800 × 900, for a linear and a graph item, with the
side panel closed and open; the panel opens over the graph (inside the viewport, the selected
stage beside it, not under it); at 800 px the graph sits above the fold; every node shows how long
its run took (live while it runs) and a running node whose worker stopped renewing says so."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.conftest import completed
from workcenter import services
from workcenter.models import Run

from .conftest import screenshot, wait_for_js, wait_live
from .conftest import ThreadedStore
from .timing import TimedStore, format_duration, ms_between
from .live import WAIT_MS

pytestmark = pytest.mark.django_db(transaction=True)

VIEWPORTS = [(1280, 800), (1366, 768), (800, 900)]

NINE = [
    {"id": "triage", "type": "triage", "status": "completed"},
    {"id": "survey", "type": "research", "mode": "read"},
    {"id": "measure", "type": "research", "mode": "read"},
    {"id": "build", "deps": ["survey", "measure"], "type": "implement", "mode": "isolated-write"},
    {"id": "check", "deps": ["build"], "type": "review"},
    {"id": "docs", "deps": ["survey"], "type": "write"},
    {"id": "bench", "deps": ["build"], "type": "test"},
    {"id": "notes", "deps": ["docs"], "type": "write"},
    {"id": "ship", "deps": ["check", "docs", "bench"], "type": "deliver"},
]

# every node text's rendered size: computed font size × the scale of its screen transform
TEXT_SIZES = """() => [...document.querySelectorAll('#graph g.node text')].filter(t => t.getClientRects().length).map(t => {
    const m = t.getScreenCTM();
    return {stage: t.closest('g.node').dataset.key, cls: t.getAttribute('class') || 'badge',
            px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b), text: t.textContent};
})"""

RECTS = """() => {
    const r = (el) => { const b = el.getBoundingClientRect(); return {left: b.left, top: b.top, right: b.right, bottom: b.bottom}; };
    const panel = document.getElementById('panel');
    return {graph: r(document.getElementById('graph')), panel: panel.hidden ? null : r(panel),
            selected: document.querySelector('#graph g.node.selected .node-box') ? r(document.querySelector('#graph g.node.selected .node-box')) : null,
            nodes: Object.fromEntries([...document.querySelectorAll('#graph g.node')].map(g => [g.dataset.stage + ':' + g.dataset.id, r(g.querySelector('.node-box'))])),
            vw: innerWidth, vh: innerHeight,
            zoom: document.querySelector('#graph g.viewport').transform.baseVal.consolidate()?.matrix.a ?? 1};
}"""


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg)


def linear_six(store):
    """triage, implement, review (changes requested), implement, review (approved), deliver running."""
    item = store.linear(title="Six steps, one sent back", criteria=["works"])
    for _ in range(2):
        store.complete(store.claim_item(item.pk))
    store.submit(store.claim_item(item.pk), completed(["works"], review_decision="changes_requested"))
    store.complete(store.claim_item(item.pk))
    store.submit(store.claim_item(item.pk), completed(["works"], review_decision="approved"))
    deliver = store.claim_item(item.pk)
    assert deliver.action.type == "deliver"
    return item, "deliver"


def graph_nine(store):
    stages = [dict(s, max_attempts=4) for s in NINE]
    item = store.graph(stages, title="Nine stages")
    for stage in ("survey", "measure", "docs"):
        store.complete(store.claim_item(item.pk, stage=stage))
    store.claim_item(item.pk, stage="build")
    return item, "ship"


ITEMS = {"linear6": linear_six, "graph9": graph_nine}


def open_item(page, url, item_id, errors):
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    page.wait_for_timeout(150)  # the view settles (fit after the first layout, ResizeObserver)


def assert_legible(page, expected_nodes, where):
    sizes = page.evaluate(TEXT_SIZES)
    stages = {s["stage"] for s in sizes}
    assert len(stages) == expected_nodes, (where, stages)
    assert len(sizes) >= 3 * expected_nodes, (where, len(sizes))
    small = [s for s in sizes if s["px"] < 12]
    assert not small, (where, small[:5])
    return min(s["px"] for s in sizes)


def inside(inner, outer, slack=0.5):
    return (inner["left"] >= outer["left"] - slack and inner["right"] <= outer["right"] + slack
            and inner["top"] >= outer["top"] - slack and inner["bottom"] <= outer["bottom"] + slack)


@pytest.mark.parametrize("kind", list(ITEMS))
@pytest.mark.parametrize("width,height", VIEWPORTS)
def test_node_text_is_legible_with_the_panel_closed_and_open(page, daphne_server, store, kind, width, height):
    item, last = ITEMS[kind](store)
    expected = 4 if kind == "linear6" else 9  # linear: one node per stage (implement and review ran twice)
    errors: list[str] = []
    page.set_viewport_size({"width": width, "height": height})
    open_item(page, daphne_server.url, item.pk, errors)

    # closed: every text at least 12 px on screen
    closed = assert_legible(page, expected, f"{kind} {width}x{height} closed")
    rects = page.evaluate(RECTS)
    # the graph is on the first screen, and the page does not scroll sideways
    assert rects["graph"]["top"] < rects["vh"] * 0.45 and rects["graph"]["bottom"] <= rects["vh"] + 0.5, rects["graph"]
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    if kind == "linear6":
        # the chain of its four stages is shown whole at a legible size at every one of these sizes
        assert all(inside(r, rects["graph"]) for r in rects["nodes"].values()), rects
    if width == 800 or width == 1280:
        screenshot(page, f"graph-{kind}-{width}-light.png")

    # open the last stage: the panel opens over the graph, inside the viewport, beside the stage
    page.locator(f'#graph g.node[data-stage="{last}"]').last.click()
    page.wait_for_selector("#panel:not([hidden])")
    page.wait_for_timeout(500)  # the view glides clear of the panel
    opened = assert_legible(page, expected, f"{kind} {width}x{height} open")
    rects = page.evaluate(RECTS)
    panel, sel, graph = rects["panel"], rects["selected"], rects["graph"]
    assert panel and sel
    assert panel["left"] >= 0 and panel["top"] >= 0 and panel["right"] <= rects["vw"] and panel["bottom"] <= rects["vh"] + 0.5, panel
    assert panel["right"] - panel["left"] >= 280, panel
    assert inside(sel, graph), (sel, graph)
    assert sel["right"] <= panel["left"], ("the selected stage is under the panel", sel, panel)
    # the graph keeps its width (the panel covers it, it does not squeeze it)
    assert abs((graph["right"] - graph["left"]) - (rects["graph"]["right"] - rects["graph"]["left"])) < 1
    if width in (800, 1280) and kind == "graph9":
        screenshot(page, f"graph-panel-{width}-light.png")
        page.emulate_media(color_scheme="dark")
        page.wait_for_timeout(100)
        screenshot(page, f"graph-panel-{width}-dark.png")
        page.locator("#panel-close").click()
        page.wait_for_timeout(400)
        screenshot(page, f"graph-{kind}-{width}-dark.png")
    if width in (800, 1280) and kind == "linear6":
        page.emulate_media(color_scheme="dark")
        page.locator("#panel-close").click()
        page.wait_for_timeout(400)
        screenshot(page, f"graph-{kind}-{width}-dark.png")
    print(f"\n{kind} at {width}x{height}: smallest node text {closed:.1f} px closed, {opened:.1f} px with the panel open")
    assert not errors, errors


def test_the_graph_is_not_stretched_to_the_events_height_at_800(page, daphne_server, store):
    item, _ = graph_nine(store)
    # many events make the events list long
    page.set_viewport_size({"width": 800, "height": 900})
    open_item(page, daphne_server.url, item.pk, [])
    sizes = page.evaluate("""() => ({graph: document.querySelector('.graph-wrap').getBoundingClientRect().height,
        events: document.querySelector('.timeline').getBoundingClientRect().top,
        firstNode: Math.min(...[...document.querySelectorAll('#graph g.node .node-box')].map(b => b.getBoundingClientRect().top))})""")
    assert sizes["graph"] <= 0.72 * 900, sizes  # not the events' height (before: 782 px)
    assert sizes["firstNode"] < 900 * 0.6, sizes  # nodes sit on the first screen, not ~750 px down
    assert sizes["events"] >= sizes["graph"], sizes  # the events come below the graph


@pytest.fixture
def timed(transactional_db, bg):
    return TimedStore(bg)


def test_each_node_shows_its_run_duration_live_for_a_running_one(page, daphne_server, timed, bg):
    item = timed.graph([{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a"]}], title="Durations")
    timed.at(10)
    a = timed.claim(item.pk, "a")
    timed.at(197)  # 3 m 07 s
    timed.complete(a)
    b = timed.claim(item.pk, "b")  # still running: started about an hour ago
    runs = {r.action_id: r for r in timed.runs(item.pk)}
    done = runs[a.action.pk]
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk, [])
    dur = lambda stage: page.locator(f'#graph g.node[data-stage="{stage}"] .node-dur').text_content()  # noqa: E731
    assert dur("a") == format_duration(ms_between(done.started_at, done.ended_at)) == "3 m 07 s"
    assert page.locator('#graph g.node[data-stage="c"] .node-dur').count() == 0  # never ran
    started = runs[b.action.pk].started_at
    first = dur("b")
    page.wait_for_timeout(2100)
    second = dur("b")
    assert first != second, "the running node's duration ticks"
    expected_now = format_duration(ms_between(started, datetime.now(timezone.utc)))
    assert second.split(" ")[0] == expected_now.split(" ")[0], (second, expected_now)


def test_a_running_node_without_heartbeat_says_so(page, daphne_server, store, bg):
    item = store.graph([{"id": "quiet"}, {"id": "busy"}], title="Heartbeats")
    quiet = bg(services.action_claim, owner_boot_id="boot-quiet-0001", lease_ms=600_000)
    busy = bg(services.action_claim, owner_boot_id="boot-busy-00001", lease_ms=600_000)
    assert {quiet.action.stage_id, busy.action.stage_id} == {"quiet", "busy"}
    if quiet.action.stage_id != "quiet":
        quiet, busy = busy, quiet
    # the quiet worker renewed last 400 s ago, for a 600 s lease: more than half its length
    from django.utils import timezone as djtz

    def age():
        now = djtz.now()
        Run.objects.filter(pk=quiet.run.pk).update(renewed_at=now - timedelta(seconds=400),
                                                  expires_at=now + timedelta(seconds=200))
    bg(age)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk, [])
    q = page.locator('#graph g.node[data-stage="quiet"]')
    b = page.locator('#graph g.node[data-stage="busy"]')
    text = q.locator(".node-hb").text_content()
    assert text.startswith("⚠ no heartbeat for 6 m ") and text.endswith(" s"), text  # 400 s = 6 m 40 s
    assert 40 <= int(text.split("m ")[1].split(" ")[0]) <= 59, text
    assert "hb-stale" in q.get_attribute("class")
    assert b.locator(".node-hb").count() == 0 and "no heartbeat" not in b.text_content()
    assert "boot-b" in b.text_content()
    # a renewal clears the warning live
    bg(services.run_renew, run_id=quiet.run.pk, owner_boot_id=quiet.run.owner_boot_id,
       lease_epoch=quiet.run.lease_epoch, lease_ms=600_000)
    # (a renewal writes no event: the page reads it with the graph's next read)
    page.reload()
    page.wait_for_selector('#graph g.node[data-stage="quiet"]')
    wait_for_js(page, """() => !document.querySelector('#graph g.node[data-stage="quiet"] .node-hb')""", timeout=WAIT_MS)
    assert "boot-q" in q.text_content()
    screenshot(page, "graph-heartbeat-1280-light.png")
