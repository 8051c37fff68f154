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
* diff: `{"rev", "base_rev", "item", "nodes", "actions", "runs"}` — `item` the item's fields
  (its `workflow_snapshot` only when that changed), `nodes` / `actions` / `runs` only those that
  changed or are new, each whole. A change of structure (a node or an edge added or removed, a
  graph mode changed, an action or run gone) is always a full state, never a diff.

The item's fields are those of WorkItemDetail minus `actions`, `runs` and `events` (the stream's
events are the timeline).
"""
from __future__ import annotations

import hashlib

from . import render, selectors
from .errors import NotFound
from .schemas_out import DetailView, GraphOut, WorkItemDetailOut

LISTS = ("actions", "runs", "events")


class Snapshot:
    """One read of an item's state, its parts rendered (see the module doc)."""

    __slots__ = ("item", "workflow", "graph_head", "edges", "nodes", "actions", "runs", "rev", "_parts")

    def __init__(self, detail: dict, graph: dict) -> None:
        rendered = render.render(WorkItemDetailOut, DetailView({**detail, "events": []}))
        self.actions = {a["id"]: a for a in rendered.pop("actions")}
        self.runs = {r["id"]: r for r in rendered.pop("runs")}
        rendered.pop("events")
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
            "structure": dumps([self.graph_head, list(self.nodes), self.edges]),
            "nodes": {k: dumps(v) for k, v in self.nodes.items()},
            "actions": {k: dumps(v) for k, v in self.actions.items()},
            "runs": {k: dumps(v) for k, v in self.runs.items()},
        }
        digest = hashlib.blake2b(digest_size=12)
        for key in ("item", "workflow", "structure"):
            digest.update(self._parts[key])
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
        """What changed since `before` (a diff on `before.rev`), or the full state when the
        structure changed (module doc)."""
        mine, theirs = self._parts, before._parts
        if (mine["structure"] != theirs["structure"] or not set(theirs["actions"]) <= set(mine["actions"])
                or not set(theirs["runs"]) <= set(mine["runs"])):
            return self.full(at_id)
        item = self.item if mine["workflow"] != theirs["workflow"] else {
            k: v for k, v in self.item.items() if k != "workflow_snapshot"}
        return {"rev": self.rev, "base_rev": before.rev, "item": item,
                "nodes": [self.nodes[k] for k, v in mine["nodes"].items() if theirs["nodes"].get(k) != v],
                "actions": [self.actions[k] for k, v in mine["actions"].items() if theirs["actions"].get(k) != v],
                "runs": [self.runs[k] for k, v in mine["runs"].items() if theirs["runs"].get(k) != v]}


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
