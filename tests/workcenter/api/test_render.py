"""workcenter/render.py renders exactly what ninja's validated rendering of the same schema gives."""
import json

import pytest
from ninja.responses import NinjaJSONEncoder
from pydantic import BaseModel

from tests.conftest import completed, make_graph
from workcenter import render, selectors, services
from workcenter.schemas_out import (
    ActionOut,
    ClaimOut,
    DetailView,
    EventOut,
    ExecutionStatsOut,
    RunOut,
    SubmitOut,
    WorkItemDetailOut,
)


def ninja_json(schema, obj):
    """What ninja sends for `obj` under `schema`: validated, dumped, encoded."""
    return json.loads(json.dumps(schema.model_validate(obj).model_dump(), cls=NinjaJSONEncoder))


def fast_json(schema, obj):
    return json.loads(render.response(schema, obj).content)


def _busy_item(store):
    """A graph item with runs in every terminal kind, snapshots, counters, a waiting reason and
    non-ASCII text: every field of the detail carries a value of its own."""
    item = make_graph(store, [{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["a"]},
                              {"id": "d", "deps": ["b", "c"]}])
    a = store.claim()
    services.run_set_snapshots(run_id=a.run.pk, owner_boot_id=a.run.owner_boot_id, lease_epoch=a.run.lease_epoch,
                               snapshots={"role_snapshot": {"id": "r", "n": [1, 2.5]}}, now=store.now())
    services.run_progress(run_id=a.run.pk, owner_boot_id=a.run.owner_boot_id, lease_epoch=a.run.lease_epoch,
                          progress={"response": "half way — ünïcode", "loop_count": 3, "input_tokens": 120,
                                    "checkpoint": {"step": 2}}, now=store.now())
    store.submit(a, completed(summary="a done ✓", evidence=["log.txt", {"k": "v"}], loop_count=3, input_tokens=120))
    b = store.claim()
    store.submit(b, {"outcome": "retryable", "error": "flaky"})
    c = store.claim()
    b2 = store.claim()
    assert (c.action.stage_id, b2.action.stage_id) == ("c", "b")
    store.submit(c, {"outcome": "waiting", "waiting_reason": "Which colour?"})
    return item, b2


@pytest.mark.parametrize("schema", [WorkItemDetailOut, ActionOut, RunOut, EventOut, ExecutionStatsOut])
def test_every_output_schema_in_use_compiles(schema):
    assert callable(render.compile_schema(schema))


def test_detail_renders_as_ninja_renders_it(store):
    item, _ = _busy_item(store)
    view = DetailView(selectors.work_item_detail(item.pk))
    assert len(view.runs) == 4 and len(view.events) >= 7
    fast, slow = fast_json(WorkItemDetailOut, view), ninja_json(WorkItemDetailOut, view)
    assert fast == slow
    # and the values are the interesting ones, not empty defaults
    assert any(r["role_snapshot"] == {"id": "r", "n": [1, 2.5]} for r in fast["runs"])
    assert any(r["waiting_reason"] == "Which colour?" for r in fast["runs"])
    assert fast["execution_stats"]["loop_count"] == 3 and fast["execution_mode"] == "graph"
    assert all(a["execution_stats"] for a in fast["actions"])


def test_claim_and_submit_bodies_render_as_ninja_renders_them(store):
    item, claim = _busy_item(store)
    view = DetailView(selectors.work_item_detail(item.pk))
    body = {"work_item": view, "action": view.action(claim.action.pk), "run": claim.run,
            "dependencies": selectors.claim_dependencies(claim.action, claim.work_item, actions=view.actions,
                                                         runs=view.runs)}
    assert body["dependencies"]
    assert fast_json(ClaimOut, body) == ninja_json(ClaimOut, body)
    run, action, got = store.submit(claim, completed())
    view = DetailView(selectors.work_item_detail(got.pk))
    body = {"run": run, "action": view.action(action.pk), "work_item": view}
    assert fast_json(SubmitOut, body) == ninja_json(SubmitOut, body)


def test_a_linear_item_renders_as_ninja_renders_it(store):
    item = store.linear()
    store.complete(store.claim())
    view = DetailView(selectors.work_item_detail(item.pk))
    assert fast_json(WorkItemDetailOut, view) == ninja_json(WorkItemDetailOut, view)


def test_defaults_and_resolvers_follow_the_schema():
    class Inner(BaseModel):
        n: int = 7

    class Outer(BaseModel):
        a: str
        b: list[Inner] = []
        c: Inner | None = None

        @staticmethod
        def resolve_a(obj) -> str:
            return obj["raw"].upper()

    assert render.render(Outer, {"raw": "x", "b": [{}, {"n": 2}]}) == {"a": "X", "b": [{"n": 7}, {"n": 2}], "c": None}
    # a required field that the object lacks is an error, not a silent null
    with pytest.raises(AttributeError):
        render.render(Inner.__class__("Req", (BaseModel,), {"__annotations__": {"x": int}}), {})


def test_live_stream_payloads_render_as_pydantic_renders_them(store):
    """The live stream's event and summary payloads (dashboard/stream/) use the same plans."""
    from workcenter.models import Event
    from workcenter.schemas_out import WorkItemSummaryOut

    item, _ = _busy_item(store)
    linear = store.linear()
    summaries = selectors.work_item_summaries([item.pk, linear.pk])
    for pk in (item.pk, linear.pk):
        for summary in (selectors.work_item_summary(pk), summaries[pk]):
            assert render.render(WorkItemSummaryOut, summary) == \
                WorkItemSummaryOut.from_orm(summary).model_dump(mode="json")
    assert render.render(WorkItemSummaryOut, summaries[item.pk])["current_action"] is not None
    stored = list(Event.objects.all())
    assert len(stored) >= 8
    for event in stored:
        assert render.render(EventOut, event) == EventOut.from_orm(event).model_dump(mode="json")


def test_attribute_objects_follow_defaults_and_report_what_they_lack():
    class Item(BaseModel):
        a: int
        b: list[int] = [1]
        when: str | None = None

    class Obj:
        a = 3

    assert render.render(Item, Obj()) == {"a": 3, "b": [1], "when": None}
    with pytest.raises(AttributeError, match="'a'"):
        render.render(Item, object())


def test_a_schema_that_nests_itself_renders_its_nested_values():
    class Node(BaseModel):
        name: str
        children: list["Node"] = []
        parent: "Node | None" = None

    Node.model_rebuild()
    tree = {"name": "root", "children": [{"name": "leaf", "children": [None]}], "parent": {"name": "up"}}
    assert render.render(Node, tree) == {
        "name": "root", "children": [{"name": "leaf", "children": [None], "parent": None}],
        "parent": {"name": "up", "children": [], "parent": None}}


def test_a_schema_that_cannot_compile_leaves_no_plan_behind():
    class Bad(BaseModel):
        x: int

        def resolve_x(self):  # resolvers must be static
            return 1

    for _ in range(2):
        with pytest.raises(TypeError, match="static"):
            render.compile_schema(Bad)


def test_threads_rendering_a_schema_for_the_first_time_all_get_its_plan(monkeypatch):
    """Request threads render at once after a server starts: while one compiles a plan, the
    others wait for it (they once got the compiling thread's placeholder and recursed)."""
    import threading
    import time

    class Fresh(BaseModel):
        n: int
        child: "Fresh | None" = None

    Fresh.model_rebuild()
    generate = render._generate

    def slow_generate(schema):
        time.sleep(0.05)  # a compile long enough for the other threads to arrive meanwhile
        return generate(schema)

    monkeypatch.setattr(render, "_generate", slow_generate)
    start, results, errors = threading.Barrier(4), [], []

    def one():
        start.wait()
        try:
            results.append(render.render(Fresh, {"n": 1, "child": {"n": 2}}))
        except BaseException as exc:  # noqa: BLE001 (collected for the assertion)
            errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [{"n": 1, "child": {"n": 2, "child": None}}] * 4
