"""Where the time went: the side panel's runs (start, end, duration) and the header's elapsed time,
time running and time waiting on a person, against runs with known timestamps."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from .conftest import screenshot, wait_for_js, wait_live
from .timing import TimedStore, box, console_errors, format_duration, ms_between

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [{"id": "a", "max_attempts": 3}, {"id": "b"}, {"id": "c", "deps": ["a", "b"]}]


@pytest.fixture
def timed(transactional_db, bg):
    return TimedStore(bg)


def finished_item(timed):
    """a asks a question at 70 s (its run: 10–70 s) while b runs 20–100 s; the lead answers at 300 s;
    a runs again 310–355 s; c runs 380–400 s and the item is done."""
    item = timed.graph(STAGES, title="Known times")
    timed.at(10)
    a1 = timed.claim(item.pk, "a")
    timed.at(20)
    b = timed.claim(item.pk, "b")
    timed.at(70)
    timed.submit(a1, {"outcome": "waiting", "waiting_reason": "Which database?"})
    timed.at(100)
    timed.complete(b)
    timed.at(300)
    timed.retry(item.pk, answer="PostgreSQL")
    timed.at(310)
    a2 = timed.claim(item.pk, "a")
    timed.at(355)
    timed.complete(a2)
    timed.at(380)
    c = timed.claim(item.pk, "c")
    timed.at(400)
    timed.complete(c)
    assert timed.item(item.pk).status == "done"
    return item


def header_times(page) -> dict:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#item-meta [data-time]')]
        .map(el => [el.dataset.time, {text: el.querySelector('dd').textContent, title: el.title}]))""")


def open_item(page, daphne_server, item_id):
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    page.wait_for_selector("#item-meta [data-time=elapsed] dd:not(:empty)")


def _within_a_tick(*texts: str) -> bool:
    """Durations read off the page one after another: a second's tick may fall between two reads."""
    values = [seconds(t) for t in texts]
    return max(values) - min(values) <= 1


def open_stage(page, stage):
    page.click(f'#graph g.node[data-stage="{stage}"]')
    page.wait_for_selector("#panel:not([hidden]) li.run")
    # the stage's instruction is read when it opens, and the panel is drawn again when it comes
    wait_for_js(page, "() => !document.querySelector('#panel-body .instruction pre.muted')")


def panel_runs(page) -> list[dict]:
    return page.evaluate("""() => [...document.querySelectorAll('#panel-body li.run')].map(li => ({
        id: li.dataset.id, status: li.dataset.status,
        duration: li.querySelector('.run-duration').textContent,
        started: Date.parse(li.querySelector('.run-times dd:nth-of-type(1) time').getAttribute('datetime')),
        ended: (t => t ? Date.parse(t.getAttribute('datetime')) : null)(
            li.querySelector('.run-times dd:nth-of-type(2) time')),
    }))""")


def seconds(text: str) -> int:
    """ "1 m 05 s" → 65, "42 s" → 42 """
    if " m " in text:
        minutes, rest = text.split(" m ")
        return int(minutes) * 60 + int(rest.rstrip(" s"))
    return int(text.rstrip(" s"))


def epoch_ms(dt: datetime) -> int:
    return round(dt.timestamp() * 1000)


def test_panel_and_header_show_the_durations_of_the_runs_timestamps(page, daphne_server, timed):
    errors = console_errors(page)
    item = finished_item(timed)
    runs = {r.pk: r for r in timed.runs(item.pk)}
    open_item(page, daphne_server, item.pk)

    # the header: elapsed = creation → the last (terminal) event, running = the union of the runs
    # (a and b overlapped 20–70 s: counted once), waiting on a person = the question → the answer
    times = header_times(page)
    last = timed.events(item.pk)[-1]
    assert last.type == "action.completed"
    assert times["elapsed"]["text"] == format_duration(ms_between(item.created_at, last.created_at)) == "6 m 40 s"
    assert times["running"]["text"] == "2 m 35 s"  # 10–100 s, 310–355 s, 380–400 s
    assert "overlapping runs counted once" in times["running"]["title"]
    assert "3 m 25 s if the runs that overlapped were added up" in times["running"]["title"]
    assert times["waiting"]["text"] == "3 m 50 s"  # 70 → 300 s
    # a finished item's times stand still
    page.wait_for_timeout(1200)
    assert header_times(page) == times

    # the panel lists every run of a stage, newest first, with start, end and the exact duration
    open_stage(page, "a")
    shown = panel_runs(page)
    assert [r["status"] for r in shown] == ["completed", "waiting"]
    assert [r["duration"] for r in shown] == ["45 s", "1 m 00 s"]
    for r in shown:
        run = runs[r["id"]]
        assert r["started"] == epoch_ms(run.started_at) and r["ended"] == epoch_ms(run.ended_at)
        assert r["duration"] == format_duration(ms_between(run.started_at, run.ended_at))
    assert page.locator("#panel-body li.run").first.locator(".run-number").inner_text() == "#2"
    assert page.locator("#panel-body .run-total").inner_text() == "1 m 45 s"  # the stage's two runs
    open_stage(page, "b")
    assert [r["duration"] for r in panel_runs(page)] == ["1 m 20 s"]
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 800})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            # in one step in the page: a relayout on the resize may draw the panel again meanwhile
            page.evaluate("document.querySelector('#panel-body li.run').scrollIntoView({block: 'nearest'})")
            screenshot(page, f"durations-panel-{width}-{scheme}.png")
    # the header still fits at 800 px: no time wraps inside itself
    page.set_viewport_size({"width": 800, "height": 800})
    for key in ("elapsed", "running", "waiting"):
        b = box(page.locator(f"#item-meta [data-time={key}]"))
        assert b["height"] < 24 and b["x"] + b["width"] <= 800, (key, b)
    assert not errors


def test_a_running_run_and_the_header_count_up_live(page, daphne_server, timed):
    errors = console_errors(page)
    # a run claimed 65 s ago (real time), still running; the item was created 5 s before that
    timed.clock.t = datetime.now(timezone.utc) - timedelta(seconds=70)
    item = timed.graph([{"id": "slow"}], title="Running now")
    timed.at(5)
    claim = timed.claim(item.pk, "slow")
    started = epoch_ms(claim.run.started_at)
    created = epoch_ms(item.created_at)
    open_item(page, daphne_server, item.pk)
    open_stage(page, "slow")

    def read():
        return page.evaluate("""() => ({now: Date.now(),
            run: document.querySelector('#panel-body li.run .run-duration').textContent,
            live: document.querySelector('#panel-body li.run .run-duration').hasAttribute('data-live'),
            total: document.querySelector('#panel-body .run-total').textContent,
            running: document.querySelector('#item-meta [data-time=running] dd').textContent,
            elapsed: document.querySelector('#item-meta [data-time=elapsed] dd').textContent})""")

    first = read()
    assert first["live"]
    # the texts are the durations up to the page's clock (the ticker may be up to 1 s behind)
    assert first["run"] in {format_duration(first["now"] - started - d) for d in (0, 1000)}
    assert _within_a_tick(first["running"], first["run"], first["total"])
    assert first["elapsed"] in {format_duration(first["now"] - created - d) for d in (0, 1000)}
    wait_for_js(page, "(t) => document.querySelector('#panel-body li.run .run-duration').textContent !== t",
                first["run"], timeout=2500)
    page.wait_for_timeout(2100)
    later = read()
    assert seconds(later["run"]) >= seconds(first["run"]) + 2
    assert seconds(later["elapsed"]) >= seconds(first["elapsed"]) + 2
    assert later["run"] in {format_duration(later["now"] - started - d) for d in (0, 1000)}
    assert _within_a_tick(later["total"], later["run"], later["running"])  # the panel's and the header's clocks
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 800})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.evaluate("window.scrollTo(0, 0)")
            screenshot(page, f"durations-header-{width}-{scheme}.png")
    assert not errors
