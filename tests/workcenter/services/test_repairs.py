"""Admin repairs (DOMAIN §11.3): release a run, reset / fail / edit an action, with a required reason."""
from datetime import timedelta

import pytest

from tests.conftest import completed, item_snapshot, make_graph
from workcenter import events, services
from workcenter.errors import InvalidInput, InvalidState, NotFound, ReservationActive, StaleRun
from workcenter.models import Action, Event, Run

ADMIN = "admin:alice"


def _fence(c):
    return dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)


def _last_event(item_id):
    return Event.objects.filter(work_item_id=item_id).order_by("-id").first()


def _assert_old_worker_fenced_out(store, c):
    """The old worker's renew, progress and submit all fail stale and change nothing."""
    before = item_snapshot(c.work_item.pk)
    assert services.run_renew(**_fence(c), now=store.now()) is None
    assert services.run_progress(**_fence(c), progress={"response": "late"}, now=store.now()) is None
    assert services.run_interrupt(**_fence(c), now=store.now()) is False
    with pytest.raises(StaleRun) as exc:
        store.complete(c)
    assert "stale" in str(exc.value)
    assert item_snapshot(c.work_item.pk) == before


def _reserved(store, reservation_ms=60_000):
    """A graph item whose integrate action holds a live integration reservation (DOMAIN §10.2)."""
    item = make_graph(store, [{"id": "w", "mode": "isolated-write"},
                              {"id": "i", "type": "integrate", "mode": "integrate", "deps": ["w"]}])
    store.complete(store.claim())
    c = store.claim()
    assert services.integration_set_workspace(
        action_id=c.action.pk, workspace={"path": "/tmp/x", "integration": {"status": "prepared"}},
        now=store.now(), **_fence(c)) is not None
    res = services.integration_acquire(action_id=c.action.pk, reservation_ms=reservation_ms, now=store.now(), **_fence(c))
    assert res is not None
    return item, c, res


# --- run_release ---------------------------------------------------------------------------------

def test_run_release_linear_interrupts_now_and_fences_old_worker(store):
    # given a linear item whose run still holds a live lease
    item = store.linear()
    c = store.claim()
    # when an admin releases it
    run = services.run_release(run_id=c.run.pk, reason="worker host died", actor=ADMIN, now=store.now())
    # then the run is interrupted now and the action is claimable again
    assert run.status == "interrupted" and run.ended_at is not None
    assert "worker host died" in run.error and ADMIN in run.error
    action = Action.objects.get(pk=c.action.pk)
    assert (action.status, action.current_run_id, action.claimable) == ("ready", None, True)
    it = store.item(item.pk)
    assert (it.status, it.current_action_id, it.current_run_id) == ("ready", c.action.pk, None)
    ev = _last_event(item.pk)
    assert (ev.type, ev.actor, ev.action_id, ev.run_id) == ("run.released", ADMIN, c.action.pk, c.run.pk)
    assert ev.data == {"retryable": True, "reason": "worker host died"}
    _assert_old_worker_fenced_out(store, c)
    again = store.claim()
    assert again.action.pk == c.action.pk and again.run.lease_epoch == c.run.lease_epoch + 1


def test_run_release_ignores_expiry(store, clock):
    store.linear()
    c = store.claim(lease_ms=1_000)
    clock.tick(5_000)
    run = services.run_release(run_id=c.run.pk, reason="expired and stuck", actor=ADMIN, now=store.now())
    assert run.status == "interrupted"


def test_run_release_not_retryable_fails_the_action(store):
    item = make_graph(store, [{"id": "a", "max_attempts": 1}, {"id": "b"}])
    ca = store.claim_item(item.pk, stage="a")
    services.run_release(run_id=ca.run.pk, reason="stuck", actor=ADMIN, now=store.now())
    assert Action.objects.get(pk=ca.action.pk).status == "failed"
    assert store.item(item.pk).status == "needs_attention"
    assert _last_event(item.pk).data == {"retryable": False, "reason": "stuck"}


def test_run_release_graph_refreshes_with_a_sibling_running(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca = store.claim()
    cb = store.claim()
    assert {ca.action.effective_stage_id, cb.action.effective_stage_id} == {"a", "b"}
    services.run_release(run_id=ca.run.pk, reason="stuck", actor=ADMIN, now=store.now())
    it = store.item(item.pk)
    assert it.status == "running" and it.current_run_id is None
    assert Run.objects.get(pk=cb.run.pk).status == "running"
    store.complete(cb)  # the sibling still owns its lease


def test_run_release_refuses_a_finished_run(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "failed", "error": "boom"})
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState) as exc:
        services.run_release(run_id=c.run.pk, reason="r", actor=ADMIN, now=store.now())
    assert "failed" in str(exc.value) and "not running" in str(exc.value)
    assert item_snapshot(item.pk) == before


def test_run_release_refuses_a_run_that_lost_its_action(store):
    # given a graph item flagged needs_attention while a sibling still runs (DOMAIN §7.6)
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca = store.claim_item(item.pk, stage="a")
    cb = store.claim_item(item.pk, stage="b")
    store.submit(ca, {"outcome": "failed", "error": "boom"})
    assert store.item(item.pk).status == "needs_attention"
    before = item_snapshot(item.pk)
    # when the orphan sibling is released, then it is refused with a pointer to the action repairs
    with pytest.raises(InvalidState) as exc:
        services.run_release(run_id=cb.run.pk, reason="r", actor=ADMIN, now=store.now())
    assert "reset or mark its Action failed" in str(exc.value)
    assert item_snapshot(item.pk) == before


def test_run_release_unknown_run(store):
    with pytest.raises(NotFound):
        services.run_release(run_id="no-such-run", reason="r", actor=ADMIN, now=store.now())


def test_run_release_refused_while_reservation_live_then_allowed(store, clock):
    item, c, res = _reserved(store)
    before = item_snapshot(item.pk)
    with pytest.raises(ReservationActive) as exc:
        services.run_release(run_id=c.run.pk, reason="stuck", actor=ADMIN, now=store.now())
    assert "integration finalization currently owns" in str(exc.value)
    assert item_snapshot(item.pk) == before
    clock.t = res.expires_at + timedelta(milliseconds=1)
    assert services.run_release(run_id=c.run.pk, reason="stuck", actor=ADMIN, now=store.now()).status == "interrupted"


# --- action_reset --------------------------------------------------------------------------------

def test_action_reset_linear_failed_becomes_current_and_ready(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "failed", "error": "boom"})
    assert store.item(item.pk).status == "needs_attention"
    action = services.action_reset(action_id=c.action.pk, reason="flaky network", actor=ADMIN, now=store.now())
    assert (action.status, action.attempt, action.lease_epoch) == ("ready", 0, c.run.lease_epoch)
    it = store.item(item.pk)
    assert (it.status, it.current_action_id, it.current_run_id) == ("ready", c.action.pk, None)
    assert Action.objects.get(pk=c.action.pk).claimable is True
    ev = _last_event(item.pk)
    assert (ev.type, ev.actor, ev.action_id, ev.run_id) == ("action.reset", ADMIN, c.action.pk, None)
    assert ev.data == {"reason": "flaky network", "previous_status": "failed"}
    again = store.claim()
    assert again.action.pk == c.action.pk and again.action.attempt == 1


def test_action_reset_linear_running_supersedes_run_and_bumps_epoch(store):
    item = store.linear()
    c = store.claim()
    services.action_reset(action_id=c.action.pk, reason="stuck for hours", actor=ADMIN, now=store.now())
    run = Run.objects.get(pk=c.run.pk)
    assert run.status == "superseded" and "stuck for hours" in run.error
    action = Action.objects.get(pk=c.action.pk)
    assert (action.status, action.current_run_id, action.lease_epoch, action.attempt) == \
        ("ready", None, c.run.lease_epoch + 1, 0)
    it = store.item(item.pk)
    assert (it.status, it.current_action_id, it.current_run_id) == ("ready", c.action.pk, None)
    assert _last_event(item.pk).data == {"reason": "stuck for hours", "previous_status": "running"}
    _assert_old_worker_fenced_out(store, c)
    again = store.claim()
    assert again.action.pk == c.action.pk and again.run.lease_epoch == c.run.lease_epoch + 2


def test_action_reset_graph_waiting_refreshes_item(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    c = store.claim()
    store.submit(c, {"outcome": "waiting", "waiting_reason": "which db?"})
    assert store.item(item.pk).status == "waiting"
    services.action_reset(action_id=c.action.pk, reason="answer given on chat", actor=ADMIN, now=store.now())
    it = store.item(item.pk)
    assert (it.status, it.current_action_id) == ("ready", c.action.pk)
    assert _last_event(item.pk).data["previous_status"] == "waiting"
    assert store.claim().action.pk == c.action.pk


def test_action_reset_graph_failed_with_sibling_running(store):
    item = make_graph(store, [{"id": "a", "max_attempts": 1}, {"id": "b"}])
    ca = store.claim_item(item.pk, stage="a")
    cb = store.claim_item(item.pk, stage="b")
    store.submit(ca, {"outcome": "retryable", "error": "flaky"})  # exhausted: attempt 1 of 1
    assert Action.objects.get(pk=ca.action.pk).status == "failed"
    assert store.item(item.pk).status == "needs_attention"
    services.action_reset(action_id=ca.action.pk, reason="retry once more", actor=ADMIN, now=store.now())
    it = store.item(item.pk)
    assert it.status == "running" and it.current_run_id is None
    again = store.claim()
    assert again.action.pk == ca.action.pk and again.action.attempt == 1  # within max_attempts (invariant 14)
    store.complete(cb)  # the sibling's lease is untouched


def test_action_reset_graph_running_fences_old_worker(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    c = store.claim()
    services.action_reset(action_id=c.action.pk, reason="stuck", actor=ADMIN, now=store.now())
    assert store.item(item.pk).status == "ready"
    assert Action.objects.get(pk=c.action.pk).lease_epoch == c.run.lease_epoch + 1
    _assert_old_worker_fenced_out(store, c)


@pytest.mark.parametrize("status", ["ready", "completed", "superseded", "cancelled"])
def test_action_reset_refuses_other_statuses(store, status):
    item = make_graph(store, [{"id": "a", "status": status}, {"id": "b"}])
    a = store.by_stage(item.pk)["a"]
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState) as exc:
        services.action_reset(action_id=a.pk, reason="r", actor=ADMIN, now=store.now())
    assert f"Action in {status} cannot be reset" in str(exc.value)
    assert item_snapshot(item.pk) == before


def test_action_reset_refuses_a_cancelled_item(store):
    item = make_graph(store, [{"id": "a", "status": "failed"}], status="needs_attention")
    services.work_item_cancel(item_id=item.pk, now=store.now())
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState) as exc:
        services.action_reset(action_id=store.by_stage(item.pk)["a"].pk, reason="r", actor=ADMIN, now=store.now())
    assert "cancelled" in str(exc.value)
    assert item_snapshot(item.pk) == before


def test_action_reset_refuses_a_non_current_linear_action(store):
    # given a linear item retried after a failure: the failed action is no longer current
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "failed", "error": "boom"})
    services.work_item_retry(item_id=item.pk, now=store.now())
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState) as exc:
        services.action_reset(action_id=c.action.pk, reason="r", actor=ADMIN, now=store.now())
    assert "not the current Action" in str(exc.value)
    assert item_snapshot(item.pk) == before


def test_action_reset_and_mark_failed_refused_while_reservation_live(store):
    item, c, _ = _reserved(store)
    before = item_snapshot(item.pk)
    for fn in (services.action_reset, services.action_mark_failed):
        with pytest.raises(ReservationActive):
            fn(action_id=c.action.pk, reason="r", actor=ADMIN, now=store.now())
    with pytest.raises(ReservationActive):
        services.action_edit(action_id=c.action.pk, reason="r", actor=ADMIN, max_attempts=4, now=store.now())
    assert item_snapshot(item.pk) == before


# --- action_mark_failed --------------------------------------------------------------------------

def test_action_mark_failed_linear_ready_needs_attention_then_retry(store):
    item = store.linear()
    action_id = store.item(item.pk).current_action_id
    action = services.action_mark_failed(action_id=action_id, reason="wrong approach", actor=ADMIN, now=store.now())
    assert action.status == "failed"
    it = store.item(item.pk)
    assert (it.status, it.current_action_id) == ("needs_attention", action_id)
    assert Action.objects.get(pk=action_id).claimable is False
    assert store.claim() is None
    ev = _last_event(item.pk)
    assert (ev.type, ev.actor, ev.action_id) == ("action.marked_failed", ADMIN, action_id)
    assert ev.data == {"reason": "wrong approach", "previous_status": "ready"}
    services.work_item_retry(item_id=item.pk, now=store.now())  # the lead's retry works from here
    assert store.item(item.pk).status == "ready"


def test_action_mark_failed_linear_running_supersedes_and_fences(store):
    item = store.linear()
    c = store.claim()
    services.action_mark_failed(action_id=c.action.pk, reason="runaway", actor=ADMIN, now=store.now())
    assert Run.objects.get(pk=c.run.pk).status == "superseded"
    action = Action.objects.get(pk=c.action.pk)
    assert (action.status, action.lease_epoch, action.current_run_id) == ("failed", c.run.lease_epoch + 1, None)
    it = store.item(item.pk)
    assert (it.status, it.current_run_id) == ("needs_attention", None)
    assert _last_event(item.pk).data["previous_status"] == "running"
    _assert_old_worker_fenced_out(store, c)


@pytest.mark.parametrize("previous", ["ready", "running", "waiting"])
def test_action_mark_failed_graph_each_open_status(store, previous):
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}])
    a = store.by_stage(item.pk)["a"]
    if previous != "ready":
        c = store.claim()
        if previous == "waiting":
            store.submit(c, {"outcome": "waiting", "waiting_reason": "?"})
    services.action_mark_failed(action_id=a.pk, reason="bad plan", actor=ADMIN, now=store.now())
    it = store.item(item.pk)
    assert (it.status, it.current_action_id) == ("needs_attention", a.pk)
    assert Action.objects.get(pk=a.pk).status == "failed"
    assert Run.objects.filter(work_item_id=item.pk, status="running").count() == 0
    assert _last_event(item.pk).data == {"reason": "bad plan", "previous_status": previous}


@pytest.mark.parametrize("status", ["failed", "completed", "superseded"])
def test_action_mark_failed_refuses_closed_actions(store, status):
    item = make_graph(store, [{"id": "a", "status": status}, {"id": "b"}])
    a = store.by_stage(item.pk)["a"]
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState):
        services.action_mark_failed(action_id=a.pk, reason="r", actor=ADMIN, now=store.now())
    assert item_snapshot(item.pk) == before


# --- action_edit ---------------------------------------------------------------------------------

def test_action_edit_ready_action_fields(store):
    item = make_graph(store, [{"id": "a"}])
    a = store.by_stage(item.pk)["a"]
    action = services.action_edit(action_id=a.pk, reason="clarify", actor=ADMIN, instruction="do it better",
                                  brief={"objective": "Ship it"}, max_attempts=4, workspace_mode="read",
                                  now=store.now())
    stored = Action.objects.get(pk=a.pk)
    assert (stored.instruction, stored.max_attempts, stored.workspace_mode) == ("do it better", 4, "read")
    assert stored.brief["objective"] == "Ship it" and stored.brief["approach"] and stored.brief["expected_outcome"]
    assert stored.status == "ready" and stored.lease_epoch == a.lease_epoch and action.updated_at > a.updated_at
    ev = _last_event(item.pk)
    assert (ev.type, ev.actor, ev.action_id) == ("action.edited", ADMIN, a.pk)
    assert ev.data == {"reason": "clarify", "changed_fields": ["instruction", "brief", "max_attempts", "workspace_mode"]}


def test_action_edit_brief_merges_over_current(store):
    item = make_graph(store, [{"id": "a"}])
    a = store.by_stage(item.pk)["a"]
    services.action_edit(action_id=a.pk, reason="r", actor=ADMIN,
                         brief={"objective": "O", "approach": "A", "expected_outcome": "E"}, now=store.now())
    services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, brief={"approach": "A2"}, now=store.now())
    assert Action.objects.get(pk=a.pk).brief == {"objective": "O", "approach": "A2", "expected_outcome": "E"}
    assert _last_event(item.pk).data["changed_fields"] == ["brief"]


def test_action_edit_lists_only_changed_fields(store):
    item = make_graph(store, [{"id": "a"}])
    a = store.by_stage(item.pk)["a"]
    services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, instruction=a.instruction, max_attempts=3,
                         workspace_mode=a.workspace_mode, now=store.now())
    assert _last_event(item.pk).data["changed_fields"] == ["max_attempts"]


def test_action_edit_running_loses_its_run_and_next_claim_sees_edit(store):
    item = store.linear()
    c = store.claim()
    services.action_edit(action_id=c.action.pk, reason="wrong instruction", actor=ADMIN,
                         instruction="the fixed instruction", now=store.now())
    assert Run.objects.get(pk=c.run.pk).status == "superseded"
    action = Action.objects.get(pk=c.action.pk)
    assert (action.status, action.lease_epoch, action.attempt) == ("ready", c.run.lease_epoch + 1, 0)
    assert (store.item(item.pk).status, store.item(item.pk).current_run_id) == ("ready", None)
    _assert_old_worker_fenced_out(store, c)
    again = store.claim()
    assert again.action.pk == c.action.pk and again.action.instruction == "the fixed instruction"
    store.complete(again)


def test_action_edit_failed_action_keeps_status(store):
    item = make_graph(store, [{"id": "a", "status": "failed"}], status="needs_attention")
    a = store.by_stage(item.pk)["a"]
    services.action_edit(action_id=a.pk, reason="more room", actor=ADMIN, max_attempts=5, now=store.now())
    stored = Action.objects.get(pk=a.pk)
    assert (stored.status, stored.max_attempts) == ("failed", 5)
    assert store.item(item.pk).status == "needs_attention"


def test_action_edit_no_change_is_refused(store):
    item = make_graph(store, [{"id": "a"}])
    a = store.by_stage(item.pk)["a"]
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidInput) as exc:
        services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, instruction=a.instruction,
                             max_attempts=a.max_attempts, now=store.now())
    assert "no change" in str(exc.value)
    with pytest.raises(InvalidInput) as exc:
        services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, now=store.now())
    assert "nothing to edit" in str(exc.value)
    assert item_snapshot(item.pk) == before


@pytest.mark.parametrize("field,value", [
    ("max_attempts", 0), ("max_attempts", -1), ("max_attempts", True), ("max_attempts", "3"), ("max_attempts", 2.0),
    ("max_attempts", 101),
    ("workspace_mode", "bogus"), ("workspace_mode", ""), ("workspace_mode", 3),
    ("brief", "objective"), ("brief", {"goal": "x"}), ("brief", {"objective": 5}),
    ("brief", {"objective": "x" * 2001}), ("brief", {"objective": "a\x00b"}),
    ("instruction", ""), ("instruction", "   "), ("instruction", 42), ("instruction", "a\x00b"),
])
def test_action_edit_bad_values(store, field, value):
    item = make_graph(store, [{"id": "a"}])
    a = store.by_stage(item.pk)["a"]
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidInput) as exc:
        services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, now=store.now(), **{field: value})
    assert exc.value.extra["errors"][0]["field"] == field
    assert item_snapshot(item.pk) == before


def test_action_edit_max_attempts_below_attempts_made(store):
    item = make_graph(store, [{"id": "a", "max_attempts": 3}, {"id": "b", "deps": ["a"]}])
    c = store.claim()
    store.submit(c, {"outcome": "retryable", "error": "flaky"})  # ready again with attempt 1
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidInput) as exc:
        services.action_edit(action_id=c.action.pk, reason="r", actor=ADMIN, max_attempts=1, now=store.now())
    assert "greater than the 1 attempt" in str(exc.value)
    assert item_snapshot(item.pk) == before
    services.action_edit(action_id=c.action.pk, reason="r", actor=ADMIN, max_attempts=2, now=store.now())
    assert Action.objects.get(pk=c.action.pk).max_attempts == 2


@pytest.mark.parametrize("status", ["completed", "superseded", "cancelled"])
def test_action_edit_refuses_closed_actions(store, status):
    item = make_graph(store, [{"id": "a", "status": status}, {"id": "b"}])
    a = store.by_stage(item.pk)["a"]
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidState) as exc:
        services.action_edit(action_id=a.pk, reason="r", actor=ADMIN, max_attempts=3, now=store.now())
    assert "cannot be edited" in str(exc.value)
    assert item_snapshot(item.pk) == before


# --- reason, actor and ids -----------------------------------------------------------------------

@pytest.mark.parametrize("reason", [None, "", "   ", 7, "x" * 2001, "bad\x00text"])
@pytest.mark.parametrize("repair", ["release", "reset", "fail", "edit"])
def test_repairs_require_a_valid_reason(store, reason, repair):
    item = store.linear()
    c = store.claim()
    before = item_snapshot(item.pk)
    calls = {
        "release": lambda: services.run_release(run_id=c.run.pk, reason=reason, actor=ADMIN, now=store.now()),
        "reset": lambda: services.action_reset(action_id=c.action.pk, reason=reason, actor=ADMIN, now=store.now()),
        "fail": lambda: services.action_mark_failed(action_id=c.action.pk, reason=reason, actor=ADMIN, now=store.now()),
        "edit": lambda: services.action_edit(action_id=c.action.pk, reason=reason, actor=ADMIN, max_attempts=5,
                                             now=store.now()),
    }
    with pytest.raises(InvalidInput) as exc:
        calls[repair]()
    assert exc.value.extra["errors"][0]["field"] == "reason"
    assert item_snapshot(item.pk) == before


def test_reason_of_exactly_2000_characters_is_kept_trimmed(store):
    item = store.linear()
    c = store.claim()
    reason = "r" * 2000
    services.action_reset(action_id=c.action.pk, reason=f"  {reason}\n", actor=ADMIN, now=store.now())
    assert _last_event(item.pk).data["reason"] == reason


def test_repairs_require_actor_and_known_ids(store):
    item = store.linear()
    action_id = store.item(item.pk).current_action_id
    with pytest.raises(InvalidInput) as exc:
        services.action_reset(action_id=action_id, reason="r", actor="", now=store.now())
    assert exc.value.extra["errors"][0]["field"] == "actor"
    for fn in (services.action_reset, services.action_mark_failed):
        with pytest.raises(NotFound):
            fn(action_id="missing", reason="r", actor=ADMIN, now=store.now())
    with pytest.raises(NotFound):
        services.action_edit(action_id="missing", reason="r", actor=ADMIN, max_attempts=3, now=store.now())
    with pytest.raises(InvalidInput):
        services.run_release(run_id="", reason="r", actor=ADMIN, now=store.now())


# --- publication -------------------------------------------------------------------------------

def test_repair_events_are_published_after_commit(store, django_capture_on_commit_callbacks):
    seen = []
    events.set_publisher(seen.append)
    try:
        store.linear()
        c = store.claim()
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.run_release(run_id=c.run.pk, reason="stuck", actor=ADMIN, now=store.now())
        assert seen == []  # nothing before commit
        for cb in callbacks:
            cb()
        assert [(e.type, e.actor) for e in seen] == [("run.released", ADMIN)]
        seen.clear()
        with django_capture_on_commit_callbacks(execute=True):
            services.action_mark_failed(action_id=c.action.pk, reason="give up", actor=ADMIN, now=store.now())
        assert [e.type for e in seen] == ["action.marked_failed"]
    finally:
        events.set_publisher(None)


def test_completed_flow_after_reset_reaches_done(store):
    item = store.linear()
    c = store.claim()
    services.action_reset(action_id=c.action.pk, reason="restart", actor=ADMIN, now=store.now())
    while (c := store.claim()) is not None:
        result = completed(store.item(item.pk).acceptance_criteria)
        if c.action.type == "review":
            result["review_decision"] = "approved"
        store.submit(c, result)
    assert store.item(item.pk).status == "done"
