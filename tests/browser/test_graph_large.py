"""Large graphs: 200 and 1,000 stages laid out and drawn within 300 ms / 1.5 s in this browser, in a
layout that reads (layers, not a staircase), Fit shows them whole; the failed/waiting path is
highlighted only along the dependencies that led to the stage; a linear item's superseded
attempts fold into the stage's current action."""
from __future__ import annotations

import pytest

from tests.load import LoadWatch
from workcenter import services

from .conftest import ThreadedStore, graph_view, perf, screenshot, wait_for_js, wait_live, wait_perf
from .test_dashboard import _layered_stages

pytestmark = pytest.mark.django_db(transaction=True)

TARGET_MS = {200: 300, 1000: 1500}  # on an idle machine; scaled by the load while the page drew
# what no load explains: a drawing several times its target is a slower layout or drawing, not a busy machine
CAP = 5

ALL_INSIDE = """() => {
    const g = document.getElementById('graph').getBoundingClientRect();
    const boxes = [...document.querySelectorAll('#graph g.node .node-box')].map(b => b.getBoundingClientRect());
    const out = boxes.filter(b => b.left < g.left - 0.5 || b.right > g.right + 0.5 || b.top < g.top - 0.5 || b.bottom > g.bottom + 0.5);
    return {count: boxes.length, outside: out.length};
}"""


# the stages whose box is on screen in the graph, and how many of them are drawn without their text
VISIBLE_TEXT = """() => {
    const g = document.getElementById('graph').getBoundingClientRect();
    const on = [...document.querySelectorAll('#graph g.node')].filter(n => {
        const b = n.querySelector('.node-box').getBoundingClientRect();
        return b.right > g.left && b.left < g.right && b.bottom > g.top && b.top < g.bottom;
    });
    return {visible: on.length, without_text: on.filter(n => !n.querySelector('.node-name')).length};
}"""


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg)


def _fan_out_stages(n: int) -> list[dict]:
    """A planned item's shape: a triage root, then stages that each depend on one or two of the
    previous dozen (pseudo-random, fixed seed): long, branching chains."""
    seed = 7
    stages = [{"id": "triage", "type": "triage", "status": "completed"}]
    for i in range(1, n):
        seed = (seed * 1103515245 + 12345) % 2 ** 31
        deps = [] if seed % 10 < 2 else [f"s{max(1, i - 1 - seed % 12)}"]
        if seed % 7 == 0 and i > 3:
            deps.append(f"s{max(1, i - 2 - seed % 5)}")
        deps = sorted({d for d in deps if d != f"s{i}"})
        stages.append({"id": f"s{i}", "deps": deps, "type": "research",
                       "status": "completed" if i < n // 5 else "ready"})
    return stages


@pytest.mark.parametrize("shape", ["layered", "fan-out"])
@pytest.mark.parametrize("size", [200, 1000])
def test_large_graph_layout_and_draw_time_and_fit(page, daphne_server, store, size, shape):
    stages = _layered_stages(size) if shape == "layered" else _fan_out_stages(size)
    item = store.graph(stages, title=f"{size} stages")
    page.set_viewport_size({"width": 1280, "height": 800})
    with LoadWatch() as load:
        page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
        # the graph's own measures (graph.js setGraph): its first layout and drawing, and that until on screen
        painted = wait_perf(page, "wc-graph-painted", "e.detail.nodes > 0", timeout=30_000)
    timing = perf(page, "wc-graph-relayout")["detail"]
    timing["painted_ms"] = painted["duration"]
    assert timing["nodes"] == painted["detail"]["nodes"] == size
    assert page.locator("#graph g.node").count() == size
    target = 1000 * load.within(TARGET_MS[size] / 1000, cap=CAP * TARGET_MS[size] / 1000)
    print(f"\n{size}-node {shape} graph: layout {timing['layout_ms']:.0f} ms + draw {timing['render_ms']:.0f} ms "
          f"= {timing['total_ms']:.0f} ms; on screen (style, layout, paint) after {timing['painted_ms']:.0f} ms "
          f"(target {TARGET_MS[size]} ms idle, {target:.0f} ms at a load of {load.factor:.1f})")
    assert timing["total_ms"] <= target
    assert timing["painted_ms"] <= target
    wait_live(page)
    # the automatic view is legible: the minimap shows where it is in the whole
    assert graph_view(page)["k"] >= 0.94
    assert page.locator("#graph canvas.minimap").is_visible()
    # the layout reads: compact layers, not a staircase (its drawing covers at most 4 times the
    # area of its nodes; dagre drew 200 layered stages over 3.8 times, 1,000 fan-out ones over 18)
    size_px = perf(page, "wc-graph-layout")["detail"]  # the layout drawn (graph.js useLayout)
    spread = size_px["width"] * size_px["height"] / (size * 224 * 78)
    print(f"{size}-node {shape} graph: drawn {size_px['width']:.0f} × {size_px['height']:.0f} px, {spread:.1f}× its nodes' area")
    assert spread <= 4, size_px
    if size == 200 and shape == "layered":
        screenshot(page, "graph-200-1280-light.png")
    # the minimap moves the view: a click on the last stage's spot in it shows that part, in full
    before = graph_view(page)
    box = page.locator("#graph canvas.minimap").bounding_box()
    # the minimap draws the whole layout in its box; the last stage's centre in the layout is where
    # its node is placed (its CSS translate) plus half a node (224 × 78)
    last = page.evaluate("""(stage) => { const m = new DOMMatrix(getComputedStyle(
        document.querySelector(`#graph g.node[data-stage="${stage}"]`)).transform); return {x: m.e, y: m.f}; }""",
                         f"s{size - 1}")
    scale = box["width"] / size_px["width"]
    page.mouse.click(box["x"] + (last["x"] + 112) * scale, box["y"] + (last["y"] + 39) * scale)
    page.wait_for_timeout(200)
    after = graph_view(page)
    assert after["k"] == before["k"] and (after["x"], after["y"]) != (before["x"], before["y"])
    seen = page.evaluate(VISIBLE_TEXT)
    assert seen["visible"] > 0 and seen["without_text"] == 0, seen
    # Fit shows every node inside the graph's box
    page.click("#fit")
    page.wait_for_timeout(500)
    inside = page.evaluate(ALL_INSIDE)
    assert inside == {"count": size, "outside": 0}, inside
    if size == 200 and shape == "layered":
        screenshot(page, "graph-200-fit-1280-light.png")


@pytest.mark.parametrize("width,height,scheme", [(1280, 800, "dark"), (800, 900, "light"), (800, 900, "dark")])
def test_large_graph_screens(page, daphne_server, store, width, height, scheme):
    item = store.graph(_layered_stages(200), title="200 stages")
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    wait_perf(page, "wc-graph-painted", "e.detail.nodes > 0", timeout=30_000)
    wait_live(page)
    page.wait_for_timeout(200)
    assert graph_view(page)["k"] >= 0.94
    screenshot(page, f"graph-200-{width}-{scheme}.png")


def _on_path(page):
    return page.evaluate("""() => ({nodes: [...document.querySelectorAll('#graph g.node.on-path')].map(g => g.dataset.stage).sort(),
        edges: [...document.querySelectorAll('#graph path.edge.on-path')].length})""")


def test_only_the_real_dependency_path_of_a_failed_stage_is_highlighted(page, daphne_server, store):
    # root -> a -> b -> fail (b finished last), root -> side -> fail (side finished first),
    # root -> other -> more: an unrelated branch
    stages = [
        {"id": "root", "max_attempts": 5}, {"id": "side", "deps": ["root"], "max_attempts": 5},
        {"id": "a", "deps": ["root"], "max_attempts": 5}, {"id": "b", "deps": ["a"], "max_attempts": 5},
        {"id": "fail", "deps": ["b", "side"], "max_attempts": 1},
        {"id": "other", "deps": ["root"], "max_attempts": 5}, {"id": "more", "deps": ["other"], "max_attempts": 5},
    ]
    item = store.graph(stages, title="One failure")
    for stage in ("root", "side", "other", "more", "a", "b"):
        store.complete(store.claim_item(item.pk, stage=stage))
    store.submit(store.claim_item(item.pk, stage="fail"), {"outcome": "failed", "error": "broke"})
    assert store.item(item.pk).status == "needs_attention"
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    page.wait_for_selector('#graph g.node[data-stage="fail"][data-status="failed"]')
    wait_live(page)
    hl = _on_path(page)
    assert hl == {"nodes": ["a", "b", "fail", "root"], "edges": 3}, hl
    screenshot(page, "graph-failed-path-1280-light.png")


def test_a_linear_items_superseded_attempts_fold_into_its_current_node(page, daphne_server, store, bg):
    item = store.linear(title="Guided twice")
    store.complete(store.claim_item(item.pk))  # triage
    for text in ("use the new API", "keep it small"):
        current = store.item(item.pk)
        bg(services.work_item_guide, item_id=item.pk, guidance=text, action_id=current.current_action_id,
           revision=current.revision, actor="user:lead")
    actions = store.actions(item.pk)
    assert [a.status for a in actions] == ["completed", "superseded", "superseded", "ready"]
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    nodes = page.eval_on_selector_all("#graph g.node", "els => els.map(g => [g.dataset.stage, g.dataset.status])")
    assert nodes == [["triage", "completed"], ["implement", "ready"]], nodes
    # the two actions superseded before they ran are the stage's attempts so far
    badge = page.locator('#graph g.node[data-stage="implement"] .node-badge')
    assert badge.text_content() == "×2"
    assert "2 attempts" in page.locator('#graph g.node[data-stage="implement"] title').text_content()
    assert page.locator("#graph path.edge").count() == 1
    # the text alternative lists the stages as the graph draws them, with their attempts; the
    # stage's row selects its node and opens its panel
    page.click("#node-list-wrap summary")
    rows = page.eval_on_selector_all("#node-list tr", "rows => rows.map(r => [r.dataset.stage, r.cells[3].textContent])")
    assert rows == [["triage", "1"], ["implement", "2"]], rows
    row = page.locator('#node-list tr[data-stage="implement"]')
    assert row.get_attribute("data-id") == actions[3].pk and row.get_attribute("data-status") == "ready"
    row.locator("button").click()
    page.wait_for_selector('#graph g.node.selected[data-stage="implement"]')
    page.wait_for_selector("#panel:not([hidden])")
    page.keyboard.press("Escape")
    # the stage completes: still one node, its run is the third attempt
    store.complete(store.claim_item(item.pk))
    page.wait_for_selector('#graph g.node[data-stage="implement"][data-status="completed"]')
    wait_for_js(page, """() => document.querySelector('#graph g.node[data-stage="implement"] .node-badge')?.textContent === '×3'""")
