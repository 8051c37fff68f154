"""A submission sent again with the same fence after it was applied (the worker lost the answer):
answered as applied, nothing written; a run ended any other way stays stale."""
import pytest

from tests.conftest import completed, item_snapshot, make_graph
from workcenter import services
from workcenter.errors import StaleRun
from workcenter.models import Event, Run


def _args(c):
    return dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)


def test_a_resubmitted_completion_answers_as_applied_and_writes_nothing(store):
    # given a linear item whose triage run was submitted
    item = store.linear(criteria=["works"])
    c = store.claim()
    run, action, first_item = store.complete(c)
    assert run.status == "completed"
    before = item_snapshot(item.pk)
    # when the same submission comes again with the same fence (its answer was lost)
    again = store.complete(c)
    # then the answer is the applied one, and not a row or event changed
    r, a, i = again
    assert (r.pk, r.status, r.summary) == (run.pk, "completed", run.summary)
    assert a.pk == action.pk and a.status == "completed"
    assert i.pk == item.pk and i.status == first_item.status and i.current_action_id == first_item.current_action_id
    assert item_snapshot(item.pk) == before


def test_a_resubmission_with_another_outcome_gets_the_applied_one_back(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "retryable", "error": "rate limited"})
    before = item_snapshot(item.pk)
    r, a, _ = store.submit(c, completed())
    assert r.status == "retryable" and r.error == "rate limited"
    assert a.status == "ready"
    assert item_snapshot(item.pk) == before


def test_a_resubmission_after_the_action_was_claimed_again_still_answers_applied(store):
    # given a retryable submission whose action another run holds now
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "retryable", "error": "try again"})
    c2 = store.claim()
    assert c2.action.pk == c.action.pk and c2.run.lease_epoch == c.run.lease_epoch + 1
    before = item_snapshot(item.pk)
    # when the first run's submission comes again, it is the applied one, and the new run keeps its lease
    r, _, _ = store.submit(c, {"outcome": "retryable", "error": "try again"})
    assert r.pk == c.run.pk and r.status == "retryable"
    assert item_snapshot(item.pk) == before
    store.complete(c2)


def test_a_graph_resubmission_answers_as_applied(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    c = store.claim()
    store.complete(c)
    before = item_snapshot(item.pk)
    r, a, i = store.complete(c)
    assert r.status == "completed" and a.status == "completed" and i.pk == item.pk
    assert item_snapshot(item.pk) == before


@pytest.mark.parametrize("ending", ["interrupt", "recovery", "cancel"])
def test_a_run_ended_otherwise_stays_stale(store, clock, ending):
    item = store.linear()
    c = store.claim(lease_ms=1_000)
    if ending == "interrupt":
        assert services.run_interrupt(**_args(c), now=store.now()) is True
    elif ending == "recovery":
        clock.tick(5_000)
        assert services.runs_recover(current_boot_id="boot-other", expired_only=True, now=store.now()) == 1
    else:
        services.work_item_cancel(item_id=item.pk, now=store.now())
    before = item_snapshot(item.pk)
    with pytest.raises(StaleRun):
        store.complete(c)
    assert item_snapshot(item.pk) == before


def test_another_fence_of_a_submitted_run_stays_stale(store):
    # the run was submitted, but the caller is not its owner (another boot id, another epoch)
    item = store.linear()
    c = store.claim()
    store.complete(c)
    before = item_snapshot(item.pk)
    with pytest.raises(StaleRun):
        store.submit(c, completed(), boot="boot-impostor")
    with pytest.raises(StaleRun):
        store.submit(c, completed(), epoch=c.run.lease_epoch + 1)
    assert item_snapshot(item.pk) == before
    assert Event.objects.filter(run_id=c.run.pk).count() == 2  # claimed, completed
    assert Run.objects.get(pk=c.run.pk).status == "completed"
