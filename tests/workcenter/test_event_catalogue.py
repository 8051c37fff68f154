"""The event catalogue (workcenter.event_types) against what the services really append.

The real services are driven through every path that appends an event (create, start, update,
contract change, guidance, cancel, every submit outcome, linear and graph retry, a graph review's
changes request, interrupt, recovery of the current and of a stale run, and the four admin
repairs); every stored row is then checked against its payload schema, and the set of types seen
must be the whole catalogue: a type the catalogue lacks, a key a schema lacks, a schema whose
type no service appends all fail here.
"""
from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, create_model

from workcenter import services
from workcenter.event_types import PAYLOADS, REFS, EventType, Payload, validate_payload
from workcenter.models import Event, WorkItem

ADMIN = "admin:alice"


def _fence(c):
    return dict(run_id=c.run.pk, owner_boot_id=c.run.owner_boot_id, lease_epoch=c.run.lease_epoch)


def _claim(store, item_id, stage=None, boot=None):
    c = store.claim_item(item_id, boot=boot, stage=stage)
    assert c is not None, f"nothing claimable for {item_id} {stage or ''}"
    return c


def _linear_to_done(store):
    """triage → implement → review (changes requested) → implement → review (approved) → deliver."""
    item = store.linear(criteria=["it works"])
    for expected, decision in [("triage", None), ("implement", None), ("review", "changes_requested"),
                               ("implement", None), ("review", "approved"), ("deliver", None)]:
        c = _claim(store, item.pk)
        assert c.action.type == expected
        extra = {"review_decision": decision} if decision else {}
        store.complete(c, **extra)
    assert store.item(item.pk).status == "done"


def _draft_life(store):
    """created (draft), started, updated, retriaged, guidance, cancelled."""
    item = store.linear(start=False)
    services.work_item_start(item_id=item.pk, now=store.now())
    item = services.work_item_update(item_id=item.pk, patch={"title": "Renamed"}, now=store.now())
    item = services.work_item_update(item_id=item.pk, patch={"goal": "A sharper goal"}, now=store.now())
    c = _claim(store, item.pk)
    services.work_item_guide(item_id=item.pk, guidance="focus on the tests", action_id=c.action.pk,
                             revision=store.item(item.pk).revision, now=store.now())
    services.work_item_cancel(item_id=item.pk, now=store.now())


def _waiting_then_linear_retry(store):
    item = store.linear()
    store.submit(_claim(store, item.pk), {"outcome": "waiting", "waiting_reason": "Which region?"})
    services.work_item_retry(item_id=item.pk, answer="eu-west", now=store.now())
    services.work_item_cancel(item_id=item.pk, now=store.now())


def _retries_then_failure(store):
    item = store.linear()
    store.submit(_claim(store, item.pk), {"outcome": "retryable", "error": "network flaked"})  # attempt 1 of 2
    store.submit(_claim(store, item.pk), {"outcome": "retryable", "error": "network flaked again"})
    assert store.item(item.pk).status == "needs_attention"
    services.work_item_retry(item_id=item.pk, now=store.now())
    store.submit(_claim(store, item.pk), {"outcome": "failed", "error": "compiler crashed"})
    services.work_item_cancel(item_id=item.pk, now=store.now())


def _graph_failure_retry_and_review(store):
    """A planned graph: a failed stage retried (work_item.retried {target_stage_id}), then a review
    requesting changes (review.changes_requested)."""
    item = store.planned([{"id": "impl", "type": "implement", "objective": "o"},
                          {"id": "rev", "type": "review", "objective": "o", "depends_on_action_ids": ["impl"]}])
    store.submit(_claim(store, item.pk, stage="impl"), {"outcome": "failed", "error": "broken build"})
    services.work_item_retry(item_id=item.pk, now=store.now())
    store.complete(_claim(store, item.pk, stage="impl"))
    store.complete(_claim(store, item.pk, stage="rev"), review_decision="changes_requested")
    services.work_item_cancel(item_id=item.pk, now=store.now())


def _interrupt_and_recovery(store):
    """A worker's interrupt, recovery of a dead worker's current run, and of a stale sibling."""
    item = store.linear()
    services.run_interrupt(**_fence(_claim(store, item.pk)), reason="worker stopping", now=store.now())
    _claim(store, item.pk, boot="dead")
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1
    services.work_item_cancel(item_id=item.pk, now=store.now())

    graph = store.planned([{"id": "a", "objective": "o", "depends_on_action_ids": []},
                           {"id": "b", "objective": "o", "depends_on_action_ids": []}])
    ca = _claim(store, graph.pk, stage="a", boot="dead")
    cb = _claim(store, graph.pk, stage="b", boot="dead")
    services.run_submit(**_fence(ca), result={"outcome": "failed", "error": "x"}, now=store.now())
    assert services.runs_recover(current_boot_id="fresh", now=store.now()) == 1  # b: stale sibling
    assert Event.objects.filter(run_id=cb.run.pk, type="run.stale_recovered").exists()
    services.work_item_cancel(item_id=graph.pk, now=store.now())


def _admin_repairs(store):
    item = store.linear()
    services.run_release(run_id=_claim(store, item.pk).run.pk, reason="host died", actor=ADMIN, now=store.now())
    c = _claim(store, item.pk)
    services.action_reset(action_id=c.action.pk, reason="stuck", actor=ADMIN, now=store.now())
    services.action_edit(action_id=c.action.pk, reason="clarify", actor=ADMIN, instruction="do it better",
                         now=store.now())
    services.action_mark_failed(action_id=c.action.pk, reason="give up", actor=ADMIN, now=store.now())
    services.work_item_cancel(item_id=item.pk, now=store.now())


SCENARIOS = [_linear_to_done, _draft_life, _waiting_then_linear_retry, _retries_then_failure,
             _graph_failure_retry_and_review, _interrupt_and_recovery, _admin_repairs]


def catalogue_problems(rows, payloads: dict[EventType, type[BaseModel]], refs=REFS) -> list[str]:
    """What is wrong with the stored rows against a catalogue: unknown types, invalid payloads,
    references a type should (not) carry, types of the catalogue no row has."""
    problems = []
    seen = set()
    for ev in rows:
        seen.add(ev.type)
        try:
            model = payloads[EventType(ev.type)]
        except (ValueError, KeyError):
            problems.append(f"#{ev.id} {ev.type}: not in the catalogue")
            continue
        try:
            model.model_validate(ev.data)
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            problems.append(f"#{ev.id} {ev.type} {ev.data!r}: {errors}")
        for ref, want in zip(("action_id", "run_id"), refs[EventType(ev.type)]):
            if want is not None and bool(getattr(ev, ref)) != want:
                problems.append(f"#{ev.id} {ev.type}: {ref} {'missing' if want else 'set'}")
    for missing in sorted(set(payloads) - seen):
        problems.append(f"{missing}: no service path appended it")
    return problems


@pytest.fixture
def stored_events(store):
    for scenario in SCENARIOS:
        scenario(store)
    assert not WorkItem.objects.exclude(status__in=["done", "cancelled"]).exists()
    return list(Event.objects.order_by("id"))


def test_every_stored_event_matches_its_schema_and_every_type_is_appended(stored_events):
    assert catalogue_problems(stored_events, PAYLOADS) == []
    assert {ev.type for ev in stored_events} == {t.value for t in EventType}
    # the rows the spec describes by shape, checked beyond the schema
    by_type = {}
    for ev in stored_events:
        by_type.setdefault(ev.type, []).append(ev.data)
    created = [ev for ev in stored_events if ev.type == "work_item.created"]
    assert {bool(ev.action_id) for ev in created} == {True, False}  # started, and a draft
    assert {"status": "draft"} in by_type["work_item.created"] and {"status": "ready"} in by_type["work_item.created"]
    assert {} in by_type["work_item.retried"] and {"target_stage_id": "impl"} in by_type["work_item.retried"]
    assert {"retryable": True, "reason": "worker stopping"} in by_type["run.interrupted"]  # a worker's stop
    assert {tuple(sorted(d)) for d in by_type["run.interrupted"]} == {("reason", "retryable"), ("retryable",)}
    completed_shapes = {tuple(sorted(d)) for d in by_type["action.completed"]}
    assert completed_shapes == {("next_action_type", "review_decision"), ("next_action_count", "review_decision")}


def test_the_check_fails_on_a_narrower_catalogue(stored_events):
    """A schema without a key the services write, a catalogue without a type, and a ref the
    catalogue gets wrong are caught."""
    narrowed = dict(PAYLOADS)
    narrowed[EventType.RUN_CLAIMED] = create_model("ClaimWithoutEpoch", __base__=Payload, owner_boot_id=(str, ...))
    del narrowed[EventType.ACTION_EDITED]
    problems = catalogue_problems(stored_events, narrowed)
    assert any(p.startswith("#") and " run.claimed " in p and "lease_epoch" in p for p in problems)
    assert any(" action.edited: not in the catalogue" in p for p in problems)
    wrong_refs = {**REFS, EventType.ACTION_EDITED: (True, True)}
    assert any(" action.edited: run_id missing" in p for p in catalogue_problems(stored_events, PAYLOADS, wrong_refs))
    # and a catalogue with a type nothing appends
    assert catalogue_problems([], PAYLOADS)[0].endswith("no service path appended it")


@pytest.mark.parametrize("type,data", [
    ("run.claimed", {"owner_boot_id": "b", "lease_epoch": 1, "worker": "w"}),   # unknown key
    ("run.claimed", {"owner_boot_id": "b"}),                                    # missing key
    ("run.claimed", {"owner_boot_id": "b", "lease_epoch": "1"}),                # loose type
    ("action.completed", {"review_decision": None}),                            # neither shape
    ("action.completed", {"next_action_type": "deliver", "next_action_count": 1, "review_decision": None}),
    ("action.reset", {"reason": "r", "previous_status": "completed"}),          # not a resettable status
    ("work_item.ready", {}),                                                    # not a type
])
def test_validate_payload_refuses(type, data):
    with pytest.raises(ValueError):
        validate_payload(type, data)


def test_event_type_members_equal_the_stored_strings():
    assert EventType.RUN_CLAIMED == "run.claimed" and "run.claimed" in {t for t in EventType}
    assert set(PAYLOADS) == set(EventType) == set(REFS)
