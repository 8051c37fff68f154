"""The live stream (API.md §4) through the real ASGI application with WebsocketCommunicator."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from dashboard.stream import consumers
from dashboard.stream.messages import PROGRESS_TAIL_CHARS
from dashboard.stream.publisher import publisher
from workcenter import events, selectors, services
from workcenter.models import Event

from .conftest import TIMEOUT, close_code, open_stream, receive_all, run, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

db_call = database_sync_to_async


def bearer(token: str):
    return [(b"authorization", f"Bearer {token}".encode())]


def stored_events(item_id=None, after_id=0) -> list[dict]:
    """What the REST API says about the events: the stream must carry the same JSON."""
    client = Client()
    client.force_login(User.objects.get(username="viewer"))
    path = "/api/v1/events" if item_id is None else f"/api/v1/work-items/{item_id}/events"
    response = client.get(path, {"after_id": after_id, "limit": 500})
    assert response.status_code == 200, response.content
    return response.json()["events"]


def rest_summary(item_id: str) -> dict:
    client = Client()
    client.force_login(User.objects.get(username="viewer"))
    items = client.get("/api/v1/work-items", {"limit": 500}).json()["items"]
    return next(i for i in items if i["id"] == item_id)


# --- authentication -----------------------------------------------------------------------------

def test_stream_without_credentials_closes_4401():
    async def scenario():
        for path in ("/ws/work-items/", "/ws/work-items/some-item/"):
            comm, _ = await open_stream(path, expect_hello=False)
            assert await close_code(comm) == 4401
            assert await comm.receive_nothing()
    run(scenario)


def test_unknown_websocket_routes_close_4404(viewer_token):
    async def scenario():
        for path in ("/ws/nope/", "/ws/work-items/a/b/", "/api/v1/work-items", "/"):
            comm, _ = await open_stream(f"{path}?token={viewer_token}", expect_hello=False)
            assert await close_code(comm) == 4404
            assert await comm.receive_nothing()
    run(scenario)


def test_stream_with_bad_token_closes_4401_without_session_fallback(viewer):
    cookie = session_cookie(viewer)

    async def scenario():
        for headers, path in [
            (bearer("wc_nope_nope"), "/ws/work-items/"),
            ([(b"authorization", b"Basic dXNlcjpwdw==")], "/ws/work-items/"),
            ([], "/ws/work-items/?token=wc_bad_token"),
        ]:
            comm, _ = await open_stream(path, headers=headers + [(b"cookie", cookie)], expect_hello=False)
            assert await close_code(comm) == 4401
    run(scenario)


def test_stream_without_view_permission_closes_4403(db):
    user = User.objects.create_user("nobody")
    cookie = session_cookie(user)

    async def scenario():
        for path in ("/ws/work-items/", "/ws/work-items/x/"):
            comm, _ = await open_stream(path, headers=[(b"cookie", cookie)], expect_hello=False)
            assert await close_code(comm) == 4403
            assert await comm.receive_nothing()
    run(scenario)


def test_stream_accepts_session_cookie_bearer_header_and_token_query(viewer, viewer_token):
    cookie = session_cookie(viewer)

    async def scenario():
        for path, headers in [
            ("/ws/work-items/", [(b"cookie", cookie)]),
            ("/ws/work-items/", [(b"cookie", cookie), (b"host", b"testserver"), (b"origin", b"http://testserver")]),
            ("/ws/work-items/", bearer(viewer_token)),
            (f"/ws/work-items/?token={viewer_token}", []),
        ]:
            comm, hello = await open_stream(path, headers=headers)
            assert hello == {"type": "hello", "last_event_id": 0, "overview": hello["overview"]}
            assert hello["overview"]["counts"] and hello["overview"]["running"] == 0
            await comm.disconnect()
    run(scenario)


def test_stream_ignores_session_cookie_sent_by_a_foreign_page(viewer, viewer_token):
    cookie = session_cookie(viewer)

    async def scenario():
        foreign = [(b"cookie", cookie), (b"host", b"workcenter.example"), (b"origin", b"https://evil.example")]
        comm, _ = await open_stream("/ws/work-items/", headers=foreign, expect_hello=False)
        assert await close_code(comm) == 4401
        # a token is not ambient: a page that has one may use it from anywhere
        comm, hello = await open_stream(f"/ws/work-items/?token={viewer_token}", headers=foreign)
        assert hello["type"] == "hello"
        await comm.disconnect()
    run(scenario)


def test_stream_refuses_bad_after_id_and_unknown_item(viewer_token):
    async def scenario():
        for path, code in [
            ("/ws/work-items/?after_id=-1", 4400),
            ("/ws/work-items/?after_id=abc", 4400),
            ("/ws/work-items/?after_id=%C2%B2", 4400),  # a Unicode digit is not an id
            ("/ws/work-items/?after_id=99999999999999999999999", 4400),
            ("/ws/work-items/no-such-item/", 4404),
        ]:
            comm, _ = await open_stream(path, headers=bearer(viewer_token), expect_hello=False)
            assert await close_code(comm) == code, path
    run(scenario)


# --- hello and live events ----------------------------------------------------------------------

def test_hello_names_last_event_id_and_per_item_graph(store, viewer, viewer_token):
    a = store.linear(title="A")
    b = store.linear(title="B")
    client = Client()
    client.force_login(viewer)
    rest_graph = client.get(f"/api/v1/work-items/{a.pk}/graph").json()
    rest_overview = client.get("/api/v1/overview").json()
    rest_state = client.get(f"/api/v1/work-items/{a.pk}/state").json()
    # the per-item hello's state is the item's whole state; its graph is the hello's own
    assert rest_state.pop("graph") == rest_graph and rest_state["base_rev"] is None
    assert rest_state["item"]["id"] == a.pk and "actions" not in rest_state["item"]
    last = Event.objects.latest("id").id
    a_last = Event.objects.filter(work_item_id=a.pk).latest("id").id
    assert a_last < Event.objects.filter(work_item_id=b.pk).latest("id").id == last

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        assert hello["overview"]["counts"] == rest_overview["counts"]
        assert hello == {"type": "hello", "last_event_id": last, "overview": hello["overview"]}
        await comm.disconnect()
        comm, hello = await open_stream(f"/ws/work-items/{a.pk}/", headers=bearer(viewer_token))
        assert hello == {"type": "hello", "last_event_id": a_last, "graph": rest_graph, "state": rest_state}
        assert rest_graph["last_event_id"] == a_last and rest_graph["nodes"]
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)


def test_stream_sends_one_message_per_committed_event_in_id_order(store, viewer, viewer_token):
    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        item = await db_call(store.linear)(title="Live")
        claim = await db_call(store.claim)()
        await db_call(store.complete)(claim)
        expected = await db_call(stored_events)(after_id=hello["last_event_id"])
        assert len(expected) >= 3
        got = await receive_all(comm, len(expected))
        assert await comm.receive_nothing()
        assert [m["type"] for m in got] == ["event"] * len(expected)
        assert [m["event"] for m in got] == expected  # same JSON as the REST API, in id order
        assert {m["work_item"]["id"] for m in got} == {item.pk}
        assert got[-1]["work_item"] == await db_call(rest_summary)(item.pk)
        assert got[0]["work_item"]["revision"] <= got[-1]["work_item"]["revision"]
        await comm.disconnect()
    run(scenario)


def test_stream_sends_nothing_for_a_rolled_back_transaction(store, viewer_token):
    item = store.linear()

    def append_then_fail():
        with pytest.raises(RuntimeError), transaction.atomic():
            events.event_append(work_item_id=item.pk, type="test.rolled_back", now=store.now())
            raise RuntimeError("roll back")

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await db_call(append_then_fail)()
        assert await comm.receive_nothing(timeout=0.3)
        await db_call(store.claim)()
        message = await comm.receive_json_from(timeout=TIMEOUT)
        assert message["event"]["type"] == "run.claimed"
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)
    assert not Event.objects.filter(type="test.rolled_back").exists()


def test_item_stream_carries_only_that_item(store, viewer_token):
    a = store.linear(title="A")
    b = store.linear(title="B")

    async def scenario():
        comm, hello = await open_stream(f"/ws/work-items/{a.pk}/", headers=bearer(viewer_token))
        await db_call(store.claim_item)(b.pk)
        await db_call(store.claim_item)(a.pk)
        await db_call(services.work_item_cancel)(item_id=b.pk, now=store.now())
        expected = await db_call(stored_events)(a.pk, after_id=hello["last_event_id"])
        assert expected and all(e["work_item_id"] == a.pk for e in expected)
        got = await receive_all(comm, len(expected))
        assert [m["event"] for m in got] == expected
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)


def test_progress_reports_are_pushed_after_commit(store, viewer_token):
    item = store.linear()
    claim = store.claim()

    async def scenario():
        comm, _ = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        everything, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        for text in ("thinking", "x" * 3000):
            run_ = await db_call(services.run_progress)(
                run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id, lease_epoch=claim.run.lease_epoch,
                progress={"response": text}, now=store.now())
            for c in (comm, everything):
                message = await c.receive_json_from(timeout=TIMEOUT)
                assert message == {"type": "progress", "work_item_id": item.pk, "action_id": claim.action.pk,
                                   "run_id": claim.run.pk, "progress_revision": run_.progress_revision,
                                   "response_tail": text[-PROGRESS_TAIL_CHARS:]}
        # a fenced-out report commits nothing and pushes nothing
        assert await db_call(services.run_progress)(
            run_id=claim.run.pk, owner_boot_id="someone-else", lease_epoch=claim.run.lease_epoch,
            progress={"response": "stale"}, now=store.now()) is None
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        await everything.disconnect()
    run(scenario)


# --- resume -------------------------------------------------------------------------------------

def _commit_during_first_read(monkeypatch, commit):
    """Commit events on the consumer's thread after it joined the group and before it reads the
    backlog: they reach the consumer twice (group queue and database) — deterministically."""
    real = selectors.events_after
    calls = []

    def events_after(**kwargs):
        if not calls:
            calls.append(kwargs)
            commit()
        return real(**kwargs)

    monkeypatch.setattr(selectors, "events_after", events_after)
    return calls


@pytest.mark.parametrize("per_item", [False, True])
def test_resume_backfills_then_goes_live_without_gap_or_duplicate(store, viewer_token, monkeypatch, per_item):
    item = store.linear(title="Resumed")
    other = store.linear(title="Other")
    first = store.claim_item(item.pk)
    store.complete(first)
    scope = item.pk if per_item else None
    after_id = stored_events(scope)[0]["id"]  # the client saw the first event only

    def commit_concurrently():
        store.claim_item(other.pk)
        store.claim_item(item.pk)

    calls = _commit_during_first_read(monkeypatch, commit_concurrently)
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)  # several pages
    path = f"/ws/work-items/{item.pk}/" if per_item else "/ws/work-items/"

    async def scenario():
        comm, hello = await open_stream(f"{path}?after_id={after_id}", headers=bearer(viewer_token))
        first = await comm.receive_json_from(timeout=TIMEOUT)
        assert calls, "the backlog was read"
        backlog = await db_call(stored_events)(scope, after_id=after_id)
        got = [first] + await receive_all(comm, len(backlog) - 1)
        assert [m["event"] for m in got] == backlog
        assert await comm.receive_nothing(timeout=0.3)  # the queued copies were dropped
        # live after the backlog
        await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        live = await db_call(stored_events)(scope, after_id=backlog[-1]["id"])
        got = await receive_all(comm, len(live))
        assert [m["event"] for m in got] == live and live[-1]["type"] == "work_item.cancelled"
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)
    ids = [e["id"] for e in stored_events(scope) if e["id"] > after_id]
    assert len(ids) > 3


@pytest.mark.parametrize("per_item", [False, True])
def test_lost_group_messages_are_read_back_from_the_database(store, viewer_token, monkeypatch, per_item):
    item = store.linear()
    path = f"/ws/work-items/{item.pk}/" if per_item else "/ws/work-items/"
    real_send = publisher.send
    losing, dropped = [True], []
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)  # the hole spans several pages

    def lossy_send(layer, groups, message):
        if message["type"] in ("stream.event", "stream.events") and losing[0]:
            # the channel layer lost it (e.g. a full channel); a batch travels as one message
            dropped.extend(m["id"] for m in message.get("events", [message]))
            return
        real_send(layer, groups, message)

    async def scenario():
        comm, hello = await open_stream(path, headers=bearer(viewer_token))
        monkeypatch.setattr(publisher, "send", lossy_send)
        claim = await db_call(store.claim)()
        await db_call(store.complete)(claim)
        await db_call(store.linear)(title="other item")
        assert await comm.receive_nothing(timeout=0.3)
        losing[0] = False
        await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        expected = await db_call(stored_events)(item.pk if per_item else None, after_id=hello["last_event_id"])
        got = await receive_all(comm, len(expected))
        assert [m["event"] for m in got] == expected
        assert len(set(dropped) & {m["event"]["id"] for m in got}) == (2 if per_item else 3)
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)


def test_overtaken_message_is_sent_once_in_order(store, viewer_token):
    """Two publishers cross (event N+1's message arrives before N's): N is read back, then its
    late copy is dropped."""
    store.linear()
    real_send = publisher.send
    held, crossed = [], []

    def crossing_send(layer, groups, message):
        if message["type"] == "stream.event" and json.loads(message["text"])["event"]["type"] == "run.claimed":
            held.append((layer, groups, message))
            crossed.append(message["id"])
            return
        real_send(layer, groups, message)
        while held:
            real_send(*held.pop())

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        publisher.send = crossing_send
        try:
            claim = await db_call(store.claim)()
            await asyncio.sleep(0.2)  # the claim's message leaves alone, before the completion commits
            await db_call(store.complete)(claim)
        finally:
            del publisher.send  # the class's method again
        assert crossed  # the two messages really crossed
        expected = await db_call(stored_events)(after_id=hello["last_event_id"])
        got = await receive_all(comm, len(expected))
        assert [m["event"]["id"] for m in got] == [e["id"] for e in expected]
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)


@pytest.mark.parametrize("per_item", [False, True])
def test_event_committed_right_after_the_snapshot_read_is_delivered(store, viewer_token, monkeypatch, per_item):
    """The group is joined before the snapshot is read: an event committing just after the read
    (and before any later step) still arrives, once."""
    item = store.linear()
    name = "item_last_event_id" if per_item else "event_last_id"
    real = getattr(selectors, name)

    def read_then_commit(*args):
        value = real(*args)
        monkeypatch.setattr(selectors, name, real)
        services.work_item_cancel(item_id=item.pk, now=store.now())
        return value

    monkeypatch.setattr(selectors, name, read_then_commit)
    path = f"/ws/work-items/{item.pk}/" if per_item else "/ws/work-items/"

    async def scenario():
        comm, hello = await open_stream(path, headers=bearer(viewer_token))
        expected = await db_call(stored_events)(item.pk, after_id=hello["last_event_id"])
        assert [e["type"] for e in expected] == ["work_item.cancelled"]
        got = await receive_all(comm, 1)
        assert [m["event"] for m in got] == expected
        assert await comm.receive_nothing()
        await comm.disconnect()
    run(scenario)


# --- replay: paged, beside the handshakes, ended by the client -------------------------------------

class _Pages:
    """Counts the replay's page reads; the `hold_at`-th waits (on its replay thread) for `release`."""

    def __init__(self, monkeypatch, hold_at: int | None = None):
        self.real = consumers._events_page
        self.calls = 0
        self.hold_at = hold_at
        self.held, self.release = threading.Event(), threading.Event()
        monkeypatch.setattr(consumers, "_events_page", self)

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls == self.hold_at:
            self.held.set()
            self.release.wait(10)
        return self.real(**kwargs)

    async def wait_held(self):
        assert await asyncio.get_running_loop().run_in_executor(None, self.held.wait, TIMEOUT)


def _history(store, items: int = 8) -> list[int]:
    for i in range(items):
        store.linear(title=f"history {i}")
    return list(Event.objects.order_by("id").values_list("id", flat=True))


def test_a_client_connecting_while_a_replay_page_is_read_gets_its_hello(store, viewer_token, monkeypatch):
    ids = _history(store)
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)
    pages = _Pages(monkeypatch, hold_at=1)

    async def scenario():
        replaying, hello = await open_stream("/ws/work-items/?after_id=0", headers=bearer(viewer_token))
        await pages.wait_held()  # the replay's first read has not returned
        other, other_hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        assert other_hello["type"] == "hello" and other_hello["last_event_id"] == ids[-1]
        pages.release.set()
        got = await receive_all(replaying, len(ids))
        assert [m["event"]["id"] for m in got] == ids
        assert await replaying.receive_nothing() and await other.receive_nothing()
        await replaying.disconnect()
        await other.disconnect()
    try:
        run(scenario)
    finally:
        pages.release.set()


def test_a_replay_reads_no_page_after_its_client_left(store, viewer_token, monkeypatch):
    ids = _history(store)
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)
    assert len(ids) > 3 * 2  # pages after the held one
    pages = _Pages(monkeypatch, hold_at=2)

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/?after_id=0", headers=bearer(viewer_token))
        assert [m["event"]["id"] for m in await receive_all(comm, 2)] == ids[:2]
        await pages.wait_held()
        await comm.send_input({"type": "websocket.disconnect", "code": 1001})  # the client is gone
        await asyncio.sleep(0.1)
        pages.release.set()  # the read in flight returns; nothing follows it
        await asyncio.sleep(0.5)
        assert pages.calls == 2
        await comm.wait(timeout=TIMEOUT)  # the consumer has ended
    try:
        run(scenario)
    finally:
        pages.release.set()


@pytest.mark.parametrize("pending_max", [consumers.PENDING_MAX, 1])
def test_events_committed_during_a_replay_are_sent_once_after_it(store, viewer_token, monkeypatch, pending_max):
    """Live messages that arrive during the replay wait for it, minus what it already sent; past
    `PENDING_MAX` they are dropped and read back from the database."""
    _history(store)
    busy = store.linear(title="busy")
    after_id = Event.objects.order_by("id").values_list("id", flat=True)[1]
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)
    monkeypatch.setattr(consumers, "PENDING_MAX", pending_max)
    pages = _Pages(monkeypatch, hold_at=3)
    real_events_after = selectors.events_after
    reads = []

    def events_after(**kwargs):
        reads.append(kwargs)
        if len(reads) == 2:  # between two pages: several events of two items commit
            claim = store.claim_item(busy.pk)
            store.complete(claim)
            store.linear(title="newcomer")
        return real_events_after(**kwargs)

    monkeypatch.setattr(selectors, "events_after", events_after)
    buffered, dropped = [], []
    real_buffer = consumers.WorkItemStreamConsumer._buffer

    def spy(self, message):
        (dropped if len(self._pending) >= consumers.PENDING_MAX else buffered).append(message["id"])
        real_buffer(self, message)

    monkeypatch.setattr(consumers.WorkItemStreamConsumer, "_buffer", spy)

    async def scenario():
        comm, _ = await open_stream(f"/ws/work-items/?after_id={after_id}", headers=bearer(viewer_token))
        await pages.wait_held()
        await asyncio.sleep(0.5)  # the commits' messages reach the consumer while it replays
        pages.release.set()
        want = await db_call(stored_events)(after_id=after_id)
        got = await receive_all(comm, len(want))
        assert [m["event"] for m in got] == want  # every event once, in id order
        assert await comm.receive_nothing(timeout=0.3)
        await db_call(services.work_item_cancel)(item_id=busy.pk, now=store.now())  # then live
        live = await comm.receive_json_from(timeout=TIMEOUT)
        assert live["event"]["type"] == "work_item.cancelled" and live["event"]["id"] > want[-1]["id"]
        await comm.disconnect()
    try:
        run(scenario)
    finally:
        pages.release.set()
    assert buffered, "no live message arrived during the replay"
    assert bool(dropped) == (pending_max == 1)


def test_progress_during_a_replay_follows_it_latest_only(store, viewer_token, monkeypatch):
    ids = _history(store, items=3)
    claim = store.claim()
    ids = list(Event.objects.order_by("id").values_list("id", flat=True))
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 2)
    pages = _Pages(monkeypatch, hold_at=2)

    async def scenario():
        comm, _ = await open_stream("/ws/work-items/?after_id=0", headers=bearer(viewer_token))
        await pages.wait_held()
        for text in ("first", "second"):
            await db_call(services.run_progress)(
                run_id=claim.run.pk, owner_boot_id=claim.run.owner_boot_id, lease_epoch=claim.run.lease_epoch,
                progress={"response": text}, now=store.now())
        await asyncio.sleep(0.3)
        pages.release.set()
        got = await receive_all(comm, len(ids) + 1)
        assert [m["event"]["id"] for m in got[:-1]] == ids
        assert got[-1]["type"] == "progress" and got[-1]["response_tail"] == "second"
        assert await comm.receive_nothing()
        await comm.disconnect()
    try:
        run(scenario)
    finally:
        pages.release.set()


def test_stream_messages_are_compact_utf8_json_like_the_api(store, viewer_token):
    """Every websocket message is encoded by workcenter/render.py: compact, text as UTF-8 (not
    \\u escapes), the same JSON as the REST API's events."""
    import json

    item = store.linear(title="Überprüfung ✓")

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        text = await comm.receive_from(timeout=TIMEOUT)
        await comm.disconnect()
        return hello, text

    hello, text = run(scenario)
    assert "Überprüfung ✓" in text and "\\u" not in text
    assert ", " not in text and ": " not in text.replace("Überprüfung ✓", "")
    message = json.loads(text)
    assert message["work_item"]["title"] == "Überprüfung ✓"
    assert [message["event"]] == stored_events(after_id=hello["last_event_id"])
