#!/usr/bin/env python3
"""Chaos run: the whole deployment under faults, then a proof that the store stayed consistent.

    python bench/chaos.py [--items N] [--seconds S] [--seed K] [--settle S] [--json]

What runs (everything on 127.0.0.1, every process started here and killed at exit):

* PostgreSQL database `workcenter_chaos_bench` (dropped and recreated, then migrated; the name
  must contain "bench") and a Redis server of its own (`redis-server` on a free port, nothing
  kept on disk) as the channel layer (`REDIS_URL`); `--redis-url` uses a given one instead.
* 2 daphne processes on free ports; 4 `manage.py workcenter_worker` processes with the simulated
  executor (short runs, an outcome mix with failures, waiting and retryable outcomes, 4 s
  leases): workers 0 and 1 use the HTTP worker protocol (`--server`, one per daphne), workers 2
  and 3 the local store.
* N work items (default 100) created through the API over the first third of the run, of four
  kinds that cover the workspace modes: `research` (two `read` actions, then a `shared` one),
  `parallel-change` (two `isolated-write`, an `integrate`, a `shared` test), `reviewed-change`
  (a `shared` chain whose review requests changes once) and the linear `software-change`
  template; most share one of six absolute work directories (so exclusivity matters), a few
  have none.

Faults and people while it runs (seeded by `--seed`; timing makes every run different): a
worker SIGKILLed every few seconds and restarted with a new boot id; twice a busy worker
SIGSTOPped past its lease and then continued (it wakes as a zombie holding runs that others
recovered); one daphne SIGKILLed and restarted on its port; the Redis server SIGKILLed once
and restarted empty on its port 10 s later (its own Redis only: a given `--redis-url` is never
killed); two threads of people and admins:
answers to waiting items and retries of failed ones (`POST …/retry`), cancels, guidance and
contract changes through the API, admin repairs through the services (`run_release`,
`action_reset`, `action_mark_failed`, `action_edit`), and stale worker calls (submit, renew,
progress, interrupt with the fence of a run that ended, with a wrong epoch or boot id on a live
one, or with a live run's own fence at a moment past its lease expiry) that must all be refused
and change nothing; and a websocket listener on /ws/work-items/ that drops its connection at
random (cleanly or by closing the socket), switches servers and resumes with `after_id`.

Then faults stop and the workers get a settle period (`--settle`, default 90 s) that ends early
once the system is quiescent: no item `ready` or `running` and no run `running`. At its end:

* **stuck** = items still `ready`/`running` (work the system owes) + runs still `running` whose
  lease has expired (recovery should have closed them). Items `waiting`/`needs_attention`
  (a person must act) and `done`/`cancelled` are settled.
* **violations** = rows returned by the SQL checks below + stale worker calls that were accepted
  + 5xx answers + unexpected service errors + listener deliveries out of order or twice:
  double claims (two runs of one action running together; two running runs of one action; one
  epoch claimed twice), workspace exclusivity (DOMAIN §5.4 matrix over the running intervals
  of runs in one workspace), fences (epochs strictly increasing per action; no event naming a
  run after the transaction that ended it; one terminal event per run, matching its status;
  worker events only from the run's own boot id), and DOMAIN §15's invariants, each as a query
  that must return no row (plus the derived `claimable` flag and the linear status rule).
* **lost_events** = stored events the resumed listener never received.

Run intervals are compared in commit order: a run starts at the id of its `run.claimed` event
and ends at the highest id of the events its ending transaction wrote (those on its item
stamped with its `ended_at`). Event ids are drawn while the transaction holds its locks, so
when a claim saw a run end, the end's event ids are lower than the claim's. The same overlap
test on the `started_at`/`ended_at` wall-clock stamps is printed for information only: a
transaction other than a claim reads the clock before its locks, so two correctly
serialised transactions can carry stamps out of order (by hundreds of milliseconds on a loaded
2-core machine, by seconds when a worker stalls inside a claim).

With `--json` the last line printed is one JSON object: `seconds`, `kills`, `items`,
`violations`, `lost_events`, `stuck` and more figures. The exit code is 1 when any check fails.
"""
from __future__ import annotations

import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_chaos_bench"
REDIS_DOWN_S = 10.0
SUBMITTED = ("completed", "waiting", "retryable", "failed")  # run statuses a submission ends in
LEASE_MS = 4_000
POLL_MS = 250
CONCURRENCY = 3
SIM_SCALE = "0.3"            # runs of 0.18-0.72 s
SIM_RATES = "0.07,0.08,0.10"  # failure, waiting, retryable (first attempts)
KINDS = ("research", "parallel-change", "reviewed-change", "software-change")
WORKSPACES = 6
NO_WORKSPACE_SHARE = 0.1
START_TIMEOUT = 60.0
ADMIN = "admin:chaos"
BIG = 2 ** 62
STALE_RESULT = {"outcome": "completed", "summary": "stale", "evidence": ["stale"],
                "acceptance_checks": [{"criterion": c, "status": "passed", "evidence": "stale"}
                                      for c in ("it works", "nothing is lost")]}


log = harness.log


class Stop(Exception):
    """SIGTERM/SIGINT: unwind through the finally blocks that kill the children."""


# --------------------------------------------------------------------------- child processes


class Child:
    """A process in its own process group (so a kill takes everything it started)."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict):
        self.name, self.argv, self.logdir, self.env = name, argv, logdir, env
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.logdir / f"{self.name}-{self.starts}.log"
        with open(self.log_path, "wb") as fh:
            self.proc = subprocess.Popen(self.argv, cwd=harness.REPO, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 20.0) -> None:
        if not self.alive():
            self.signal(signal.SIGKILL)  # whatever it left in its group
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except (OSError, AttributeError):
            return ""


class Server(Child):
    def __init__(self, index: int, logdir: Path, env: dict):
        self.port = harness.free_port()
        super().__init__(f"daphne-{index}", harness.daphne_command(self.port), logdir, env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_and_wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for _ in range(5):
            self.start()
            while time.monotonic() < deadline and self.alive() and not harness.port_open(self.port):
                time.sleep(0.1)
            if self.alive() and harness.port_open(self.port):
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)  # it exited (its port still held?): try again on the same port
        self.kill()
        raise RuntimeError(f"{self.name} did not listen on {self.port}:\n{self.tail()}")


class RedisProc(Child):
    """A Redis server of the run's own on a free port: it can be killed without touching anyone else's."""

    def __init__(self, logdir: Path):
        self.port = harness.free_port()
        super().__init__("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                   "--appendonly", "no", "--dir", str(logdir)], logdir, dict(os.environ))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start_and_wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        self.start()
        while time.monotonic() < deadline and self.alive() and not harness.port_open(self.port):
            time.sleep(0.05)
        if not (self.alive() and harness.port_open(self.port)):
            self.kill()
            raise RuntimeError(f"redis-server did not listen on {self.port}:\n{self.tail()}")


class WorkerProc(Child):
    BOOT = re.compile(r"worker (\S+) starting")

    def __init__(self, index: int, logdir: Path, env: dict, server: Server | None, token: str):
        argv = [sys.executable, "manage.py", "workcenter_worker", "--concurrency", str(CONCURRENCY),
                "--lease-ms", str(LEASE_MS), "--poll-ms", str(POLL_MS)]
        if server is not None:
            argv += ["--server", server.url, "--token", token]
        self.mode = "http" if server is not None else "local"
        self.boots: list[str] = []
        super().__init__(f"worker-{index}", argv, logdir, env)

    def boot_id(self) -> str | None:
        """The boot id of the current process, read from its first output line once printed."""
        if self.log_path is None:
            return None
        if len(self.boots) < self.starts:
            try:
                match = self.BOOT.search(self.log_path.read_text(errors="replace"))
            except OSError:
                match = None
            if match is None:
                return None
            self.boots.append(match.group(1))
        return self.boots[-1]


# --------------------------------------------------------------------------- HTTP API client


class Api:
    """The API over plain HTTP, trying the live servers in random order."""

    def __init__(self, servers: list[Server], token: str, rng: random.Random):
        self.servers, self.token, self.rng = servers, token, rng
        self.statuses: Counter = Counter()
        self.server_errors: list[str] = []
        self.unreachable = 0

    def call(self, method: str, path: str, body=None, timeout: float = 20.0) -> tuple[int | None, dict | None]:
        order = [s for s in self.servers if s.alive()]
        self.rng.shuffle(order)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for server in order:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
            try:
                conn.request(method, "/api/v1" + path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                continue
            finally:
                conn.close()
            self.statuses[resp.status] += 1
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = {"raw": raw[:200].decode(errors="replace")}
            if resp.status >= 500:
                self.server_errors.append(f"{method} {path} -> {resp.status}: {raw[:300]!r}")
            return resp.status, payload
        self.unreachable += 1
        return None, None


# --------------------------------------------------------------------------- websocket listener


class Listener(threading.Thread):
    """/ws/work-items/ on either server; drops the connection at random and resumes with after_id."""

    def __init__(self, servers: list[Server], token: str, seed: int):
        super().__init__(name="listener", daemon=True)
        self.servers, self.token = servers, token
        self.rng = random.Random(seed)
        self.received: list[int] = []
        self.last_id = 0
        self.connects = 0
        self.connect_failures = 0
        self.drops = 0
        self.close_codes: Counter = Counter()
        self.calm = threading.Event()    # no more random drops (drain at the end)
        self.finish = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        while not self.finish.is_set():
            live = [s for s in self.servers if s.alive()] or self.servers
            server = self.rng.choice(live)
            url = f"ws://127.0.0.1:{server.port}/ws/work-items/?token={self.token}&after_id={self.last_id}"
            connected = False
            try:
                with connect(url, open_timeout=5, close_timeout=2, max_size=None) as ws:
                    connected = True
                    self.connects += 1
                    self._session(ws)
            except ConnectionClosed as exc:
                self.close_codes[exc.rcvd.code if exc.rcvd is not None else None] += 1
            except Exception as exc:  # refused while a server is down; a server killed under us
                if connected:
                    self.close_codes[type(exc).__name__] += 1
                else:
                    self.connect_failures += 1
                    time.sleep(0.2)
            if connected:
                self.drops += 1

    def _session(self, ws) -> None:
        """Read events until this connection's random budget (time or messages) is spent, then
        leave: half the time with a close frame, half by closing the socket under it."""
        budget_s = self.rng.uniform(0.3, 5.0)
        budget_n = self.rng.randint(1, 400)
        started, got = time.monotonic(), 0
        hello = json.loads(ws.recv(timeout=10))
        if hello.get("type") != "hello":
            self.errors.append(f"first message is not hello: {hello!r}"[:200])
        while not self.finish.is_set():
            if not self.calm.is_set() and (time.monotonic() - started > budget_s or got >= budget_n):
                break
            try:
                raw = ws.recv(timeout=0.3)
            except TimeoutError:
                continue
            message = json.loads(raw)
            if message.get("type") == "event":
                eid = message["event"]["id"]
                self.received.append(eid)
                self.last_id = max(self.last_id, eid)
                got += 1
        if self.rng.random() < 0.5:
            ws.socket.close()  # abrupt: no close frame


# --------------------------------------------------------------------------- the run


class Chaos:
    def __init__(self, args, logdir: Path):
        self.args = args
        self.rng = random.Random(args.seed)
        self.logdir = logdir
        self.servers: list[Server] = []
        self.workers: list[WorkerProc] = []
        self.listener: Listener | None = None
        self.redis: RedisProc | None = None
        self.api: Api | None = None
        self.token = ""
        self.counts: Counter = Counter()
        self.service_errors: list[str] = []
        self.stale_accepted: list[str] = []
        self.killed_boots: set[str] = set()
        self.orphans: set[str] = set()   # runs that were running when their worker was killed
        self.item_ids: list[str] = []
        self.retried: Counter = Counter()
        self.workdirs: list[str] = []
        self.paused: set[WorkerProc] = set()
        self.lock = threading.Lock()
        self.budgets: Counter = Counter()

    # ---- set-up
    def setup(self) -> dict:
        args = self.args
        if args.redis_url is None:
            self.redis = RedisProc(self.logdir)
            self.redis.start_and_wait()
            args.redis_url = self.redis.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "workcenter.settings"
        harness.production_settings()  # a production-like configuration, whether or not debug defaults to off
        harness.use_channel_layer(args.redis_url)
        # refuses a name without "bench"; DROP … WITH (FORCE)
        harness.fresh_database("postgres", args.database_url)
        self.token = harness.api_user("chaos", harness.RUNNER)
        from django.db import connections

        connections.close_all()
        root = Path(tempfile.mkdtemp(prefix="wc-chaos-ws-", dir=self.logdir))
        for i in range(WORKSPACES):
            d = root / f"repo-{i}"
            d.mkdir()
            self.workdirs.append(str(d.resolve()))
        env = dict(os.environ, PYTHONUNBUFFERED="1", WORKCENTER_SIM_SCALE=SIM_SCALE, WORKCENTER_SIM_RATES=SIM_RATES)
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.servers = [Server(i, self.logdir, env) for i in range(2)]
        for s in self.servers:
            s.start_and_wait()
        self.workers = [WorkerProc(i, self.logdir, env, self.servers[i] if i < 2 else None, self.token)
                        for i in range(4)]
        for w in self.workers:
            w.start()
        self.api = Api(self.servers, self.token, random.Random(self.args.seed + 1))
        self.listener = Listener(self.servers, self.token, self.args.seed + 2)
        self.listener.start()
        return env

    # ---- faults
    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def _busy_workers(self) -> tuple[list[WorkerProc], list[WorkerProc]]:
        """(live workers holding a running run, all live workers), paused ones left out."""
        from workcenter.models import Run

        boots = {w.boot_id(): w for w in self.workers if w.alive() and w.boot_id() and w not in self.paused}
        busy = set(Run.objects.filter(status="running", owner_boot_id__in=list(boots))
                   .values_list("owner_boot_id", flat=True))
        return [boots[b] for b in busy], list(boots.values())

    def kill_worker(self) -> None:
        from workcenter.models import Run

        busy, idle = self._busy_workers()
        candidates = busy if busy and self.rng.random() < 0.8 else idle
        if not candidates:
            return
        victim = self.rng.choice(candidates)
        boot = victim.boot_id()
        victim.kill()
        self.count("worker_kills")
        self.killed_boots.add(boot)
        self.orphans.update(Run.objects.filter(status="running", owner_boot_id=boot).values_list("pk", flat=True))
        self.pending_restarts.append((time.monotonic() + self.rng.uniform(0.2, 2.0), victim))

    def pause_worker(self) -> tuple[float, WorkerProc] | None:
        """SIGSTOP a busy worker past its lease: its runs are recovered by the others, and when it
        wakes its renewals, progress and submissions must all be fenced out."""
        busy, _ = self._busy_workers()
        if not busy:
            return None
        victim = self.rng.choice(busy)
        victim.signal(signal.SIGSTOP)
        self.paused.add(victim)
        self.count("worker_pauses")
        return time.monotonic() + LEASE_MS / 1000 + self.rng.uniform(1.0, 2.5), victim

    def resume_worker(self, victim: WorkerProc) -> None:
        victim.signal(signal.SIGCONT)
        self.paused.discard(victim)

    def kill_server(self) -> Server:
        server = self.rng.choice(self.servers)
        server.kill()
        self.count("server_kills")
        return server

    # ---- people and admins
    def create_item(self, n: int, rng: random.Random | None = None) -> None:
        """Create item `n` over HTTP; one that failed waits in `pending_creates` to be made again."""
        rng = rng or self.rng
        kind = KINDS[n % len(KINDS)] if n < len(KINDS) else rng.choice(KINDS)
        title = f"chaos item {n} ({kind})"
        if n % 25 == 7:
            title += " [sim:waiting]"
        elif n % 25 == 19:
            title += " [sim:fail]"
        body = {"title": title, "goal": f"Exercise the store under faults ({kind})",
                "acceptance_criteria": ["it works", "nothing is lost"], "work_item_type": kind}
        if rng.random() >= NO_WORKSPACE_SHARE:
            body["work_dir"] = rng.choice(self.workdirs)
        status, payload = self.api.call("POST", "/work-items", body)
        if status == 201:
            self.item_ids.append(payload["id"])
            self.count("created")
        else:
            self.count(f"create_{status}")
            with self.lock:
                self.pending_creates.append(n)

    def creator(self, create_at: list[float], stop: threading.Event) -> None:
        """Create the items at their times, on a thread of its own: a create that waits on a stalled
        server never delays a fault. What it has not made when `stop` is set waits in `unmade`."""
        rng = random.Random(self.args.seed * 7919)
        n = 0
        while not stop.is_set():
            now = time.monotonic()
            while n < len(create_at) and create_at[n] <= now and not stop.is_set():
                self.create_item(n, rng)
                n += 1
            with self.lock:
                retry = self.pending_creates.pop(0) if self.pending_creates and rng.random() < 0.3 else None
            if retry is not None:
                self.create_item(retry, rng)
            stop.wait(0.05)
        self.unmade = list(range(n, len(create_at)))

    @staticmethod
    def _pick(rng: random.Random, qs):
        ids = list(qs.values_list("pk", flat=True)[:200])
        return rng.choice(ids) if ids else None

    def human(self, rng: random.Random) -> None:
        """One operation of a person or an admin, on a target read from the database."""
        from django.db.models import F

        from workcenter.models import Action, Run, WorkItem

        op = rng.choices(
            ["answer", "retry", "cancel", "guidance", "update", "release", "reset", "mark_failed", "edit", "stale"],
            weights=[5, 5, 1, 1, 1, 1.5, 1.5, 1, 1, 6])[0]
        if op != "stale" and self.budgets[op] <= 0:
            return
        if op == "answer":
            item = self._pick(rng, WorkItem.objects.filter(status="waiting"))
            if item:
                self._api_op("answer", "POST", f"/work-items/{item}/retry", {"answer": "Take option A"})
        elif op == "retry":
            ids = [i for i in WorkItem.objects.filter(status="needs_attention").values_list("pk", flat=True)
                   if self.retried[i] < 3]
            if ids:
                item = rng.choice(ids)
                with self.lock:
                    self.retried[item] += 1
                self._api_op("retry", "POST", f"/work-items/{item}/retry", {})
        elif op == "cancel":
            item = self._pick(rng, WorkItem.objects.exclude(status__in=["done", "cancelled"]))
            if item:
                self._api_op("cancel", "POST", f"/work-items/{item}/cancel", None)
        elif op == "guidance":
            rows = list(WorkItem.objects.filter(status__in=["ready", "running"], current_action_id__isnull=False)
                        .values_list("pk", "current_action_id", "revision")[:200])
            if rows:
                item, action, revision = rng.choice(rows)
                self._api_op("guidance", "POST", f"/work-items/{item}/guidance",
                             {"action_id": action, "revision": revision, "guidance": "Prefer the smaller change"})
        elif op == "update":
            rows = list(WorkItem.objects.exclude(status__in=["done", "cancelled"])
                        .values_list("pk", "goal", "revision")[:200])
            if rows:
                item, goal, revision = rng.choice(rows)
                self._api_op("update", "PATCH", f"/work-items/{item}",
                             {"goal": goal + " (revised)", "expected_revision": revision})
        elif op == "release":
            run = self._pick(rng, Run.objects.filter(status="running"))
            if run:
                self._service_op("release", "run_release", run_id=run)
        elif op == "reset":
            action = self._pick(rng, Action.objects.filter(status__in=["failed", "running", "waiting"])
                                .exclude(work_item__status__in=["done", "cancelled"]))
            if action:
                self._service_op("reset", "action_reset", action_id=action)
        elif op == "mark_failed":
            action = self._pick(rng, Action.objects.filter(status__in=["ready", "running"]))
            if action:
                self._service_op("mark_failed", "action_mark_failed", action_id=action)
        elif op == "edit":
            rows = list(Action.objects.filter(status__in=["ready", "failed"], attempt__lt=F("max_attempts"))
                        .values_list("pk", "max_attempts")[:200])
            if rows:
                action, max_attempts = rng.choice(rows)
                self._service_op("edit", "action_edit", action_id=action, max_attempts=max_attempts + 1)
        elif op == "stale":
            self.stale_probe(rng)

    def _api_op(self, name: str, method: str, path: str, body) -> None:
        status, _ = self.api.call(method, path, body)
        self.count(f"{name}_{status}")
        if status == 200:
            with self.lock:
                self.budgets[name] -= 1

    def _service_op(self, name: str, fn: str, **kwargs) -> None:
        from django.db import connection

        from workcenter import services
        from workcenter.errors import WorkcenterError

        try:
            getattr(services, fn)(reason=f"chaos {name}", actor=ADMIN, **kwargs)
        except WorkcenterError as exc:
            self.count(f"{name}_refused_{exc.code}")
            return
        except Exception as exc:  # anything else is a defect of the service (a 500 in the admin)
            with self.lock:
                self.service_errors.append(f"{fn}({kwargs}): {type(exc).__name__}: {exc}")
            connection.close()
            return
        self.count(f"{name}_ok")
        with self.lock:
            self.budgets[name] -= 1

    def stale_probe(self, rng: random.Random) -> None:
        """A worker call whose fence must fail, of one of three kinds: the triple of a run that
        ended (over the API); a live run's with a wrong epoch or boot id (over the API); or a
        live run's own triple at a moment past its lease expiry (through the services, with an
        injected clock: the window between expiry and recovery, which a real zombie can hit).
        Submit, renew and progress must be refused (409 stale_run / None), interrupt must answer
        `{"interrupted": false}`, and an ended run's row must not change. The one exception: a
        submit with the owner's own fence on a run that a submission ended is a resend whose
        answer was lost, answered as applied (200, the stored run) while writing nothing."""
        kind = rng.choice(["ended"] * 5 + ["wrong"] * 3 + ["expired"] * 2)
        if kind == "expired":
            return self._expired_probe(rng)
        from workcenter.models import Run

        fields = ("status", "ended_at", "expires_at", "progress_revision", "summary", "response")
        ended = kind == "ended"
        qs = Run.objects.exclude(status="running") if ended else Run.objects.filter(status="running")
        if ended and self.orphans and rng.random() < 0.5:
            qs = qs.filter(pk__in=list(self.orphans))
        run = qs.order_by("?").values("pk", "owner_boot_id", "lease_epoch", *fields).first()
        if run is None:
            return
        boot, epoch = run["owner_boot_id"], run["lease_epoch"]
        if not ended:
            if rng.random() < 0.5:
                epoch += rng.choice([-1, 1])
            else:
                boot = "chaos-impostor"
        fence = {"owner_boot_id": boot, "lease_epoch": epoch}
        call = rng.choice(["submit", "renew", "progress", "interrupt"])
        body = {
            "submit": {**fence, **STALE_RESULT},
            "renew": {**fence, "lease_ms": 600_000},
            "progress": {**fence, "response": "stale progress"},
            "interrupt": {**fence, "reason": "stale interrupt"},
        }[call]
        status, payload = self.api.call("POST", f"/runs/{run['pk']}/{call}", body)
        self.count("stale_probes")
        if status is None:
            return
        payload = payload if isinstance(payload, dict) else {}
        refused = (status == 200 and payload.get("interrupted") is False) if call == "interrupt" else (
            status == 409 and payload.get("code") == "stale_run")
        if (call == "submit" and ended and run["status"] in SUBMITTED and status == 200
                and (payload.get("run") or {}).get("status") == run["status"]):
            refused = True  # the owner's own fence on a run its submission ended: answered as applied, nothing written
        if not refused:
            self._accepted(f"{call} on {kind} run {run['pk']} ({run['status']}) with {fence}: {status} {payload}")
        if ended:
            after = Run.objects.filter(pk=run["pk"]).values(*fields).first()
            before = {k: run[k] for k in fields}
            if after != before:
                self._accepted(f"{call} changed ended run {run['pk']}: {before} -> {after}")

    def _expired_probe(self, rng: random.Random) -> None:
        from datetime import timedelta

        from workcenter import services
        from workcenter.errors import StaleRun, WorkcenterError
        from workcenter.models import Run
        from workcenter.services.runs import AppliedSubmission

        run = Run.objects.filter(status="running").order_by("?").values(
            "pk", "owner_boot_id", "lease_epoch", "expires_at").first()
        if run is None:
            return
        fence = {"run_id": run["pk"], "owner_boot_id": run["owner_boot_id"], "lease_epoch": run["lease_epoch"],
                 "now": run["expires_at"] + timedelta(milliseconds=1)}
        call = rng.choice(["submit", "renew", "progress"])
        self.count("stale_probes")
        try:
            if call == "renew":
                out = services.run_renew(lease_ms=600_000, **fence)
            elif call == "progress":
                out = services.run_progress(progress={"response": "stale progress"}, **fence)
            else:
                out = services.run_submit(result=dict(STALE_RESULT), **fence)
        except StaleRun:
            return
        except WorkcenterError as exc:
            out = f"{exc.code}: {exc.message}"
        if isinstance(out, AppliedSubmission) and out[0].summary != STALE_RESULT["summary"]:
            return  # its owner submitted between the read and this call: a resend, answered as applied
        if out is not None:
            self._accepted(f"{call} of run {run['pk']} after its lease expired was not refused: {out!r}")

    def _accepted(self, message: str) -> None:
        with self.lock:
            self.stale_accepted.append(message[:400])

    def people(self, seed: int, stop: threading.Event) -> None:
        """A thread of people and admins acting every 0.2-0.8 s (two run at once)."""
        from django.db import connection

        rng = random.Random(seed)
        try:
            while not stop.wait(rng.uniform(0.2, 0.8)):
                try:
                    self.human(rng)
                except Exception as exc:  # a defect of the driver or the store: reported, not fatal
                    with self.lock:
                        self.service_errors.append(f"operation failed: {type(exc).__name__}: {exc}")
                    connection.close()
        finally:
            connection.close()

    # ---- phases
    def chaos_phase(self) -> None:
        args = self.args
        n_items = args.items
        self.budgets = Counter({
            "answer": 10 ** 6, "retry": 10 ** 6,
            "cancel": max(2, n_items * 6 // 100), "guidance": max(2, n_items * 5 // 100),
            "update": max(1, n_items * 3 // 100), "release": max(2, n_items * 6 // 100),
            "reset": max(2, n_items * 6 // 100), "mark_failed": max(2, n_items * 4 // 100),
            "edit": max(1, n_items * 3 // 100)})
        self.pending_restarts: list[tuple[float, WorkerProc]] = []
        self.pending_creates: list[int] = []
        t0 = time.monotonic()
        end = t0 + args.seconds
        create_span = max(1.0, args.seconds / 3)
        create_at = [t0 + create_span * i / n_items for i in range(n_items)]
        self.unmade: list[int] = []
        kill_every = max(2.0, min(6.0, args.seconds / 12))
        next_kill = t0 + self.rng.uniform(1.5, kill_every)
        server_kill_at: float | None = t0 + self.rng.uniform(0.35, 0.55) * args.seconds
        server_down: tuple[float, Server] | None = None
        redis_kill_at: float | None = (t0 + self.rng.uniform(0.2, 0.4) * args.seconds
                                       if self.redis is not None else None)
        redis_up_at: float | None = None
        pause_at = sorted(t0 + self.rng.uniform(0.15, 0.8) * args.seconds for _ in range(2))
        pauses: list[tuple[float, WorkerProc]] = []
        stop = threading.Event()
        threads = [threading.Thread(target=self.people, args=(args.seed * 1000 + i, stop), daemon=True,
                                    name=f"people-{i}") for i in range(2)]
        threads.append(threading.Thread(target=self.creator, args=(create_at, stop), daemon=True, name="creator"))
        for t in threads:
            t.start()
        try:
            while True:
                now = time.monotonic()
                if now >= end:
                    break
                if now >= next_kill:
                    self.kill_worker()
                    next_kill = now + self.rng.uniform(0.5, 1.5) * kill_every
                for entry in list(self.pending_restarts):
                    if entry[0] <= now:
                        self.pending_restarts.remove(entry)
                        entry[1].start()
                        self.count("worker_restarts")
                if pause_at and now >= pause_at[0]:
                    pause_at.pop(0)
                    paused = self.pause_worker()
                    if paused:
                        pauses.append(paused)
                for entry in list(pauses):
                    if entry[0] <= now:
                        pauses.remove(entry)
                        self.resume_worker(entry[1])
                if server_kill_at is not None and now >= server_kill_at:
                    server_down = (now + self.rng.uniform(1.0, 3.0), self.kill_server())
                    server_kill_at = None
                if server_down is not None and now >= server_down[0]:
                    server_down[1].start_and_wait()
                    self.count("server_restarts")
                    server_down = None
                if redis_kill_at is not None and now >= redis_kill_at:
                    self.redis.kill()
                    self.count("redis_kills")
                    redis_kill_at, redis_up_at = None, now + REDIS_DOWN_S
                if redis_up_at is not None and now >= redis_up_at:
                    self.redis.start_and_wait()
                    self.count("redis_restarts")
                    redis_up_at = None
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(120 if t.name == "creator" else 30)  # a create in flight waits up to 2 × 20 s for an answer
            for _, w in pauses:
                self.resume_worker(w)
        # faults stop: everything back up
        if redis_up_at is not None:
            self.redis.start_and_wait()
            self.count("redis_restarts")
        if server_down is not None:
            server_down[1].start_and_wait()
            self.count("server_restarts")
        for _, w in self.pending_restarts:
            w.start()
            self.count("worker_restarts")
        self.pending_restarts = []
        for n in self.unmade + self.pending_creates:  # every item is made, the faults over
            self.create_item(n)

    def settle(self) -> tuple[float, bool]:
        from django.db import connection

        from workcenter.models import Run, WorkItem

        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.settle:
            for w in self.workers:
                if not w.alive():  # a worker must never die by itself: note it and restart it
                    self.count("worker_died")
                    w.start()
            busy = WorkItem.objects.filter(status__in=["ready", "running"]).exists() or \
                Run.objects.filter(status="running").exists()
            connection.close()
            if not busy:
                return time.monotonic() - t0, True
            time.sleep(0.5)
        return time.monotonic() - t0, False

    def stuck(self) -> dict:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT id, status FROM workcenter_workitem WHERE status IN ('ready', 'running', 'draft')")
            items = cur.fetchall()
            cur.execute("SELECT id, work_item_id, owner_boot_id, expires_at FROM workcenter_run "
                        "WHERE status = 'running' AND expires_at <= now()")
            runs = cur.fetchall()
        return {"items": items, "runs": runs}

    def drain_listener(self, timeout: float = 30.0) -> int:
        from workcenter.models import Event

        self.listener.calm.set()
        last = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.listener.last_id < last:
            time.sleep(0.2)
        time.sleep(1.0)  # anything sent twice arrives now
        self.listener.finish.set()
        self.listener.join(15)
        return last

    def shutdown(self) -> None:
        for w in list(self.paused):
            self.resume_worker(w)
        for w in self.workers:
            w.stop()
        if self.listener is not None:
            self.listener.finish.set()
        for s in self.servers:
            s.stop()
        if self.redis is not None:
            self.redis.stop()


# --------------------------------------------------------------------------- the checks (SQL)

GRAPH = "(w.workflow_snapshot ->> 'execution_mode') = 'graph'"
TERMINAL_BY_STATUS = {
    "completed": ("action.completed", "work_item.completed", "review.changes_requested"),
    "waiting": ("action.waiting",),
    "retryable": ("action.retry_scheduled", "action.retry_exhausted"),
    "failed": ("action.failed",),
    "interrupted": ("run.interrupted", "run.released"),
    "superseded": ("run.stale_recovered",),
    "cancelled": ("run.stale_recovered",),
}
_status_map = " OR ".join(
    f"(r.status = '{status}' AND e.type IN ({', '.join(repr(t) for t in types)}))"
    for status, types in TERMINAL_BY_STATUS.items())

PREPARE = [
    # every run with the id of its run.claimed event (its start in commit order) and the highest
    # id of the events its ending transaction wrote on its item (stamped with its ended_at; one
    # recovery may end several runs of an item, with one event each)
    "DROP TABLE IF EXISTS chaos_claims, chaos_ends, chaos_runs, chaos_created",
    """CREATE TEMP TABLE chaos_claims AS
       SELECT run_id, min(id) AS start_eid, count(*) AS n FROM workcenter_event
       WHERE type = 'run.claimed' GROUP BY run_id""",
    """CREATE TEMP TABLE chaos_ends AS
       SELECT r.id AS run_id, max(e.id) AS end_eid FROM workcenter_run r
       JOIN workcenter_event e ON e.work_item_id = r.work_item_id AND e.created_at = r.ended_at
       GROUP BY r.id""",
    """CREATE TEMP TABLE chaos_runs AS
       SELECT r.id, r.action_id, r.work_item_id, r.owner_boot_id, r.lease_epoch, r.status, r.started_at,
              r.ended_at, a.workspace_mode AS mode, w.workspace_key AS ws,
              c.start_eid, COALESCE(c.n, 0) AS claim_events, d.end_eid
       FROM workcenter_run r JOIN workcenter_action a ON a.id = r.action_id
       JOIN workcenter_workitem w ON w.id = r.work_item_id
       LEFT JOIN chaos_claims c ON c.run_id = r.id LEFT JOIN chaos_ends d ON d.run_id = r.id""",
    # the event of the transaction that inserted each action (same timestamp as created_at)
    """CREATE TEMP TABLE chaos_created AS
       SELECT a.id AS action_id, a.work_item_id, a.sequence, min(e.id) AS ce FROM workcenter_action a
       LEFT JOIN workcenter_event e ON e.work_item_id = a.work_item_id AND e.created_at = a.created_at
       GROUP BY a.id, a.work_item_id, a.sequence""",
]

CONFLICT = ("(x.mode IN ('shared', 'integrate') OR y.mode IN ('shared', 'integrate') OR "
            "(x.work_item_id <> y.work_item_id AND x.mode <> 'read' AND y.mode <> 'read'))")
OVERLAP_COMMIT = (f"x.start_eid < COALESCE(y.end_eid, {BIG}) AND y.start_eid < COALESCE(x.end_eid, {BIG}) "
                  "AND (x.ended_at IS NULL OR x.end_eid IS NOT NULL) AND (y.ended_at IS NULL OR y.end_eid IS NOT NULL)")
OVERLAP_CLOCK = "x.started_at < COALESCE(y.ended_at, 'infinity') AND y.started_at < COALESCE(x.ended_at, 'infinity')"

# (group, name, query): each query returns the rows that break the rule; zero rows = holds
CHECKS = [
    # --- double claims
    ("double claims", "an action with more than one running run",
     "SELECT action_id, count(*) FROM workcenter_run WHERE status = 'running' GROUP BY action_id HAVING count(*) > 1"),
    ("double claims", "two runs of one action running at once (commit order)",
     f"SELECT x.id, y.id FROM chaos_runs x JOIN chaos_runs y ON x.action_id = y.action_id AND x.id < y.id "
     f"WHERE {OVERLAP_COMMIT}"),
    ("double claims", "one lease epoch claimed twice for an action",
     "SELECT action_id, lease_epoch FROM workcenter_run GROUP BY action_id, lease_epoch HAVING count(*) > 1"),
    # --- workspace exclusivity (DOMAIN §5.4, invariant 10)
    ("exclusivity", "conflicting runs running at once in one workspace (commit order)",
     f"SELECT x.id, x.mode, y.id, y.mode, x.ws FROM chaos_runs x JOIN chaos_runs y "
     f"ON x.ws = y.ws AND x.ws <> '' AND x.id < y.id WHERE {OVERLAP_COMMIT} AND {CONFLICT}"),
    ("exclusivity", "a workspace mode edited (the check assumes a run's mode is its action's)",
     "SELECT id FROM workcenter_event WHERE type = 'action.edited' "
     "AND (data -> 'changed_fields') @> '[\"workspace_mode\"]'::jsonb"),
    # --- fences (DOMAIN §6, invariants 3, 5, 11)
    ("fences", "lease epochs not strictly increasing in claim order",
     "SELECT x.id, y.id FROM chaos_runs x JOIN chaos_runs y ON x.action_id = y.action_id "
     "AND x.start_eid < y.start_eid WHERE x.lease_epoch >= y.lease_epoch"),
    ("fences", "an action's epoch below one of its runs'",
     "SELECT a.id FROM workcenter_action a JOIN workcenter_run r ON r.action_id = a.id "
     "GROUP BY a.id, a.lease_epoch HAVING max(r.lease_epoch) > a.lease_epoch"),
    ("fences", "a run without exactly one run.claimed event",
     "SELECT id, claim_events FROM chaos_runs WHERE claim_events <> 1"),
    ("fences", "a run.claimed event that disagrees with its run",
     "SELECT e.id FROM workcenter_event e JOIN workcenter_run r ON r.id = e.run_id WHERE e.type = 'run.claimed' "
     "AND ((e.data ->> 'lease_epoch')::bigint <> r.lease_epoch OR e.data ->> 'owner_boot_id' <> r.owner_boot_id "
     "OR e.created_at <> r.started_at OR e.action_id <> r.action_id)"),
    ("fences", "an event naming a run after the transaction that ended it",
     "SELECT e.id, e.type, r.id FROM workcenter_event e JOIN chaos_runs r ON r.id = e.run_id "
     "WHERE r.end_eid IS NOT NULL AND e.id > r.end_eid"),
    ("fences", "more than one terminal event for a run",
     "SELECT run_id, count(*) FROM workcenter_event WHERE run_id IS NOT NULL AND type <> 'run.claimed' "
     "GROUP BY run_id HAVING count(*) > 1"),
    ("fences", "a run's terminal event does not match its status or its end",
     f"SELECT r.id, r.status, e.type FROM workcenter_run r JOIN workcenter_event e ON e.run_id = r.id "
     f"AND e.type <> 'run.claimed' WHERE NOT ({_status_map}) OR r.ended_at IS NULL OR e.created_at <> r.ended_at"),
    ("fences", "a run that ended with an outcome or interruption but has no event naming it",
     "SELECT r.id, r.status FROM workcenter_run r WHERE r.status IN "
     "('completed', 'waiting', 'retryable', 'failed', 'interrupted') AND NOT EXISTS (SELECT 1 FROM workcenter_event e "
     "WHERE e.run_id = r.id AND e.type <> 'run.claimed')"),
    ("fences", "a worker event from another boot than the run's",
     "SELECT e.id, e.actor, r.owner_boot_id FROM workcenter_event e JOIN workcenter_run r ON r.id = e.run_id "
     "WHERE e.actor LIKE 'worker:%' AND e.actor <> 'worker:' || r.owner_boot_id"),
    # --- DOMAIN §15 invariants
    ("invariant 1", "current_run_id set iff the action is running",
     "SELECT id, status, current_run_id FROM workcenter_action "
     "WHERE (status = 'running') <> (current_run_id IS NOT NULL)"),
    ("invariant 1", "a running action whose current run is not its running run of the same epoch",
     "SELECT a.id FROM workcenter_action a LEFT JOIN workcenter_run r ON r.id = a.current_run_id "
     "WHERE a.status = 'running' AND (r.id IS NULL OR r.status <> 'running' OR r.action_id <> a.id "
     "OR r.lease_epoch <> a.lease_epoch)"),
    ("invariant 1", "a running run its action does not point to",
     "SELECT r.id FROM workcenter_run r JOIN workcenter_action a ON a.id = r.action_id "
     "WHERE r.status = 'running' AND a.current_run_id IS DISTINCT FROM r.id"),
    ("invariant 2", "linear item: current_run_id set iff running, naming the current action's running run",
     f"SELECT w.id, w.status FROM workcenter_workitem w LEFT JOIN workcenter_run r ON r.id = w.current_run_id "
     f"WHERE NOT COALESCE({GRAPH}, false) AND ((w.status = 'running') <> (w.current_run_id IS NOT NULL) "
     f"OR (w.current_run_id IS NOT NULL AND (r.id IS NULL OR r.status <> 'running' "
     f"OR r.action_id IS DISTINCT FROM w.current_action_id)))"),
    ("invariant 2", "graph item with a current_run_id",
     f"SELECT w.id FROM workcenter_workitem w WHERE {GRAPH} AND w.current_run_id IS NOT NULL"),
    ("invariant 4", "an item without its work_item.created event in the same transaction",
     "SELECT w.id FROM workcenter_workitem w WHERE NOT EXISTS (SELECT 1 FROM workcenter_event e "
     "WHERE e.work_item_id = w.id AND e.type = 'work_item.created' AND e.created_at = w.created_at)"),
    ("invariant 4", "an action inserted without an event in the same transaction",
     "SELECT action_id FROM chaos_created WHERE ce IS NULL"),
    ("invariant 4", "a run that ended without an event in the same transaction",
     "SELECT id, status FROM chaos_runs WHERE ended_at IS NOT NULL AND end_eid IS NULL"),
    ("invariant 4", "an item's last change without an event in the same transaction",
     "SELECT w.id FROM workcenter_workitem w WHERE NOT EXISTS (SELECT 1 FROM workcenter_event e "
     "WHERE e.work_item_id = w.id AND e.created_at = w.updated_at)"),
    ("invariant 4", "an action's last change without an event in the same transaction",
     "SELECT a.id FROM workcenter_action a WHERE NOT EXISTS (SELECT 1 FROM workcenter_event e "
     "WHERE e.work_item_id = a.work_item_id AND e.created_at = a.updated_at)"),
    ("invariant 4", "an event naming a run or action that does not exist",
     "SELECT e.id FROM workcenter_event e WHERE (e.run_id IS NOT NULL AND NOT EXISTS "
     "(SELECT 1 FROM workcenter_run r WHERE r.id = e.run_id)) OR (e.action_id IS NOT NULL AND NOT EXISTS "
     "(SELECT 1 FROM workcenter_action a WHERE a.id = e.action_id))"),
    ("invariant 5", "a run whose ended_at disagrees with its status",
     "SELECT id, status FROM workcenter_run WHERE (status = 'running') = (ended_at IS NOT NULL)"),
    ("invariant 6", "a waiting linear item with a running run",
     f"SELECT w.id FROM workcenter_workitem w JOIN workcenter_run r ON r.work_item_id = w.id AND r.status = 'running' "
     f"WHERE w.status = 'waiting' AND NOT COALESCE({GRAPH}, false)"),
    ("invariant 6", "a waiting action still running",
     "SELECT a.id FROM workcenter_action a JOIN workcenter_run r ON r.action_id = a.id "
     "WHERE r.status = 'waiting' AND a.current_run_id = r.id"),
    ("invariant 7", "a completed action whose last run did not complete it",
     "SELECT a.id, r.status FROM workcenter_action a JOIN LATERAL (SELECT x.status FROM chaos_runs x "
     "WHERE x.action_id = a.id ORDER BY x.start_eid DESC LIMIT 1) r ON true JOIN workcenter_workitem w "
     f"ON w.id = a.work_item_id WHERE a.status = 'completed' AND NOT (r.status = 'completed' OR "
     f"(r.status = 'waiting' AND NOT COALESCE({GRAPH}, false)))"),
    ("invariant 7", "a completed run without evidence, or review without a decision",
     "SELECT r.id FROM workcenter_run r JOIN workcenter_action a ON a.id = r.action_id WHERE r.status = 'completed' "
     "AND (jsonb_array_length(r.evidence) < 1 OR (a.type = 'review' AND r.review_decision IS NULL))"),
    ("invariant 7", "a completed run whose acceptance checks are not one per criterion, in order, with evidence",
     "SELECT r.id FROM workcenter_run r JOIN workcenter_action a ON a.id = r.action_id "
     "JOIN workcenter_workitem w ON w.id = r.work_item_id WHERE r.status = 'completed' "
     "AND a.contract_revision = w.revision AND (jsonb_array_length(r.acceptance_checks) "
     "<> jsonb_array_length(w.acceptance_criteria) OR EXISTS (SELECT 1 FROM jsonb_array_elements(r.acceptance_checks) "
     "WITH ORDINALITY c(v, i) WHERE btrim(c.v ->> 'criterion') "
     "IS DISTINCT FROM (w.acceptance_criteria ->> (c.i::int - 1)) "
     "OR c.v ->> 'status' NOT IN ('passed', 'deferred', 'not_applicable') "
     "OR COALESCE(btrim(c.v ->> 'evidence'), '') = ''))"),
    ("invariant 7", "a completed test, deliver or approved review with a check not passed",
     "SELECT r.id FROM workcenter_run r JOIN workcenter_action a ON a.id = r.action_id WHERE r.status = 'completed' "
     "AND (a.type IN ('test', 'deliver') OR (a.type = 'review' AND r.review_decision = 'approved')) "
     "AND EXISTS (SELECT 1 FROM jsonb_array_elements(r.acceptance_checks) c(v) WHERE c.v ->> 'status' <> 'passed')"),
    ("invariant 8", "an item's revision is not 1 + its contract changes",
     "SELECT w.id, w.revision FROM workcenter_workitem w WHERE w.revision <> 1 + "
     "(SELECT count(*) FROM workcenter_event e "
     "WHERE e.work_item_id = w.id AND e.type = 'workflow.retriaged') + (SELECT count(*) FROM workcenter_run r "
     "JOIN workcenter_action a ON a.id = r.action_id WHERE r.work_item_id = w.id AND r.status = 'completed' "
     "AND a.type = 'triage' AND r.contract_patch IS NOT NULL)"),
    ("invariant 8", "an action that does not record the revision it was created under",
     "SELECT c.action_id, a.contract_revision FROM chaos_created c JOIN workcenter_action a ON a.id = c.action_id "
     "WHERE a.contract_revision <> 1 + (SELECT count(*) FROM workcenter_event e WHERE e.work_item_id = c.work_item_id "
     "AND e.type = 'workflow.retriaged' AND e.id <= c.ce)"),
    ("invariant 9", "an event of a cancelled item after its cancellation",
     "SELECT e.id, e.type FROM workcenter_event e JOIN (SELECT work_item_id, min(id) AS cid FROM workcenter_event "
     "WHERE type = 'work_item.cancelled' GROUP BY work_item_id) c ON c.work_item_id = e.work_item_id "
     "WHERE e.id > c.cid"),
    ("invariant 9", "a done or cancelled item with open actions or running runs",
     "SELECT w.id, w.status FROM workcenter_workitem w WHERE w.status IN ('done', 'cancelled') AND (EXISTS (SELECT 1 "
     "FROM workcenter_action a WHERE a.work_item_id = w.id AND a.status IN ('ready', 'running', 'waiting')) "
     "OR EXISTS (SELECT 1 FROM workcenter_run r WHERE r.work_item_id = w.id AND r.status = 'running'))"),
    ("invariant 9", "a done item whose last event is not its completion",
     "SELECT w.id FROM workcenter_workitem w WHERE w.status = 'done' AND (SELECT e.type FROM workcenter_event e "
     "WHERE e.work_item_id = w.id ORDER BY e.id DESC LIMIT 1) NOT IN ('action.completed', 'work_item.completed')"),
    ("invariant 12", "a run interrupted, reset or recovered while its action held a live reservation",
     "SELECT a.id FROM workcenter_action a WHERE a.workspace -> 'integration' -> 'reservation' IS NOT NULL "
     "AND a.status <> 'running'"),
    ("invariant 13", "a sequence repeated, or not increasing in creation order",
     "SELECT x.action_id, y.action_id FROM chaos_created x JOIN chaos_created y ON x.work_item_id = y.work_item_id "
     "AND x.action_id <> y.action_id WHERE x.sequence = y.sequence OR (x.sequence < y.sequence AND x.ce > y.ce)"),
    ("invariant 14", "attempt above max_attempts",
     "SELECT id, attempt, max_attempts FROM workcenter_action WHERE attempt > max_attempts OR attempt < 0"),
    ("invariant 15", "a graph item whose status is not what graph refresh computes",
     f"""SELECT id, status, expected FROM (
           SELECT w.id, w.status,
             CASE WHEN b.status = 'waiting' THEN 'waiting' WHEN b.status = 'failed' THEN 'needs_attention'
                  WHEN EXISTS (SELECT 1 FROM workcenter_action a WHERE a.work_item_id = w.id AND a.status = 'running')
                       THEN 'running'
                  WHEN EXISTS (SELECT 1 FROM workcenter_action a WHERE a.work_item_id = w.id AND a.status = 'ready')
                       THEN 'ready'
                  ELSE 'done' END AS expected,
             (SELECT e.type FROM workcenter_event e WHERE e.work_item_id = w.id AND e.type <> 'run.claimed'
              ORDER BY e.id DESC LIMIT 1) AS last_type
           FROM workcenter_workitem w
           LEFT JOIN LATERAL (SELECT a.status FROM workcenter_action a WHERE a.work_item_id = w.id
                              AND a.status IN ('waiting', 'failed') ORDER BY a.sequence LIMIT 1) b ON true
           WHERE {GRAPH} AND w.status NOT IN ('cancelled', 'draft')) g
         WHERE status <> expected AND last_type NOT IN ('work_item.retried', 'action.guidance_added')"""),
    ("invariant 15", "a linear item whose status disagrees with its current action",
     f"""SELECT w.id, w.status, a.status FROM workcenter_workitem w
         LEFT JOIN workcenter_action a ON a.id = w.current_action_id
         WHERE NOT COALESCE({GRAPH}, false) AND NOT (
           (w.status = 'ready' AND a.status = 'ready') OR (w.status = 'running' AND a.status = 'running')
           OR (w.status = 'waiting' AND a.status = 'completed')
           OR (w.status = 'needs_attention' AND a.status = 'failed')
           OR (w.status = 'done' AND w.current_action_id IS NULL) OR w.status IN ('cancelled', 'draft'))"""),
    ("claim flag", "the derived claimable flag disagrees with the readiness rule (DOMAIN §5.1-5.3)",
     f"""SELECT a.id, a.claimable FROM workcenter_action a JOIN workcenter_workitem w ON w.id = a.work_item_id
         WHERE a.claimable IS DISTINCT FROM (a.status = 'ready' AND a.current_run_id IS NULL AND CASE
           WHEN {GRAPH} THEN w.status IN ('ready', 'running') AND NOT EXISTS (
             SELECT 1 FROM jsonb_array_elements_text(a.depends_on_stage_ids) d(s) WHERE NOT EXISTS (
               SELECT 1 FROM workcenter_action c WHERE c.work_item_id = a.work_item_id AND c.status = 'completed'
               AND COALESCE(NULLIF(c.stage_id, ''), c.type) = d.s AND c.sequence = (
                 SELECT max(c2.sequence) FROM workcenter_action c2 WHERE c2.work_item_id = a.work_item_id
                 AND COALESCE(NULLIF(c2.stage_id, ''), c2.type) = d.s
                 AND c2.status NOT IN ('superseded', 'cancelled'))))
           ELSE w.status = 'ready' AND w.current_run_id IS NULL AND w.current_action_id = a.id END)"""),
]

INFO = [
    ("runs stamped as ended before they started (the ending transaction read the clock before its lock)",
     "SELECT id, id, extract(epoch FROM started_at - ended_at) * 1000 FROM workcenter_run WHERE ended_at < started_at"),
    ("claims stamped earlier than an event committed before them (the earlier transaction read the clock before its locks)",
     "SELECT e.id, p.lag, p.lag FROM workcenter_event e JOIN LATERAL (SELECT extract(epoch FROM max(q.created_at) "
     "- e.created_at) * 1000 AS lag FROM workcenter_event q WHERE q.id < e.id AND q.id > e.id - 100) p ON true "
     "WHERE e.type = 'run.claimed' AND p.lag > 0"),
    ("two runs of one action overlapping in wall-clock stamps only",
     f"SELECT x.id, y.id, extract(epoch FROM (LEAST(COALESCE(x.ended_at, 'infinity'), COALESCE(y.ended_at, 'infinity'))"
     f" - GREATEST(x.started_at, y.started_at))) * 1000 FROM chaos_runs x JOIN chaos_runs y "
     f"ON x.action_id = y.action_id AND x.id < y.id WHERE {OVERLAP_CLOCK}"),
    ("conflicting runs of one workspace overlapping in wall-clock stamps only",
     f"SELECT x.id, y.id, extract(epoch FROM (LEAST(COALESCE(x.ended_at, 'infinity'), COALESCE(y.ended_at, 'infinity'))"
     f" - GREATEST(x.started_at, y.started_at))) * 1000 FROM chaos_runs x JOIN chaos_runs y "
     f"ON x.ws = y.ws AND x.ws <> '' AND x.id < y.id WHERE {OVERLAP_CLOCK} AND {CONFLICT}"),
]


def run_checks() -> tuple[list[dict], list[dict]]:
    from django.db import connection

    results, info = [], []
    with connection.cursor() as cur:
        for sql in PREPARE:
            cur.execute(sql)
        for group, name, sql in CHECKS:
            cur.execute(f"SELECT * FROM ({sql}) q LIMIT 1000")
            rows = cur.fetchall()
            results.append({"group": group, "name": name, "count": len(rows),
                            "sample": [list(map(str, r)) for r in rows[:3]]})
        for name, sql in INFO:
            cur.execute(f"SELECT * FROM ({sql}) q LIMIT 1000")
            rows = cur.fetchall()
            info.append({"name": name, "count": len(rows),
                         "max_ms": round(max((float(r[2]) for r in rows), default=0.0), 3)})
    return results, info


def listener_check(received: list[int]) -> dict:
    from workcenter.models import Event

    stored = list(Event.objects.order_by("id").values_list("id", flat=True))
    seen = set(received)
    out_of_order = sum(1 for a, b in zip(received, received[1:]) if b <= a)
    return {"stored": len(stored), "received": len(received), "missing": len(set(stored) - seen),
            "duplicates": len(received) - len(seen), "out_of_order": out_of_order,
            "unknown": len(seen - set(stored)), "missing_sample": sorted(set(stored) - seen)[:10]}


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__)
    ap.add_argument("--items", type=int, default=100, help="work items to create (default 100)")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the fault phase (default 60)")
    ap.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    ap.add_argument("--settle", type=float, default=90.0,
                    help="most seconds the workers get after the faults stop (default 90; ends when quiescent)")
    ap.add_argument("--database-url", default=os.environ.get("WORKCENTER_CHAOS_DATABASE_URL", DEFAULT_PG_URL),
                    help="PostgreSQL database to drop and recreate (its name must contain 'bench')")
    ap.add_argument("--redis-url", default=os.environ.get("WORKCENTER_CHAOS_REDIS_URL"),
                    help="a Redis database to flush and use as the channel layer, never killed (default: a "
                         "redis-server of the run's own on a free port, killed once for 10 s)")
    ap.add_argument("--log-dir", help="keep the processes' logs here (default: a temporary directory, removed)")
    args = ap.parse_args(argv)
    if args.items < 1 or args.seconds <= 0 or args.settle <= 0:
        ap.error("--items, --seconds and --settle must be positive")
    for url in (args.database_url, args.redis_url or "redis://127.0.0.1"):
        host = re.sub(r"^[a-z]+://([^@/]*@)?", "", url).split("/")[0].rsplit(":", 1)[0]
        if host not in ("127.0.0.1", "localhost", "[::1]"):
            ap.error(f"only local services are used: {url}")

    def on_signal(signum, frame):
        raise Stop(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    started = time.monotonic()
    tmp = None
    if args.log_dir:
        logdir = Path(args.log_dir).resolve()
        logdir.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="wc-chaos-")
        logdir = Path(tmp.name)
    chaos = Chaos(args, logdir)
    failed_setup = None
    try:
        log(f"Work Center chaos run: {args.items} items, {args.seconds:.0f} s of faults, seed {args.seed}")
        chaos.setup()
        log(f"  PostgreSQL {args.database_url.rsplit('/', 1)[-1]}, Redis {args.redis_url}; servers "
            f"{', '.join(s.url for s in chaos.servers)}; workers 0-1 HTTP, 2-3 local; logs {logdir}")
        t_chaos = time.monotonic()
        chaos.chaos_phase()
        chaos_s = time.monotonic() - t_chaos
        log(f"  faults: {chaos.counts['worker_kills']} worker kills, {chaos.counts['server_kills']} daphne kill, "
            f"{chaos.counts['redis_kills']} Redis kill ({REDIS_DOWN_S:.0f} s down), "
            f"{chaos.counts['created']} items created in {chaos_s:.1f} s")
        settle_s, quiet = chaos.settle()
        log(f"  settle: {'quiescent' if quiet else 'NOT quiescent'} after {settle_s:.1f} s")
        stuck = chaos.stuck()
        probe_rng = random.Random(args.seed + 3)
        for _ in range(30):  # a last round of stale calls on the settled state
            chaos.stale_probe(probe_rng)
        for w in chaos.workers:
            w.stop()
        last_event = chaos.drain_listener()
        lst = chaos.listener
        from django.db import connection

        connection.close()
    except Stop as exc:
        failed_setup = str(exc)
    except Exception as exc:
        import traceback

        failed_setup = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    finally:
        chaos.shutdown()
    if failed_setup:
        log(f"chaos run aborted: {failed_setup}")
        for child in chaos.servers + chaos.workers:
            log(f"--- {child.name} (last output)\n{child.tail(1500)}")
        if tmp is not None:
            tmp.cleanup()
        return 2

    checks, info = run_checks()
    delivery = listener_check(lst.received)
    from workcenter.models import Event, Run, WorkItem

    statuses = Counter(WorkItem.objects.values_list("status", flat=True))
    run_statuses = Counter(Run.objects.values_list("status", flat=True))
    orphans = Counter(Run.objects.filter(pk__in=list(chaos.orphans)).values_list("status", flat=True))
    event_count = Event.objects.count()
    c = chaos.counts
    sql_violations = sum(r["count"] for r in checks)
    violations = (sql_violations + len(chaos.stale_accepted) + len(chaos.api.server_errors) + len(chaos.service_errors)
                  + delivery["duplicates"] + delivery["out_of_order"] + delivery["unknown"] + len(lst.errors))
    stuck_n = len(stuck["items"]) + len(stuck["runs"])
    seconds = time.monotonic() - started

    log("")
    log(f"Items: {dict(sorted(statuses.items()))}  (created {c['created']} of {args.items})")
    log(f"Runs: {sum(run_statuses.values())} {dict(sorted(run_statuses.items()))}; events {event_count}")
    log(f"Kills: {c['worker_kills']} workers (restarted {c['worker_restarts']}), {c['server_kills']} daphne "
        f"(restarted {c['server_restarts']}), {c['redis_kills']} Redis (restarted {c['redis_restarts']}); "
        f"runs orphaned by kills: {sum(orphans.values())} {dict(orphans)}; "
        f"{c['worker_pauses']} workers paused past their lease")
    ops = {k: v for k, v in sorted(c.items()) if not k.startswith(("worker_", "server_", "redis_", "created"))}
    log(f"People and admins: {ops}")
    log(f"API answers: {dict(sorted(chaos.api.statuses.items()))}; unreachable {chaos.api.unreachable}")
    log(f"Listener: {lst.connects} connections ({lst.connect_failures} refused), {lst.drops} drops, "
        f"close codes {dict(lst.close_codes)}; received {delivery['received']} of {delivery['stored']} events "
        f"(last id {last_event})")
    log("")
    log("Checks (each must find nothing):")
    for r in checks:
        mark = "ok  " if r["count"] == 0 else "FAIL"
        log(f"  {mark} [{r['group']}] {r['name']}: {r['count']}" + (f"  e.g. {r['sample']}" if r["count"] else ""))
    extra = [("stale worker calls accepted or changing a run", chaos.stale_accepted),
             ("5xx answers from the API", chaos.api.server_errors),
             ("unexpected errors from admin repair services", chaos.service_errors),
             ("listener protocol errors", lst.errors)]
    for name, items in extra:
        mark = "ok  " if not items else "FAIL"
        log(f"  {mark} [driver] {name}: {len(items)}" + (f"  e.g. {items[:3]}" if items else ""))
    log(f"  {'ok  ' if not (delivery['duplicates'] or delivery['out_of_order'] or delivery['unknown']) else 'FAIL'} "
        f"[listener] events received twice / out of order / unknown: {delivery['duplicates']} / "
        f"{delivery['out_of_order']} / {delivery['unknown']}")
    log(f"  {'ok  ' if not delivery['missing'] else 'FAIL'} [listener] stored events never received (lost): "
        f"{delivery['missing']}" + (f"  e.g. {delivery['missing_sample']}" if delivery["missing"] else ""))
    log(f"  {'ok  ' if not stuck['items'] else 'FAIL'} [stuck] items still ready/running after the settle: "
        f"{len(stuck['items'])}" + (f"  e.g. {stuck['items'][:3]}" if stuck["items"] else ""))
    log(f"  {'ok  ' if not stuck['runs'] else 'FAIL'} [stuck] runs running without a live lease after the settle: "
        f"{len(stuck['runs'])}" + (f"  e.g. {stuck['runs'][:3]}" if stuck["runs"] else ""))
    for r in info:
        log(f"  info  {r['name']}: {r['count']} (largest {r['max_ms']} ms)")
    ok = violations == 0 and delivery["missing"] == 0 and stuck_n == 0 and c["created"] == args.items
    log(f"\nchaos run {'PASSED' if ok else 'FAILED'} in {seconds:.1f} s: {violations} violations, "
        f"{delivery['missing']} lost events, {stuck_n} stuck")
    if not ok and tmp is None:
        log(f"logs kept in {logdir}")
    res = {
        "seconds": round(seconds, 1), "kills": c["worker_kills"] + c["server_kills"] + c["redis_kills"],
        "items": c["created"],
        "violations": violations, "lost_events": delivery["missing"], "stuck": stuck_n,
        "worker_kills": c["worker_kills"], "server_kills": c["server_kills"], "redis_kills": c["redis_kills"],
        "events": event_count,
        "runs": sum(run_statuses.values()), "orphaned_runs": sum(orphans.values()),
        "chaos_seconds": round(chaos_s, 1), "settle_seconds": round(settle_s, 1),
        "worker_pauses": c["worker_pauses"], "reconnects": lst.connects, "stale_probes": c["stale_probes"],
        "repairs": sum(v for k, v in c.items() if k.endswith("_ok")),
        "retries": c["retry_200"] + c["answer_200"], "cancels": c["cancel_200"],
        "final_statuses": dict(sorted(statuses.items())),
    }
    harness.emit(res, args.json)
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
