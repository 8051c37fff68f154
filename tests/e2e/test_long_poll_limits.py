"""Bounded long-polls: how many claims may wait at once, per token and per process. Past a bound a
claim that finds nothing answers 429 `too_many_waiting_claims` with Retry-After at once, never a
reset; the server keeps answering (`/healthz`) and the claims that wait still get work; and a
waiting claim holds its few fields, not the body the client sent."""
from __future__ import annotations

import asyncio
import gc
import http.client
import json
import os
import resource
import time
import tracemalloc

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User

from workcenter.dispatch import longpoll
from tests.live import free_port, start_daphne, stop_process, wait_until
from workcenter.auth import api_token_create
from tests.load import within

pytestmark = pytest.mark.django_db(transaction=True)

PER_TOKEN, PER_PROCESS = 8, 20
WAIT_MS = 15_000  # far beyond the steps before the action appears: a 204 then would be a lost wake


def _token() -> str:
    user = User.objects.create_user(f"robot-{User.objects.count()}")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem", "run_actions"]))
    return api_token_create(user=user, name="long-poll-limits")[1]


def _get(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _parked(port: int, token: str) -> float:
    text = _get(port, "/metrics", token)[1].decode()
    return float(next(line for line in text.splitlines() if line.startswith("workcenter_parked_claims ")).split()[1])


class Answer:
    """One claim's answer over a raw connection: status, headers, body, seconds from its send."""

    def __init__(self, status: int, headers: dict, body: bytes, took: float) -> None:
        self.status, self.headers, self.body, self.took = status, headers, body, took

    def json(self) -> dict:
        return json.loads(self.body)


async def _claim(port: int, token: str, boot: str, wait_ms: int, pad: int = 0) -> Answer:
    """POST /api/v1/claims with `wait_ms` on a connection of its own (`pad` spaces of padding)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"owner_boot_id": boot, "wait_ms": wait_ms}).encode() + b" " * pad
    t0 = time.monotonic()
    writer.write(b"POST /api/v1/claims HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                 + body)
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_ms / 1000 + 10)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        content = await reader.readexactly(int(headers.get("content-length", "0")))
        return Answer(int(lines[0].split()[1]), headers, content, time.monotonic() - t0)
    finally:
        writer.close()


@pytest.fixture
def bounded_server():
    port = free_port()
    proc = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING", "WORKCENTER_LONG_POLL_MAX_PER_TOKEN": str(PER_TOKEN),
                               "WORKCENTER_LONG_POLL_MAX_PER_PROCESS": str(PER_PROCESS)})
    yield port
    stop_process(proc)


async def _answered(tasks: list[asyncio.Task], count: int) -> list[Answer]:
    """The answers of `count` of `tasks` (within 2 s), and no more answers for 0.3 s after them."""
    pending, end = set(tasks), time.monotonic() + 2
    while len(tasks) - len(pending) < count and time.monotonic() < end:
        _, pending = await asyncio.wait(pending, timeout=end - time.monotonic(), return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.3)
    answers = [t.result() for t in tasks if t.done()]
    assert len(answers) == count, [x.status for x in answers]
    return answers


def _refused(answer: Answer, scope: str, limit: int) -> None:
    assert answer.status == 429, (answer.status, answer.body)
    assert answer.took < within(1.0, cap=5.0), answer.took  # at once: the claim would wait 30 s
    assert 1 <= int(answer.headers["retry-after"]) <= longpoll.RETRY_AFTER_SECONDS
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    body = answer.json()
    assert body["code"] == "too_many_waiting_claims" and body["message"]
    assert body["extra"] == {"limit": limit, "scope": scope}


def test_past_the_bounds_claims_answer_429_at_once_the_server_keeps_answering_and_the_waiting_get_work(
        bounded_server):
    port = bounded_server
    a, b, c = _token(), _token(), _token()
    health: list[int] = []

    async def watch_health(stop: asyncio.Event):
        while not stop.is_set():  # /healthz, every 50 ms, throughout
            health.append((await asyncio.to_thread(_get, port, "/healthz"))[0])
            await asyncio.sleep(0.05)

    async def scenario():
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_health(stop))
        # given one token that sends more claims than its bound, with bodies near the parking limit
        pad = longpoll.MAX_BODY - 200
        first = [asyncio.create_task(_claim(port, a, f"a-{i}", WAIT_MS, pad)) for i in range(PER_TOKEN + 4)]
        over_token = await _answered(first, 4)
        for answer in over_token:
            _refused(answer, "token", PER_TOKEN)
        assert await asyncio.to_thread(_parked, port, a) == PER_TOKEN
        # and two more tokens: the process's bound
        second = [asyncio.create_task(_claim(port, token, f"{name}-{i}", WAIT_MS))
                  for name, token in (("b", b), ("c", c)) for i in range(PER_TOKEN)]
        over_process = await _answered(second, 2 * PER_TOKEN - (PER_PROCESS - PER_TOKEN))
        for answer in over_process:
            _refused(answer, "process", PER_PROCESS)
        assert await asyncio.to_thread(_parked, port, a) == PER_PROCESS
        # when an action becomes claimable, a waiting claim gets it at once (maybe before the
        # create's own answer is back: the wake follows the commit within a millisecond)
        waiting = [t for t in first + second if not t.done()]
        t0 = time.monotonic()
        status, _ = await asyncio.to_thread(_create, port, a)
        assert status == 201
        done, _ = await asyncio.wait(waiting, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        claimed = [t.result() for t in done]
        took = time.monotonic() - t0
        assert [x.status for x in claimed] == [201], ([x.status for x in claimed], took)  # not its deadline's 204
        print(f"\na waiting claim took the new action {1000 * took:.0f} ms after the create began")
        # the place it left is free again: a new claim waits instead of a 429
        again = asyncio.create_task(_claim(port, c, "c-again", 2_000))
        done, _ = await asyncio.wait({again}, timeout=1)
        assert not done
        # the others answer 204 at their deadline
        rest = await asyncio.gather(again, *(t for t in first + second if not t.done()))
        assert len(rest) == PER_PROCESS and {x.status for x in rest} == {204}, [x.status for x in rest]
        stop.set()
        await watcher

    async_to_sync(scenario)()
    assert health and set(health) == {200}, health
    print(f"\n/healthz answered 200 {len(health)} times while {PER_PROCESS} claims waited and the rest were refused")
    assert _parked(port, a) == 0


def _create(port: int, token: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/api/v1/work-items", body=json.dumps(
            {"title": "For a waiting claim", "goal": "g", "work_item_type": "software-change"}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_claim_with_a_bad_token_never_takes_a_place(bounded_server):
    """Made-up tokens are refused by the route's first attempt (401), before any count."""
    port = bounded_server

    async def scenario():
        answers = await asyncio.gather(*(_claim(port, f"wc_{i:08x}_nope", "x", 5_000) for i in range(PER_PROCESS + 5)))
        assert {x.status for x in answers} == {401}
        assert max(x.took for x in answers) < 2.0

    async_to_sync(scenario)()
    token = _token()

    async def then():  # the process still has all its places
        tasks = [asyncio.create_task(_claim(port, token, f"t-{i}", 1_000)) for i in range(PER_TOKEN)]
        done, _ = await asyncio.wait(tasks, timeout=0.6)
        assert not done
        assert {x.status for x in await asyncio.gather(*tasks)} == {204}

    async_to_sync(then)()


FEW_FDS = 160  # the server's file descriptors: a dozen at rest, some 30 once serving (database connections)


@pytest.fixture
def server_with_few_fds():
    """The bounded server under a low RLIMIT_NOFILE (inherited from this process while it starts)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    port = free_port()
    resource.setrlimit(resource.RLIMIT_NOFILE, (FEW_FDS, hard))
    try:
        proc = start_daphne(port, {"WORKCENTER_LOG_LEVEL": "WARNING",
                                   "WORKCENTER_LONG_POLL_MAX_PER_TOKEN": str(PER_TOKEN),
                                   "WORKCENTER_LONG_POLL_MAX_PER_PROCESS": str(PER_PROCESS)})
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    yield port, proc
    stop_process(proc)


def _open_fds(proc) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def test_more_claims_than_the_server_has_file_descriptors_never_take_it_down(server_with_few_fds):
    """More long-poll claims than the server could hold connections for, one after the other from
    a few tokens: beyond the bounds each answers 429 at once, so `/healthz` and the API keep
    answering (without the bounds the claims took every descriptor and the server stopped
    accepting connections)."""
    port, proc = server_with_few_fds
    tokens = [_token() for _ in range(4)]
    total = FEW_FDS + 40
    at_rest = _open_fds(proc)

    async def scenario():
        tasks = []
        for i in range(total):
            tasks.append(asyncio.create_task(_claim(port, tokens[i % len(tokens)], f"fd-{i}", 30_000)))
            await asyncio.wait({tasks[-1]}, timeout=0.05)  # answered, or waiting
            if i % 20 == 19:
                assert (await asyncio.to_thread(_get, port, "/healthz"))[0] == 200, f"after {i + 1} claims"
        await asyncio.sleep(0.5)
        refused = [t.result() for t in tasks if t.done()]
        assert len(refused) == total - PER_PROCESS, len(refused)
        assert {x.status for x in refused} == {429} and max(x.took for x in refused) < within(1.0, cap=5.0)
        assert await asyncio.to_thread(_parked, port, tokens[0]) == PER_PROCESS
        print(f"\nserver file descriptors: {at_rest} at rest, {_open_fds(proc)} with {PER_PROCESS} claims parked "
              f"after {total} sent (limit {FEW_FDS})")
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async_to_sync(scenario)()
    assert _get(port, "/healthz")[0] == 200
    assert wait_until(lambda: _parked(port, tokens[0]) == 0, 5)


# --- in-process: the middleware's counts and what a waiting claim holds ------------------------

SECURITY = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff")]


def _route(attempts: list):
    async def app(scope, receive, send):  # the claim route: nothing claimable, security headers
        message = await receive()
        attempts.append(len(message["body"]))
        await send({"type": "http.response.start", "status": 204, "headers": list(SECURITY)})
        await send({"type": "http.response.body", "body": b""})
    return app


class Client:
    """A long-poll claim's ASGI side: its body (made on the first receive, held by nobody else),
    then a disconnect when `leave` is set."""

    def __init__(self, token: str, boot: str, pad: int, wait_ms: int = 30_000):
        self.token, self.boot, self.pad, self.wait_ms = token, boot, pad, wait_ms
        self.leave = asyncio.Event()
        self.sent: list[dict] = []
        self.given = False

    def scope(self) -> dict:
        return {"type": "http", "method": "POST", "path": "/api/v1/claims",
                "headers": [(b"authorization", f"Bearer {self.token}".encode()),
                            (b"content-type", b"application/json")]}

    async def receive(self):
        if not self.given:
            self.given = True
            return {"type": "http.request", "more_body": False,
                    "body": json.dumps({"owner_boot_id": self.boot, "wait_ms": self.wait_ms}).encode() + b" " * self.pad}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)


def _bound_settings(settings, per_token: int, per_process: int) -> None:
    settings.WORKCENTER_LONG_POLL_MAX_PER_TOKEN = per_token
    settings.WORKCENTER_LONG_POLL_MAX_PER_PROCESS = per_process


def test_the_bounds_count_waiting_claims_per_token_and_per_process_and_free_their_places(settings):
    _bound_settings(settings, 3, 5)
    attempts: list[int] = []
    middleware = longpoll.LongPollClaims(_route(attempts))

    async def scenario():
        clients, tasks = [], []
        for token, name, count in (("wc_aaaaaaaa_s1", "a", 4), ("wc_bbbbbbbb_s2", "b", 3)):
            batch = [Client(token, f"{name}{i}", 0) for i in range(count)]
            tasks += [asyncio.create_task(middleware(c.scope(), c.receive, c.send)) for c in batch]
            clients += batch
            await asyncio.sleep(0.1)
        answered = sorted((c for c in clients if c.sent), key=lambda c: c.boot)
        assert [c.boot[0] for c in answered] == ["a", "b"]
        assert [json.loads(c.sent[1]["body"])["extra"] for c in answered] == [
            {"limit": 3, "scope": "token"}, {"limit": 5, "scope": "process"}]
        start = answered[0].sent[0]
        assert start["status"] == 429 and (b"retry-after", b"5") in start["headers"]
        assert all(h in start["headers"] for h in SECURITY)
        assert longpoll.parked.waiting_total == 5
        # one that leaves frees its place: the next claim of that token waits
        next(c for c in clients if c.boot[0] == "a" and not c.sent).leave.set()
        await asyncio.sleep(0.05)
        assert longpoll.parked.waiting_total == 4
        late = Client("wc_aaaaaaaa_s1", "a-late", 0)
        tasks.append(asyncio.create_task(middleware(late.scope(), late.receive, late.send)))
        await asyncio.sleep(0.05)
        assert not late.sent and longpoll.parked.waiting_total == 5
        for c in clients + [late]:
            c.leave.set()
        await asyncio.gather(*tasks)
        assert longpoll.parked.waiting_total == 0 and not longpoll.parked.waiting

    async_to_sync(scenario)()


def _bytes_per_parked_claim(settings, n: int, pad: int, boot_chars: int = 36) -> float:
    """tracemalloc's growth per claim over `n` parked claims with bodies of `pad` spaces more."""
    _bound_settings(settings, n + 1, n + 1)
    attempts: list[int] = []
    middleware = longpoll.LongPollClaims(_route(attempts))

    async def scenario():
        first = Client("wc_cccccccc_s", "warm", 0)  # the listener and the pump, started once
        tasks = [asyncio.create_task(middleware(first.scope(), first.receive, first.send))]
        await asyncio.sleep(0.1)
        clients = [Client("wc_cccccccc_s", f"{i:0{boot_chars}d}", pad) for i in range(n)]
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        tasks += [asyncio.create_task(middleware(c.scope(), c.receive, c.send)) for c in clients]
        assert await asyncio.to_thread(wait_until, lambda: longpoll.parked.waiting_total == n + 1, 10)
        await asyncio.sleep(0.05)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        for c in [first] + clients:
            c.leave.set()
        await asyncio.gather(*tasks)
        assert not any(c.sent for c in clients)  # they waited, none answered
        return (after - before) / n

    tracemalloc.start()
    try:
        return async_to_sync(scenario)()
    finally:
        tracemalloc.stop()


def test_a_parked_claim_holds_its_fields_not_the_body_the_client_sent(settings):
    n = 200
    small = _bytes_per_parked_claim(settings, n, 0)
    large = _bytes_per_parked_claim(settings, n, longpoll.MAX_BODY - 200)
    long_boot = _bytes_per_parked_claim(settings, n, 0, boot_chars=longpoll.MAX_BODY - 200)
    print(f"\nbytes per parked claim (tracemalloc, {n} claims): small body {small:,.0f}; "
          f"body of {longpoll.MAX_BODY - 200 + 60:,} bytes (padding) {large:,.0f}; "
          f"boot id of {longpoll.MAX_BODY - 200:,} characters {long_boot:,.0f}")
    assert large - small < 1024, (small, large)  # the padding is not kept
    assert large < 20 * 1024 and long_boot < 20 * 1024, (large, long_boot)
