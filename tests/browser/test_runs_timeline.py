"""The timeline view (a tab beside the graph): a row per stage, a bar per run from claim to end
coloured by outcome, waiting-on-a-person spans, a growing bar for the running run, a click
that opens the run."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.load import LoadWatch

from .conftest import perf, screenshot, wait_for_js, wait_live
from .timing import TimedStore, box, console_errors

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def timed(transactional_db, bg):
    # the story below spans 300 s and ends 10 s before the page opens: the axis runs to now
    return TimedStore(bg, ago=timedelta(seconds=310))


def open_timeline(page, daphne_server, item_id, keyboard=False):
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    if keyboard:
        page.focus("#tab-graph")
        page.keyboard.press("ArrowRight")
    else:
        page.click("#tab-runs")
    page.wait_for_selector("#runs-view:not([hidden]) .tl-row")


def bars(page, stage=None) -> list[dict]:
    return page.evaluate("""(stage) => [...document.querySelectorAll(
            stage ? `#runs-view .tl-row[data-stage="${stage}"] .tl-bar` : '#runs-view .tl-bar')].map(b => {
        const r = b.getBoundingClientRect();
        return {run: b.dataset.run, status: b.dataset.status, left: r.left, width: r.width,
                label: b.getAttribute('aria-label'), border: getComputedStyle(b).borderTopColor};
    })""", stage)


def status_colour(page, var: str) -> str:
    return page.evaluate("""(v) => { const p = document.createElement('span'); p.style.color = `var(${v})`;
        document.body.append(p); const c = getComputedStyle(p).color; p.remove(); return c; }""", var)


def test_a_run_interrupted_failed_and_retried_draws_three_bars_in_order(page, daphne_server, timed):
    errors = console_errors(page)
    # build: run 1 claimed at 10 s, interrupted at 70 s (retryable); run 2 80–200 s, failed: the item
    # needs a person until the lead retries at 260 s; run 3 270–300 s completes
    item = timed.graph([{"id": "build", "max_attempts": 3}, {"id": "check", "deps": ["build"]}], title="Three tries")
    timed.at(10)
    r1 = timed.claim(item.pk, "build")
    timed.at(70)
    assert timed.interrupt(r1) is True
    timed.at(80)
    r2 = timed.claim(item.pk, "build")
    timed.at(200)
    timed.submit(r2, {"outcome": "failed", "error": "compiler crashed"})
    assert timed.item(item.pk).status == "needs_attention"
    timed.at(260)
    timed.retry(item.pk)
    timed.at(270)
    r3 = timed.claim(item.pk, "build")
    timed.at(300)
    timed.complete(r3)
    statuses = {r.pk: r.status for r in timed.runs(item.pk)}
    assert statuses == {r1.run.pk: "interrupted", r2.run.pk: "failed", r3.run.pk: "completed"}

    open_timeline(page, daphne_server, item.pk, keyboard=True)
    # ARIA tabs: the arrow key moved to the Timeline tab, which now shows instead of the graph
    assert page.evaluate("document.activeElement.id") == "tab-runs"
    assert page.get_attribute("#tab-runs", "aria-selected") == "true"
    assert page.locator("#graph").is_hidden()
    # one row per stage, in graph order; no bar for the stage that never ran
    rows = page.eval_on_selector_all("#runs-view .tl-row", "rows => rows.map(r => r.dataset.stage)")
    assert rows == ["build", "check"]
    assert bars(page, "check") == []
    shown = bars(page, "build")
    assert [b["run"] for b in shown] == [r1.run.pk, r2.run.pk, r3.run.pk]
    assert [b["status"] for b in shown] == ["interrupted", "failed", "completed"]
    # in time order, widths proportional to the durations (60 s, 120 s, 30 s)
    assert shown[0]["left"] < shown[1]["left"] < shown[2]["left"]
    unit = shown[1]["width"] / 120
    assert unit > 1  # at least a pixel per second: the ratios below are not vacuous
    assert abs(shown[0]["width"] - 60 * unit) <= 2 and abs(shown[2]["width"] - 30 * unit) <= 2
    assert abs((shown[1]["left"] - shown[0]["left"]) - 70 * unit) <= 2  # claims 70 s apart
    # coloured by outcome with the status colours
    assert shown[0]["border"] == shown[1]["border"] == status_colour(page, "--st-failed")
    assert shown[2]["border"] == status_colour(page, "--st-done")
    assert "interrupted" in shown[0]["label"] and "1 m 00 s" in shown[0]["label"]
    assert "2 m 00 s" in shown[1]["label"] and "30 s" in shown[2]["label"]
    # the item waited on a person from the failure (200 s) to the retry (260 s): hatched
    wait = box(page.locator('#runs-view .tl-row[data-stage="build"] .tl-wait'))
    assert page.get_attribute('#runs-view .tl-row[data-stage="build"] .tl-wait', "data-kind") == "attention"
    assert abs(wait["x"] - (shown[1]["left"] + shown[1]["width"])) <= 2
    assert abs(wait["width"] - 60 * unit) <= 2
    assert page.locator("#runs-view .tl-tick").count() >= 2
    # the events say which attempt of the stage each start was, numbered as the bars are
    claims = page.eval_on_selector_all('#events li.event[data-type="run.claimed"]',
                                       "els => els.map(e => e.querySelector('.event-detail')?.textContent || '')")
    assert claims == ["attempt 3 of this stage", "attempt 2 of this stage", ""], claims
    # two stages fill the view's height: their rows grow (to at most 44 px), the bars sit mid-row
    heights = page.eval_on_selector_all("#runs-view .tl-row", "rows => rows.map(r => r.getBoundingClientRect().height)")
    assert all(43 <= h <= 45 for h in heights), heights
    bar = box(page.locator(f'#runs-view .tl-bar[data-run="{r1.run.pk}"]'))
    row_box = box(page.locator('#runs-view .tl-row[data-stage="build"]'))
    assert abs((bar["y"] + bar["height"] / 2) - (row_box["y"] + row_box["height"] / 2)) <= 1.5
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 800})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.locator("#runs-view").scroll_into_view_if_needed()
            screenshot(page, f"timeline-{width}-{scheme}.png")
        # the legend gives way a whole key at a time: a key shows whole on its one line or not at all
        cut = page.evaluate("""() => { const l = document.querySelector('.graph-toolbar .legend').getBoundingClientRect();
            return [...document.querySelectorAll('.graph-toolbar .legend-item')].filter(el => el.getClientRects().length)
              .map(el => [el.textContent, el.getBoundingClientRect()])
              .filter(([, r]) => r.top < l.bottom && (r.right > l.right + 0.5 || r.bottom > l.bottom + 0.5)).map(([t]) => t); }""")
        assert cut == [], (width, cut)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(color_scheme="light")

    # a click on a bar opens that run: its stage selected, the panel open, the run's card marked
    page.click(f'#runs-view .tl-bar[data-run="{r2.run.pk}"]')
    page.wait_for_selector(f'#panel:not([hidden]) li.run.marked[data-id="{r2.run.pk}"]')
    assert page.locator("#panel-title").inner_text().startswith("build")
    assert page.get_attribute("#graph g.node.selected", "data-stage") == "build"
    card = box(page.locator(f'#panel-body li.run[data-id="{r2.run.pk}"]'))
    body = box(page.locator("#panel-body"))
    assert card["y"] >= body["y"] - 1 and card["y"] < body["y"] + body["height"]
    assert page.locator("#panel-body li.run.marked").count() == 1
    screenshot(page, "timeline-open-run-1280-light.png")
    # the keyboard reaches every bar: arrows move along the row, Enter opens the run
    page.focus(f'#runs-view .tl-bar[data-run="{r1.run.pk}"]')
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.run") == r3.run.pk
    page.keyboard.press("Enter")
    page.wait_for_selector(f'#panel-body li.run.marked[data-id="{r3.run.pk}"]')
    # back to the graph with the other arrow
    page.focus("#tab-runs")
    page.keyboard.press("ArrowLeft")
    assert page.get_attribute("#tab-graph", "aria-selected") == "true"
    assert page.locator("#runs-view").is_hidden() and page.locator("#graph").is_visible()
    assert not errors


def test_the_running_bar_grows_live(page, daphne_server, timed):
    errors = console_errors(page)
    # created 70 s ago; "first" ran 0–10 s; "live" claimed 10 s ago, still running. The axis fits
    # the runs (from the first claim to now), so the running bar's share of it grows
    timed.clock.t = datetime.now(timezone.utc) - timedelta(seconds=70)
    item = timed.graph([{"id": "first"}, {"id": "live", "deps": ["first"]}, {"id": "next", "deps": ["live"]}], title="Growing")
    first = timed.claim(item.pk, "first")
    timed.at(10)
    timed.complete(first)
    timed.at(60)
    claim = timed.claim(item.pk, "live")
    open_timeline(page, daphne_server, item.pk)
    first = bars(page, "live")
    assert [b["status"] for b in first] == ["running"] and first[0]["run"] == claim.run.pk
    page.wait_for_timeout(2500)
    later = bars(page, "live")
    assert later[0]["width"] > first[0]["width"] + 5, (first, later)
    assert later[0]["label"] != first[0]["label"]  # its duration counts up
    # and it stops growing when the run ends, live
    timed.at((datetime.now(timezone.utc) - timed.start).total_seconds())
    timed.complete(claim)
    wait_for_js(page, """() => document.querySelector('#runs-view .tl-row[data-stage="live"] .tl-bar')
        ?.dataset.status === 'completed'""")
    screenshot(page, "timeline-live-1280-light.png")
    assert not errors


def test_two_hundred_stages_with_runs_from_milliseconds_to_hours(page, daphne_server, timed):
    errors = console_errors(page)
    timed.clock.t = datetime.now(timezone.utc) - timedelta(hours=5)
    stages = [{"id": f"s{i:03d}"} for i in range(200)]
    item = timed.graph(stages, title="Two hundred stages")
    t = 0.0
    # 30 stages run one after another: 5 ms, 2 s, then up to 2 hours
    lengths = [0.005, 2] + [60 * (i % 7 + 1) for i in range(27)] + [2 * 3600]
    for i, length in enumerate(lengths):
        t += 1
        timed.at(t)
        c = timed.claim(item.pk, f"s{i:03d}")
        t += length
        timed.at(t)
        timed.complete(c)
    with LoadWatch() as load:
        open_timeline(page, daphne_server, item.pk)
    drawn = perf(page, "wc-runs")  # item-runs.js's measure of its drawing
    timing = {**drawn["detail"], "ms": drawn["duration"]}
    print(f"\ntimeline of {timing['rows']} stages, {timing['bars']} bars: drawn in {timing['ms']:.1f} ms "
          f"(at a load of {load.factor:.1f})")
    assert timing["rows"] == 200 and timing["bars"] == len(lengths)
    assert timing["ms"] < 1000 * load.within(0.3, cap=1.5)  # 300 ms on an idle machine
    tiny, long_ = bars(page, "s000")[0], bars(page, f"s{len(lengths) - 1:03d}")[0]
    assert tiny["width"] >= 3  # a 5 ms run stays visible and clickable
    assert long_["width"] > 100 * tiny["width"] / 3
    def axis_width():
        return box(page.locator("#runs-view .tl-axis"))["width"]

    # zoom in (twice 1.5×): the time axis widens, the bars with it; Fit comes back
    before = axis_width()
    page.click('#runs-view [data-zoom="in"]')
    page.click('#runs-view [data-zoom="in"]')
    zoomed = bars(page, f"s{len(lengths) - 1:03d}")[0]
    assert axis_width() > 2.2 * before
    assert abs(zoomed["width"] / long_["width"] - axis_width() / before) < 0.01, (zoomed, long_)
    assert page.locator("#runs-view .tl-tick").count() > 4
    page.click('#runs-view [data-zoom="fit"]')
    assert abs(bars(page, f"s{len(lengths) - 1:03d}")[0]["width"] - long_["width"]) <= 1
    # the rows scroll inside the view; the axis stays on top
    page.locator('#runs-view .tl-row[data-stage="s199"]').scroll_into_view_if_needed()
    axis = box(page.locator("#runs-view .tl-axis"))
    view = box(page.locator("#runs-view"))
    assert abs(axis["y"] - view["y"]) <= 2
    page.set_viewport_size({"width": 800, "height": 900})
    page.locator("#runs-view").evaluate("el => el.scrollTop = 0")
    screenshot(page, "timeline-200-800-light.png")
    assert not errors


def test_a_draft_s_timeline_is_empty_without_errors(page, daphne_server, timed, bg):
    from tests.conftest import Store

    errors = console_errors(page)
    item = bg(Store(timed.clock).create, title="Not yet", start=False)
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    wait_live(page)
    page.click("#tab-runs")
    page.wait_for_selector("#runs-view:not([hidden])")
    assert page.locator("#runs-view .tl-row").count() == 0
    assert page.locator("#graph-empty").is_visible()
    assert page.locator("#item-meta [data-time=running] dd").inner_text() == "0 s"
    assert not errors


def test_a_linear_stage_done_again_keeps_one_row_with_a_bar_per_run(page, daphne_server, timed, bg):
    from tests.conftest import Store

    errors = console_errors(page)
    store = Store(timed.clock)
    item = bg(store.linear, criteria=["works"], title="Linear rows")
    # triage, implement, review asking for changes, implement again: two actions of one stage
    for stage, extra in (("triage", {}), ("implement", {}), ("review", {"review_decision": "changes_requested"}),
                         ("implement", {})):
        bg(lambda s=stage, e=extra: store.complete(store.claim_item(item.pk, stage=s), **e))
    open_timeline(page, daphne_server, item.pk)
    rows = page.eval_on_selector_all("#runs-view .tl-row", "rows => rows.map(r => r.dataset.stage)")
    assert rows == ["triage", "implement", "review"]
    assert [b["status"] for b in bars(page, "implement")] == ["completed", "completed"]
    assert len(bars(page, "review")) == 1
    # the second implement bar opens the second implement action's panel with its run
    second = bars(page, "implement")[1]["run"]
    page.click(f'#runs-view .tl-bar[data-run="{second}"]')
    page.wait_for_selector(f'#panel-body li.run.marked[data-id="{second}"]')
    assert not errors
