"""The page's list of events reads as sentences a lead understands, from what the events really
carry: "Rev asked for changes → Impl", "Triage planned 2 stages", "Retried by lead: …", the stage
of a stage a plan has just created (without reload), short worker ids with the full id on hover;
never the stored field names ("next action count", "retryable true", "status superseded")."""
from __future__ import annotations

import uuid

import pytest

from tests.conftest import Clock, Store, completed, make_graph
from workcenter import services
from workcenter.services import bulk
from workcenter.models import Event, WorkItem

from .conftest import screenshot, wait_for_js, wait_live
from .timing import box, console_errors
from .live import WAIT_MS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(transactional_db):
    return Store(Clock())


def open_item(page, daphne_server, item_id):
    page.goto(f"{daphne_server.url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)


def event_id(bg, item_id, type_, nth=-1):
    return bg(lambda: list(Event.objects.filter(work_item_id=item_id, type=type_).order_by("id")
                           .values_list("id", flat=True))[nth])


def row(page, ev_id):
    return page.locator(f'#events li.event[data-id="{ev_id}"]')


def review_graph(store):
    """impl → rev (a review that sends changes back to impl) → ship."""
    stages = [{"id": "impl", "type": "implement"},
              {"id": "rev", "type": "review", "deps": ["impl"], "return_to": "impl"},
              {"id": "ship", "deps": ["rev"]}]
    item = make_graph(store, stages, title="Changes requested")
    WorkItem.objects.filter(pk=item.pk).update(workflow_snapshot={"execution_mode": "graph", "stages": [
        {"id": s["id"], "type": s.get("type", "research"), "depends_on_stage_ids": s.get("deps", []),
         "changes_requested_stage_id": s.get("return_to")} for s in stages]})
    return item


def test_a_graph_review_requesting_changes_shows_the_stage_it_sends_the_work_back_to(page, daphne_server, store, bg):
    errors = console_errors(page)
    item = bg(review_graph, store)
    bg(lambda: store.complete(store.claim_item(item.pk, stage="impl")))
    open_item(page, daphne_server, item.pk)
    bg(lambda: store.complete(store.claim_item(item.pk, stage="rev"), review_decision="changes_requested"))
    ev = event_id(bg, item.pk, "review.changes_requested")
    row(page, ev).wait_for()
    line = row(page, ev).locator(".event-line")
    assert line.locator(".event-text").inner_text() == "Rev asked for changes → Impl"
    assert line.locator(".event-stage").get_attribute("data-stage") == "rev"  # the review's own stage
    assert line.locator(".event-text").get_attribute("title") == "review.changes_requested"  # the stored type on hover
    screenshot(page, "events-changes-requested-1280-light.png")
    assert not errors


LINEAR_RENAMED = {"id": "renamed", "name": "Renamed stages", "execution_mode": "linear", "planning_mode": "static",
                  "work_item_type": "change", "stages": [
                      {"id": "triage", "type": "triage"}, {"id": "fix", "type": "implement"},
                      {"id": "check", "type": "review", "changes_requested_stage_id": "fix"},
                      {"id": "ship", "type": "deliver"}]}


def test_a_linear_review_requesting_changes_shows_the_stage_it_returns_to(page, daphne_server, store, bg):
    errors = console_errors(page)
    # stage ids that are not their types: the event names the next action's type ("implement"),
    # the page names its stage ("fix")
    item = bg(store.create, workflow=LINEAR_RENAMED, criteria=["works"], title="Linear changes")
    for stage in ("triage", "fix"):
        bg(lambda s=stage: store.complete(store.claim_item(item.pk, stage=s)))
    open_item(page, daphne_server, item.pk)
    bg(lambda: store.complete(store.claim_item(item.pk, stage="check"), review_decision="changes_requested"))
    ev = event_id(bg, item.pk, "action.completed")
    data = bg(lambda: Event.objects.get(pk=ev).data)
    assert data == {"next_action_type": "implement", "review_decision": "changes_requested"}
    row(page, ev).wait_for()
    wait_for_js(page, """(id) => document.querySelector(`#events li[data-id="${id}"] .event-text`)
        .textContent === 'Check asked for changes → Fix'""", ev)
    assert row(page, ev).get_attribute("data-stage") == "check"
    # a completion that is not a changes request has no arrow
    first = event_id(bg, item.pk, "action.completed", nth=0)
    assert row(page, first).locator(".event-text").inner_text() == "Triage completed"
    assert not errors


def test_a_stage_a_plan_just_created_gets_its_chip_without_reload(page, daphne_server, store, bg):
    errors = console_errors(page)
    item = bg(store.create, title="Planned live", work_item_type="analysis")
    open_item(page, daphne_server, item.pk)
    page.evaluate("window.__sameDocument = true")

    def plan_and_claim():
        # the plan adds stages a and b; a is claimed at once, before the page has re-read the item
        triage = store.claim_item(item.pk)
        store.submit(triage, completed(plan={"work_item_type": "analysis", "actions": [
            {"id": "a", "type": "research", "objective": "look"}, {"id": "b", "type": "write", "objective": "write"}]}))
        return store.claim_item(item.pk, stage="a")

    claim = bg(plan_and_claim)
    ev = bg(lambda: Event.objects.get(type="run.claimed", run_id=claim.run.pk).pk)
    row(page, ev).wait_for()
    wait_for_js(page, """(id) => document.querySelector(`#events li[data-id="${id}"] .event-stage`)
        ?.dataset.stage === 'a'""", ev, timeout=WAIT_MS)
    assert row(page, ev).locator(".event-text").inner_text().startswith("A started on worker ")
    planned = event_id(bg, item.pk, "action.completed")
    assert row(page, planned).locator(".event-text").inner_text() == "Triage planned 2 stages"
    assert page.evaluate("window.__sameDocument") is True
    assert page.locator("#events li.event[data-pending-stage]").count() == 0
    assert not errors


def test_worker_ids_are_short_with_the_full_id_on_hover(page, daphne_server, store, bg):
    errors = console_errors(page)
    boot = str(uuid.uuid4())
    item = bg(make_graph, store, [{"id": "solo"}], title="Worker ids")
    open_item(page, daphne_server, item.pk)
    bg(lambda: store.claim_item(item.pk, boot=boot))
    ev = event_id(bg, item.pk, "run.claimed")
    r = row(page, ev)
    r.wait_for()
    ids = r.locator(".worker-id")
    assert ids.count() == 2  # "by worker …" and the actor "worker:…"
    for i in range(2):
        assert ids.nth(i).inner_text() == f"{boot[:8]}…"
        assert ids.nth(i).get_attribute("title") == boot
    assert r.locator(".event-text").inner_text() == f"Solo started on worker {boot[:8]}…"
    # the first start of an attempt needs no detail line; no "lease epoch" reaches the lead
    assert r.locator(".event-detail").count() == 0
    assert "epoch" not in page.locator("#events").inner_text()
    assert boot not in page.locator("#events").inner_text()
    # one line each: no UUID wraps the row
    for part in (".event-meta",):
        b = box(r.locator(part))
        assert b["height"] < 22, (part, b)
    page.set_viewport_size({"width": 800, "height": 900})
    r.scroll_into_view_if_needed()
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        screenshot(page, f"events-worker-ids-800-{scheme}.png")
    assert not errors


def test_events_read_as_sentences_without_the_stored_field_names(page, daphne_server, store, bg):
    errors = console_errors(page)
    item = bg(make_graph, store, [{"id": "build", "type": "implement", "max_attempts": 3}], title="Sentences")
    open_item(page, daphne_server, item.pk)

    def history():
        store.submit(store.claim_item(item.pk, stage="build"), {"outcome": "retryable", "error": "network flaked"})
        claim = store.claim_item(item.pk, stage="build")
        services.run_interrupt(run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id,
                               lease_epoch=claim.run.lease_epoch, reason="worker shutting down")
        store.submit(store.claim_item(item.pk, stage="build"), {"outcome": "failed", "error": "compiler crashed"})
        rev = WorkItem.objects.get(pk=item.pk).revision
        bulk.work_items_bulk_apply(operation="retry", ids=[item.pk], reason="the compiler is fixed",
                                       expected_revisions={item.pk: rev}, actor="user:lead")
        services.work_item_cancel(item_id=item.pk, actor="user:lead", reason="no longer needed")

    bg(history)
    last = event_id(bg, item.pk, "work_item.cancelled")
    row(page, last).wait_for()
    texts = {}
    for ev_type in ("action.retry_scheduled", "run.interrupted", "action.failed", "work_item.retried",
                    "work_item.cancelled"):
        r = row(page, event_id(bg, item.pk, ev_type))
        detail = r.locator(".event-detail")
        texts[ev_type] = (r.locator(".event-text").inner_text(), detail.inner_text() if detail.count() else "")
    assert texts == {
        "action.retry_scheduled": ("Build failed on attempt 1 of 3; it runs again", "“network flaked”"),
        "run.interrupted": ("Build was interrupted; it runs again", "“worker shutting down”"),
        "action.failed": ("Build failed", "“compiler crashed”"),
        "work_item.retried": ("Retried by lead: “the compiler is fixed”", "Build starts again"),
        "work_item.cancelled": ("Cancelled by lead:", "“no longer needed”"),
    }, texts
    shown = page.locator("#events").inner_text()
    for internal in ("retryable", "next action", "status superseded", "lease_epoch", "target stage", "_"):
        assert internal not in shown, internal
    screenshot(page, "events-sentences-1280-light.png")
    assert not errors
