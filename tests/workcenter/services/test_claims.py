"""Claims (DOMAIN §5): readiness per mode, workspace exclusivity matrix, ordering, effects."""
import pytest

from tests.conftest import make_graph
from workcenter import services
from workcenter.errors import InvalidInput
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.domain.rules import workspace_blocks

MODES = ["shared", "read", "isolated-write", "integrate"]

# DOMAIN §5.4 matrix: (running R, candidate A) -> (same item allowed, other item allowed)
MATRIX = {
    ("shared", "shared"): (False, False), ("shared", "read"): (False, False),
    ("shared", "isolated-write"): (False, False), ("shared", "integrate"): (False, False),
    ("read", "shared"): (False, False), ("read", "read"): (True, True),
    ("read", "isolated-write"): (True, True), ("read", "integrate"): (False, False),
    ("isolated-write", "shared"): (False, False), ("isolated-write", "read"): (True, True),
    ("isolated-write", "isolated-write"): (True, False), ("isolated-write", "integrate"): (False, False),
    ("integrate", "shared"): (False, False), ("integrate", "read"): (False, False),
    ("integrate", "isolated-write"): (False, False), ("integrate", "integrate"): (False, False),
}


@pytest.mark.parametrize("running,candidate", list(MATRIX))
def test_workspace_blocks_matches_matrix(running, candidate):
    same_ok, other_ok = MATRIX[(running, candidate)]
    assert workspace_blocks(candidate, "W", [(running, "W")]) is (not same_ok)
    assert workspace_blocks(candidate, "W", [(running, "V")]) is (not other_ok)


@pytest.mark.parametrize("running,candidate", list(MATRIX))
def test_action_claim_same_item_follows_matrix(store, tmp_path, running, candidate):
    # given one item with two independent stages in a real workspace, R running
    item = make_graph(store, [{"id": "r", "mode": running}, {"id": "a", "mode": candidate}], work_dir=str(tmp_path))
    first = store.claim()
    assert first.action.stage_id == "r"
    # when another worker claims
    second = store.claim(boot="boot-B")
    # then the matrix decides
    same_ok, _ = MATRIX[(running, candidate)]
    assert (second is not None) is same_ok
    if second:
        assert second.action.stage_id == "a" and second.work_item.pk == item.pk


@pytest.mark.parametrize("running,candidate", list(MATRIX))
def test_action_claim_other_item_follows_matrix(store, tmp_path, running, candidate):
    make_graph(store, [{"id": "r", "mode": running}], work_dir=str(tmp_path))
    other = make_graph(store, [{"id": "a", "mode": candidate}], work_dir=str(tmp_path))
    assert store.claim().action.stage_id == "r"
    second = store.claim(boot="boot-B")
    _, other_ok = MATRIX[(running, candidate)]
    assert (second is not None) is other_ok
    if second:
        assert second.work_item.pk == other.pk


def test_action_claim_empty_workspace_disables_exclusivity(store):
    make_graph(store, [{"id": "r", "mode": "shared"}], work_dir="")
    make_graph(store, [{"id": "a", "mode": "shared"}], work_dir="")
    assert store.claim() is not None
    assert store.claim(boot="boot-B") is not None


def test_action_claim_linear_item_blocks_graph_item_in_same_workspace(store, tmp_path):
    store.linear(work_dir=str(tmp_path))
    make_graph(store, [{"id": "a", "mode": "read"}], work_dir=str(tmp_path))
    c = store.claim()
    assert c.action.type == "triage"
    assert store.claim() is None


def test_action_claim_skips_blocked_candidate_for_a_later_allowed_one(store, tmp_path):
    d2 = tmp_path / "other"
    d2.mkdir()
    make_graph(store, [{"id": "r"}], work_dir=str(tmp_path))
    make_graph(store, [{"id": "blocked"}], work_dir=str(tmp_path))
    free = make_graph(store, [{"id": "free"}], work_dir=str(d2))
    store.claim()
    c = store.claim()
    assert c.work_item.pk == free.pk


def test_action_claim_orphan_running_action_of_needs_attention_item_still_blocks(store, tmp_path):
    # given a graph item with two running siblings, one fails -> needs_attention; the other stays running
    item = make_graph(store, [{"id": "p", "mode": "read"}, {"id": "q", "mode": "read"}], work_dir=str(tmp_path))
    c1, c2 = store.claim(), store.claim()
    assert {c1.action.stage_id, c2.action.stage_id} == {"p", "q"}
    store.submit(c1, {"outcome": "failed", "error": "boom"})
    assert store.item(item.pk).status == "needs_attention"
    assert Action.objects.get(pk=c2.action.pk).status == "running"
    # then a shared candidate in that workspace is blocked by the orphan
    make_graph(store, [{"id": "s", "mode": "shared"}], work_dir=str(tmp_path))
    assert store.claim() is None


def test_action_claim_linear_only_current_action(store):
    item = store.linear()
    cur = item.current_action_id
    # a ready action that is not current is never claimed
    Action.objects.create(work_item=item, sequence=2, type="implement", stage_id="implement", status="ready",
                          created_at=store.now(), updated_at=store.now(), claimable=False)
    c = store.claim()
    assert c.action.pk == cur
    assert store.claim() is None


@pytest.mark.parametrize("status", ["draft", "waiting", "needs_attention", "done", "cancelled"])
def test_action_claim_graph_item_not_runnable(store, status):
    make_graph(store, [{"id": "a"}], status=status)
    assert store.claim() is None


def test_action_claim_graph_dependencies_use_canonical_action(store):
    # DEV-1: a superseded older action of stage a does not block b once the canonical a completed
    make_graph(store, [{"id": "a", "status": "superseded"}, {"id": "a"}, {"id": "b", "deps": ["a"]}])
    c = store.claim()
    assert c.action.sequence == 2
    assert store.claim() is None
    store.complete(c)
    c2 = store.claim()
    assert c2.action.stage_id == "b"


def test_action_claim_dependency_on_missing_stage_never_satisfied(store):
    make_graph(store, [{"id": "b", "deps": ["nowhere"]}])
    assert store.claim() is None


def test_action_claim_orders_by_updated_at_then_sequence(store):
    first = make_graph(store, [{"id": "a"}])
    second = make_graph(store, [{"id": "a"}])
    c = store.claim()
    assert c.work_item.pk == first.pk
    # an interrupted (re-queued) action moves behind older ready work
    services.run_interrupt(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch,
                           now=store.now())
    c2 = store.claim()
    assert c2.work_item.pk == second.pk


def test_action_claim_effects(store):
    item = store.linear()
    c = store.claim(lease_ms=30_000)
    a = Action.objects.get(pk=c.action.pk)
    run = Run.objects.get(pk=c.run.pk)
    item = WorkItem.objects.get(pk=item.pk)
    assert (a.status, a.attempt, a.lease_epoch, a.current_run_id) == ("running", 1, 1, run.pk)
    assert (item.status, item.current_run_id, item.current_action_id) == ("running", run.pk, a.pk)
    assert run.status == "running" and run.owner_boot_id == "boot-A" and run.lease_epoch == 1
    assert (run.expires_at - run.started_at).total_seconds() == 30
    assert run.evidence == [] and run.progress_revision == 1
    ev = Event.objects.filter(work_item=item).order_by("-id").first()
    assert ev.type == "run.claimed" and ev.data == {"owner_boot_id": "boot-A", "lease_epoch": 1}
    assert ev.action_id == a.pk and ev.run_id == run.pk and ev.actor == "worker:boot-A"


def test_action_claim_graph_item_current_run_stays_null(store):
    item = make_graph(store, [{"id": "a"}, {"id": "b"}])
    store.claim()
    store.claim()
    item = store.item(item.pk)
    assert item.status == "running" and item.current_run_id is None


def test_action_claim_progress_revision_continues_from_earlier_runs(store):
    store.linear()
    c = store.claim()
    services.run_progress(run_id=c.run.pk, owner_boot_id="boot-A", lease_epoch=1, progress={"response": "x"},
                          now=store.now())
    services.run_interrupt(run_id=c.run.pk, owner_boot_id="boot-A", lease_epoch=1, now=store.now())
    c2 = store.claim()
    # first run: 1 at claim, 2 after progress (interrupt without final progress adds nothing)
    assert c2.run.progress_revision == 3


@pytest.mark.parametrize("lease_ms", [0, -1, True, 2**31, 10**15, "60000"])
def test_action_claim_rejects_bad_lease(store, lease_ms):
    store.linear()
    with pytest.raises(InvalidInput):
        services.action_claim(owner_boot_id="b", lease_ms=lease_ms, now=store.now())
    assert Run.objects.count() == 0


def test_a_claim_reads_the_clock_once_it_holds_its_candidate(store, tmp_path, monkeypatch):
    """The run's lease starts when the claim has its candidate and workspace, not when its
    transaction began: time the claim spent before that (waiting for the CPU, scanning past taken
    candidates) is not taken from the lease, and the run is never stamped before a run it saw end."""
    import time

    from workcenter import clock
    from workcenter.services import hooks

    make_graph(store, [{"id": "a", "mode": "shared"}], work_dir=str(tmp_path))
    seen = {}

    def slow_candidate(name):
        if name == "claim_candidate_read":
            time.sleep(0.05)
            seen["after_delay"] = clock.now()

    monkeypatch.setattr(hooks, "fault_hook", slow_candidate)
    claim = services.action_claim(owner_boot_id="boot-clock", lease_ms=60_000)
    run = Run.objects.get(pk=claim.run.pk)
    assert run.started_at >= seen["after_delay"]
    assert (run.expires_at - seen["after_delay"]).total_seconds() >= 60
