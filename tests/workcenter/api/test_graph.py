"""GET /work-items/{id}/graph (API.md "Graph"): nodes, edges, leases and blocked_by reasons."""
from __future__ import annotations

import pytest

from workcenter.models import Event

from .conftest import ISO_MS

pytestmark = pytest.mark.django_db


def _planned(api, actions, **create):
    """A graph item built the real way: the planning triage submits a plan over HTTP."""
    item = api.create(**create)
    triage = api.claim()
    assert triage["work_item"]["id"] == item["id"]
    result = api.complete(triage, plan={"work_item_type": "analysis", "actions": actions})
    assert result["run"]["status"] == "completed", result["run"]["error"]
    return item


def _graph(api, item_id):
    r = api.get(f"/work-items/{item_id}/graph")
    assert r.status_code == 200, r.content
    return r.json()


def _nodes(graph):
    return {n["stage_id"]: n for n in graph["nodes"]}


def test_graph_of_a_planned_item_with_dependency_reasons(api, viewer):
    item = _planned(api, [
        {"id": "a", "type": "research", "name": "Collect", "objective": "Collect facts"},
        {"id": "b", "type": "analysis", "objective": "Analyse", "depends_on_action_ids": ["a"]},
        {"id": "c", "type": "analysis", "objective": "Side quest", "depends_on_action_ids": []},
    ])
    # when
    graph = _graph(viewer, item["id"])
    # then
    assert graph["work_item_id"] == item["id"]
    assert graph["execution_mode"] == "graph"
    assert graph["status"] == "ready"
    assert [n["stage_id"] for n in graph["nodes"]] == ["triage", "a", "b", "c"]
    nodes = _nodes(graph)
    assert set(nodes["a"]) == {"id", "stage_id", "type", "name", "status", "attempt", "max_attempts",
                               "workspace_mode", "sequence", "lease", "blocked_by", "run",
                               "stopping", "usual_duration_s", "overdue_after_s"}  # the last three: additions
    assert nodes["a"]["stopping"] is False and nodes["a"]["usual_duration_s"] is None
    assert nodes["a"]["name"] == "Collect" and nodes["b"]["name"] == "b"
    assert nodes["triage"]["status"] == "completed" and nodes["triage"]["blocked_by"] == []
    assert {(e["source"], e["target"]) for e in graph["edges"]} == {("triage", "a"), ("a", "b"), ("triage", "c")}
    assert nodes["a"]["blocked_by"] == [] and nodes["c"]["blocked_by"] == []
    assert nodes["b"]["blocked_by"] == ["waiting for stage a (ready)"]
    assert graph["last_event_id"] == Event.objects.filter(work_item_id=item["id"]).latest("id").id

    # when a runs
    claim = api.claim()
    assert claim["action"]["stage_id"] == "a"
    nodes = _nodes(_graph(api, item["id"]))
    # then its lease shows and b names the running dependency
    lease = nodes["a"]["lease"]
    assert lease["run_id"] == claim["run"]["id"] and lease["owner_boot_id"] == "boot-A"
    assert lease["lease_epoch"] == 1 and ISO_MS.match(lease["expires_at"])
    assert nodes["a"]["blocked_by"] == []
    assert nodes["b"]["blocked_by"] == ["waiting for stage a (running)"]
    assert nodes["b"]["lease"] is None

    # when a completes, b is free
    api.complete(claim)
    nodes = _nodes(_graph(api, item["id"]))
    assert nodes["a"]["status"] == "completed" and nodes["a"]["lease"] is None
    assert nodes["b"]["blocked_by"] == []


def test_graph_names_a_waiting_item(api):
    item = _planned(api, [
        {"id": "a", "type": "research", "objective": "Ask"},
        {"id": "c", "type": "analysis", "objective": "Independent", "depends_on_action_ids": []},
    ])
    claim = api.claim()
    assert claim["action"]["stage_id"] == "a"
    api.submit(claim, outcome="waiting", waiting_reason="Which region?")
    graph = _graph(api, item["id"])
    assert graph["status"] == "waiting"
    nodes = _nodes(graph)
    assert nodes["a"]["status"] == "waiting" and nodes["a"]["blocked_by"] == []
    assert nodes["c"]["status"] == "ready"
    assert nodes["c"]["blocked_by"] == ["work item is waiting"]
    assert api.post("/claims", {"owner_boot_id": "b"}).status_code == 204


def test_graph_names_the_run_holding_the_workspace(api, tmp_path):
    holder = api.create(title="Holder", work_dir=str(tmp_path))
    waiter = api.create(title="Waiter", work_dir=str(tmp_path))
    claim = api.claim()
    assert claim["work_item"]["id"] == holder["id"]
    # when
    graph = _graph(api, waiter["id"])
    # then
    [node] = graph["nodes"]
    assert node["status"] == "ready"
    [reason] = node["blocked_by"]
    assert claim["run"]["id"] in reason
    assert holder["id"] in reason and '"Holder"' in reason
    assert "shared" in reason and "workspace" in reason
    assert api.post("/claims", {"owner_boot_id": "boot-B"}).status_code == 204
    # the holder's own node is running, not blocked
    assert _graph(api, holder["id"])["nodes"][0]["blocked_by"] == []
    # once the holder stops, the waiter is free again
    api.post(f"/runs/{claim['run']['id']}/interrupt", {"owner_boot_id": "boot-A", "lease_epoch": 1})
    assert _graph(api, waiter["id"])["nodes"][0]["blocked_by"] == []


def test_graph_workspace_rule_allows_reads_beside_reads(api, tmp_path):
    # a read-mode stage of another item does not block a read-mode stage (DOMAIN §5.4)
    first = api.create(title="First", work_dir=str(tmp_path))
    second = api.create(title="Second", work_dir=str(tmp_path))
    for item, stage in ((first, "r1"), (second, "r2")):
        triage = api.claim()
        assert triage["work_item"]["id"] == item["id"] and triage["action"]["type"] == "triage"
        plan = {"work_item_type": "analysis",
                "actions": [{"id": stage, "type": "research", "objective": "Read", "workspace_mode": "read"}]}
        assert api.complete(triage, plan=plan)["run"]["status"] == "completed"
    claim = api.claim()
    assert claim["action"]["stage_id"] == "r1"
    assert _nodes(_graph(api, second["id"]))["r2"]["blocked_by"] == []
    assert api.claim(boot="boot-B")["action"]["stage_id"] == "r2"


def test_linear_graph_is_a_chain_of_every_action(api):
    item = api.create(work_item_type="software-change")
    claim = api.claim()
    api.complete(claim)
    # guidance supersedes implement and appends a copy
    detail = api.get(f"/work-items/{item['id']}").json()
    api.post(f"/work-items/{item['id']}/guidance", {"action_id": detail["current_action_id"], "revision": 1,
                                                    "guidance": "smaller diff"})
    graph = _graph(api, item["id"])
    assert graph["execution_mode"] == "linear"
    assert [(n["stage_id"], n["status"]) for n in graph["nodes"]] == [
        ("triage", "completed"), ("implement", "superseded"), ("implement", "ready")]
    assert [n["sequence"] for n in graph["nodes"]] == [1, 2, 3]
    assert [(e["source"], e["target"]) for e in graph["edges"]] == [("triage", "implement"),
                                                                  ("implement", "implement")]
    assert [e["target_action_id"] for e in graph["edges"]] == [n["id"] for n in graph["nodes"][1:]]
    assert graph["nodes"][2]["blocked_by"] == []
    assert graph["nodes"][0]["name"] == "Triage"


def test_cancelled_graph_keeps_its_nodes(api):
    item = _planned(api, [{"id": "a", "type": "research", "objective": "x"}])
    api.post(f"/work-items/{item['id']}/cancel")
    graph = _graph(api, item["id"])
    assert graph["status"] == "cancelled"
    assert [(n["stage_id"], n["status"]) for n in graph["nodes"]] == [("triage", "completed"), ("a", "cancelled")]


def test_graph_names_a_sibling_holding_the_workspace(api, tmp_path):
    item = _planned(api, [
        {"id": "x", "type": "implement", "objective": "One"},
        {"id": "y", "type": "implement", "objective": "Two", "depends_on_action_ids": []},
    ], work_dir=str(tmp_path))
    claim = api.claim()
    assert claim["action"]["stage_id"] == "x"
    nodes = _nodes(_graph(api, item["id"]))
    [reason] = nodes["y"]["blocked_by"]
    assert claim["run"]["id"] in reason and "this work item" in reason and "stage x" in reason
