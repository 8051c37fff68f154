"""A work item's live state: what the work-item page shows (its graph and its detail, without the
events), read in one go and rendered once, so that the per-item stream can push it instead of the
page pulling `GET …/graph` and `GET …/work-items/<id>` after every event.

A `Snapshot` is one read of the item (`selectors.work_item_detail` without events, then
`selectors.graph_snapshot` on those same rows: four statements and the workspace's running
actions). Each of its parts (the item's fields, every graph node, every action, every run) is
kept as its rendered JSON bytes, so two snapshots compare part by part without walking dicts.

`rev` names a snapshot by its content (a digest of every part): two processes that read the
same state give it the same rev. A client holding the state of rev X can apply a diff whose
`base_rev` is X and nothing else; on any other base it reads the whole state back
(`GET …/work-items/<id>/state`), whose rev chains with the next diff when nothing changed in
between. The wire form (`state` in the per-item stream's messages, API additions in docs/api.md):

* full: `{"rev", "base_rev": null, "item", "graph", "actions", "runs"}` — the page replaces what
  it holds; `graph` is a Graph (API.md §3) whose `last_event_id` is the message's event id;
* diff: `{"rev", "base_rev", "item", "nodes", "actions", "runs"}`, and `"edges"` when edges were
  added — `item` the item's fields that changed (often `status`, `revision`, `updated_at`, …), `nodes` /
  `actions` / `runs` those that changed or are new, each whole (the page puts a new node in
  sequence order, a new action by sequence, a new run by start), `edges` the new edges only. A
  retry (new actions, runs, nodes and edges) is a diff; a node, edge, action or run gone or the
  execution mode changed is a full state, never a diff.

The item's fields are those of WorkItemDetail minus `actions`, `runs` and `events` (the stream's
events are the timeline). The actions and runs are their state forms (schemas_out.StateActionOut,
StateRunOut): what the page draws, bounded per attempt, without an action's instruction, brief
and context (`instruction()`, read when the side panel opens) nor a run's response, evidence,
snapshots and checkpoint.
"""
from __future__ import annotations

import hashlib

from . import render, selectors
from .errors import NotFound
from .models import Action, WorkItem
from .schemas_out import DetailView, GraphOut, StateActionOut, StateRunOut, WorkItemDetailOut

# WorkItemDetail's fields that the state leaves out of its `item`
LEFT_OUT = ("actions", "runs", "events")
_GONE = object()


class Snapshot:
    """One read of an item's state, its parts rendered (see the module doc)."""

    __slots__ = ("item", "workflow", "graph_head", "edges", "nodes", "actions", "runs", "rev", "_parts")

    def __init__(self, detail: dict, graph: dict) -> None:
        rendered = render.render(WorkItemDetailOut, DetailView({**detail, "actions": [], "runs": [], "events": []}))
        for key in LEFT_OUT:
            del rendered[key]
        self.actions = {a["id"]: a for a in (render.render(StateActionOut, a) for a in detail["actions"])}
        self.runs = {r["id"]: r for r in (render.render(StateRunOut, r) for r in detail["runs"])}
        self.workflow = rendered.get("workflow_snapshot")
        self.item = rendered
        g = render.render(GraphOut, graph)
        self.nodes = {n["id"]: n for n in g["nodes"]}
        self.edges = g["edges"]
        self.graph_head = {"work_item_id": g["work_item_id"], "execution_mode": g["execution_mode"]}
        dumps = render.dumps
        self._parts = {
            "item": dumps({k: v for k, v in rendered.items() if k != "workflow_snapshot"}),
            "workflow": dumps(self.workflow),
            "head": dumps(self.graph_head),
            "edges": [dumps(e) for e in self.edges],
            "nodes": {k: dumps(v) for k, v in self.nodes.items()},
            "actions": {k: dumps(v) for k, v in self.actions.items()},
            "runs": {k: dumps(v) for k, v in self.runs.items()},
        }
        digest = hashlib.blake2b(digest_size=12)
        for key in ("item", "workflow", "head"):
            digest.update(self._parts[key])
        for data in self._parts["edges"]:
            digest.update(data)
        for key in ("nodes", "actions", "runs"):
            for part_id, data in self._parts[key].items():
                digest.update(part_id.encode("utf-8", "surrogatepass"))
                digest.update(data)
        self.rev = digest.hexdigest()

    def full(self, at_id: int) -> dict:
        """The whole state; the graph's `last_event_id` is `at_id`."""
        graph = {**self.graph_head, "status": self.item["status"], "nodes": list(self.nodes.values()),
                 "edges": self.edges, "last_event_id": at_id}
        return {"rev": self.rev, "base_rev": None, "item": self.item, "graph": graph,
                "actions": list(self.actions.values()), "runs": list(self.runs.values())}

    def diff(self, before: "Snapshot", at_id: int) -> dict:
        """What changed since `before` (a diff on `before.rev`): what is new or changed; the full
        state when something is gone or the execution mode changed (module doc)."""
        mine, theirs = self._parts, before._parts
        edges, old_edges = set(mine["edges"]), set(theirs["edges"])
        if (mine["head"] != theirs["head"] or not set(theirs["nodes"]) <= set(mine["nodes"])
                or not old_edges <= edges or not set(theirs["actions"]) <= set(mine["actions"])
                or not set(theirs["runs"]) <= set(mine["runs"])):
            return self.full(at_id)
        item = {k: v for k, v in self.item.items() if before.item.get(k, _GONE) != v}
        out = {"rev": self.rev, "base_rev": before.rev, "item": item,
               "nodes": [self.nodes[k] for k, v in mine["nodes"].items() if theirs["nodes"].get(k) != v],
               "actions": [self.actions[k] for k, v in mine["actions"].items() if theirs["actions"].get(k) != v],
               "runs": [self.runs[k] for k, v in mine["runs"].items() if theirs["runs"].get(k) != v]}
        if edges != old_edges:
            out["edges"] = [e for e, data in zip(self.edges, mine["edges"]) if data not in old_edges]
        return out


def instruction(item_id: str, action_id: str) -> dict:
    """`{"action_id", "instruction", "brief", "context"}` of one action of the item: the texts its
    state leaves out (NotFound when the item or the action is not there)."""
    row = (Action.objects.filter(work_item_id=item_id, pk=action_id)
           .values_list("instruction", "brief", "context").first())
    if row is None:
        if not WorkItem.objects.filter(pk=item_id).exists():
            raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id})
        raise NotFound(f"the work item {item_id} has no action with the id {action_id}",
                       extra={"id": item_id, "action_id": action_id})
    return {"action_id": action_id, "instruction": row[0] or "", "brief": row[1], "context": row[2] or []}


def read(item_id: str) -> Snapshot:
    """The item's state now (NotFound when it is gone)."""
    detail = selectors.work_item_detail(item_id, events=False)
    return Snapshot(detail, selectors.graph_snapshot(item_id, detail=detail, last_event_id=0))


def read_many(item_ids) -> dict[str, Snapshot]:
    """`read` for each id; an item that is gone is left out."""
    out = {}
    for item_id in item_ids:
        try:
            out[item_id] = read(item_id)
        except NotFound:
            continue
    return out
