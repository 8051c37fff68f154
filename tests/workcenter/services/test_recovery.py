"""Recovery (DOMAIN §9.2) including DEV-3."""

from tests.conftest import make_graph
from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem


def test_runs_recover_current_run_of_dead_boot(store):
    item = store.linear()
    c = store.claim(boot="dead")
    services.run_progress(run_id=c.run.pk, owner_boot_id="dead", lease_epoch=1, progress={"response": "p"},
                          now=store.now())
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1
    run = Run.objects.get(pk=c.run.pk)
    assert run.status == "interrupted" and run.response == "p"
    assert run.error == "Agent process or lease ended before the Run submitted a terminal outcome"
    item = store.item(item.pk)
    assert (item.status, item.current_action_id, item.current_run_id) == ("ready", c.action.pk, None)
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "run.interrupted" and ev.data == {"retryable": True} and ev.actor == "recovery:fresh"
    # reclaimed with a higher epoch
    again = store.claim(boot="fresh")
    assert again.action.pk == c.action.pk and again.run.lease_epoch == 2


def test_runs_recover_leaves_own_live_runs(store, clock):
    store.linear()
    store.claim(boot="me", lease_ms=10_000)
    assert services.runs_recover(current_boot_id="me", now=store.now()) == 0
    clock.tick(10_000)
    assert services.runs_recover(current_boot_id="me", now=store.now()) == 1


def test_runs_recover_not_retryable_goes_to_needs_attention(store):
    item = store.linear()
    Action.objects.filter(work_item=item).update(max_attempts=1)
    c = store.claim(boot="dead")
    services.runs_recover(current_boot_id="fresh", now=store.now())
    assert Action.objects.get(pk=c.action.pk).status == "failed"
    assert store.item(item.pk).status == "needs_attention"


def test_runs_recover_graph_refresh(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    store.claim(boot="dead")
    store.claim(boot="dead")
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 2
    assert store.item(item.pk).status == "ready"
    assert {a.status for a in store.actions(item.pk)} == {"ready"}


def test_runs_recover_a_linear_run_its_item_no_longer_points_at_as_stale(store):
    # an item left running on another run (an admin's edit, an older build's write): the dead
    # boot's run owns its action but not the item, so it is superseded and the item left alone
    item = store.linear()
    c = store.claim(boot="dead")
    WorkItem.objects.filter(pk=item.pk).update(current_run_id="someone-else")
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1
    run = Run.objects.get(pk=c.run.pk)
    assert run.status == "superseded" and run.error == "Run no longer owns the current WorkItem Action"
    assert Action.objects.get(pk=c.action.pk).status == "ready"
    assert store.item(item.pk).current_run_id == "someone-else"
    assert Event.objects.filter(work_item=item).last().type == "run.stale_recovered"


def test_runs_recover_stale_sibling_of_needs_attention_item(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    ca, cb = store.claim(boot="dead"), store.claim(boot="dead")
    services.run_submit(run_id=ca.run.pk, owner_boot_id="dead", lease_epoch=1,
                        result={"outcome": "failed", "error": "x"}, now=store.now())
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1
    run = Run.objects.get(pk=cb.run.pk)
    assert run.status == "superseded" and run.error == "Run no longer owns the current WorkItem Action"
    assert Action.objects.get(pk=cb.action.pk).status == "ready"
    ev = Event.objects.filter(work_item=item).last()
    assert ev.type == "run.stale_recovered" and ev.data == {"status": "superseded"}
    assert store.item(item.pk).status == "needs_attention"


def test_runs_recover_cancelled_item_stays_cancelled(store):
    # DEV-3: a leftover running run of a cancelled graph item is cancelled; the item never turns done
    item = make_graph(store, [{"id": "a"}])
    c = store.claim(boot="dead")
    # simulate a run left behind by the reference design (cancel ended only the item's current run)
    WorkItem.objects.filter(pk=item.pk).update(status="cancelled")
    Action.objects.filter(pk=c.action.pk).update(status="cancelled", current_run_id=None)
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1
    assert Run.objects.get(pk=c.run.pk).status == "cancelled"
    assert store.item(item.pk).status == "cancelled"


def test_runs_recover_after_cancel_or_contract_change_returns_zero(store):
    item = store.linear()
    store.claim(boot="dead")
    services.work_item_update(item_id=item.pk, patch={"goal": "g2"}, now=store.now())
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 0


def test_runs_recover_expired_only_leaves_live_peers(store, clock):
    # several workers share a store: a tick's recovery must not interrupt a live peer's run
    store.linear()
    c = store.claim(boot="peer", lease_ms=5_000)
    assert services.runs_recover(current_boot_id="me", expired_only=True, now=store.now()) == 0
    assert Run.objects.get(pk=c.run.pk).status == "running"
    clock.tick(5_000)
    assert services.runs_recover(current_boot_id="me", expired_only=True, now=store.now()) == 1
    assert Run.objects.get(pk=c.run.pk).status == "interrupted"
