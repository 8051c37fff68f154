"""State tokens (workcenter/services/state_tokens.py): every transition of an item, its actions or
its runs moves the token; a retry or cancel given the token a preview showed is refused
(state_changed, nothing written) once the item moved, and says in words what happened."""
from __future__ import annotations

import pytest

from tests.conftest import item_snapshot, make_graph
from workcenter import services
from workcenter.errors import StateChanged
from workcenter.models import Event, Run, WorkItem
from workcenter.services import bulk
from workcenter.services.state_tokens import state_token, state_tokens

ADMIN = "admin:alice"


def _fence(c):
    return dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)


def _failed(store, title="Broken", stages=None):
    item = make_graph(store, stages or [{"id": "build", "max_attempts": 1}], title=title)
    store.submit(store.claim_item(item.pk, stage="build"), {"outcome": "failed", "error": "boom"})
    assert store.item(item.pk).status == "needs_attention"
    return item


def _moves(item_id, step) -> bool:
    before = state_token(item_id)
    step()
    after = state_token(item_id)
    assert after >= before
    return after != before


def test_every_transition_moves_the_token_and_renewals_and_progress_do_not(store):
    item = make_graph(store, [{"id": "a", "max_attempts": 9}, {"id": "b", "deps": ["a"]}])
    assert state_token(item.pk) == 0  # built without events
    claim = {}

    def do_claim():
        claim["c"] = store.claim_item(item.pk, stage="a")

    assert _moves(item.pk, do_claim)
    c = claim["c"]
    assert not _moves(item.pk, lambda: services.run_renew(**_fence(c), now=store.now()))
    assert not _moves(item.pk, lambda: services.run_progress(**_fence(c), progress={"response": "half"},
                                                             now=store.now()))
    assert _moves(item.pk, lambda: services.work_item_guide(
        item_id=item.pk, guidance="look at the logs", action_id=c.action.pk,
        revision=store.item(item.pk).revision, actor="user:bob", now=store.now()))
    do_claim()  # guidance restarts the running action
    assert _moves(item.pk, lambda: store.submit(claim["c"], {"outcome": "retryable", "error": "rate limited"}))
    do_claim()
    assert _moves(item.pk, lambda: services.run_interrupt(**_fence(claim["c"]), now=store.now()))
    do_claim()
    assert _moves(item.pk, lambda: services.run_release(run_id=claim["c"].run.pk, reason="stuck", actor=ADMIN,
                                                        now=store.now()))
    do_claim()
    assert _moves(item.pk, lambda: services.runs_recover(current_boot_id="another-boot", now=store.now()))
    do_claim()
    assert _moves(item.pk, lambda: store.submit(claim["c"], {"outcome": "waiting", "waiting_reason": "which?"}))
    assert _moves(item.pk, lambda: services.work_item_retry(item_id=item.pk, answer="this one", now=store.now()))
    a = store.by_stage(item.pk)["a"]
    assert _moves(item.pk, lambda: services.action_edit(action_id=a.pk, reason="clearer", actor=ADMIN,
                                                        instruction="do a, carefully", now=store.now()))
    assert _moves(item.pk, lambda: services.action_mark_failed(action_id=a.pk, reason="hopeless", actor=ADMIN,
                                                               now=store.now()))
    assert _moves(item.pk, lambda: services.action_reset(action_id=a.pk, reason="try again", actor=ADMIN,
                                                         now=store.now()))
    assert _moves(item.pk, lambda: services.work_item_update(item_id=item.pk, patch={"goal": "another goal"},
                                                             now=store.now()))
    assert _moves(item.pk, lambda: services.work_item_cancel(item_id=item.pk, now=store.now()))
    # the token is the newest event's id
    assert state_token(item.pk) == Event.objects.filter(work_item_id=item.pk).order_by("-id")[0].id


def test_state_tokens_reads_several_items_at_once(store):
    a = store.create(title="A")
    b = make_graph(store, [{"id": "x"}])
    assert state_tokens([a.pk, b.pk, "nope"]) == {a.pk: state_token(a.pk), b.pk: 0, "nope": 0}
    assert state_token(a.pk) > 0


def test_a_retry_with_a_stale_token_is_refused_with_what_happened_and_writes_nothing(store):
    item = _failed(store)
    seen = services.work_item_retry_preview(item_id=item.pk)["state_token"]
    assert seen == state_token(item.pk)
    # someone else retries it and it fails again: needs_attention again, the same revision
    services.work_item_retry(item_id=item.pk, actor="user:bob", now=store.now())
    store.submit(store.claim_item(item.pk, stage="build"), {"outcome": "failed", "error": "boom again"})
    assert (store.item(item.pk).status, store.item(item.pk).revision) == ("needs_attention", 1)
    before = item_snapshot(item.pk)
    with pytest.raises(StateChanged) as exc:
        services.work_item_retry(item_id=item.pk, expected_state_token=seen, actor="user:alice", now=store.now())
    assert exc.value.code == "state_changed"
    message = exc.value.message
    assert message == ("retried by user:bob, stage build was claimed and a run of stage build failed "
                       "since the preview"), message
    assert exc.value.extra["state_token"] == state_token(item.pk)
    assert exc.value.extra["expected_state_token"] == seen
    assert item_snapshot(item.pk) == before
    # the token of now is accepted
    fresh = services.work_item_retry_preview(item_id=item.pk)["state_token"]
    services.work_item_retry(item_id=item.pk, expected_state_token=fresh, actor="user:alice", now=store.now())
    assert store.item(item.pk).status == "ready"


def test_a_cancel_with_a_stale_token_is_refused_and_one_with_the_current_token_goes_through(store):
    item = make_graph(store, [{"id": "build"}])
    seen = state_token(item.pk)
    c = store.claim_item(item.pk, stage="build")
    before = item_snapshot(item.pk)
    with pytest.raises(StateChanged, match="stage build was claimed since the preview"):
        services.work_item_cancel(item_id=item.pk, expected_state_token=seen, actor="user:alice", now=store.now())
    assert item_snapshot(item.pk) == before
    assert Run.objects.get(pk=c.run.pk).status == "running"
    services.work_item_cancel(item_id=item.pk, expected_state_token=state_token(item.pk), now=store.now())
    assert store.item(item.pk).status == "cancelled"
    with pytest.raises(StateChanged, match="cancelled by system since the preview"):
        services.work_item_cancel(item_id=item.pk, expected_state_token=seen, now=store.now())


def test_bulk_rows_carry_the_token_and_a_moved_row_is_refused_alone(store):
    a = make_graph(store, [{"id": "build"}], title="A")
    b = make_graph(store, [{"id": "build"}], title="B", status="draft")
    preview = bulk.work_items_bulk_preview(operation="cancel", ids=[a.pk, b.pk, "missing"])
    rows = {r["id"]: r for r in preview["rows"]}
    assert rows[a.pk]["message"] == "cancels it" and rows[a.pk]["stops"] == []
    assert (rows[a.pk]["state_token"], rows[b.pk]["state_token"], rows["missing"]["state_token"]) == (0, 0, None)
    c = store.claim_item(a.pk, stage="build")
    before = item_snapshot(a.pk)
    out = bulk.work_items_bulk_apply(operation="cancel", ids=[a.pk, b.pk], reason="duplicates", actor="user:alice",
                                     expected_revisions={a.pk: 1, b.pk: 1},
                                     expected_state_tokens={a.pk: 0, b.pk: 0}, now=store.now())
    res = {r["id"]: r for r in out["results"]}
    assert (res[a.pk]["ok"], res[a.pk]["code"]) == (False, "state_changed")
    assert res[a.pk]["message"] == "stage build was claimed since the preview; nothing was done to it"
    assert item_snapshot(a.pk) == before and Run.objects.get(pk=c.run.pk).status == "running"
    assert res[b.pk]["ok"] and store.item(b.pk).status == "cancelled"


def test_bulk_without_tokens_keeps_the_revision_fence_only(store):
    a = make_graph(store, [{"id": "build"}], title="A")
    c = store.claim_item(a.pk, stage="build")
    out = bulk.work_items_bulk_apply(operation="cancel", ids=[a.pk], reason="why", expected_revisions={a.pk: 1},
                                     now=store.now())
    assert out["results"][0]["ok"]
    assert Run.objects.get(pk=c.run.pk).status == "cancelled"


def test_the_revision_fence_is_checked_before_the_state_fence(store):
    item = _failed(store)
    seen = state_token(item.pk)
    services.work_item_update(item_id=item.pk, patch={"goal": "new"}, now=store.now())
    out = bulk.work_items_bulk_apply(operation="retry", ids=[item.pk], reason="why", expected_revisions={item.pk: 1},
                                     expected_state_tokens={item.pk: seen}, now=store.now())
    assert out["results"][0]["code"] == "revision_conflict"


@pytest.mark.parametrize("tokens", [
    {},
    {"A": 1},
    {"A": 1, "B": 1, "C": 1},
    {"A": "1", "B": 1},
    {"A": True, "B": 1},
    {"A": -1, "B": 1},
    {"A": 2**63, "B": 1},
    [1, 1],
])
def test_bad_token_maps_are_refused_as_a_whole(store, tokens):
    a = make_graph(store, [{"id": "x"}], id="A", status="draft")
    b = make_graph(store, [{"id": "x"}], id="B", status="draft")
    before = [item_snapshot(a.pk), item_snapshot(b.pk)]
    with pytest.raises(Exception) as exc:
        bulk.work_items_bulk_apply(operation="cancel", ids=["A", "B"], reason="why", expected_revisions={"A": 1, "B": 1},
                                   expected_state_tokens=tokens, now=store.now())
    assert getattr(exc.value, "code", None) == "invalid_input"
    assert exc.value.extra["errors"][0]["field"] == "expected_state_tokens"
    assert [item_snapshot(a.pk), item_snapshot(b.pk)] == before
    assert set(WorkItem.objects.values_list("status", flat=True)) == {"draft"}


def test_a_long_history_since_the_token_is_said_once_per_kind_and_the_current_token_is_given(store):
    item = make_graph(store, [{"id": "a", "max_attempts": 1000}])
    seen = state_token(item.pk)
    for _ in range(110):  # 220 events: more than a refusal reads
        c = store.claim_item(item.pk, stage="a")
        services.run_interrupt(**_fence(c), now=store.now())
    with pytest.raises(StateChanged) as exc:
        services.work_item_cancel(item_id=item.pk, expected_state_token=seen, now=store.now())
    assert exc.value.message == "stage a was claimed and a run of stage a was interrupted since the preview"
    assert exc.value.extra["state_token"] == state_token(item.pk)
    assert store.item(item.pk).status == "ready"
