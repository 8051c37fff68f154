"""The live stream as a deployment runs it: real daphne processes on the test database, Redis as
the channel layer.

* a websocket on the Redis layer stays up through three of the layer's blocking receives without
  traffic (a wrong read timeout closed it after one, 5.6 s), then still receives
  what commits (the client's socket timeouts are set explicitly: workcenter/redis_layer.py);
* replays are paged and never hold up other clients: while three clients replay 10,000 events
  from the start, a fourth one gets its hello within a second; a client that leaves stops its
  replay; every replay is complete, in order, without a duplicate.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.error
from pathlib import Path

import pytest
import redis
from django.contrib.auth.models import Permission, User
from websockets.sync.client import connect

from workcenter.auth import api_token_create
from workcenter.models import Event
from workcenter.redis_layer import BLOCKING_RECEIVE

from tests.live import free_port, start_daphne, stop_process, wait_until

from .test_worker_recovery import _post
from tests.live import redis_db_url

pytestmark = pytest.mark.django_db(transaction=True)

IDLE_REDIS_URL = os.environ.get("WORKCENTER_TEST_IDLE_REDIS_URL", redis_db_url(5))
# The failure this guards shows after one blocking receive of the layer (BLOCKING_RECEIVE, 5 s)
# plus the read that times out: waiting three of them is as telling as a minute, in a quarter.
IDLE_SECONDS = 3 * (BLOCKING_RECEIVE + 1)
REPLAY_REDIS_URL = os.environ.get("WORKCENTER_TEST_REPLAY_REDIS_URL", redis_db_url(6))
HISTORY = 10_000  # stored events
HISTORY_ITEMS = 200  # the overview of the hello counts them; the replay is the 10,000 events


def _token(*codenames: str) -> str:
    user = User.objects.create_user("deployment")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames))
    return api_token_create(user=user, name="deployment")[1]


class _Server:
    """One daphne process with its output kept in a file (shown when a test fails)."""

    def __init__(self, log: Path, env: dict):
        self.port = free_port()
        self.log_path = log
        self.log = open(log, "wb")
        self.proc = start_daphne(self.port, env, stdout=self.log, timeout=30)

    def url(self, path: str) -> str:
        return f"127.0.0.1:{self.port}{path}"

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def create_item(self, token: str, title: str) -> dict:
        """POST /api/v1/work-items; a failure shows the server's output."""
        try:
            status, body = _post(f"http://{self.url('/api/v1/work-items')}", token, {
                "title": title, "goal": "Arrive live", "acceptance_criteria": ["arrives"],
                "work_item_type": "research"})
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{exc}: {exc.read()[:2000]!r}\n{self.output()[-3000:]}") from None
        assert status == 201
        return body

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def test_redis_layer_websockets_stay_up_through_quiet_blocking_receives_then_receive(tmp_path):
    """Two servers on one Redis: one with the bare URL, one whose URL asks for a read timeout
    that would end the layer's blocking receive. A client on each waits IDLE_SECONDS in silence;
    then an item is created through the first server and both clients receive its event."""
    redis.Redis.from_url(IDLE_REDIS_URL).flushdb()  # a Redis that is down fails here, loudly
    token = _token("view_workitem", "change_workitem")
    servers = []
    try:
        servers.append(_Server(tmp_path / "plain.log", {"REDIS_URL": IDLE_REDIS_URL}))
        servers.append(_Server(tmp_path / "short.log", {"REDIS_URL": f"{IDLE_REDIS_URL}?socket_timeout=2"}))
        with contextlib.ExitStack() as stack:
            clients = [stack.enter_context(connect(f"ws://{s.url('/ws/work-items/')}?token={token}", open_timeout=10))
                       for s in servers]
            for ws in clients:
                hello = json.loads(ws.recv(timeout=10))
                assert hello["type"] == "hello" and hello["last_event_id"] == 0
            # nothing but the stream's heartbeats reaches the clients while idle (the protocol's
            # pings aside): the layer's blocking receive ends quietly however long it waits
            quiet = time.monotonic() + IDLE_SECONDS
            for ws, server in zip(clients, servers):
                while True:
                    try:
                        unexpected = ws.recv(timeout=max(0.0, quiet - time.monotonic()))
                    except TimeoutError:
                        break
                    if json.loads(unexpected).get("type") != "heartbeat":
                        pytest.fail(f"received while nothing was committed: {unexpected[:500]}")
                assert ws.close_code is None, f"closed {ws.close_code} while idle:\n{server.output()[-3000:]}"
            body = servers[0].create_item(token, "after a quiet while")
            for ws in clients:
                message = _not_a_heartbeat(ws)
                assert message["type"] == "event" and message["event"]["type"] == "work_item.created"
                assert message["work_item"]["id"] == body["id"]
        for server in servers:
            assert "Timeout reading" not in server.output()
    finally:
        for server in servers:
            server.stop()


# --- replays ---------------------------------------------------------------------------------------

def _store_history(store, total: int = HISTORY) -> list[int]:
    """`total` stored events over `HISTORY_ITEMS` items (created through the services; the rest
    of the history added as the updates an item collects)."""
    items = [store.linear(title=f"history {i}") for i in range(HISTORY_ITEMS)]
    missing = total - Event.objects.count()
    now = store.now()
    Event.objects.bulk_create([
        Event(work_item_id=items[i % len(items)].pk, type="work_item.updated",
              data={"revision": 1, "changed_fields": ["title"]}, actor="deployment", created_at=now)
        for i in range(missing)], batch_size=1000)
    return list(Event.objects.order_by("id").values_list("id", flat=True))


class _Replay(threading.Thread):
    """A client resuming from `after_id`, reading everything it is sent (a real websocket)."""

    def __init__(self, url: str, want: int):
        super().__init__(daemon=True)
        self.url, self.want = url, want
        self.hello: dict | None = None
        self.ids: list[int] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self):
        try:
            with connect(self.url, open_timeout=30, max_size=None) as ws:
                self.hello = json.loads(ws.recv(timeout=30))
                while len(self.ids) < self.want:
                    message = json.loads(ws.recv(timeout=60))
                    if message["type"] == "event":
                        self.ids.append(message["event"]["id"])
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()


def _not_a_heartbeat(ws) -> dict:
    """The next message of the stream that is not a heartbeat (one may come at any moment)."""
    while True:
        message = json.loads(ws.recv(timeout=10))
        if message["type"] != "heartbeat":
            return message


def _handshake_seconds(url: str) -> float:
    """From opening the connection to the hello received."""
    started = time.monotonic()
    with connect(url, open_timeout=10) as ws:
        hello = json.loads(ws.recv(timeout=10))
        took = time.monotonic() - started
    assert hello["type"] == "hello"
    return took


def test_handshakes_stay_prompt_while_three_clients_replay_ten_thousand_events(store, tmp_path):
    redis.Redis.from_url(REPLAY_REDIS_URL).flushdb()
    ids = _store_history(store)
    assert len(ids) == HISTORY
    token = _token("view_workitem", "change_workitem")
    server = _Server(tmp_path / "daphne.log", {"REDIS_URL": REPLAY_REDIS_URL})
    replays = [_Replay(f"ws://{server.url('/ws/work-items/')}?after_id=0&token={token}", HISTORY + 1)
               for _ in range(3)]
    try:
        for r in replays:
            r.start()
        assert wait_until(lambda: all(r.ids or r.done.is_set() for r in replays), 30), [r.error for r in replays]
        handshakes, during = [], 0
        for n in range(5):  # new clients keep arriving while the replays run
            replaying = all(len(r.ids) < HISTORY for r in replays)
            handshakes.append(_handshake_seconds(f"ws://{server.url('/ws/work-items/')}?token={token}"))
            during += replaying and all(len(r.ids) < HISTORY for r in replays)
            if n == 1:  # an event commits in the middle of the replays: each gets it once, in order
                server.create_item(token, "during the replays")
            time.sleep(0.1)
        for r in replays:
            assert r.done.wait(180), f"replay stalled at {len(r.ids)} events"
        print(f"handshakes while replaying: {[round(h, 3) for h in handshakes]} s; {during} of them during all three")
        assert during >= 1, "the replays ended before a handshake could overlap them (nothing was measured)"
        assert max(handshakes) < 1.0, (handshakes, server.output()[-3000:])
        everything = list(Event.objects.order_by("id").values_list("id", flat=True))
        assert len(everything) == HISTORY + 1
        for r in replays:
            assert r.error is None, (r.error, server.output()[-3000:])
            assert r.hello["type"] == "hello" and set(r.hello) == {"type", "last_event_id", "overview", "heartbeat_s"}
            assert r.ids == everything  # complete, in id order, no duplicate, the live one included
    finally:
        server.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_replay_ends_when_its_client_leaves(store, tmp_path):
    """Three clients open a full replay and leave after its first event: together they cost the
    server less than half of what one complete replay costs (a replay that went on would render
    and send the whole history to nobody)."""
    _store_history(store)
    token = _token("view_workitem")
    server = _Server(tmp_path / "daphne.log", {})
    replay_url = f"ws://{server.url('/ws/work-items/')}?after_id=0&token={token}"
    try:
        assert _handshake_seconds(f"ws://{server.url('/ws/work-items/')}?token={token}") < 10  # warm
        start, started = _cpu_seconds(server.proc.pid), time.monotonic()
        complete = _Replay(replay_url, HISTORY)
        complete.start()
        assert complete.done.wait(120) and complete.error is None, complete.error
        took = time.monotonic() - started
        time.sleep(0.5)
        full = _cpu_seconds(server.proc.pid) - start
        start = _cpu_seconds(server.proc.pid)
        for _ in range(3):
            with connect(replay_url, open_timeout=10) as ws:
                assert json.loads(ws.recv(timeout=10))["type"] == "hello"
                assert _not_a_heartbeat(ws)["type"] == "event"
        time.sleep(3)  # what a replay still running would spend
        left = _cpu_seconds(server.proc.pid) - start
        print(f"server CPU: {full:.2f} s for one complete replay ({took:.2f} s from connect to the last event), "
              f"{left:.2f} s for three left after their first event")
        assert left < full / 2, server.output()[-3000:]
        assert _handshake_seconds(f"ws://{server.url('/ws/work-items/')}?token={token}") < 1.0
    finally:
        server.stop()
