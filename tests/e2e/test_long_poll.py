"""Long-poll claims against real daphne processes: a parked claim wakes when an action becomes
claimable (committed by the same server, by another process, by another server over Redis), at
its deadline it answers 204, a client that leaves frees its place; and no wake-up is lost between
an empty attempt and the park."""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import threading
import time

from datetime import datetime, timedelta, timezone

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import Permission, User
from django.db import connection

from workcenter.dispatch import longpoll
from dashboard.stream.publisher import publisher
from tests.conftest import Clock, Store, make_graph
from tests.live import free_port, start_daphne, stop_process, wait_until
from workcenter import services
from workcenter.auth import api_token_create
from workcenter.constants import CLAIM_HINTS
from workcenter.dispatch.wake import wake
from tests.live import redis_db_url
from tests.load import within

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("WORKCENTER_TEST_REDIS_URL", redis_db_url(3))


def _token() -> str:
    user = User.objects.create_user(f"robot-{User.objects.count()}")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="long-poll")[1]


def _call(port: int, token: str, method: str, path: str, body=None, timeout: float = 60) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


class Parked(threading.Thread):
    """A worker's long-poll claim on a thread: its answer and when it came."""

    def __init__(self, port: int, token: str, wait_ms: int, boot: str = "boot-long"):
        super().__init__(daemon=True)
        self.args = (port, token, "POST", "/api/v1/claims", {"owner_boot_id": boot, "wait_ms": wait_ms})
        self.started_at = self.answered_at = None
        self.status = self.body = self.error = None

    def run(self):
        self.started_at = time.monotonic()
        try:
            self.status, self.body = _call(*self.args)
        except (http.client.HTTPException, OSError) as exc:
            # a claim still parked when its test ends: the server stops under it, and says nothing
            self.error = exc
            return
        self.answered_at = time.monotonic()


def _create(port: int, token: str, title: str) -> dict:
    status, body = _call(port, token, "POST", "/api/v1/work-items",
                         {"title": title, "goal": "g", "work_item_type": "software-change"})
    assert status == 201, body
    return body


def _parked(port: int, token: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    text = conn.getresponse().read().decode()
    conn.close()
    line = next(line for line in text.splitlines() if line.startswith("workcenter_parked_claims "))
    return float(line.split()[1])


@pytest.fixture
def server():
    port = free_port()
    proc = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING"})
    yield port
    stop_process(proc)


def _park_then_create(park_port: int, create_port: int, token: str, title: str) -> tuple[Parked, dict, float]:
    """A claim parked on one server, then an item created through a server (the same or another):
    (the claim, the item, when the create began)."""
    waiter = Parked(park_port, token, 20_000)
    waiter.start()
    assert wait_until(lambda: _parked(park_port, token) == 1, 10)
    t0 = time.monotonic()
    item = _create(create_port, token, title)
    waiter.join(10)
    return waiter, item, t0


def test_a_parked_claim_wakes_when_the_same_server_makes_an_action_claimable(server):
    token = _token()
    # when an item is created through the same server
    waiter, item, t0 = _park_then_create(server, server, token, "Wake me")
    # then the parked claim took its first action at once
    assert waiter.status == 201, waiter.body
    assert waiter.body["work_item"]["id"] == item["id"]
    print(f"\nwoken {1000 * (waiter.answered_at - t0):.0f} ms after the create request began")
    assert waiter.answered_at - t0 < within(1.0, cap=5.0)  # the claim waits 20 s
    assert _parked(server, token) == 0


def test_a_parked_claim_wakes_for_another_process_commit_and_answers_204_at_its_deadline(server):
    token = _token()
    # nothing claimable: 204 at the deadline, not before
    t0 = time.monotonic()
    assert _call(server, token, "POST", "/api/v1/claims", {"owner_boot_id": "boot-d", "wait_ms": 400})[0] == 204
    assert 0.4 <= time.monotonic() - t0 < 2.0
    # a commit of another process (this test's, beside the database) reaches the parked claim
    waiter = Parked(server, token, 20_000)
    waiter.start()
    assert wait_until(lambda: _parked(server, token) == 1, 10)
    t0 = time.monotonic()
    services.work_item_create(title="From elsewhere", goal="g", work_item_type="software-change", actor="test")
    waiter.join(10)
    assert waiter.status == 201, waiter.body
    print(f"\nwoken {1000 * (waiter.answered_at - t0):.0f} ms after another process's commit")
    assert waiter.answered_at - t0 < within(1.0, cap=5.0)  # the claim waits 20 s


def test_a_client_that_leaves_while_parked_is_forgotten(server):
    token = _token()
    sock = socket.create_connection(("127.0.0.1", server))
    body = json.dumps({"owner_boot_id": "boot-gone", "wait_ms": 30_000}).encode()
    sock.sendall(b"POST /api/v1/claims HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    assert wait_until(lambda: _parked(server, token) == 1, 10)
    sock.close()
    assert wait_until(lambda: _parked(server, token) == 0, 5)
    # and the action that then appears is claimed by nobody on its behalf
    _create(server, token, "After the leave")
    time.sleep(0.5)
    status, body = _call(server, token, "POST", "/api/v1/claims", {"owner_boot_id": "boot-next"})
    assert status == 201 and body["run"]["owner_boot_id"] == "boot-next"


def test_many_parked_claims_and_one_new_action_one_claims_it_the_rest_stay_parked(server):
    token = _token()
    waiters = [Parked(server, token, 6_000, boot=f"boot-{i}") for i in range(8)]
    for w in waiters:
        w.start()
    assert wait_until(lambda: _parked(server, token) == 8, 10)
    _create(server, token, "Only one")
    assert wait_until(lambda: sum(w.status == 201 for w in waiters) == 1, 5)
    time.sleep(0.3)
    assert _parked(server, token) == 7  # the others parked again (at most one tried and found nothing)
    for w in waiters:
        w.join(10)
    assert sorted(w.status for w in waiters) == [201] + [204] * 7


def test_no_wake_is_lost_between_an_empty_attempt_and_the_park(transactional_db):
    """The action becomes claimable while the attempt that finds nothing is still running: the wake
    that follows must make the request try again at once, not sleep until its deadline."""
    layer = get_channel_layer()
    attempts: list[float] = []

    async def app(scope, receive, send):  # the claim route, controlled: empty first, then a claim
        await receive()
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            wake.request(layer)  # the commit lands during the empty attempt
            await asyncio.sleep(0.05)  # and its wake arrives before the attempt answers
            status = 204
        else:
            status = 201
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    publisher.register()
    sent, took = _drive(app, 5_000)
    assert sent[0]["status"] == 201 and len(attempts) == 2
    assert took < 1.0, took  # not the 5 s deadline, nor the periodic retry


def _drive(app, wait_ms: int) -> tuple[list[dict], float]:
    """One long-poll claim through LongPollClaims in front of `app`: what it sent, how long it took."""
    async def scenario():
        sent: list[dict] = []
        body = json.dumps({"owner_boot_id": "b", "wait_ms": wait_ms}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop()
            await asyncio.sleep(3600)

        async def send(message):
            sent.append(message)

        t0 = time.monotonic()
        await longpoll.LongPollClaims(app)({"type": "http", "method": "POST", "path": "/api/v1/claims"},
                                           receive, send)
        return sent, time.monotonic() - t0

    return async_to_sync(scenario)()


def test_a_contended_empty_claim_looks_again_shortly_without_a_wake(transactional_db):
    """An attempt that skipped a candidate another transaction held (204 with the `contended`
    hint) is tried again within milliseconds although no wake comes (that holder's commit sends
    none); the client gets the route's answer as it is, and a claim that stays contended parks as
    usual."""
    attempts: list[float] = []

    def route(claim_on: int | None):
        async def app(scope, receive, send):
            await receive()
            attempts.append(time.monotonic())
            status = 201 if len(attempts) == claim_on else 204
            scope[CLAIM_HINTS]["contended"] = status == 204  # as the claim route says it
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        return app

    sent, took = _drive(route(claim_on=3), 5_000)  # contended twice, then the holder has committed
    assert sent[0]["status"] == 201 and len(attempts) == 3
    assert took < 0.5, took  # two short pauses, not the 5 s deadline
    attempts.clear()
    sent, took = _drive(route(claim_on=None), 600)  # contended to the end: the retries, then parked
    assert sent[0]["status"] == 204 and sent[0]["headers"] == []
    assert len(attempts) == len(longpoll.CONTENDED_RETRY_SECONDS) + 2  # first, the retries, the deadline's
    assert 0.55 < took < 1.5, took


def test_a_parked_claim_on_one_server_wakes_for_a_commit_on_another_over_redis():
    redis.Redis.from_url(REDIS_URL).flushdb()
    token = _token()
    env = {"REDIS_URL": REDIS_URL, "WORKCENTER_LOG_LEVEL": "WARNING"}
    port_a, port_b = free_port(), free_port()
    procs = [start_daphne(port_a, env), start_daphne(port_b, env)]
    try:
        waiter, item, t0 = _park_then_create(port_a, port_b, token, "Across servers")
        assert waiter.status == 201 and waiter.body["work_item"]["id"] == item["id"]
        print(f"\nwoken across servers {1000 * (waiter.answered_at - t0):.0f} ms after the create began")
        assert waiter.answered_at - t0 < within(1.0, cap=5.0)  # the claim waits 20 s
    finally:
        for p in procs:
            stop_process(p)


def _completed():
    return {"outcome": "completed", "summary": "s", "evidence": ["e"], "acceptance_checks": []}


class ViaServices:
    """Another process's commits: the test process's own service calls."""

    def submit(self, claim):
        services.run_submit(run_id=claim.run.pk, owner_boot_id="boot-X", lease_epoch=claim.run.lease_epoch,
                            result=_completed())

    def interrupt(self, claim):
        services.run_interrupt(run_id=claim.run.pk, owner_boot_id="boot-X", lease_epoch=claim.run.lease_epoch,
                               reason="the worker stopped")

    def recover(self):
        assert services.runs_recover(current_boot_id="boot-Z", expired_only=True) == 1


class ViaHttp:
    """Another server's commits: the worker protocol on that server."""

    def __init__(self, port: int, token: str):
        self.port, self.token = port, token

    def _post(self, path, body):
        status, answer = _call(self.port, self.token, "POST", path, body)
        assert status == 200, answer
        return answer

    def submit(self, claim):
        self._post(f"/api/v1/runs/{claim.run.pk}/submit",
                   {"owner_boot_id": "boot-X", "lease_epoch": claim.run.lease_epoch, **_completed()})

    def interrupt(self, claim):
        self._post(f"/api/v1/runs/{claim.run.pk}/interrupt",
                   {"owner_boot_id": "boot-X", "lease_epoch": claim.run.lease_epoch, "reason": "the worker stopped"})

    def recover(self):
        assert self._post("/api/v1/recoveries", {"owner_boot_id": "boot-Z", "expired_only": True})["recovered"] == 1


def _hold(stages, lease_ms=60_000, work_dir=""):
    """A graph item whose only claimable action is then held by boot X: nothing is claimable."""
    item = make_graph(Store(Clock(datetime.now(timezone.utc))), stages, work_dir=work_dir)
    claim = services.action_claim(owner_boot_id="boot-X", lease_ms=lease_ms)
    assert claim is not None and claim.work_item.pk == item.pk
    assert services.action_claim(owner_boot_id="boot-probe") is None
    return claim


INTEGRATE = [{"id": "i", "type": "integrate", "mode": "integrate", "max_attempts": 3}]


def _completed_dependency(tmp_path):
    claim = _hold([{"id": "a"}, {"id": "b", "deps": ["a"]}])
    return claim.work_item.pk, lambda via: via.submit(claim)


def _interrupted_run(tmp_path):
    claim = _hold([{"id": "a", "max_attempts": 3}])
    return claim.work_item.pk, lambda via: via.interrupt(claim)


def _recovered_run(tmp_path):
    claim = _hold([{"id": "a", "max_attempts": 3}], lease_ms=400)

    def step(via):
        time.sleep(0.6)  # its 400 ms lease has expired
        via.recover()
        return 0.6  # of the time to wake, spent waiting for the lease
    return claim.work_item.pk, step


def _freed_workspace(tmp_path):
    """Boot X holds an integrate action in a workspace where a second item's integrate action
    waits (ready, claimable, but integrate runs alone in its workspace); X then completes."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    claim = _hold(INTEGRATE, work_dir=str(workspace))
    waiting = make_graph(Store(Clock(datetime.now(timezone.utc))), INTEGRATE, work_dir=str(workspace), title="second")
    assert services.action_claim(owner_boot_id="boot-probe") is None
    return waiting.pk, lambda via: via.submit(claim)


def _ended_reservation(tmp_path):
    """Boot X's integrate run holds an integration reservation, which keeps recovery away from it;
    the reservation has ended (acquired 11 s in the past: it lasts 10 s at least), and a recovery
    pass then gives the action back."""
    claim = _hold(INTEGRATE)
    fence = dict(run_id=claim.run.pk, owner_boot_id="boot-X", lease_epoch=claim.run.lease_epoch)
    past = datetime.now(timezone.utc) - timedelta(seconds=11)
    assert services.integration_set_workspace(action_id=None, workspace={"path": "/tmp/x", "integration": {
        "status": "prepared"}}, now=past, **fence) is not None
    assert services.integration_acquire(action_id=None, reservation_ms=10_000, now=past, **fence) is not None
    return claim.work_item.pk, lambda via: via.recover()


KINDS = pytest.mark.parametrize("kind,given", [
    ("a completed dependency", _completed_dependency),
    ("an interrupted run", _interrupted_run),
    ("a recovered run", _recovered_run),
    ("a freed workspace", _freed_workspace),
    ("an ended integration reservation", _ended_reservation),
])


def _woken(park_port: int, token: str, kind: str, waiting_id: str, step, via) -> None:
    """Given nothing claimable and a claim parked on `park_port`, when `via` makes an action
    claimable, then the parked claim gets it at once."""
    waiter = Parked(park_port, token, 20_000, boot="boot-Y")
    waiter.start()
    assert wait_until(lambda: _parked(park_port, token) == 1, 10)
    t0 = time.monotonic()
    t0 += step(via) or 0
    waiter.join(10)
    assert waiter.status == 201, (kind, waiter.body)
    assert waiter.body["work_item"]["id"] == waiting_id
    print(f"\n{kind}: woken {1000 * (waiter.answered_at - t0):.0f} ms after the commit began")
    assert waiter.answered_at - t0 < within(1.0, cap=5.0)  # the claim waits 20 s


@KINDS
def test_a_parked_claim_wakes_for_each_kind_of_change(server, tmp_path, kind, given):
    token = _token()
    waiting_id, step = given(tmp_path)
    _woken(server, token, kind, waiting_id, step, ViaServices())


@pytest.fixture(scope="module")
def redis_servers(django_db_setup, django_db_blocker):
    """Two daphne servers on the Redis layer, for the module's PostgreSQL tests."""
    if connection.vendor != "postgresql":
        pytest.skip("the Redis pair runs on PostgreSQL")
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = {"REDIS_URL": REDIS_URL, "WORKCENTER_LOG_LEVEL": "WARNING"}
    ports = [free_port(), free_port()]
    procs = [start_daphne(port, env) for port in ports]
    yield ports
    for p in procs:
        stop_process(p)


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL + Redis across two servers")
@KINDS
def test_over_redis_a_parked_claim_wakes_for_each_kind_of_change_committed_on_another_server(
        redis_servers, tmp_path, kind, given):
    token = _token()
    waiting_id, step = given(tmp_path)
    park_port, other_port = redis_servers
    _woken(park_port, token, kind, waiting_id, step, ViaHttp(other_port, token))


def test_one_commit_that_makes_several_actions_claimable_is_claimed_by_as_many_parked_claims(server):
    """A stage with three dependants completes (or a plan with parallel branches is accepted): one
    commit, several claimable actions, one wake — and each process wakes one parked claim per
    wake. A claim that saw another claimable action beside its own wakes the next parked claim,
    so all three go out at once, not at the other claims' deadlines."""
    token = _token()
    claim = _hold([{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["a"]}, {"id": "d", "deps": ["a"]}])
    waiters = [Parked(server, token, 8_000, boot=f"boot-{i}") for i in range(4)]
    for w in waiters:
        w.start()
    assert wait_until(lambda: _parked(server, token) == 4, 10)
    t0 = time.monotonic()
    ViaServices().submit(claim)  # another process's commit: b, c and d claimable at once
    assert wait_until(lambda: sum(w.status == 201 for w in waiters) == 3, 5), [w.status for w in waiters]
    print(f"\nthree parked claims answered within {1000 * (max(w.answered_at for w in waiters if w.answered_at) - t0):.0f} ms "
          "of the commit")
    assert sorted(w.body["action"]["stage_id"] for w in waiters if w.status == 201) == ["b", "c", "d"]
    # the last claim saw nothing more beside its own: the fourth was not woken to find nothing
    time.sleep(0.3)
    assert _parked(server, token) == 1 and [w.status for w in waiters].count(None) == 1
