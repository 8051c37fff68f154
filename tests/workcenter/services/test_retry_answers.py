"""Retry with one answer per waiting stage (`answers`, DOMAIN §8.6 extended) and its preview."""
import pytest

from tests.conftest import item_snapshot, make_graph
from workcenter import services
from workcenter.errors import FenceLost, InvalidInput, InvalidState
from workcenter.models import Action, Event, Run

TWO_WAITING = [{"id": "ask-db"}, {"id": "ask-region"}, {"id": "build", "deps": ["ask-db", "ask-region"]},
               {"id": "docs"}]


def _two_waiting(store, docs_running=False):
    """ask-db and ask-region both wait (each with its own question); build depends on both; docs
    is independent (running when asked)."""
    item = make_graph(store, TWO_WAITING)
    db = store.claim_item(item.pk, stage="ask-db")
    region = store.claim_item(item.pk, stage="ask-region")
    docs = store.claim_item(item.pk, stage="docs") if docs_running else None
    store.submit(db, {"outcome": "waiting", "waiting_reason": "Which database?"})
    store.submit(region, {"outcome": "waiting", "waiting_reason": "Which region?"})
    item = store.item(item.pk)
    assert item.status == "waiting" and item.current_action_id == db.action.pk
    return item, db, region, docs


def _answers(**by_action):
    return [{"action_id": k, "answer": v} for k, v in by_action.items()]


def test_answers_reset_every_named_waiting_stage_with_its_own_answer(store):
    item, db, region, docs = _two_waiting(store, docs_running=True)
    n_actions = Action.objects.filter(work_item_id=item.pk).count()
    # when both questions are answered in one retry
    services.work_item_retry(item_id=item.pk, answers=[
        {"action_id": region.action.pk, "answer": "  eu-west  "},
        {"action_id": db.action.pk, "answer": "PostgreSQL"},
    ], actor="user:lead", now=store.now())
    # then both stages are reset in place, each with its own question and answer in its context
    item = store.item(item.pk)
    assert item.status == "ready" and item.current_action_id == db.action.pk
    a_db, a_region = Action.objects.get(pk=db.action.pk), Action.objects.get(pk=region.action.pk)
    assert (a_db.status, a_db.attempt) == ("ready", 0) and (a_region.status, a_region.attempt) == ("ready", 0)
    assert a_db.context[-1]["waiting_reason"] == "Which database?" and a_db.context[-1]["answer"] == "PostgreSQL"
    assert a_region.context[-1]["waiting_reason"] == "Which region?" and a_region.context[-1]["answer"] == "eu-west"
    assert "User answer: PostgreSQL" in a_db.instruction and "User answer: eu-west" in a_region.instruction
    assert Action.objects.filter(work_item_id=item.pk).count() == n_actions  # in place
    # the running sibling is stopped as by any graph retry
    assert Run.objects.get(pk=docs.run.pk).status == "superseded"
    # one event per stage, by sequence
    evs = list(Event.objects.filter(work_item_id=item.pk, type="work_item.retried").order_by("id"))
    assert [(e.action_id, e.data, e.actor) for e in evs] == [
        (db.action.pk, {"target_stage_id": "ask-db"}, "user:lead"),
        (region.action.pk, {"target_stage_id": "ask-region"}, "user:lead")]
    # and the item does not go back to waiting: both stages are claimable again
    claimable = {a.effective_stage_id for a in store.actions(item.pk) if a.claimable}
    assert claimable == {"ask-db", "ask-region", "docs"}


def test_the_single_answer_form_still_resets_only_the_current_stage(store):
    item, db, region, _ = _two_waiting(store)
    services.work_item_retry(item_id=item.pk, answer="PostgreSQL", now=store.now())
    assert Action.objects.get(pk=db.action.pk).status == "ready"
    assert Action.objects.get(pk=region.action.pk).status == "waiting"
    # the item is ready (§8.6 forces it) but the second question is still open, and the preview says so
    store.submit(store.claim_item(item.pk, stage="ask-db"), {"outcome": "completed", "summary": "ok",
                                                              "evidence": ["ok"], "acceptance_checks": []})
    assert store.item(item.pk).status == "waiting"
    p = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    assert [w["stage_id"] for w in p["waiting_stages"]] == ["ask-region"]


@pytest.mark.parametrize("bad", [
    [],
    "PostgreSQL",
    [{"action_id": "x"}],
    [{"action_id": "x", "answer": "y", "extra": 1}],
    [{"action_id": "", "answer": "y"}],
    [{"action_id": 5, "answer": "y"}],
])
def test_malformed_answers_are_refused_and_write_nothing(store, bad):
    item, *_ = _two_waiting(store)
    before = item_snapshot(item.pk)
    with pytest.raises(InvalidInput) as exc:
        services.work_item_retry(item_id=item.pk, answers=bad, now=store.now())
    assert [e["field"] for e in exc.value.extra["errors"]] == ["answers"]
    assert item_snapshot(item.pk) == before


def test_refused_answers_write_nothing(store):
    item, db, region, _ = _two_waiting(store)
    build = store.by_stage(item.pk)["build"]
    cases = {
        "blank": _answers(**{db.action.pk: "ok", region.action.pk: "   "}),
        "too long": _answers(**{db.action.pk: "x" * 8001}),
        "twice": [{"action_id": db.action.pk, "answer": "a"}, {"action_id": db.action.pk, "answer": "b"}],
        "not waiting": _answers(**{db.action.pk: "ok", build.pk: "ok"}),
        "unknown": _answers(**{db.action.pk: "ok", "no-such-action": "ok"}),
        "current missing": _answers(**{region.action.pk: "eu-west"}),
    }
    before = item_snapshot(item.pk)
    for name, answers in cases.items():
        with pytest.raises(InvalidInput) as exc:
            services.work_item_retry(item_id=item.pk, answers=answers, now=store.now())
        assert [e["field"] for e in exc.value.extra["errors"]] == ["answers"], name
        assert item_snapshot(item.pk) == before, name
    with pytest.raises(InvalidInput):
        services.work_item_retry(item_id=item.pk, answer="x", answers=_answers(**{db.action.pk: "ok"}),
                                 now=store.now())
    assert item_snapshot(item.pk) == before


def test_a_failed_guarded_write_rolls_back_every_reset(store, monkeypatch):
    item, db, region, _ = _two_waiting(store)
    before = item_snapshot(item.pk)
    from workcenter.services import graph

    real = graph.apply_graph_reset
    calls = []

    def second_loses_its_fence(plan, replacement, reason, now):
        calls.append(plan.target.pk)
        if len(calls) == 2:  # the second stage's row changed under the lock
            Action.objects.filter(pk=plan.target.pk).update(lease_epoch=99)
        return real(plan, replacement, reason, now)

    monkeypatch.setattr(graph, "apply_graph_reset", second_loses_its_fence)
    with pytest.raises(FenceLost):
        services.work_item_retry(item_id=item.pk, answers=_answers(**{db.action.pk: "a", region.action.pk: "b"}),
                                 now=store.now())
    assert calls == [db.action.pk, region.action.pk]
    assert item_snapshot(item.pk) == before


def test_answers_of_a_needs_attention_graph_reset_the_failed_stage_too(store):
    item = make_graph(store, [{"id": "fails"}, {"id": "asks"}])
    fails = store.claim_item(item.pk, stage="fails")
    asks = store.claim_item(item.pk, stage="asks")
    store.submit(asks, {"outcome": "waiting", "waiting_reason": "Which?"})
    store.submit(fails, {"outcome": "failed", "error": "boom"})
    assert store.item(item.pk).status == "needs_attention"
    services.work_item_retry(item_id=item.pk, answers=_answers(**{asks.action.pk: "this one"}), now=store.now())
    assert {a.effective_stage_id: a.status for a in store.actions(item.pk)} == {"fails": "ready", "asks": "ready"}
    assert Action.objects.get(pk=asks.action.pk).context[-1]["answer"] == "this one"
    assert [e.data for e in Event.objects.filter(work_item_id=item.pk, type="work_item.retried").order_by("id")] == [
        {"target_stage_id": "fails"}, {"target_stage_id": "asks"}]


def test_a_linear_item_takes_answers_for_its_current_action_only(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "waiting", "waiting_reason": "Which database?"})
    before = item_snapshot(item.pk)
    for bad in (_answers(**{"other": "x"}), _answers(**{c.action.pk: "x", "other": "y"})):
        with pytest.raises(InvalidInput) as exc:
            services.work_item_retry(item_id=item.pk, answers=bad, now=store.now())
        assert "current action only" in exc.value.message
    assert item_snapshot(item.pk) == before
    services.work_item_retry(item_id=item.pk, answers=_answers(**{c.action.pk: " PostgreSQL "}), now=store.now())
    new = store.actions(item.pk)[-1]
    assert new.pk != c.action.pk and new.context[-1]["answer"] == "PostgreSQL"
    assert Event.objects.filter(work_item_id=item.pk).last().data == {}


def test_answers_when_the_item_does_not_need_retry_is_invalid_state(store):
    item = make_graph(store, [{"id": "a"}])
    with pytest.raises(InvalidState):
        services.work_item_retry(item_id=item.pk, answers=_answers(a="x"), now=store.now())


# --- preview -------------------------------------------------------------------------------------

def test_preview_lists_every_waiting_stage_with_its_question_and_what_it_resets(store):
    item, db, region, docs = _two_waiting(store, docs_running=True)
    acts = store.by_stage(item.pk)
    p = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    # the current stage's plan, as before
    assert p["target_action_id"] == db.action.pk
    assert p["reset_action_ids"] == [acts["ask-db"].pk, acts["build"].pk, acts["docs"].pk]
    assert p["superseded_run_ids"] == [docs.run.pk]
    # and every stage that waits, each with its question, the run that asked and its own reset
    ws = p["waiting_stages"]
    assert [(w["stage_id"], w["waiting_reason"], w["run_id"]) for w in ws] == [
        ("ask-db", "Which database?", db.run.pk), ("ask-region", "Which region?", region.run.pk)]
    assert ws[1]["reset_action_ids"] == [acts["ask-region"].pk, acts["build"].pk, acts["docs"].pk]
    assert ws[0]["waiting_since"] == Run.objects.get(pk=db.run.pk).ended_at
    # with action_id: the answers retry naming both
    both = services.work_item_retry_preview(item_id=item.pk, action_ids=[db.action.pk, region.action.pk],
                                            now=store.now())
    assert both["reset_action_ids"] == [acts[s].pk for s in ("ask-db", "ask-region", "build", "docs")]
    assert both["superseded_run_ids"] == [docs.run.pk]
    # which is exactly what that retry then resets
    services.work_item_retry(item_id=item.pk, answers=_answers(**{db.action.pk: "a", region.action.pk: "b"}),
                             now=store.now())
    assert {a.pk for a in store.actions(item.pk) if a.status == "ready"} == set(both["reset_action_ids"])


def test_preview_with_action_ids_refuses_what_the_retry_would(store):
    item, db, region, _ = _two_waiting(store)
    before = item_snapshot(item.pk)
    build = store.by_stage(item.pk)["build"]
    for bad in ([db.action.pk, build.pk], [region.action.pk], [db.action.pk, db.action.pk]):
        with pytest.raises(InvalidInput) as exc:
            services.work_item_retry_preview(item_id=item.pk, action_ids=bad, now=store.now())
        assert [e["field"] for e in exc.value.extra["errors"]] == ["action_id"]
    assert item_snapshot(item.pk) == before


def test_preview_of_a_waiting_linear_item_names_its_question(store):
    item = store.linear()
    c = store.claim()
    store.submit(c, {"outcome": "waiting", "waiting_reason": "Which database?"})
    p = services.work_item_retry_preview(item_id=item.pk, now=store.now())
    assert [(w["action_id"], w["stage_id"], w["waiting_reason"], w["reset_action_ids"]) for w in p["waiting_stages"]] \
        == [(c.action.pk, "triage", "Which database?", [])]
