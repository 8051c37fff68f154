"""Graph reset (DOMAIN §7.8), review routing (§7.7), manual graph retry (§8.6) and its preview."""
import pytest

from tests.conftest import make_graph
from workcenter import services
from workcenter.errors import InvalidState
from workcenter.models import Action, Event, Run, WorkItem


def _review_graph(store, extra=()):
    """impl -> rev(review, returns to impl) -> ship ; side independent."""
    stages = [{"id": "impl", "type": "implement"}, {"id": "side"},
              {"id": "rev", "type": "review", "deps": ["impl"], "return_to": "impl"},
              {"id": "ship", "deps": ["rev"]}, *extra]
    item = make_graph(store, stages)
    WorkItem.objects.filter(pk=item.pk).update(workflow_snapshot={"execution_mode": "graph", "stages": [
        {"id": s["id"], "type": s.get("type", "research"), "depends_on_stage_ids": s.get("deps", []),
         "changes_requested_stage_id": s.get("return_to"), "workspace_mode": s.get("mode", "shared")}
        for s in stages]})
    return store.item(item.pk)


def test_review_changes_request_resets_target_dependants_and_running_siblings(store):
    item = _review_graph(store)
    ci = store.claim()
    store.complete(ci)
    cs, cr = store.claim(), store.claim()
    assert (cs.action.stage_id, cr.action.stage_id) == ("side", "rev")
    n_actions = Action.objects.filter(work_item=item).count()
    store.complete(cr, review_decision="changes_requested")
    acts = store.by_stage(item.pk)
    # the target (same id), the review (dependant) and the running independent sibling are reset
    assert acts["impl"].pk == ci.action.pk and acts["impl"].status == "ready" and acts["impl"].attempt == 0
    assert acts["rev"].status == "ready" and acts["side"].status == "ready"
    assert acts["side"].lease_epoch == cs.run.lease_epoch + 1  # taken away from its running run
    assert acts["impl"].lease_epoch == ci.run.lease_epoch        # was not running: unchanged
    assert Run.objects.get(pk=cs.run.pk).status == "superseded"
    assert Run.objects.get(pk=cs.run.pk).error == "Superseded by review changes request"
    assert Run.objects.get(pk=ci.run.pk).status == "completed"  # history kept
    assert Action.objects.filter(work_item=item).count() == n_actions
    assert acts["impl"].context[-1]["type"] == "review"
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "review.changes_requested" and ev.data == {"target_stage_id": "impl"}
    assert store.item(item.pk).status in ("ready", "running")


def test_review_return_stage_not_ancestor_keeps_review_completed(store):
    # return target 'side' is not an ancestor of the review: review stays completed, dependants proceed
    item = _review_graph(store)
    Action.objects.filter(work_item=item, stage_id="rev").update(changes_requested_stage_id="side")
    store.complete(store.claim())       # impl
    cs = store.claim()                  # side
    store.complete(cs)
    cr = store.claim()
    assert cr.action.stage_id == "rev"
    store.complete(cr, review_decision="changes_requested")
    acts = store.by_stage(item.pk)
    assert acts["rev"].status == "completed" and acts["side"].status == "ready"
    claimed = {store.claim().action.stage_id, store.claim().action.stage_id}
    assert claimed == {"side", "ship"}


def test_graph_reset_missing_return_stage_rolls_back(store):
    item = _review_graph(store)
    Action.objects.filter(work_item=item, stage_id="rev").update(changes_requested_stage_id="ghost")
    store.complete(store.claim())
    store.claim()                        # side
    cr = store.claim()
    before = list(Action.objects.filter(work_item=item).values())
    with pytest.raises(InvalidState):
        store.complete(cr, review_decision="changes_requested")
    assert list(Action.objects.filter(work_item=item).values()) == before
    assert Run.objects.get(pk=cr.run.pk).status == "running"


def test_graph_retry_resets_in_place_with_dependants_and_running_siblings(store):
    item = _review_graph(store)
    ci = store.claim()
    store.submit(ci, {"outcome": "failed", "error": "broken"})
    # nothing claimable except side... which was claimed before? side is claimable, item needs attention though
    assert store.item(item.pk).status == "needs_attention"
    preview = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    acts = store.by_stage(item.pk)
    assert preview["mode"] == "graph" and preview["new_action"] is False
    assert preview["target_action_id"] == ci.action.pk and preview["target_stage_id"] == "impl"
    assert preview["reset_action_ids"] == [acts["impl"].pk, acts["rev"].pk, acts["ship"].pk]
    assert preview["superseded_run_ids"] == []
    # the preview wrote nothing
    assert Action.objects.get(pk=ci.action.pk).status == "failed"
    item = services.work_item_retry(item_id=item.pk, now=store.now())
    assert item.status == "ready" and item.current_action_id == ci.action.pk
    assert Action.objects.get(pk=ci.action.pk).status == "ready"
    assert Action.objects.filter(work_item=item).count() == 4
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "work_item.retried" and ev.data == {"target_stage_id": "impl"}


def test_graph_retry_preview_lists_running_runs_to_supersede(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a"]}])
    ca, cb = store.claim(), store.claim()
    store.submit(ca, {"outcome": "failed", "error": "x"})
    preview = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    assert preview["superseded_run_ids"] == [cb.run.pk]
    acts = store.by_stage(item.pk)
    assert set(preview["reset_action_ids"]) == {acts["a"].pk, acts["b"].pk, acts["c"].pk}
    services.work_item_retry(item_id=item.pk, now=store.now())
    assert Run.objects.get(pk=cb.run.pk).status == "superseded"
    assert Run.objects.get(pk=cb.run.pk).error == "Superseded by manual graph retry"
    assert set(a.status for a in store.actions(item.pk)) == {"ready"}


def test_graph_retry_forces_ready_even_with_another_failed_action(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca, _cb = store.claim(), store.claim()
    store.submit(ca, {"outcome": "failed", "error": "x"})
    # b's run is now stale (item needs_attention); the retry of a also resets running b
    services.work_item_retry(item_id=item.pk, now=store.now())
    assert store.item(item.pk).status == "ready"


def test_retry_preview_linear(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "waiting", "waiting_reason": "?"})
    preview = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    waiting = preview.pop("waiting_stages")
    assert preview.pop("state_token") == Event.objects.filter(work_item_id=item.pk).order_by("-id")[0].id
    assert preview == {"target_action_id": c.action.pk, "target_stage_id": "triage", "mode": "linear",
                       "reset_action_ids": [], "superseded_run_ids": [], "new_action": True}
    assert [(w["action_id"], w["waiting_reason"]) for w in waiting] == [(c.action.pk, "?")]


def test_retry_preview_refused_when_not_needed(store):
    item = store.linear()
    with pytest.raises(InvalidState):
        services.work_item_retry_preview(item_id=item.pk, now=store.now())


def test_graph_reset_integrate_target_keeps_prepared_workspace(store):
    item = make_graph(store, [{"id": "w", "mode": "isolated-write"}, {"id": "i", "type": "integrate", "mode": "integrate", "deps": ["w"]}])
    store.complete(store.claim())
    ci = store.claim()
    Action.objects.filter(pk=ci.action.pk).update(workspace={"path": "/x", "integration": {"status": "prepared"}})
    store.submit(ci, {"outcome": "failed", "error": "merge"})
    services.work_item_retry(item_id=item.pk, now=store.now())
    a = Action.objects.get(pk=ci.action.pk)
    assert a.workspace == {"path": "/x", "integration": {"status": "prepared"}}
    assert a.status == "ready"


def test_item_state_and_reset_writes_are_guarded_on_the_rows_as_read(store):
    """`save_item_state` without an explicit guard, and the graph reset's action writes, check
    the rows still hold what the caller read under its lock; a slip rolls everything back."""
    from django.db import transaction

    from tests.conftest import item_snapshot
    from workcenter.errors import FenceLost
    from workcenter.services import common, graph

    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    before = item_snapshot(item.pk)
    # the caller's copy says "running", the row says "ready": the write must not land
    stale = WorkItem.objects.get(pk=item.pk)
    stale.status = "running"
    with pytest.raises(FenceLost), transaction.atomic():
        common.save_item_state(stale, store.now(), status="done", current_action_id=None)
    # a reset planned from rows that changed before it was applied
    with pytest.raises(FenceLost), transaction.atomic():
        fresh = common.lock_item(item.pk)
        actions = common.item_actions(fresh, lock=True)
        plan = graph.plan_graph_reset(fresh, actions, "a", None, store.now())
        Action.objects.filter(pk=plan.affected[-1].pk).update(status="failed")
        graph.apply_graph_reset(plan, None, "test", store.now())
    assert item_snapshot(item.pk) == before
