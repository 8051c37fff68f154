"""The event pump (dashboard/stream/pump.py): on the in-memory channel layer, events committed by other
processes reach this process's websocket clients — once, in id order, within about a second."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
import redis
from channels.db import database_sync_to_async
from django.contrib.auth.models import Permission, User

from dashboard.stream.consumers import WorkItemStreamConsumer
from dashboard.stream.pump import pump
from workcenter import services
from workcenter.models import Event
from workcenter.redis_layer import redis_channel_layers
from tests.live import ROOT, Listener, database_url, free_port, port_open, wait_until

from .conftest import TIMEOUT, open_stream, receive_all, run
from tests.live import redis_db_url

pytestmark = pytest.mark.django_db(transaction=True)

db_call = database_sync_to_async
REDIS_URL = os.environ.get("WORKCENTER_TEST_PUMP_REDIS_URL", redis_db_url(13))


def bearer(token: str):
    return [(b"authorization", f"Bearer {token}".encode())]


def other_process_env() -> dict:
    """A process on the test database with the embedded defaults (no Redis)."""
    env = dict(os.environ, DATABASE_URL=database_url(), PYTHONUNBUFFERED="1")
    env.pop("REDIS_URL", None)
    return env


def manage_shell(code: str) -> str:
    """Run `manage.py shell -c CODE` in another process; returns its stdout."""
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=other_process_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def stored(after_id: int, item_id: str | None = None) -> list[tuple[int, str, str]]:
    qs = Event.objects.filter(id__gt=after_id).order_by("id")
    if item_id is not None:
        qs = qs.filter(work_item_id=item_id)
    return list(qs.values_list("id", "type", "work_item_id"))


@pytest.fixture
def group_deliveries(monkeypatch):
    """Every live message a consumer is handed (before its duplicate check), by event id."""
    seen: list[int] = []
    real = WorkItemStreamConsumer.stream_event

    async def stream_event(self, message):
        seen.append(message["id"])
        await real(self, message)

    monkeypatch.setattr(WorkItemStreamConsumer, "stream_event", stream_event)
    return seen


def test_pump_delivers_events_of_another_process_once_in_order(store, viewer_token, group_deliveries):
    # given: an item, and two clients on the in-memory layer (every item; that item)
    item = store.linear(title="Shared")

    async def scenario():
        everything, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        one, one_hello = await open_stream(f"/ws/work-items/{item.pk}/", headers=bearer(viewer_token))
        assert pump.running
        # when: another process claims the item's action and creates a second item ...
        out = await asyncio.to_thread(manage_shell, (
            "from workcenter import services\n"
            "claim = services.action_claim(owner_boot_id='other-process')\n"
            "other = services.work_item_create(title='From elsewhere', goal='g', actor='user:other')\n"
            "print('ids', claim.work_item.pk, other.pk)\n"))
        exited = time.monotonic()
        _, claimed_item, other_id = next(line for line in out.splitlines() if line.startswith("ids ")).split()
        assert claimed_item == item.pk
        theirs = await db_call(stored)(hello["last_event_id"])
        assert {t for _, t, _ in theirs} >= {"run.claimed", "work_item.created"}
        got = await receive_all(everything, len(theirs))
        latency = time.monotonic() - exited
        # ... then this process commits too: published after commit here AND read by the pump
        await db_call(services.work_item_cancel)(item_id=item.pk, now=store.now())
        mine = await everything.receive_json_from(timeout=TIMEOUT)
        await asyncio.sleep(0.6)  # three more polls: the pump's copy of the cancel has arrived
        assert await everything.receive_nothing(timeout=0.2)

        # then: every stored event once, in id order, with its item's summary
        want = await db_call(stored)(hello["last_event_id"])
        assert [m["event"]["id"] for m in got + [mine]] == [i for i, _, _ in want]
        assert [(m["event"]["type"], m["work_item"]["id"]) for m in got + [mine]] == [(t, w) for _, t, w in want]
        assert mine["event"]["type"] == "work_item.cancelled"
        assert latency < 1.0, f"the other process's events took {latency:.2f} s"
        # the item stream carries that item's events only, also once and in order
        want_one = await db_call(stored)(one_hello["last_event_id"], item.pk)
        got_one = await receive_all(one, len(want_one))
        assert [m["event"]["id"] for m in got_one] == [i for i, _, _ in want_one]
        assert other_id not in {m["work_item"]["id"] for m in got_one}
        assert await one.receive_nothing(timeout=0.2)
        # the cancel was published by this process after its commit; the pump skipped it (no second copy)
        cancel_id = mine["event"]["id"]
        assert group_deliveries.count(cancel_id) == 2  # one copy to each of the two consumers
        await everything.disconnect()
        await one.disconnect()
    run(scenario)


def test_pump_fills_a_burst_of_several_pages_in_order(store, viewer_token, monkeypatch):
    """More events than a page commit between two polls: the pump reads page after page."""
    monkeypatch.setattr("dashboard.stream.pump.PAGE", 3)

    async def scenario():
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await asyncio.to_thread(manage_shell, (
            "from workcenter import services\n"
            "for i in range(5):\n"
            "    item = services.work_item_create(title=f'burst {i}', goal='g')\n"
            "    services.work_item_cancel(item_id=item.pk)\n"))
        want = await db_call(stored)(hello["last_event_id"])
        assert len(want) >= 10
        got = await receive_all(comm, len(want))
        assert [(m["event"]["id"], m["event"]["type"]) for m in got] == [(i, t) for i, t, _ in want]
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
    run(scenario)


def test_pump_polls_only_while_a_consumer_is_connected(store, viewer_token):
    async def scenario():
        before = pump.polls
        await asyncio.sleep(0.5)
        assert pump.polls == before and not pump.running  # nobody connected: no query
        a, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        b, _ = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await asyncio.sleep(0.5)
        assert pump.running and pump.polls - before >= 2
        await a.disconnect()
        await asyncio.sleep(0.3)
        assert pump.running  # one client is still connected
        await b.disconnect()
        await asyncio.sleep(0.05)
        assert not pump.running  # the last one to leave ended it at once
        stopped = pump.polls
        await db_call(store.linear)(title="while nobody listens")
        await asyncio.sleep(0.5)
        assert pump.polls == stopped
        # the next client starts it again, from the current max id (its own hello covers the past)
        c, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        assert pump.running and pump.cursor == hello["last_event_id"] > 0
        assert await c.receive_nothing(timeout=0.5)
        await c.disconnect()
    run(scenario)


def test_pump_setting_zero_turns_it_off(store, viewer_token, settings):
    settings.WORKCENTER_EVENT_POLL_MS = 0

    async def scenario():
        before = pump.polls
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await asyncio.sleep(0.5)
        assert not pump.running and pump.polls == before
        # this process's own events are still published after commit
        await db_call(store.linear)(title="local")
        message = await comm.receive_json_from(timeout=TIMEOUT)
        assert message["event"]["type"] == "work_item.created"
        await comm.disconnect()
    run(scenario)


def test_pump_is_off_with_a_redis_layer(store, viewer_token, settings, group_deliveries):
    redis.Redis.from_url(REDIS_URL).flushdb()  # a Redis that is down fails here, loudly
    settings.CHANNEL_LAYERS = redis_channel_layers(REDIS_URL)

    async def scenario():
        before = pump.polls
        comm, hello = await open_stream("/ws/work-items/", headers=bearer(viewer_token))
        await asyncio.sleep(0.5)
        assert not pump.running and pump.polls == before
        await db_call(store.linear)(title="over redis")
        want = await db_call(stored)(hello["last_event_id"])
        got = await receive_all(comm, len(want))
        assert [m["event"]["id"] for m in got] == [i for i, _, _ in want]
        await asyncio.sleep(0.5)
        assert await comm.receive_nothing(timeout=0.2)
        assert group_deliveries == [i for i, _, _ in want]  # one copy each: no pump publishing again
        await comm.disconnect()
    run(scenario)


# --- end to end: daphne on the embedded default, a worker in another process ------------------------



def test_daphne_without_redis_streams_a_worker_process_events(store, tmp_path):
    user = User.objects.create_user("robot")
    user.user_permissions.add(Permission.objects.get(content_type__app_label="workcenter", codename="view_workitem"))
    from workcenter.auth import api_token_create

    _, token = api_token_create(user=user, name="pump-e2e")
    item = store.create(title="for the worker", criteria=["works"], work_item_type="research")
    port = free_port()
    env = dict(other_process_env(), WORKCENTER_SIM_SCALE="0.05", WORKCENTER_SIM_RATES="0,0,0")
    log = open(tmp_path / "daphne.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "workcenter.asgi:application"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    listener = None
    try:
        assert wait_until(lambda: port_open(port) or server.poll() is not None, 30, 0.1) and server.poll() is None, \
            (tmp_path / "daphne.log").read_text(errors="replace")
        listener = Listener(f"ws://127.0.0.1:{port}/ws/work-items/?token={token}")
        start = listener.hello["last_event_id"]
        assert start == Event.objects.latest("id").id
        # a worker on the local store, in its own process, with the in-memory layer of its own
        worker = subprocess.run([sys.executable, "manage.py", "workcenter_worker", "--once", "--concurrency", "1"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        exited = time.monotonic()
        want = stored(start)
        types = [t for _, t, _ in want]
        assert "run.claimed" in types and "action.completed" in types, types
        assert wait_until(lambda: len(listener.event_ids()) >= len(want), 10), (listener.messages, want)
        arrived = time.monotonic() - exited
        time.sleep(0.6)  # nothing more (no duplicate) arrives
        assert listener.event_ids() == [i for i, _, _ in want]
        events_sent = [m for m in listener.messages if m["type"] == "event"]
        assert [m["event"]["type"] for m in events_sent] == types
        assert {m["work_item"]["id"] for m in events_sent} == {item.pk}
        assert arrived < 1.0, f"the last worker event arrived {arrived:.2f} s after the worker exited"
    finally:
        if listener is not None:
            listener.close()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()
