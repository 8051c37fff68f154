"""The graph and the Timeline tell a stage's history as it happened: one node per stage with its
attempts folded into it ("×18") and listed in the panel, the same attempts on the Timeline; a
review that requested changes in its own colour with a labelled back-edge to the stage it sent
work back to; red for failure only (the path to a waiting stage is amber); a linear stage that
asked a question drawn waiting; a waiting or failed node counting from when the wait or failure
began; a skip link, aria-activedescendant and the selected stage in the URL.

Every history is built through the real services (tests/conftest.py Store)."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.conftest import completed
from workcenter import services

from .conftest import ThreadedStore, perf, screenshot, wait_for_js, wait_live
from .timing import box

pytestmark = pytest.mark.django_db(transaction=True)

RETRIES = 17


def node(page, stage):
    return page.locator(f'#graph g.node[data-stage="{stage}"]')


def open_item(page, url, item_id, query=""):
    page.goto(f"{url}/work-items/{item_id}/{query}")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    page.wait_for_timeout(150)  # the view settles (fit after the first layout)


def css_colour(page, value: str) -> str:
    """A CSS colour expression as the page computes it (rgb(…))."""
    return page.evaluate("""(v) => { const p = document.createElement('span'); p.style.color = v;
        document.body.append(p); const c = getComputedStyle(p).color; p.remove(); return c; }""", value)


def rgb(colour: str) -> tuple[float, ...]:
    """(r, g, b) 0–255 of `rgb(…)` or `color(srgb …)` (how Chromium computes a color-mix)."""
    values = [float(x) for x in re.findall(r"\d*\.?\d+", colour.replace("srgb", ""))[:3]]
    return tuple(v * 255 for v in values) if colour.startswith("color(") else tuple(values)


def retried_linear(bg, behind=timedelta(minutes=13)):
    """A linear item whose implement stage failed, was retried by the lead and failed again, 18
    runs in all; runs last 3 s or 50 s, each retry 20 s after the failure."""
    store = ThreadedStore(bg, behind=behind)
    clock = store._store.clock
    item = store.linear(title="Retried seventeen times")
    store.complete(store.claim_item(item.pk))  # triage
    for i in range(RETRIES + 1):
        claim = store.claim_item(item.pk)
        assert claim.action.type == "implement"
        clock.tick(50_000 if i % 3 == 0 else 3_000)
        store.submit(claim, {"outcome": "failed", "error": f"compiler crashed ({i + 1})"})
        assert store.item(item.pk).status == "needs_attention"
        if i < RETRIES:
            clock.tick(20_000)
            bg(services.work_item_retry, item_id=item.pk, actor="user:lead", now=clock.tick(1))
    return store, item


def graph_review_loop(bg):
    """A planned graph item (triage's plan: implement → review → deliver); the review requested
    changes, implement ran again (lease epoch 2) and completed."""
    store = ThreadedStore(bg, behind=timedelta(minutes=10))
    clock = store._store.clock
    item = store.planned([
        {"id": "implement", "type": "implement", "objective": "o"},
        {"id": "review", "type": "review", "objective": "o", "depends_on_action_ids": ["implement"]},
        {"id": "deliver", "type": "deliver", "objective": "o", "depends_on_action_ids": ["review"]},
    ], title="Sent back once")
    assert store.by_stage(item.pk)["review"].changes_requested_stage_id == "implement"
    claim = store.claim_item(item.pk, stage="implement")
    clock.tick(30_000)
    store.complete(claim)
    review = store.claim_item(item.pk, stage="review")
    clock.tick(20_000)
    store.submit(review, completed(review_decision="changes_requested", summary="the error path is untested"))
    claim = store.claim_item(item.pk, stage="implement")
    assert claim.run.lease_epoch == 2
    clock.tick(40_000)
    store.complete(claim)
    return store, item


def test_a_linear_stage_retried_17_times_is_one_node_with_18_attempts(page, daphne_server, bg):
    store, item = retried_linear(bg)
    runs = store.runs(item.pk)
    implement_runs = [r for r in runs if r.status == "failed"]
    assert len(implement_runs) == RETRIES + 1
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk)

    # one node per stage: Triage and Implement, one edge between them
    nodes = page.eval_on_selector_all("#graph g.node", "els => els.map(g => [g.dataset.stage, g.dataset.status])")
    assert nodes == [["triage", "completed"], ["implement", "failed"]], nodes
    assert page.locator("#graph path.edge").count() == 1
    badge = node(page, "implement").locator(".node-badge")
    assert badge.text_content() == "×18"
    assert node(page, "triage").locator(".node-badge").count() == 0
    # every node inside the graph's box at 1280 × 800 (the old picture cut 7 of 19 off)
    graph = box(page.locator("#graph"))
    for stage in ("triage", "implement"):
        b = box(node(page, stage).locator(".node-box"))
        assert b["x"] >= graph["x"] and b["x"] + b["width"] <= graph["x"] + graph["width"], (stage, b, graph)
    # the failed node says how long ago it failed (the story of about 11 minutes began 13 minutes
    # ago: about 2 minutes), not its last run's 3 s
    status = node(page, "implement").locator(".node-status").text_content()
    assert re.fullmatch(r"✕ failed · \d+ m \d\d s ago", status), status
    assert int(status.split("· ")[1].split(" m")[0]) >= 1, status
    # the folded node counts its attempts once: no "1/2" try count of the newest action beside "×18"
    sub = node(page, "implement").locator(".node-sub").text_content()
    assert not re.search(r"\d+/\d+", sub), sub
    # the text alternative lists the stages as the graph draws them: one row per stage
    page.click("#node-list-wrap summary")
    rows = page.eval_on_selector_all("#node-list tr", "rows => rows.map(r => [r.dataset.stage, r.cells[3].textContent])")
    assert rows == [["triage", "1"], ["implement", "18"]], rows
    page.click("#node-list-wrap summary")

    screenshots(page, "history-retried")

    # the panel lists every attempt, newest first, with outcome, duration, worker and reason
    node(page, "implement").click()
    page.wait_for_selector("#panel:not([hidden]) li.attempt")
    cards = page.locator("#panel-body li.attempt")
    assert cards.count() == RETRIES + 1
    assert page.locator("#panel-body h3", has_text="Attempts (18)").count() == 1
    ids = page.eval_on_selector_all("#panel-body li.attempt", "els => els.map(e => e.dataset.id)")
    newest_first = [r.pk for r in sorted(implement_runs, key=lambda r: r.started_at, reverse=True)]
    assert ids == newest_first
    first = page.locator(f'#panel-body li.attempt[data-id="{newest_first[-1]}"]').inner_text()
    assert "#1" in first and "failed" in first and "compiler crashed (1)" in first
    assert "50 s" in first and "boot-A" in first  # the worker
    # the context carried from the earlier attempts reads as words, never as raw JSON
    context = page.locator("#panel-body ul.context").inner_text()
    assert context and '{"' not in context and "null" not in context, context
    assert "Then retried by lead." in first
    # in one step in the page: the panel may be drawn again meanwhile (a live update), which would
    # leave a located heading detached
    page.evaluate("""() => [...document.querySelectorAll('#panel-body h3')]
        .find((h) => h.textContent.startsWith('Attempts')).scrollIntoView({block: 'nearest'})""")
    screenshot(page, "history-retried-panel-1280-light.png")
    page.keyboard.press("Escape")

    # the Timeline lists the same attempts: one row for Implement, 18 bars, the same runs
    page.click("#tab-runs")
    page.wait_for_selector("#runs-view:not([hidden]) .tl-row")
    rows = page.eval_on_selector_all("#runs-view .tl-row", "rows => rows.map(r => [r.dataset.stage, r.dataset.attempts])")
    assert rows == [["triage", "1"], ["implement", "18"]], rows
    assert page.locator('#runs-view .tl-row[data-stage="implement"] .tl-count').text_content() == "×18"
    bars = page.eval_on_selector_all('#runs-view .tl-row[data-stage="implement"] .tl-bar', """els => els.map(b => {
        const r = b.getBoundingClientRect();
        return {run: b.dataset.run, status: b.dataset.status, width: r.width, label: b.querySelector('.tl-dur').textContent};
    })""")
    assert sorted(b["run"] for b in bars) == sorted(ids)
    assert all(b["status"] == "failed" for b in bars)
    # every bar at least 8 px (clickable); the 50 s runs carry their length where it fits
    assert min(b["width"] for b in bars) >= 8, bars
    labelled = [b for b in bars if b["label"]]
    assert labelled and all(b["label"] == "50 s" for b in labelled), labelled
    # the runs (and the wait after the last failure, still open) fill the axis: the first bar
    # starts near its left end, the wait ends near its right; nothing before the first claim
    track = box(page.locator('#runs-view .tl-row[data-stage="implement"] .tl-track'))
    spans = "#runs-view .tl-bar, #runs-view .tl-wait"
    lefts = page.eval_on_selector_all(spans, "els => els.map(b => b.getBoundingClientRect().left)")
    rights = page.eval_on_selector_all(spans, "els => els.map(b => b.getBoundingClientRect().right)")
    assert min(lefts) - track["x"] < 0.03 * track["width"], (lefts, track)
    assert track["x"] + track["width"] - max(rights) < 0.03 * track["width"], (rights, track)
    # one legend: the toolbar's, with the waiting keys; none inside the Timeline
    assert page.locator("#runs-view .tl-key").count() == 0
    assert page.locator('.legend .legend-item[data-key="attention"]').is_visible()
    screenshots(page, "history-retried-timeline")
    # a bar opens its attempt in the panel
    page.click(f'#runs-view .tl-bar[data-run="{newest_first[-1]}"]')
    page.wait_for_selector(f'#panel-body li.attempt.marked[data-id="{newest_first[-1]}"]')


def test_a_graph_review_loop_draws_a_labelled_back_edge_and_changes_requested(page, daphne_server, bg):
    store, item = graph_review_loop(bg)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk)
    review = node(page, "review")
    assert review.get_attribute("data-status") == "changes_requested"
    assert review.locator(".node-status").text_content().startswith("↺ changes requested")
    # its colour is its own: neither the completed green nor the failure red
    stripe = review.locator(".node-stripe").evaluate("el => getComputedStyle(el).fill")
    assert stripe == css_colour(page, "var(--st-changes)")
    assert stripe not in (css_colour(page, "var(--st-done)"), css_colour(page, "var(--st-failed)"))
    # the loop: a back-edge from the review to implement, labelled with the count
    loop = page.locator('#graph g.loop[data-source="review"][data-target="implement"]')
    assert loop.count() == 1
    assert loop.locator(".loop-label text").text_content() == "↺ ×1"
    assert "requested changes 1 time" in loop.get_attribute("aria-label")
    # implement ran twice: one node, "×2"; review's one attempt, no badge
    assert node(page, "implement").locator(".node-badge").text_content() == "×2"
    assert node(page, "implement").get_attribute("data-status") == "completed"
    # the loop's label sits inside the graph's box
    graph = box(page.locator("#graph"))
    label = box(loop.locator(".loop-label"))
    assert label["y"] >= graph["y"] and label["x"] + label["width"] <= graph["x"] + graph["width"], (label, graph)
    screenshots(page, "history-review-loop")

    # the panel and the Timeline say "changes requested" for the review's attempt, not completed
    review.click()
    page.wait_for_selector("#panel:not([hidden]) li.attempt")
    card = page.locator("#panel-body li.attempt").first
    assert card.get_attribute("data-status") == "changes_requested"
    assert "requested changes → implement" in card.inner_text()
    page.keyboard.press("Escape")
    page.click("#tab-runs")
    page.wait_for_selector("#runs-view:not([hidden]) .tl-row")
    statuses = page.eval_on_selector_all("#runs-view .tl-bar", "els => els.map(b => [b.dataset.stage, b.dataset.status])")
    assert statuses == [["triage", "completed"], ["implement", "completed"], ["implement", "completed"],
                        ["review", "changes_requested"]], statuses
    attempts = page.eval_on_selector_all("#runs-view .tl-row", "rows => rows.map(r => [r.dataset.stage, r.dataset.attempts])")
    assert attempts == [["triage", "1"], ["implement", "2"], ["review", "1"], ["deliver", "0"]], attempts
    page.click("#tab-graph")

    # the review runs again and approves: completed, two attempts, the loop stays drawn
    claim = store.claim_item(item.pk, stage="review")
    store.complete(claim, review_decision="approved")
    page.wait_for_selector('#graph g.node[data-stage="review"][data-status="completed"]')
    wait_for_js(page, """() => document.querySelector('#graph g.node[data-stage="review"] .node-badge')?.textContent === '×2'""")
    assert loop.locator(".loop-label text").text_content() == "↺ ×1"


def test_a_linear_review_loop_draws_each_stage_once(page, daphne_server, bg):
    store = ThreadedStore(bg)
    item = store.linear(title="Sent back twice", criteria=["works"])
    store.complete(store.claim_item(item.pk))  # triage
    for _ in range(2):
        store.complete(store.claim_item(item.pk))  # implement
        store.submit(store.claim_item(item.pk), completed(["works"], review_decision="changes_requested"))
    assert len(store.actions(item.pk)) == 6  # triage, implement, review, implement, review, implement
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk)
    nodes = page.eval_on_selector_all("#graph g.node", "els => els.map(g => [g.dataset.stage, g.dataset.status])")
    # the newest review requested changes: implement is ready for its third attempt
    assert nodes == [["triage", "completed"], ["implement", "ready"], ["review", "changes_requested"]], nodes
    assert node(page, "implement").locator(".node-badge").text_content() == "×2"
    assert node(page, "review").locator(".node-badge").text_content() == "×2"
    loop = page.locator('#graph g.loop[data-source="review"][data-target="implement"]')
    assert loop.locator(".loop-label text").text_content() == "↺ ×2"
    assert page.locator("#graph path.edge").count() == 2  # triage → implement → review
    # implement's third run completes: a new review action, ready; still one node per stage
    store.complete(store.claim_item(item.pk))
    page.wait_for_selector('#graph g.node[data-stage="review"][data-status="ready"]')
    wait_for_js(page, """() => document.querySelector('#graph g.node[data-stage="implement"] .node-badge')?.textContent === '×3'""")
    assert page.locator("#graph g.node").count() == 3
    assert loop.locator(".loop-label text").text_content() == "↺ ×2"
    screenshot(page, "history-linear-loop-1280-light.png")


def test_a_waiting_linear_stage_is_drawn_waiting_on_an_amber_path_counting_from_the_wait(page, daphne_server, bg):
    # the stage asked 3 minutes ago after a run of a few milliseconds
    store = ThreadedStore(bg, behind=timedelta(minutes=3))
    item = store.linear(title="Asks a question")
    store.complete(store.claim_item(item.pk))  # triage
    claim = store.claim_item(item.pk)
    store.submit(claim, {"outcome": "waiting", "waiting_reason": "Which region should this ship to?"})
    assert store.item(item.pk).status == "waiting"
    assert store.by_stage(item.pk)["implement"].status == "completed"  # DOMAIN §7.4
    page.set_viewport_size({"width": 1280, "height": 800})
    open_item(page, daphne_server.url, item.pk)
    implement = node(page, "implement")
    # drawn waiting, not completed
    assert implement.get_attribute("data-status") == "waiting"
    assert "completed" not in implement.locator(".node-status").text_content()
    # its time counts from the wait's start (about 3 minutes), live
    status = implement.locator(".node-status").text_content()
    assert re.fullmatch(r"\? waiting · for (2 m 5\d|3 m \d\d) s", status), status
    first = implement.locator(".node-dur").text_content()
    page.wait_for_timeout(2200)
    assert implement.locator(".node-dur").text_content() != first
    # the path to it is amber: the edge, its arrowhead and the outline of Triage; nothing red
    edge = page.locator("#graph path.edge")
    assert "path-waiting" in edge.get_attribute("class")
    assert edge.get_attribute("marker-end") == "url(#wc-arrow-waiting)"
    stroke = edge.evaluate("el => getComputedStyle(el).stroke")
    r, g, b = rgb(stroke)
    assert r > g > b and r - b > 60, stroke  # amber
    assert "path-waiting" in node(page, "triage").get_attribute("class")
    reds = {css_colour(page, "var(--st-failed)"),
            css_colour(page, "color-mix(in srgb, var(--st-failed) 70%, var(--border-strong))"),
            css_colour(page, "color-mix(in srgb, var(--st-failed) 60%, var(--border))")}
    painted = page.evaluate("""() => [...document.querySelectorAll('#graph svg *')].flatMap(el => {
        const s = getComputedStyle(el); return el.getClientRects().length ? [s.stroke, s.fill] : []; })""")
    assert not reds & set(painted), reds & set(painted)
    # the path's arrowhead is drawn in the same amber
    head = page.locator("#wc-arrow-waiting path").evaluate("el => getComputedStyle(el).fill")
    assert head == stroke
    screenshot(page, "history-waiting-1280-light.png")
    # the list's progress bar shows the stage that asked as waiting, not a full green 2/2
    page.goto(f"{daphne_server.url}/")
    row = page.locator(f'#items tr[data-id="{item.pk}"]')
    row.wait_for()
    segs = row.locator(".progress-seg").evaluate_all("els => els.map(e => e.dataset.status)")
    assert segs == ["completed", "waiting"], segs
    assert row.locator(".progress-text").text_content() == "1/2"


def test_skip_link_active_descendant_and_the_stage_in_the_url(page, daphne_server, bg):
    store = ThreadedStore(bg)
    item = store.graph([{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]}], title="Keyboard")
    page.set_viewport_size({"width": 1280, "height": 800})
    url = f"{daphne_server.url}/work-items/{item.pk}/"
    open_item(page, daphne_server.url, item.pk)
    assert page.get_attribute("#graph", "aria-activedescendant") in (None, "")
    # the first Tab reaches the skip link, Enter moves the keyboard to the graph
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "skip-graph"
    assert page.locator("#skip-graph").is_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "graph"
    # arrows select; aria-activedescendant names the selected node
    page.keyboard.press("ArrowRight")
    active = page.get_attribute("#graph", "aria-activedescendant")
    assert active and page.get_attribute(f"#{active}", "data-stage") == "a"
    assert "selected" in page.get_attribute(f"#{active}", "class")
    page.keyboard.press("ArrowRight")
    active = page.get_attribute("#graph", "aria-activedescendant")
    assert page.get_attribute(f"#{active}", "data-stage") == "b"
    assert "stage=" not in page.url  # selected, not opened: the URL names the opened stage
    # Enter opens b: the URL names it
    page.keyboard.press("Enter")
    page.wait_for_selector("#panel:not([hidden])")
    page.wait_for_url(re.compile(r"\?stage=b$"))
    # moving on with the panel open replaces the entry (the open panel may turn the chain to run
    # downwards: the arrow along the flow)
    flow_down = (perf(page, "wc-graph-layout") or {}).get("detail", {}).get("layout", "").endswith("TB")
    page.keyboard.press("ArrowDown" if flow_down else "ArrowRight")
    page.wait_for_url(re.compile(r"\?stage=c$"))
    assert page.locator("#panel-title").inner_text().startswith("c")
    # a click opens a: a new entry
    node(page, "a").click()
    page.wait_for_url(re.compile(r"\?stage=a$"))
    # reload keeps it: a is selected, its panel open
    page.reload()
    page.wait_for_selector('#graph g.node.selected[data-stage="a"]')
    page.wait_for_selector("#panel:not([hidden])")
    assert page.locator("#panel-title").inner_text().startswith("a")
    assert page.get_attribute("#graph", "aria-activedescendant") == node(page, "a").get_attribute("id")
    # back: c again; back: the page without a stage, the panel closed
    page.go_back()
    page.wait_for_selector('#graph g.node.selected[data-stage="c"]')
    assert page.url.endswith("?stage=c")
    assert page.locator("#panel-title").inner_text().startswith("c")
    page.go_back()
    page.wait_for_url(url)
    page.wait_for_selector("#panel", state="hidden")
    # forward: c opens again; Escape closes it and the URL drops the stage
    page.go_forward()
    page.wait_for_selector("#panel:not([hidden])")
    page.keyboard.press("Escape")
    page.wait_for_url(url)
    # a deep link opens its stage
    page.goto(f"{url}?stage=b")
    page.wait_for_selector('#graph g.node.selected[data-stage="b"]')
    page.wait_for_selector("#panel:not([hidden])")


def screenshots(page, name: str) -> None:
    """1280 × 800 and 800 × 900, light and dark; back to 1280 × 800 light."""
    for width, height in ((1280, 800), (800, 900)):
        page.set_viewport_size({"width": width, "height": height})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_timeout(450)  # the view refits to the new room
            screenshot(page, f"{name}-{width}-{scheme}.png")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(color_scheme="light")
    page.wait_for_timeout(450)
