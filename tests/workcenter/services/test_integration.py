"""Integration reservations (DOMAIN §10.2): every refusal while live, normal behaviour once expired."""

import pytest

from tests.conftest import make_graph
from workcenter import services
from workcenter.errors import ReservationActive
from workcenter.models import Action, Run


def _reserved(store, reservation_ms=60_000):
    item = make_graph(store, [{"id": "w", "mode": "isolated-write"},
                              {"id": "i", "type": "integrate", "mode": "integrate", "deps": ["w"]}])
    store.complete(store.claim())
    c = store.claim()
    fence = dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)
    assert services.integration_set_workspace(action_id=c.action.pk, workspace={"path": "/tmp/x", "integration": {"status": "prepared"}},
                                              now=store.now(), **fence) is not None
    res = services.integration_acquire(action_id=c.action.pk, reservation_ms=reservation_ms, now=store.now(), **fence)
    assert res is not None and res.token
    return item, c, fence, res


def test_integration_acquire_moves_run_expiry(store, clock):
    _, c, _, res = _reserved(store, reservation_ms=1)  # clamped to 10 s
    run = Run.objects.get(pk=c.run.pk)
    assert run.expires_at == res.expires_at
    assert (res.expires_at - clock()).total_seconds() == pytest.approx(10, abs=0.01)


def test_integration_acquire_renews_the_lease_it_extends(store, clock):
    # the reservation is a renewal: the page's "no heartbeat" clock restarts with it
    make_graph(store, [{"id": "w", "mode": "isolated-write"},
                              {"id": "i", "type": "integrate", "mode": "integrate", "deps": ["w"]}])
    store.complete(store.claim())
    c = store.claim()
    fence = dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)
    services.integration_set_workspace(action_id=c.action.pk, workspace={"integration": {"status": "prepared"}},
                                       now=store.now(), **fence)
    clock.tick(5_000)
    res = services.integration_acquire(action_id=c.action.pk, reservation_ms=30_000, now=store.now(), **fence)
    run = Run.objects.get(pk=c.run.pk)
    assert run.renewed_at == clock() > run.started_at
    assert run.expires_at - run.renewed_at == res.expires_at - clock()


def test_integration_acquire_requires_prepared_integrate(store):
    make_graph(store, [{"id": "i", "type": "integrate", "mode": "integrate"}])
    c = store.claim()
    assert services.integration_acquire(action_id=c.action.pk, run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id,
                                        lease_epoch=c.run.lease_epoch, now=store.now()) is None


def test_reservation_refuses_interrupt_cancel_update_guidance_reset(store):
    item, c, fence, res = _reserved(store)
    with pytest.raises(ReservationActive) as exc:
        services.run_interrupt(now=store.now(), **fence)
    assert "integration finalization currently owns" in str(exc.value)
    with pytest.raises(ReservationActive):
        services.work_item_cancel(item_id=item.pk, now=store.now())
    with pytest.raises(ReservationActive):
        services.work_item_update(item_id=item.pk, patch={"goal": "x"}, now=store.now())
    it = store.item(item.pk)
    with pytest.raises(ReservationActive):
        services.work_item_guide(item_id=item.pk, guidance="g", action_id=it.current_action_id, revision=it.revision,
                                 now=store.now())
    assert services.runs_recover(current_boot_id="other-boot", now=store.now()) == 0
    assert Run.objects.get(pk=c.run.pk).status == "running"
    assert store.item(item.pk).status == "running"


def test_reservation_refuses_graph_reset(store):
    item = make_graph(store, [{"id": "w", "mode": "isolated-write"},
                              {"id": "i", "type": "integrate", "mode": "integrate", "deps": ["w"]},
                              {"id": "x", "mode": "read"}])
    store.complete(store.claim())
    ci = store.claim()
    cx = store.claim()
    fence = dict(run_id=ci.run.pk, owner_boot_id=ci.run.owner_boot_id, lease_epoch=ci.run.lease_epoch)
    services.integration_set_workspace(action_id=ci.action.pk, workspace={"integration": {"status": "prepared"}},
                                       now=store.now(), **fence)
    services.integration_acquire(action_id=ci.action.pk, now=store.now(), **fence)
    store.submit(cx, {"outcome": "failed", "error": "x"})
    with pytest.raises(ReservationActive):
        services.work_item_retry(item_id=item.pk, now=store.now())  # the reset would touch the running integrate


def test_reservation_expired_everything_proceeds(store, clock):
    item, c, fence, res = _reserved(store, reservation_ms=10_000)
    clock.tick(10_001)
    assert services.runs_recover(current_boot_id="other-boot", now=store.now()) == 1
    assert Action.objects.get(pk=c.action.pk).status == "ready"


def test_finish_and_rollback_fences(store, clock):
    item, c, fence, res = _reserved(store)
    # wrong token: refused, record unchanged
    before = Action.objects.get(pk=c.action.pk).workspace
    assert services.integration_finish(action_id=c.action.pk, token="nope", workspace={"integration": {"status": "finalized"}},
                                       now=store.now(), **fence) is None
    assert Action.objects.get(pk=c.action.pk).workspace == before
    # finish ignores the run's lease expiry but needs a live reservation
    a = services.integration_finish(action_id=c.action.pk, token=res.token,
                                    workspace={"integration": {"status": "finalized"}}, now=store.now(), **fence)
    assert a.workspace == {"integration": {"status": "finalized"}} and a.workspace_mode == "integrate"


def test_rollback_clears_workspace(store):
    item, c, fence, res = _reserved(store)
    a = services.integration_rollback(action_id=c.action.pk, token=res.token, now=store.now(), **fence)
    assert a.workspace is None


def test_old_run_cannot_finish_new_runs_reservation(store, clock):
    item, c, fence, res = _reserved(store, reservation_ms=10_000)
    clock.tick(10_001)
    services.runs_recover(current_boot_id="other", now=store.now())
    c2 = store.claim()
    fence2 = dict(run_id=c2.run.pk, owner_boot_id=c2.run.owner_boot_id, lease_epoch=c2.run.lease_epoch)
    services.integration_set_workspace(action_id=c2.action.pk, workspace={"integration": {"status": "prepared"}},
                                       now=store.now(), **fence2)
    res2 = services.integration_acquire(action_id=c2.action.pk, now=store.now(), **fence2)
    assert services.integration_finish(action_id=c.action.pk, token=res2.token, workspace={}, now=store.now(), **fence) is None
    assert services.integration_rollback(action_id=c.action.pk, token=res2.token, now=store.now(), **fence) is None
    assert Action.objects.get(pk=c2.action.pk).workspace["integration"]["reservation"]["token"] == res2.token
