"""What the stream pushes besides events: the per-item state (diffs that rebuild exactly what
GET …/state answers) and the list's overview (pushed after changes, at most once a second)."""
from __future__ import annotations

import time

import pytest
from django.test import Client

from dashboard.stream import live_state
from tests.conftest import make_graph
from workcenter import item_page_state
from workcenter.models import WorkItem

from .conftest import TIMEOUT, open_stream, run

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [{"id": "a", "type": "research"}, {"id": "b", "type": "research"},
          {"id": "c", "deps": ["a", "b"], "type": "implement"}]


def apply(shown: dict, state: dict, event_id: int) -> dict:
    """What the page does with a pushed state (static/dashboard/item.js applyState)."""
    if state["base_rev"] is None:
        return {k: v for k, v in state.items() if k != "base_rev"}
    assert state["base_rev"] == shown["rev"]
    nodes = {n["id"]: n for n in shown["graph"]["nodes"]} | {n["id"]: n for n in state["nodes"]}
    graph = {**shown["graph"], "status": state["item"].get("status", shown["graph"]["status"]),
             "last_event_id": event_id, "nodes": sorted(nodes.values(), key=lambda n: n["sequence"]),
             "edges": shown["graph"]["edges"] + state.get("edges", [])}
    actions = {a["id"]: a for a in shown["actions"]} | {a["id"]: a for a in state["actions"]}
    runs = {r["id"]: r for r in shown["runs"]} | {r["id"]: r for r in state["runs"]}
    return {"rev": state["rev"], "graph": graph, "item": {**shown["item"], **state["item"]},
            "actions": sorted(actions.values(), key=lambda a: a["sequence"]),
            "runs": sorted(runs.values(), key=lambda r: (r["started_at"], r["id"]), reverse=True)}


def whole(item_id: str, client: Client) -> dict:
    state = client.get(f"/api/v1/work-items/{item_id}/state").json()
    del state["base_rev"]
    return state


def test_a_diff_rebuilds_the_state_it_was_made_for(store):
    item = make_graph(store, STAGES)
    before = item_page_state.read(item.pk)
    assert item_page_state.read(item.pk).rev == before.rev  # named by content: the same read, the same rev
    claim = store.claim_item(item.pk, stage="a")
    after = item_page_state.read(item.pk)
    diff = after.diff(before, 99)
    assert diff["base_rev"] == before.rev and diff["rev"] == after.rev != before.rev
    changed = [n["stage_id"] for n in diff["nodes"]]
    assert "a" in changed and "b" not in changed  # the claimed node (and c, which now waits on it less)
    assert [r["id"] for r in diff["runs"]] == [claim.run.pk]  # the new run
    assert "workflow_snapshot" not in diff["item"] and "title" not in diff["item"]  # unchanged, not sent again
    rebuilt = apply(apply({}, before.full(98), 98), diff, 99)
    assert rebuilt == {k: v for k, v in after.full(99).items() if k != "base_rev"}
    # another item's state has another structure: never a diff, the whole state
    other = item_page_state.read(make_graph(store, STAGES, title="Other").pk)
    assert after.diff(other, 100)["base_rev"] is None


def test_the_item_stream_pushes_diffs_that_rebuild_what_the_api_answers(store, viewer, viewer_token):
    item = make_graph(store, STAGES)
    client = Client()
    client.force_login(viewer)

    async def scenario():
        comm, hello = await open_stream(f"/ws/work-items/{item.pk}/", headers=[
            (b"authorization", f"Bearer {viewer_token}".encode())])
        shown = {**{k: v for k, v in hello["state"].items() if k != "base_rev"}, "graph": hello["graph"]}
        from channels.db import database_sync_to_async
        claims = {}
        steps = [lambda: claims.setdefault("a", store.claim_item(item.pk, stage="a")),
                 lambda: claims.setdefault("b", store.claim_item(item.pk, stage="b")),
                 lambda: store.complete(claims["a"])]
        nonlocal_state = shown
        for step in steps:
            await database_sync_to_async(step)()
            while True:  # the batch's messages: the item's last one carries the state
                msg = await comm.receive_json_from(timeout=TIMEOUT)
                if "state" in msg:
                    break
            # diffs on the hello's state, then on each other (one process, one chain)
            assert msg["state"]["base_rev"] == nonlocal_state["rev"]
            nonlocal_state = apply(nonlocal_state, msg["state"], msg["event"]["id"])
            assert nonlocal_state == await database_sync_to_async(whole)(item.pk, client)
        await comm.disconnect()
    run(scenario)


def test_a_state_too_large_to_push_is_announced_and_read_back(store, viewer, viewer_token, monkeypatch):
    monkeypatch.setattr(live_state, "MAX_STATE_BYTES", 100)
    item = make_graph(store, STAGES)

    async def scenario():
        comm, hello = await open_stream(f"/ws/work-items/{item.pk}/", headers=[
            (b"authorization", f"Bearer {viewer_token}".encode())])
        from channels.db import database_sync_to_async
        await database_sync_to_async(store.claim_item)(item.pk, stage="a")
        while True:
            msg = await comm.receive_json_from(timeout=TIMEOUT)
            if "state" in msg:
                break
        assert set(msg["state"]) == {"rev", "base_rev", "read"} and msg["state"]["read"] is True
        await comm.disconnect()
    run(scenario)


def test_the_list_stream_pushes_the_overview_after_changes_at_most_once_a_second(store, viewer_token, settings):
    settings.WORKCENTER_STREAM_OVERVIEW = True
    items = [make_graph(store, STAGES, title=f"Item {i}") for i in range(3)]

    async def scenario():
        from channels.db import database_sync_to_async
        comm, hello = await open_stream("/ws/work-items/", headers=[
            (b"authorization", f"Bearer {viewer_token}".encode())])
        assert hello["overview"]["counts"]["ready"] == 3 and hello["overview"]["running"] == 0
        started = time.monotonic()
        for item in items:  # three changes in well under a second
            await database_sync_to_async(store.claim_item)(item.pk, stage="a")
        overviews = []
        while time.monotonic() - started < 3:
            if await comm.receive_nothing(timeout=0.2):
                continue
            msg = await comm.receive_json_from(timeout=TIMEOUT)
            if msg["type"] == "overview":
                overviews.append((time.monotonic() - started, msg["overview"]))
        # one at once, one at the interval's end with the last change in it; none later
        assert 1 <= len(overviews) <= 2, overviews
        if len(overviews) == 2:  # the server starts the second an interval after the first; the
            # first's own read and send (at most its arrival time) may have delayed its arrival
            assert overviews[1][0] - overviews[0][0] >= live_state.INTERVAL * 0.9 - overviews[0][0], overviews
        last = overviews[-1][1]
        truth = await database_sync_to_async(lambda: {s: WorkItem.objects.filter(status=s).count()
                                                      for s in ("ready", "running")})()
        assert last["running"] == 3 and last["counts"]["running"] == truth["running"] == 3
        await comm.disconnect()
    run(scenario)
