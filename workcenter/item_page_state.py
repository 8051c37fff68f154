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

* hello (every whole state the stream pushes, the hello's and those on events): the full form
  without a stage's earlier attempts, and `"left_out": {"actions", "runs",
  "nodes", "edges"}` counting what it leaves out (`Snapshot.hello`): the ended actions that are
  not their stage's newest (with their nodes and the edges touching them) and the ended runs that
  are not their stage's newest. Its rev is the whole state's: a page that holds those rows from
  its earlier reads (they no longer change) puts them back; one that holds fewer reads the whole
  state (`GET …/state`, the full form, nothing left out).

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
from .models import Action, Run, WorkItem
from .schemas_out import DetailView, GraphOut, StateActionOut, StateRunOut, WorkItemDetailOut

# WorkItemDetail's fields that the state leaves out of its `item`
LEFT_OUT = ("actions", "runs", "events")
_GONE = object()
# an action in one of these statuses no longer changes unless it is its stage's newest (a graph
# item resets that one in place; a linear item appends a new one)
ENDED_ACTIONS = frozenset({"completed", "failed", "superseded", "cancelled"})


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

    def hello(self, at_id: int) -> dict:
        """The whole state as the stream pushes it (a hello, or on an event when no diff applies):
        without a stage's earlier attempts, so that its
        size does not grow with the retries (module doc). Left out: the actions that ended
        (`ENDED_ACTIONS`) and are not their stage's newest, their graph nodes and the edges that
        touch them, and the runs that ended and are not their stage's newest; `left_out` counts
        them. Those rows no longer change: a page that holds them from an earlier read keeps
        them, one that holds fewer reads the whole state back (GET …/state)."""
        newest: dict[str, dict] = {}
        for action in self.actions.values():
            held = newest.get(action["stage_id"])
            if held is None or action["sequence"] > held["sequence"]:
                newest[action["stage_id"]] = action
        old = {k for k, a in self.actions.items()
               if a["status"] in ENDED_ACTIONS and newest[a["stage_id"]] is not a}
        stage_of = {k: a["stage_id"] for k, a in self.actions.items()}
        last_run: dict[str, dict] = {}
        for run in self.runs.values():
            stage = stage_of.get(run["action_id"])
            held = last_run.get(stage)
            if held is None or (run["started_at"], run["id"]) > (held["started_at"], held["id"]):
                last_run[stage] = run
        old_runs = {k for k, r in self.runs.items()
                    if r["ended_at"] is not None and last_run.get(stage_of.get(r["action_id"])) is not r}
        if not old and not old_runs:
            return self.full(at_id)
        state = self.full(at_id)
        graph = state["graph"]
        nodes = [n for n in graph["nodes"] if n["id"] not in old]
        edges = [e for e in graph["edges"] if e["source_action_id"] not in old and e["target_action_id"] not in old]
        state["graph"] = {**graph, "nodes": nodes, "edges": edges}
        state["actions"] = [a for a in state["actions"] if a["id"] not in old]
        state["runs"] = [r for r in state["runs"] if r["id"] not in old_runs]
        state["left_out"] = {"actions": len(old), "runs": len(old_runs), "nodes": len(graph["nodes"]) - len(nodes),
                             "edges": len(graph["edges"]) - len(edges)}
        return state

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


def stage_runs(item_id: str, stage_id: str) -> dict:
    """`{"stage_id", "runs"}`: every run of every action of one stage of the item, whole (the
    response, evidence and acceptance checks the state leaves out, the summary and error uncut),
    oldest first. What the side panel reads when it shows a stage, and again when one of its runs
    ended meanwhile. NotFound when the item is not there or has no such stage."""
    actions = list(Action.objects.filter(Action.of_stage(stage_id), work_item_id=item_id).values_list("pk", flat=True))
    if not actions:
        if not WorkItem.objects.filter(pk=item_id).exists():
            raise NotFound(f"no work item has the id {item_id}", extra={"id": item_id})
        raise NotFound(f"the work item {item_id} has no stage {stage_id}", extra={"id": item_id, "stage_id": stage_id})
    runs = Run.objects.filter(work_item_id=item_id, action_id__in=actions).order_by("started_at", "id")
    return {"stage_id": stage_id, "runs": list(runs)}


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
