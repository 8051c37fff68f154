"""Races on PostgreSQL with real threads, each on its own connection (SQLite ignores row locks).

These tests are marked `postgres`; .ci/run fails if they are skipped on the PostgreSQL run.
"""
import contextlib
import threading
import time
from collections import defaultdict

import pytest
from django.db import connection, connections

from tests.conftest import Clock, Store, make_graph
from workcenter import services
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.services import hooks
from workcenter.domain.rules import workspace_blocks

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="race tests need PostgreSQL"),
]

GRAPH = [  # a 6-stage graph mixing every workspace mode
    {"id": "a", "mode": "shared"},
    {"id": "b", "mode": "read", "deps": ["a"]},
    {"id": "c", "mode": "isolated-write", "deps": ["a"]},
    {"id": "d", "mode": "isolated-write", "deps": ["a"]},
    {"id": "e", "mode": "integrate", "type": "integrate", "deps": ["b", "c", "d"]},
    {"id": "f", "mode": "read", "deps": ["e"]},
]


def _real_clock_store():
    from django.utils import timezone

    class RealClock(Clock):
        def tick(self, ms=1):
            return timezone.now()

        def __call__(self):
            return timezone.now()

    return Store(RealClock())


def test_concurrent_claimers_never_conflict_and_finish_everything(tmp_path):
    store = _real_clock_store()
    dirs = [tmp_path / f"ws{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    items = []
    for i in range(36):  # 216 actions; 4 shared workspaces and a group without a workspace
        wd = str(dirs[i % 4]) if i % 5 else ""
        items.append(make_graph(store, GRAPH, work_dir=wd, title=f"race {i}"))
    total = Action.objects.count()
    assert total >= 200

    violations, claimed, errors = [], defaultdict(int), []
    lock = threading.Lock()
    deadline = time.monotonic() + 120

    def worker(n):
        boot = f"boot-{n}"
        try:
            idle = 0
            while time.monotonic() < deadline:
                c = services.action_claim(owner_boot_id=boot, lease_ms=120_000)
                if c is None:
                    if not WorkItem.objects.exclude(status="done").exists():
                        return
                    idle += 1
                    time.sleep(0.005)
                    continue
                with lock:
                    claimed[c.action.pk] += 1
                # check the committed state from this worker's own connection: no conflicting runner
                key = c.work_item.workspace_key
                if key:
                    others = list(Action.objects.filter(status="running", work_item__workspace_key=key)
                                  .exclude(pk=c.action.pk).values_list("workspace_mode", "work_item_id"))
                    if workspace_blocks(c.action.workspace_mode, c.work_item.pk, others):
                        with lock:
                            violations.append((c.action.pk, c.action.workspace_mode, others))
                time.sleep(0.002)
                services.run_submit(run_id=c.run.pk, owner_boot_id=boot, lease_epoch=c.run.lease_epoch,
                                    result={"outcome": "completed", "summary": "ok", "evidence": ["race"],
                                            "acceptance_checks": []})
        except Exception as exc:  # pragma: no cover - surfaced by the assertion below
            with lock:
                errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)

    assert errors == []
    assert violations == []
    assert all(n == 1 for n in claimed.values()), "an action was claimed twice"
    assert len(claimed) == total
    assert set(WorkItem.objects.values_list("status", flat=True)) == {"done"}
    assert set(Action.objects.values_list("status", flat=True)) == {"completed"}
    assert set(Run.objects.values_list("status", flat=True)) == {"completed"}
    for item in items:
        types = list(Event.objects.filter(work_item=item).order_by("id").values_list("type", flat=True))
        assert types.count("run.claimed") == 6 and types.count("action.completed") == 6
        # every completion follows its claim
        per_action = defaultdict(list)
        for t, a in Event.objects.filter(work_item=item).order_by("id").values_list("type", "action_id"):
            per_action[a].append(t)
        assert all(seq == ["run.claimed", "action.completed"] for seq in per_action.values())


@contextlib.contextmanager
def claim_held_open():
    """A claim by "holder" on a thread, paused after its writes with its transaction open (its
    candidate's rows and workspace held) for the duration of the block; yields {"holder": the
    claim}, filled once the block has ended and the claim committed."""
    inside, release = threading.Event(), threading.Event()
    holder_thread, result = {}, {}

    def hook(name):
        if name == "after_claim_update" and threading.get_ident() == holder_thread.get("id"):
            inside.set()
            release.wait(10)

    def holder():
        holder_thread["id"] = threading.get_ident()
        try:
            result["holder"] = services.action_claim(owner_boot_id="holder")
        finally:
            connections.close_all()

    hooks.fault_hook = hook
    t = threading.Thread(target=holder)
    try:
        t.start()
        assert inside.wait(10)
        yield result
    finally:
        release.set()
        t.join(10)
        hooks.fault_hook = None


def test_claims_in_different_workspaces_do_not_wait_on_each_other(tmp_path):
    store = _real_clock_store()
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    w1.mkdir()
    w2.mkdir()
    first = make_graph(store, [{"id": "a"}], work_dir=str(w1))
    same = make_graph(store, [{"id": "a"}], work_dir=str(w1))
    other = make_graph(store, [{"id": "a"}], work_dir=str(w2))

    with claim_held_open() as result:
        # the holder's transaction is open, holding `first` and workspace w1
        t0 = time.monotonic()
        c = services.action_claim(owner_boot_id="other")
        elapsed = time.monotonic() - t0
        assert c is not None and c.work_item.pk == other.pk
        assert elapsed < 1.0
        # the same workspace is skipped at once rather than waited for, and the answer says so
        t0 = time.monotonic()
        assert services.claim_attempt(owner_boot_id="third") == (None, True)
        assert time.monotonic() - t0 < 1.0
    assert result["holder"].work_item.pk == first.pk
    assert Action.objects.get(work_item=same).status == "ready"


@pytest.mark.parametrize("work_dir", ["", "ws"])
def test_a_claim_that_skipped_a_held_candidate_says_so_and_the_next_one_claims_it(tmp_path, work_dir):
    """Two ready siblings of one graph item (in one workspace, or none): while a claim holds the
    item row (and the workspace), a second claim skips both. It answers "nothing" but says a
    candidate was held (the long-poll claim then looks again shortly: that holder's commit wakes
    nobody); once the holder commits, the next attempt claims the other sibling. With nothing
    claimable at all, nothing was held."""
    store = _real_clock_store()
    if work_dir:
        (tmp_path / work_dir).mkdir()
    item = make_graph(store, [{"id": "a", "mode": "read"}, {"id": "b", "mode": "read"}],
                      work_dir=str(tmp_path / work_dir) if work_dir else "")
    with claim_held_open() as result:
        assert services.claim_attempt(owner_boot_id="second") == (None, True)
    second, contended = services.claim_attempt(owner_boot_id="second")
    assert second is not None and not contended
    assert {result["holder"].action.stage_id, second.action.stage_id} == {"a", "b"}
    assert set(Action.objects.filter(work_item=item).values_list("status", flat=True)) == {"running"}
    assert services.claim_attempt(owner_boot_id="third") == (None, False)
