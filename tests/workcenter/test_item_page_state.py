"""The work-item page's state (workcenter/item_page_state.py): what it leaves out (an action's
texts, a run's response), the diff forms (what changed only; a retry's new action, node, run and
edge travel in a diff; something gone is the whole state), and the route that reads the texts."""
from __future__ import annotations

import pytest
from django.test import Client

from workcenter import item_page_state, render, services

from ..dashboard.test_live_state import apply

pytestmark = pytest.mark.django_db

STAGES = [{"id": f"s{i}", "type": "research", "objective": f"find out {i}"} for i in range(5)]


def retried(store, retries, *, response=""):
    """A linear item whose implement stage failed `retries + 1` times, retried by the lead."""
    item = store.linear(title="Retried")
    store.complete(store.claim_item(item.pk))
    for i in range(retries + 1):
        claim = store.claim_item(item.pk)
        store.submit(claim, {"outcome": "failed", "error": f"compiler crashed ({i + 1})", "response": response})
        if i < retries:
            services.work_item_retry(item_id=item.pk, actor="user:lead", now=store.now())
    return item


def size(data) -> int:
    return len(render.dumps(data))


def test_the_state_leaves_the_long_texts_out(store):
    item = retried(store, 1, response="x" * 20_000)
    full = item_page_state.read(item.pk).full(1)
    for action in full["actions"]:
        assert not {"instruction", "context", "brief"} & set(action)
    for run in full["runs"]:
        assert not {"response", "evidence", "checkpoint", "role_snapshot"} & set(run)
        assert {"status", "started_at", "ended_at", "owner_boot_id", "error", "summary"} <= set(run)
    assert size(full) < 12_000  # a 20 KB response and every instruction stay out


def test_a_progress_diff_carries_only_what_changed(store):
    item = store.planned(STAGES)  # triage + 5 stages
    claim = store.claim_item(item.pk)
    before = item_page_state.read(item.pk)
    store.complete(claim)
    after = item_page_state.read(item.pk)
    diff = after.diff(before, 2)
    assert diff["base_rev"] == before.rev
    assert set(diff["item"]) < set(after.item) and "workflow_snapshot" not in diff["item"]
    assert [r["id"] for r in diff["runs"]] == [claim.run.pk]
    assert "edges" not in diff
    print("progress diff", size(diff), "bytes")
    assert size(diff) <= 2048
    assert apply(apply({}, before.full(1), 1), diff, 2) == _without_base(after.full(2))


def _without_base(state):
    return {k: v for k, v in state.items() if k != "base_rev"}


def test_a_retry_is_a_diff_with_the_new_action_node_run_and_edge(store):
    item = retried(store, 0)
    before = item_page_state.read(item.pk)
    services.work_item_retry(item_id=item.pk, actor="user:lead", now=store.now())
    retried_state = item_page_state.read(item.pk)
    diff = retried_state.diff(before, 5)
    assert diff["base_rev"] == before.rev
    new_ids = set(retried_state.actions) - set(before.actions)
    assert len(new_ids) == 1 and new_ids <= {a["id"] for a in diff["actions"]} and new_ids <= {n["id"] for n in diff["nodes"]}
    assert [e["target_action_id"] for e in diff["edges"]] == list(new_ids)
    print("retry diff", size(diff), "bytes")
    assert size(diff) <= 4096
    rebuilt = apply(apply({}, before.full(4), 4), diff, 5)
    assert rebuilt == _without_base(retried_state.full(5))
    # and the claim that follows: a diff on the retry's state
    store.claim_item(item.pk)
    claimed = item_page_state.read(item.pk)
    assert apply(rebuilt, claimed.diff(retried_state, 6), 6) == _without_base(claimed.full(6))


def test_something_gone_is_the_whole_state(store):
    item = retried(store, 1)
    now = item_page_state.read(item.pk)
    later = retried(store, 2)  # another item: none of these nodes, actions or runs
    assert item_page_state.read(later.pk).diff(now, 9)["base_rev"] is None


def test_the_whole_state_grows_little_per_retry(store):
    once = size(item_page_state.read(retried(store, 1).pk).full(1))
    many = size(item_page_state.read(retried(store, 17).pk).full(1))
    print("whole state after 1 and 17 retries", once, many)
    assert many < 100_000 * 0.4  # it was 100 KB


def test_the_instruction_route_reads_an_actions_texts(store, viewer):
    item = store.planned(STAGES)
    action = store.by_stage(item.pk)["s1"]
    client = Client()
    client.force_login(viewer)
    body = client.get(f"/api/v1/work-items/{item.pk}/actions/{action.pk}/instruction").json()
    assert body == {"action_id": action.pk, "instruction": action.instruction, "brief": action.brief,
                    "context": action.context}
    assert action.instruction
    missing = client.get(f"/api/v1/work-items/{item.pk}/actions/nope/instruction")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert client.get(f"/api/v1/work-items/nope/actions/{action.pk}/instruction").status_code == 404
    assert Client().get(f"/api/v1/work-items/{item.pk}/actions/{action.pk}/instruction").status_code == 401


def test_the_stage_runs_route_reads_every_run_of_a_stage_whole(store, viewer):
    """A linear stage's runs across its actions (one per retry), oldest first, with what the
    state leaves out or cuts: the response, the evidence, an error longer than 300 characters."""
    long_error = "the build broke: " + "x" * 600
    item = retried(store, 2, response="full response text")
    services.work_item_retry(item_id=item.pk, actor="user:lead", now=store.now())
    claim = store.claim_item(item.pk)
    store.submit(claim, {"outcome": "failed", "error": long_error, "response": "last response",
                         "evidence": ["log: build.txt"]})
    client = Client()
    client.force_login(viewer)
    body = client.get(f"/api/v1/work-items/{item.pk}/stages/implement/runs").json()
    assert body["stage_id"] == "implement"
    runs = body["runs"]
    assert len(runs) == 4
    assert [r["started_at"] for r in runs] == sorted(r["started_at"] for r in runs)
    assert len({r["action_id"] for r in runs}) == 4  # one action per retry, all of the stage
    assert runs[0]["response"] == "full response text"
    assert runs[-1]["error"].startswith("the build broke: ") and len(runs[-1]["error"]) > 300
    assert [e["label"] for e in runs[-1]["evidence"]] == ["log: build.txt"]
    assert runs[-1]["response"] == "last response"
    triage = client.get(f"/api/v1/work-items/{item.pk}/stages/triage/runs").json()["runs"]
    assert len(triage) == 1 and triage[0]["status"] == "completed"
    missing = client.get(f"/api/v1/work-items/{item.pk}/stages/nope/runs")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert client.get("/api/v1/work-items/nope/stages/triage/runs").status_code == 404
    assert Client().get(f"/api/v1/work-items/{item.pk}/stages/triage/runs").status_code == 401


def test_get_state_answers_the_shape_the_stream_pushes_whole(store, viewer):
    item = retried(store, 1)
    client = Client()
    client.force_login(viewer)
    answered = client.get(f"/api/v1/work-items/{item.pk}/state").json()
    pushed = render.loads(render.dumps(item_page_state.read(item.pk).full(answered["graph"]["last_event_id"])))
    assert answered == pushed



def test_the_hello_leaves_a_stages_earlier_attempts_out(store):
    hellos = {}
    for retries in (1, 17):
        snapshot = item_page_state.read(retried(store, retries).pk)
        hello, full = snapshot.hello(1), snapshot.full(1)
        hellos[retries] = size(hello)
        # triage and the newest implement attempt; the rest counted
        assert [a["stage_id"] for a in hello["actions"]] == ["triage", "implement"]
        assert len(hello["runs"]) == 2 and len(hello["graph"]["nodes"]) == 2
        assert hello["left_out"] == {"actions": retries, "runs": retries, "nodes": retries, "edges": retries + 1}
        assert hello["rev"] == full["rev"]
        # what is left out had ended: the page puts back what it holds and has the whole state
        kept = {a["id"] for a in hello["actions"]}
        left = [a for a in full["actions"] if a["id"] not in kept]
        assert all(a["status"] == "failed" for a in left)
        assert all(r["ended_at"] for r in full["runs"] if r not in hello["runs"])
    print("hello state after 1 and 17 retries", hellos)
    assert abs(hellos[17] - hellos[1]) <= hellos[1] * 0.10


def test_a_hello_of_an_item_without_earlier_attempts_is_the_whole_state(store):
    item = store.planned(STAGES)
    snapshot = item_page_state.read(item.pk)
    assert snapshot.hello(3) == snapshot.full(3)


def test_the_state_forms_render_as_ninja_renders_them(store):
    from workcenter.models import Action, Run
    from workcenter.schemas_out import StateActionOut, StateRunOut

    item = retried(store, 1)
    Run.objects.filter(work_item_id=item.pk).update(error="e" * 1000)
    for action in Action.objects.filter(work_item_id=item.pk):
        assert render.render(StateActionOut, action) == StateActionOut.from_orm(action).model_dump(mode="json")
    for run in Run.objects.filter(work_item_id=item.pk):
        rendered = render.render(StateRunOut, run)
        assert rendered == StateRunOut.from_orm(run).model_dump(mode="json")
        assert len(rendered["error"]) == 300 and rendered["error"].endswith("…")


def test_a_whole_state_pushed_on_an_event_leaves_the_earlier_attempts_out_too(store):
    from dashboard.stream.live_state import ItemStates

    item = retried(store, 2)
    states = ItemStates()
    pushed = states.states({item.pk: 1}, {item.pk: 2})[item.pk]  # this process sent nothing before: whole
    assert pushed["base_rev"] is None and pushed["left_out"]["runs"] == 2
    services.work_item_retry(item_id=item.pk, actor="user:lead", now=store.now())
    assert states.states({item.pk: 2}, {item.pk: 3})[item.pk]["base_rev"] == pushed["rev"]  # then a diff
