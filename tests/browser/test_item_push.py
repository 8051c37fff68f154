"""The work-item page follows the stream without asking: the per-item stream pushes the item's
state (changed nodes, actions, runs), so the page makes no HTTP request per event; a gap in the
diffs (a message that never reached it) is filled with one read of the whole state."""
from __future__ import annotations

import pytest

from tests.conftest import completed
from workcenter import services
from workcenter.models import Action, Event

from .conftest import Frames, StreamTap, ThreadedStore, wait_for_js, wait_live, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [{"id": f"s{i:02d}", "type": "research", "mode": "read", "max_attempts": 3} for i in range(30)]


@pytest.fixture
def store(transactional_db, bg):
    return ThreadedStore(bg)


def open_item(page, daphne_server, item_id) -> list[str]:
    """Open the page, wait until it is live; returns the list the HTTP requests it makes from now
    on are appended to (the websocket itself is not counted)."""
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}") if r.resource_type != "websocket" else None)
    return requests


def state_reads(requests: list[str], item_id) -> list[str]:
    """The page's reads of the whole state (item.js resync)."""
    return [r for r in requests if r.endswith(f"/work-items/{item_id}/state")]


def node_statuses(page) -> dict:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#graph g.node')]
        .map(g => [g.dataset.stage, g.dataset.status]))""")


def stored_statuses(bg, item_id) -> dict:
    return bg(lambda: {a.effective_stage_id: a.status for a in Action.objects.filter(work_item_id=item_id)})


def test_the_item_page_follows_fifty_events_without_one_http_request(page, daphne_server, store, bg):
    # given a 30-stage item open and live
    item = store.graph(STAGES, title="Pushed, not pulled")
    frames = Frames(page)
    requests = open_item(page, daphne_server, item.pk)
    mark = bg(lambda: Event.objects.order_by("-id").values_list("id", flat=True).first() or 0)

    # when workers claim and finish stages: at least 50 events for this item
    def work():
        for i in range(26):
            claim = services.action_claim(owner_boot_id="boot-push", lease_ms=60_000)
            if i % 5 == 4:  # some fail once and go back to ready (a run of their own each)
                services.run_submit(run_id=claim.run.pk, owner_boot_id="boot-push", lease_epoch=claim.run.lease_epoch,
                                    result={"outcome": "retryable", "error": "flaky network"})
                continue
            services.run_submit(run_id=claim.run.pk, owner_boot_id="boot-push", lease_epoch=claim.run.lease_epoch,
                                result=completed())

    bg(work)
    events = bg(lambda: list(Event.objects.filter(work_item_id=item.pk, id__gt=mark).order_by("id")))
    assert len(events) >= 50

    # then the page received them all, and its graph and timeline show the stored state
    wait_until(page, lambda: frames.event_ids(after=mark) >= {e.id for e in events}, timeout=15_000)
    truth = stored_statuses(bg, item.pk)
    wait_for_js(page, """(truth) => Object.entries(truth).every(([s, st]) =>
        document.querySelector(`#graph g.node[data-stage="${s}"]`)?.dataset.status === st)""", truth)
    assert node_statuses(page) == truth
    page.wait_for_selector(f'#events li[data-id="{events[-1].id}"]')
    shown = page.eval_on_selector_all("#events li", "els => els.map(e => Number(e.dataset.id))")
    assert {e.id for e in events} <= set(shown)
    # the side panel's data (the detail's runs) followed too, from the pushed state: not one read of it
    assert state_reads(requests, item.pk) == []
    assert requests == [], requests
    print(f"\n{len(events)} events, {len(requests)} HTTP requests")


def test_a_dropped_state_is_filled_with_one_read_of_the_whole_state(page, daphne_server, store, bg):
    # given an open item page that will lose the next message carrying a state
    item = store.graph(STAGES[:4], title="A gap")
    tap = StreamTap(page)
    requests = open_item(page, daphne_server, item.pk)
    tap.drop_next(lambda m: m.get("type") == "event" and bool(m.get("state")))

    # when one stage is claimed (its messages dropped) and then another one
    first = store.claim_item(item.pk, stage="s00", boot="boot-gap-1")
    wait_until(page, lambda: tap.dropped)
    assert len(tap.dropped) == 1
    second = store.claim_item(item.pk, stage="s01", boot="boot-gap-2")

    # then the next diff does not apply to what the page shows: it reads the state back once, and
    # both claims are on screen
    page.wait_for_selector('#graph g.node[data-stage="s01"][data-status="running"]', timeout=10_000)
    page.wait_for_selector('#graph g.node[data-stage="s00"][data-status="running"]', timeout=10_000)
    assert len(state_reads(requests, item.pk)) == 1, requests
    # and diffs apply again after it: the next change needs no request
    before = len(requests)
    store.complete(second)
    page.wait_for_selector('#graph g.node[data-stage="s01"][data-status="completed"]', timeout=10_000)
    store.complete(first)
    page.wait_for_selector('#graph g.node[data-stage="s00"][data-status="completed"]', timeout=10_000)
    assert len(requests) == before, requests[before:]
    assert node_statuses(page) == stored_statuses(bg, item.pk)
