"""Runs (DOMAIN §6, §7, §9.1): fencing, terminal submission, progress, renewal, interruption."""
from datetime import timedelta

import pytest

from tests.conftest import checks_for, completed, item_snapshot, make_graph
from workcenter import services
from workcenter.errors import InvalidInput, StaleRun
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.services.hooks import inject_fault


def _args(c, **kw):
    d = dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)
    d.update(kw)
    return d


# --- fencing: every stale case of DOMAIN §6.4 -------------------------------------------------

def _assert_stale_everywhere(store, c, words):
    before = item_snapshot(c.work_item.pk)
    with pytest.raises(StaleRun) as exc:
        store.submit(c, completed())
    msg = str(exc.value)
    assert "stale" in msg and any(w in msg for w in words), msg
    assert services.run_progress(**_args(c), progress={"response": "x"}, now=store.now()) is None
    assert services.run_renew(**_args(c), now=store.now()) is None
    assert services.run_set_snapshots(**_args(c), snapshots={"vp_snapshot": {"id": "v"}}, now=store.now()) is False
    assert item_snapshot(c.work_item.pk) == before


def test_fence_different_boot_id(store):
    store.linear()
    c = store.claim()
    c.run.owner_boot_id = "someone-else"
    _assert_stale_everywhere(store, c, ["finished"])
    assert services.run_interrupt(**_args(c), now=store.now()) is False


def test_fence_lower_epoch_after_reclaim(store):
    store.linear()
    old = store.claim()
    services.run_interrupt(**_args(old), now=store.now())
    new = store.claim()
    assert new.run.lease_epoch == 2
    _assert_stale_everywhere(store, old, ["finished"])
    assert services.run_interrupt(**_args(old), now=store.now()) is False
    store.complete(new)  # the new run still works


def test_fence_run_superseded_by_guidance(store):
    item = store.linear()
    c = store.claim()
    services.work_item_guide(item_id=item.pk, guidance="try harder", action_id=c.action.pk, revision=1, now=store.now())
    _assert_stale_everywhere(store, c, ["finished"])


def test_fence_run_superseded_by_contract_change(store):
    item = store.linear()
    c = store.claim()
    services.work_item_update(item_id=item.pk, patch={"goal": "new goal"}, now=store.now())
    _assert_stale_everywhere(store, c, ["finished"])


def test_fence_cancelled_item(store):
    item = store.linear()
    c = store.claim()
    services.work_item_cancel(item_id=item.pk, now=store.now())
    _assert_stale_everywhere(store, c, ["cancelled"])


def test_fence_expired_lease(store, clock):
    store.linear()
    c = store.claim(lease_ms=1000)
    clock.tick(1000)
    _assert_stale_everywhere(store, c, ["expired"])
    # interrupt does not need a live lease
    assert services.run_interrupt(**_args(c), now=store.now()) is True


def test_fence_sibling_of_graph_item_in_needs_attention(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca, cb = store.claim(), store.claim()
    store.submit(ca, {"outcome": "failed", "error": "nope"})
    assert store.item(item.pk).status == "needs_attention"
    _assert_stale_everywhere(store, cb, ["finished"])


def test_fence_sibling_reset_by_review_changes_request(store):
    item = make_graph(store, [
        {"id": "impl", "type": "implement"},
        {"id": "side"},
        {"id": "rev", "type": "review", "deps": ["impl"], "return_to": "impl"},
    ])
    WorkItem.objects.filter(pk=item.pk).update(workflow_snapshot={"execution_mode": "graph", "stages": [
        {"id": "impl", "type": "implement"}, {"id": "side", "type": "research"},
        {"id": "rev", "type": "review", "depends_on_stage_ids": ["impl"], "changes_requested_stage_id": "impl"}]})
    ci = store.claim()
    store.complete(ci)
    cs = store.claim()
    cr = store.claim()
    assert (cs.action.stage_id, cr.action.stage_id) == ("side", "rev")
    store.complete(cr, review_decision="changes_requested")
    _assert_stale_everywhere(store, cs, ["finished"])


def test_fence_unknown_run(store):
    with pytest.raises(StaleRun) as exc:
        services.run_submit(run_id="nope", owner_boot_id="b", lease_epoch=1, result=completed(), now=store.now())
    assert "stale" in str(exc.value) and "finished" in str(exc.value)
    assert services.run_interrupt(run_id="nope", owner_boot_id="b", lease_epoch=1, now=store.now()) is False


# --- progress, renewal, snapshots --------------------------------------------------------------

def test_run_progress_overwrites_fields(store):
    store.linear()
    c = store.claim()
    run = services.run_progress(**_args(c), progress={"response": "x" * 70000, "tool_count": 3, "loop_count": -4,
                                                      "checkpoint": {"tool_events": [{"name": "ls"}]}}, now=store.now())
    assert len(run.response) == 65536 and run.tool_count == 3 and run.loop_count == 0
    assert run.checkpoint == {"version": 1, "tool_events": [{"name": "ls", "status": "completed"}]}
    assert run.progress_revision == 2
    run = services.run_progress(**_args(c), progress={"tool_count": 1}, now=store.now())
    stored = Run.objects.get(pk=c.run.pk)
    assert stored.tool_count == 1 and stored.response == "" and stored.progress_revision == 3


def test_run_renew_moves_expiry(store, clock):
    store.linear()
    c = store.claim(lease_ms=1000)
    clock.tick(500)
    run = services.run_renew(**_args(c), lease_ms=5000, now=clock())
    assert run.expires_at == clock() + timedelta(milliseconds=5000)
    assert Run.objects.get(pk=c.run.pk).expires_at == run.expires_at


def test_run_set_snapshots_only_once(store):
    store.linear()
    c = store.claim()
    snaps = {"vp_snapshot": {"id": "vp1"}, "role_snapshot": {"id": "r"}, "model_snapshot": {}, "tool_policy_snapshot": {}}
    assert services.run_set_snapshots(**_args(c), snapshots=snaps, now=store.now()) is True
    assert services.run_set_snapshots(**_args(c), snapshots=snaps, now=store.now()) is False
    assert Run.objects.get(pk=c.run.pk).vp_snapshot == {"id": "vp1"}


# --- submission: normalisation errors raise and change nothing ---------------------------------

@pytest.mark.parametrize("result,words", [
    ({"outcome": "done"}, ["Invalid", "outcome"]),
    ({"outcome": "waiting"}, ["waiting outcome requires waitingReason"]),
    ({"outcome": "completed", "contract_patch": {"acceptance_criteria": "x"}}, ["acceptance_criteria"]),
])
def test_run_submit_hard_errors_change_nothing(store, result, words):
    item = store.linear()
    c = store.claim()
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidInput) as exc:
        store.submit(c, result)
    assert all(w in str(exc.value) for w in words)
    assert item_snapshot(item.pk) == before
    assert Run.objects.get(pk=c.run.pk).status == "running"


@pytest.mark.parametrize("stage,result,error", [
    ("triage", {"outcome": "completed", "summary": "s", "evidence": [], "acceptance_checks": checks_for(["c1"])},
     "concrete evidence"),
    ("triage", {"outcome": "completed", "evidence": ["e"], "acceptance_checks": []}, "every acceptance criterion"),
    ("implement", {"outcome": "completed", "evidence": ["e"], "contract_patch": {"goal": "g"},
                   "acceptance_checks": checks_for(["c1"])}, "Only triage may submit"),
    ("review", {"outcome": "completed", "evidence": ["e"], "acceptance_checks": checks_for(["c1"])}, "requires approved"),
    ("review", {"outcome": "completed", "evidence": ["e"], "review_decision": "approved",
                "acceptance_checks": checks_for(["c1"], "deferred")}, "requires every acceptance check to pass"),
    ("deliver", {"outcome": "completed", "evidence": ["e"], "acceptance_checks": checks_for(["c1"], "not_applicable")},
     "requires every acceptance check to pass"),
])
def test_run_submit_validation_downgrades_to_failed(store, stage, result, error):
    item = store.linear(criteria=["c1"])
    for s in ["triage", "implement", "review", "deliver"]:
        c = store.claim()
        if s == stage:
            break
        store.complete(c, review_decision="approved")
    run, action, item = store.submit(c, result)
    assert run.status == "failed" and error in run.error
    assert action.status == "failed"
    assert store.item(item.pk).status == "needs_attention"
    ev = Event.objects.filter(work_item=item).order_by("-id").first()
    assert ev.type == "action.failed" and error in ev.data["error"]


def test_run_submit_review_changes_request_may_defer(store):
    store.linear(criteria=["c1"])
    for _stage in ["triage", "implement"]:
        store.complete(store.claim())
    c = store.claim()
    run, _, _ = store.submit(c, completed(["c1"], review_decision="changes_requested",
                                          acceptance_checks=checks_for(["c1"], "deferred")))
    assert run.status == "completed"


# --- linear outcome table (DOMAIN §7.4) --------------------------------------------------------

def test_linear_waiting(store):
    item = store.linear()
    c = store.claim()
    run, action, item = store.submit(c, {"outcome": "waiting", "waiting_reason": "which db?"})
    assert (run.status, action.status, store.item(item.pk).status) == ("waiting", "completed", "waiting")
    assert store.item(item.pk).current_action_id == action.pk and store.item(item.pk).current_run_id is None
    assert Event.objects.filter(work_item=item).last().data == {"reason": "which db?"}


def test_linear_retryable_then_exhausted(store):
    item = store.linear()
    c = store.claim()
    _, action, _ = store.submit(c, {"outcome": "retryable", "error": "flaky"})
    assert action.status == "ready" and store.item(item.pk).status == "ready"
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "action.retry_scheduled" and ev.data == {"attempt": 1, "max_attempts": 2, "error": "flaky"}
    c = store.claim()
    assert c.action.pk == action.pk and c.action.attempt == 2
    _, action, _ = store.submit(c, {"outcome": "retryable", "error": "flaky"})
    assert action.status == "failed" and store.item(item.pk).status == "needs_attention"
    assert Event.objects.filter(work_item=item).last().type == "action.retry_exhausted"
    assert Action.objects.get(pk=action.pk).attempt <= Action.objects.get(pk=action.pk).max_attempts


def test_linear_failed(store):
    item = store.linear()
    _, action, _ = store.submit(store.claim(), {"outcome": "failed", "error": "bad"})
    assert action.status == "failed" and store.item(item.pk).status == "needs_attention"
    assert Event.objects.filter(work_item=item).last().data == {"error": "bad"}


def test_linear_completed_chain_with_review_changes_request(store):
    item = store.linear(criteria=["c1"])
    store.complete(store.claim())                       # triage
    impl = store.claim()
    store.complete(impl)                                # implement
    rev = store.claim()
    assert rev.action.type == "review"
    _, _, _ = store.submit(rev, completed(["c1"], review_decision="changes_requested",
                                          acceptance_checks=checks_for(["c1"], "deferred")))
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "action.completed" and ev.data == {"next_action_type": "implement", "review_decision": "changes_requested"}
    again = store.claim()
    assert again.action.type == "implement" and again.action.pk != impl.action.pk
    assert again.action.sequence == 4
    # context carries the review's entry
    assert again.action.context[-1]["type"] == "review" and again.action.context[-1]["review_decision"] == "changes_requested"
    store.complete(again)
    store.complete(store.claim(), review_decision="approved")
    last = store.claim()
    assert last.action.type == "deliver"
    store.complete(last)
    item = store.item(item.pk)
    assert item.status == "done" and item.current_action_id is None
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "work_item.completed" and ev.data == {"summary": "done"}
    assert Action.objects.filter(work_item=item, status="completed").count() == 6


def test_linear_next_action_context_and_revision(store):
    item = store.linear()
    triage = store.claim()
    store.complete(triage, contract_patch={"goal": "sharper goal", "acceptance_criteria": ["a", " ", "b"]},
                   acceptance_checks=checks_for(["a", "b"]))
    item = store.item(item.pk)
    assert item.goal == "sharper goal" and item.acceptance_criteria == ["a", "b"] and item.revision == 2
    nxt = Action.objects.get(pk=item.current_action_id)
    assert nxt.contract_revision == 2 and nxt.type == "implement"
    assert nxt.context[-1]["type"] == "triage" and nxt.context[-1]["summary"] == "done"
    assert "sharper goal" in nxt.instruction


# --- planning triage (DOMAIN §4.4, §7.4 graph) ---------------------------------------------------

def test_planned_triage_inserts_generated_actions(store):
    item = store.planned([{"id": "a", "type": "research", "objective": "o"},
                          {"id": "b", "type": "write", "objective": "o"}])
    acts = store.actions(item.pk)
    assert [a.effective_stage_id for a in acts] == ["triage", "a", "b"]
    assert [a.sequence for a in acts] == [1, 2, 3]
    assert acts[2].depends_on_stage_ids == ["a"]
    assert item.workflow_snapshot["execution_mode"] == "graph" and item.workflow_template == "ai-planned"
    assert item.status == "ready" and item.current_action_id == acts[1].pk
    ev = Event.objects.filter(work_item=item, type="action.completed").first()
    assert ev.data == {"next_action_count": 2, "review_decision": None}
    assert acts[1].context[-1]["type"] == "triage"


@pytest.mark.parametrize("plan,words", [
    (None, "structured plan"),
    ({"actions": []}, "specific workItemType"),
    ({"work_item_type": "analysis", "actions": []}, "between 1 and 8"),
    ({"work_item_type": "analysis", "actions": [{"id": "a"}]}, "requires an objective"),
    ({"work_item_type": "analysis", "actions": [{"type": "triage", "objective": "o"}]}, "cannot add another triage"),
    ({"work_item_type": "analysis", "actions": [{"objective": "o", "depends_on_action_ids": ["zz"]}]},
     "missing, self, or future dependency"),
    ({"work_item_type": "other", "actions": [{"objective": "o"}]}, "keep the selected workItemType"),
])
def test_planned_triage_invalid_plan_fails_the_run(store, plan, words):
    item = store.create(work_item_type="analysis")
    c = store.claim()
    run, action, _ = store.submit(c, completed([], plan=plan))
    item = store.item(item.pk)
    assert run.status == "failed" and words in run.error
    assert item.status == "needs_attention" and item.current_action_id == action.pk
    assert item.workflow_snapshot["planning_mode"] == "ai" and len(item.workflow_snapshot["stages"]) == 1


def test_planned_triage_template_reuse_continues_linear(store):
    item = store.create()
    c = store.claim()
    store.submit(c, completed([], plan={"work_item_type": "software-change", "actions": [{"objective": "ignored"}]}))
    item = store.item(item.pk)
    assert item.execution_mode == "linear"
    assert [s["id"] for s in item.workflow_snapshot["stages"]] == ["triage", "implement", "review", "deliver"]
    nxt = store.claim()
    assert nxt.action.type == "implement"


# --- finalize atomicity (fault hook) -------------------------------------------------------------

@pytest.mark.parametrize("point", ["after_run_update", "before_event"])
def test_run_submit_fault_commits_nothing(store, point):
    item = store.planned([{"id": "a", "objective": "o"}, {"id": "b", "objective": "o"}])
    c = store.claim()
    before = item_snapshot(item.pk)
    with inject_fault(point), pytest.raises(RuntimeError):
        store.complete(c)
    assert item_snapshot(item.pk) == before


def test_run_interrupt_fault_commits_nothing(store):
    item = store.linear()
    c = store.claim()
    before = item_snapshot(item.pk)
    with inject_fault("after_interrupt_run_update"), pytest.raises(RuntimeError):
        services.run_interrupt(**_args(c), final_progress={"response": "partial", "tool_count": 9}, now=store.now())
    assert item_snapshot(item.pk) == before


# --- interruption (DOMAIN §9.1) -----------------------------------------------------------------

def test_run_interrupt_retryable_linear(store):
    item = store.linear()
    c = store.claim()
    assert services.run_interrupt(**_args(c), reason="stop", final_progress={"response": "half", "tool_count": 2},
                                  now=store.now()) is True
    run = Run.objects.get(pk=c.run.pk)
    assert (run.status, run.error, run.response, run.tool_count, run.progress_revision) == ("interrupted", "stop", "half", 2, 2)
    item = store.item(item.pk)
    assert (item.status, item.current_run_id, item.current_action_id) == ("ready", None, c.action.pk)
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "run.interrupted" and ev.data == {"retryable": True, "reason": "stop"}


def test_run_interrupt_not_retryable_when_attempts_used(store):
    item = store.linear()
    Action.objects.filter(work_item=item).update(max_attempts=1)
    c = store.claim()
    services.run_interrupt(**_args(c), now=store.now())
    assert Action.objects.get(pk=c.action.pk).status == "failed"
    assert store.item(item.pk).status == "needs_attention"


def test_run_interrupt_deliver_is_never_retryable(store):
    item = make_graph(store, [{"id": "d", "type": "deliver", "max_attempts": 5}])
    c = store.claim()
    services.run_interrupt(**_args(c), now=store.now())
    assert Action.objects.get(pk=c.action.pk).status == "failed"
    assert store.item(item.pk).status == "needs_attention"


def test_run_interrupt_two_parallel_graph_actions(store):
    # DEV-7: interrupting both running siblings persists both
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca, cb = store.claim(), store.claim()
    assert services.run_interrupt(**_args(ca), now=store.now()) is True
    assert store.item(item.pk).status == "running"
    assert services.run_interrupt(**_args(cb), now=store.now()) is True
    item = store.item(item.pk)
    assert item.status == "ready" and item.current_action_id == ca.action.pk


# --- graph outcomes (DOMAIN §7.4 graph, DEV-4) ---------------------------------------------------

def test_graph_waiting_blocks_item_and_siblings_can_finish(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a"]}])
    ca, cb = store.claim(), store.claim()
    _, action, _ = store.submit(ca, {"outcome": "waiting", "waiting_reason": "need input"})
    assert action.status == "waiting"
    assert store.item(item.pk).status == "waiting"
    # the running sibling may still finish (finalize guard accepts waiting)
    store.complete(cb)
    assert store.item(item.pk).status == "waiting"
    assert store.claim() is None
    # retry with an answer resets that stage in place
    services.work_item_retry(item_id=item.pk, answer="use postgres", now=store.now())
    a = Action.objects.get(pk=ca.action.pk)
    assert a.status == "ready" and a.context[-1]["answer"] == "use postgres"
    assert a.context[-1]["waiting_reason"] == "need input"


def test_graph_failed_first_among_blocked_wins(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca, cb = store.claim(), store.claim()
    store.submit(cb, {"outcome": "waiting", "waiting_reason": "?"})
    assert store.item(item.pk).status == "waiting"
    # a is still running; item is waiting; a fails -> a is first by sequence -> needs_attention
    store.submit(ca, {"outcome": "failed", "error": "x"})
    item = store.item(item.pk)
    assert item.status == "needs_attention" and item.current_action_id == ca.action.pk


def test_graph_last_completion_is_done_with_action_completed_event(store):
    item = make_graph(store, [{"id": "a"}])
    store.complete(store.claim())
    item = store.item(item.pk)
    assert item.status == "done" and item.current_action_id is None
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "action.completed" and ev.data == {"next_action_count": 0, "review_decision": None}


def test_finalize_guard_follows_mode_at_claim_time(store):
    # DEV-6: a triage claimed under a graph snapshot that picks a linear template still finalizes
    item = store.create()
    snap = dict(store.item(item.pk).workflow_snapshot, execution_mode="graph")
    WorkItem.objects.filter(pk=item.pk).update(workflow_snapshot=snap)
    c = store.claim()
    assert store.item(item.pk).current_run_id is None  # graph-mode claim
    store.submit(c, completed([], plan={"work_item_type": "software-change"}))
    item = store.item(item.pk)
    assert item.execution_mode == "linear" and item.status == "ready"
    nxt = store.claim()
    assert nxt.action.type == "implement"
    assert store.item(item.pk).current_run_id == nxt.run.pk


def test_run_progress_counter_overflow_is_stored_as_zero(store):
    store.linear()
    c = store.claim()
    services.run_progress(**_args(c), progress={"loop_count": 10**20, "tool_count": 1e300,
                                                      "input_tokens": "1e300", "output_tokens": 7}, now=store.now())
    stored = Run.objects.get(pk=c.run.pk)
    assert (stored.loop_count, stored.tool_count, stored.input_tokens, stored.output_tokens) == (0, 0, 0, 7)
