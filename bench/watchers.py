#!/usr/bin/env python3
"""Dashboard watchers benchmark: K live pages on one server while another process appends events.
A benchmark, not a test.

    python bench/watchers.py [--db sqlite|postgres] [--watchers K] [--rate R] [--seconds S]
                             [--items N] [--json]

What runs (everything on 127.0.0.1, every process started here and stopped at exit):

* the database: `--db sqlite` (default) a temporary SQLite file, Channels' in-memory layer (other
  processes' commits reach the server through its event pump, dashboard/pump.py);
  `--db postgres` DATABASE_URL when it names a PostgreSQL database containing "bench", else
  postgres://postgres@127.0.0.1:5432/workcenter_watch_bench (dropped and recreated), with Redis db
  12 as the channel layer (REDIS_URL; WORKCENTER_WATCH_BENCH_REDIS_URL overrides it; flushed).
* set-up, before the clock: N busy graph items (a chain of stages long enough for the run, built
  as bench/claims.py builds them) and 120 draft items (so the list page holds a full page), a
  user with `view_workitem` and an API token.
* ONE daphne process (`python -m daphne workcenter.asgi:application`, bench/harness.py).
* K websocket clients in this process (asyncio + `websockets`, `Authorization: Bearer`), as the
  dashboard's pages: max(1, K // 11) list watchers on /ws/work-items/, the rest item watchers on
  /ws/work-items/<id>/, dealt round-robin over the N busy items.
* the appender: a separate process (this file with --appender) that, once every client has its
  hello, makes R service calls a second for S seconds, each committing one stored event through
  workcenter.services: `action_claim` and `run_submit` (outcome completed) on the busy items
  (claims pick the oldest-updated ready action, so the items take turns), and every 10th call a
  `work_item_create` of a draft (a new row on the list). Right after each call returns (the
  transaction has committed) it reads time.time() and then the ids of the events that call
  stored (the event table after the previous max: it is the only writer), and at the end writes
  (commit time, event id, item id) for every event to a file this process reads.

What a client does with each message, and which HTTP requests it counts (the requests the page
would make on top of the websocket; the initial page load is not counted):

* list watcher: starts from the first 100 rows of GET /api/v1/work-items (read once, not
  counted); per event message upserts the message's `work_item` summary into its rows (newest
  `updated_at` first, 100 kept) and takes the status counts from `overview.counts` when the
  message carries it (the hello's `overview`, then the stream's `overview` messages). Counts 1
  request for an event message without `work_item`, 1 for an event
  id that is not above the last one (duplicate or backwards), and 1 for every hole it was left
  with: consecutive delivered ids with an appended event between them (checked at the end
  against the appender's list; the server fills holes itself, so normally never). Not in the
  main figure but printed (`list_recount_requests_per_event`): the recounts (250 ms debounce) a
  page would need for events that arrive before any overview reached it (0 with the pushes on).
* item watcher: starts from its hello (`graph`, and `state`: the whole state but its graph). A
  message with `state`: `base_rev` null ⇒ replace the whole state (graph, item, actions, runs);
  `base_rev` == my rev ⇒ patch (upsert `nodes`, `actions`, `runs` by id, merge `item`);
  otherwise (or `read`: too large to push) the page reads the state back: 1 request
  (GET …/state). In all cases rev := state.rev and every event up to the message's is covered. An event that no state covers within
  2 s (messages without `state`, as before the server sends it) counts 2 requests (the page
  re-reads graph and detail after it). A duplicate or backwards id counts nothing but is
  reported.

Figures: latency = the client's time.time() when it finished applying the message of event X
minus the appender's time.time() right after the commit of X, over every (client, event) pair
delivered (list watchers: every appended event; item watchers: those of their item); p50/p99,
and `delivered_ratio` = pairs delivered / pairs expected (a lossy run cannot look fast). The
clients' own event-loop lag (a 50 ms ticker) is printed: when its p99 is large, the latency
includes the client's own queueing. `server_cpu_ms_per_event` = the daphne process's user+sys
CPU (/proc/<pid>/stat) from the start of the appending until the drain ended (every expected
message delivered, or 10 s) divided by the events appended; its share of a core is printed too,
as are the p99 per 5 s of the run (a backlog that builds up shows as a rising series), the
clients still waiting on a message more than 1 s after its commit, and (Redis layer) the group
sends of the appender that channels_redis reported over capacity (it logs those at INFO only).
The machine's other load counts: on a shared 2-core box, compare CPU per event rather than
latency between runs.

With --json the last line is one JSON object: watchers, events_per_s, http_requests_per_event,
p50_ms, p99_ms, server_cpu_ms_per_event, and db, layer, list_watchers, item_watchers, items,
events, delivered_ratio and the request breakdown.
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # bench/harness.py, found beside this script (it also puts the checkout on sys.path)
import claims as svcbench  # bench/claims.py: its item builder and submit result

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_watch_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
FILLER_ITEMS = 120          # drafts, so the list page is a full page of 100 rows
LIST_PAGE = 100
STATE_PATIENCE = 2.0        # seconds an event may wait for a state that covers it
LIST_STATUSES = 7           # the list page's per-status count requests (static/dashboard/list.js)
RECOUNT_DEBOUNCE = 0.25
CONNECT_BATCH = 25          # handshakes in flight at once
DRAIN_MAX = 10.0
LEASE_MS = 3_600_000
CREATE_EVERY = 10           # every 10th appended call creates a draft item


log = harness.log


# --------------------------------------------------------------------------- the appender process


def appender_main(args) -> int:
    """Set up Django, say "ready", wait for "go" on stdin, append at `--rate` for `--seconds`,
    write the commit log (JSON) to `--log`."""
    harness.django_setup()
    import logging

    from workcenter import services
    from workcenter.models import Event

    # channels_redis reports a group send that found channels over capacity (messages dropped) at
    # INFO, below the configured level: count those reports from this process's sends
    over = {"reports": 0, "channels": 0}

    class OverCapacity(logging.Handler):
        def emit(self, record):
            if "over capacity" in record.msg:
                over["reports"] += 1
                over["channels"] += int(record.args[0]) if record.args else 0

    redis_log = logging.getLogger("channels_redis.core")
    redis_log.setLevel(logging.INFO)
    redis_log.addHandler(OverCapacity(logging.INFO))

    last = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    boot = f"watch-bench-{os.getpid()}"
    busy = max(1, args.items)
    claims: list = []
    log("ready")
    if sys.stdin.readline().strip() != "go":
        return 1
    rows: list[tuple[float, int, str]] = []
    calls = {"claim": 0, "submit": 0, "create": 0, "claim_none": 0}
    total = int(round(args.rate * args.seconds))
    t0 = time.time()
    behind = 0.0
    for i in range(total):
        due = t0 + i / args.rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        else:
            behind = max(behind, -delay)
        if i % CREATE_EVERY == CREATE_EVERY - 1:
            services.work_item_create(title=f"watch bench draft {i}", goal="a new row", start=False,
                                      actor="bench")
            calls["create"] += 1
        elif claims and len(claims) >= max(1, busy // 2):
            c = claims.pop(0)
            services.run_submit(run_id=c.run.pk, owner_boot_id=boot, lease_epoch=c.run.lease_epoch,
                                result=svcbench.RESULT)
            calls["submit"] += 1
        else:
            c = services.action_claim(owner_boot_id=boot, lease_ms=LEASE_MS)
            if c is not None:
                claims.append(c)
                calls["claim"] += 1
            elif claims:
                c = claims.pop(0)
                services.run_submit(run_id=c.run.pk, owner_boot_id=boot, lease_epoch=c.run.lease_epoch,
                                    result=svcbench.RESULT)
                calls["submit"] += 1
            else:  # every busy item is done: keep the rate with drafts
                calls["claim_none"] += 1
                services.work_item_create(title=f"watch bench draft {i}", goal="a new row", start=False,
                                          actor="bench")
        committed = time.time()
        new = list(Event.objects.filter(id__gt=last).order_by("id").values_list("id", "work_item_id"))
        for eid, item in new:
            rows.append((committed, eid, item))
        if new:
            last = new[-1][0]
    from dashboard.stream.publisher import publisher

    publisher.drain()  # this process's last sends (Redis layer) before the counts are read
    Path(args.log).write_text(json.dumps({"t0": t0, "rows": rows, "calls": calls, "behind_s": behind,
                                          "over_capacity": over}))
    log("done")
    return 0


# --------------------------------------------------------------------------- clients


class Client:
    """One page's websocket: the messages it applied (event id, time applied) and the HTTP
    requests it counted."""

    kind = "?"

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.ws = None
        self.applied: list[tuple[int, float]] = []
        self.requests: dict[str, int] = {}
        self.anomalies: dict[str, int] = {}
        self.last_id = 0
        self.closed_early: str | None = None

    def count(self, reason: str, n: int) -> None:
        self.requests[reason] = self.requests.get(reason, 0) + n

    def anomaly(self, what: str) -> None:
        self.anomalies[what] = self.anomalies.get(what, 0) + 1

    async def open(self) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                                open_timeout=60, max_size=None, ping_interval=None, close_timeout=2)
        hello = json.loads(await asyncio.wait_for(self.ws.recv(), 60))
        if hello.get("type") != "hello":
            raise RuntimeError(f"first message is not a hello: {str(hello)[:200]}")
        self.on_hello(hello)

    async def run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                if msg.get("type") == "overview":
                    self.on_overview(msg)
                if msg.get("type") != "event":
                    continue  # progress: transient, nothing to fetch
                eid = msg["event"]["id"]
                if eid <= self.last_id:
                    self.on_backwards(eid)
                    continue
                self.last_id = eid
                self.on_event(eid, msg)
                self.applied.append((eid, time.time()))
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code not in (1000, 1001):
                self.closed_early = f"closed {exc.rcvd.code}"

    def on_overview(self, msg: dict) -> None:
        pass

    def on_hello(self, hello: dict) -> None:
        self.last_id = hello.get("last_event_id", 0)

    def on_backwards(self, eid: int) -> None:
        self.anomaly("duplicate_or_backwards")


class ListWatcher(Client):
    kind = "list"

    def __init__(self, url: str, token: str, rows: list[dict]):
        super().__init__(url, token)
        self.rows = {r["id"]: r for r in rows}
        self.order = [r["id"] for r in rows]
        self.counts: dict | None = None
        self.last_recount = 0.0
        self.recounts = 0

    def on_backwards(self, eid: int) -> None:
        super().on_backwards(eid)
        self.count("list_backwards", 1)

    def on_event(self, eid: int, msg: dict) -> None:
        summary = msg.get("work_item")
        if summary is None:
            self.count("list_no_work_item", 1)
        else:
            sid = summary["id"]
            if sid in self.rows:
                self.order.remove(sid)
            self.rows[sid] = summary
            key = summary.get("updated_at") or ""
            # newest updated_at first (ISO strings of one format sort as times)
            pos = 0
            while pos < len(self.order) and (self.rows[self.order[pos]].get("updated_at") or "") > key:
                pos += 1
            self.order.insert(pos, sid)
            for gone in self.order[LIST_PAGE:]:
                del self.rows[gone]
            del self.order[LIST_PAGE:]
        if self.counts is None:  # no overview yet: the page would recount (never, once pushed)
            now = time.time()
            if now - self.last_recount >= RECOUNT_DEBOUNCE:
                self.last_recount = now
                self.recounts += 1

    def on_hello(self, hello: dict) -> None:
        super().on_hello(hello)
        if hello.get("overview"):
            self.counts = dict(hello["overview"].get("counts") or {})

    def on_overview(self, msg: dict) -> None:
        self.counts = dict(msg["overview"].get("counts") or {})


class ItemWatcher(Client):
    kind = "item"

    def __init__(self, url: str, token: str, item_id: str):
        super().__init__(url, token)
        self.item_id = item_id
        self.rev: str | None = None
        self.covered = 0            # every event up to this id is in the state the page shows
        self.pending: list[tuple[int, float]] = []  # events received, not yet covered by a state
        self.graph: dict | None = None
        self.nodes: dict = {}
        self.actions: dict = {}
        self.runs: dict = {}
        self.item: dict | None = None
        self.states = {"full": 0, "patch": 0, "mismatch": 0}

    def on_hello(self, hello: dict) -> None:
        super().on_hello(hello)
        state = hello.get("state")
        if state is not None:  # the hello's state has no graph: it is the hello's
            self._replace({**state, "graph": hello.get("graph")})
            self.rev = state.get("rev")
            self.covered = hello.get("last_event_id", 0)
        else:
            self.graph = hello.get("graph")
            self.nodes = {n["id"]: n for n in (self.graph or {}).get("nodes", [])}
            self.covered = hello.get("last_event_id", 0)

    def _replace(self, state: dict) -> None:
        self.graph = state.get("graph")
        self.nodes = {n["id"]: n for n in (self.graph or {}).get("nodes", [])}
        self.actions = {a["id"]: a for a in state.get("actions") or []}
        self.runs = {r["id"]: r for r in state.get("runs") or []}
        self.item = state.get("item")

    def on_event(self, eid: int, msg: dict) -> None:
        self.pending.append((eid, time.time()))
        state = msg.get("state")
        if state is None:
            return
        base = state.get("base_rev")
        if state.get("read"):  # too large to push: the page reads it back
            self.count("item_state_read", 1)
            self.states["mismatch"] += 1
        elif base is None:
            self._replace(state)
            self.states["full"] += 1
        elif base == self.rev:
            for n in state.get("nodes") or []:
                self.nodes[n["id"]] = n
            for a in state.get("actions") or []:
                self.actions[a["id"]] = a
            for r in state.get("runs") or []:
                self.runs[r["id"]] = r
            if state.get("item") is not None:
                self.item = {**(self.item or {}), **state["item"]}  # a diff's item: the fields that changed
            self.states["patch"] += 1
        else:
            self.count("item_rev_mismatch", 1)  # GET …/state
            self.states["mismatch"] += 1
        self.rev = state.get("rev")
        self.covered = max(self.covered, eid)
        self.pending = [p for p in self.pending if p[0] > self.covered]

    def sweep(self, now: float) -> None:
        """Events no state covered within STATE_PATIENCE: the page re-read graph and detail."""
        keep = []
        for eid, t in self.pending:
            if eid <= self.covered:
                continue
            if now - t >= STATE_PATIENCE:
                self.count("item_no_state", 2)
            else:
                keep.append((eid, t))
        self.pending = keep


async def loop_lag(samples: list[float], stop: asyncio.Event, period: float = 0.05) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        samples.append(time.perf_counter() - t - period)


async def sweeper(watchers: list[ItemWatcher], stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(0.1)
        now = time.time()
        for w in watchers:
            w.sweep(now)


# --------------------------------------------------------------------------- set-up and run


def setup(args) -> tuple[str, list[str]]:
    """Fresh database, migrated; user + token; busy and draft items. Returns (token, busy ids)."""
    harness.production_settings()
    harness.use_channel_layer(os.environ.get("WORKCENTER_WATCH_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
                              if args.db == "postgres" else None)
    harness.fresh_database(args.db, harness.bench_pg_url(DEFAULT_PG_URL))
    from django.db import connections

    from workcenter import services

    token = harness.api_user("watch-bench")
    for i in range(FILLER_ITEMS):
        services.work_item_create(title=f"watch bench filler {i}", goal="a row", start=False, actor="bench")
    # long enough that the busy items do not finish: two events per action, 90% of the calls
    per_item = math.ceil(args.rate * args.seconds * 0.9 / 2 / max(1, args.items)) + 3
    stages = [(f"s{i}", [f"s{i - 1}"] if i else []) for i in range(min(max(per_item, 6), 200))]
    busy = svcbench.Builder().create("watch-chain", stages, args.items)
    connections.close_all()
    return token, busy


async def run_clients(args, port: int, token: str, busy: list[str], appender: subprocess.Popen,
                      daphne_pid: int, commit_log: Path) -> dict:
    n_list = max(1, args.watchers // 11)
    n_item = max(0, args.watchers - n_list)
    rows = (await asyncio.to_thread(harness.http_get, port, f"/api/v1/work-items?limit={LIST_PAGE}", token))["items"]
    base = f"ws://127.0.0.1:{port}/ws/work-items/"
    lists = [ListWatcher(base, token, list(rows)) for _ in range(n_list)]
    items = [ItemWatcher(f"{base}{busy[i % len(busy)]}/", token, busy[i % len(busy)]) for i in range(n_item)]
    clients: list[Client] = [*lists, *items]
    t = time.perf_counter()
    for start in range(0, len(clients), CONNECT_BATCH):
        await asyncio.gather(*(c.open() for c in clients[start:start + CONNECT_BATCH]))
    log(f"{len(clients)} clients connected ({n_list} list, {n_item} item) in {time.perf_counter() - t:.1f} s")
    readers = [asyncio.create_task(c.run()) for c in clients]
    stop = asyncio.Event()
    lag: list[float] = []
    helpers = [asyncio.create_task(loop_lag(lag, stop)), asyncio.create_task(sweeper(items, stop))]
    line = await asyncio.to_thread(appender.stdout.readline)
    if line.strip() != "ready":
        raise RuntimeError(f"appender: {line!r}")
    await asyncio.sleep(0.5)
    cpu0, t_go, client0 = harness.cpu_seconds(daphne_pid), time.time(), time.process_time()
    appender.stdin.write("go\n")
    appender.stdin.flush()
    line = await asyncio.to_thread(appender.stdout.readline)
    t_done = time.time()
    if line.strip() != "done":
        raise RuntimeError(f"appender ended without finishing: {line!r}")
    data = json.loads(commit_log.read_text())
    committed = {eid: (t, item) for t, eid, item in data["rows"]}
    last_id = max(committed) if committed else 0
    last_of: dict[str, int] = {}
    for eid, (_, item) in committed.items():
        last_of[item] = max(last_of.get(item, 0), eid)

    def all_delivered() -> bool:
        return (all(c.last_id >= last_id for c in lists)
                and all(c.last_id >= last_of.get(c.item_id, 0) for c in items))

    drain_start = time.time()
    while time.time() - drain_start < DRAIN_MAX and not all_delivered():
        await asyncio.sleep(0.1)
    drain = time.time() - drain_start
    cpu1, client1, window = harness.cpu_seconds(daphne_pid), time.process_time(), time.time() - t_go
    await asyncio.sleep(STATE_PATIENCE + 0.3)  # let the sweeper judge the last events
    stop.set()
    await asyncio.gather(*(c.ws.close() for c in clients), return_exceptions=True)
    await asyncio.wait(readers, timeout=5)
    for h in helpers:
        await h
    for w in items:
        w.sweep(time.time() + STATE_PATIENCE)
    return {"lists": lists, "items": items, "committed": committed, "data": data,
            "cpu": cpu1 - cpu0, "client_cpu": client1 - client0, "window": window, "t_go": t_go, "t_done": t_done,
            "drain": drain, "lag": lag}


def report(args, res: dict, daphne_log: Path) -> dict:
    lists, items, committed = res["lists"], res["items"], res["committed"]
    pct = harness.pct
    ids = sorted(committed)
    events = len(ids)
    latencies: list[float] = []
    by_kind: dict[str, list[float]] = {"list": [], "item": []}
    late: dict[str, set] = {"list": set(), "item": set()}  # clients with a message applied > 1 s after its commit
    late_ids: set[int] = set()
    pair_latency: list[tuple[int, float]] = []
    delivered = expected = 0
    reasons: dict[str, int] = {}
    anomalies: dict[str, int] = {}

    def tally(c, kind: str, got: list[tuple[int, float]]) -> None:
        """One client's delivered (event id, applied at): latencies, and whether it was late."""
        by_kind[kind].extend(t - committed[e][0] for e, t in got)
        pair_latency.extend((e, t - committed[e][0]) for e, t in got)
        if any(t - committed[e][0] > 1.0 for e, t in got):
            late[kind].add(id(c))
        late_ids.update(e for e, t in got if t - committed[e][0] > 1.0)

    for c in lists:
        got = [(e, t) for e, t in c.applied if e in committed]
        expected += events
        delivered += len(got)
        tally(c, "list", got)
        # holes left: an appended event between two consecutive delivered ids, or after the last one
        seen = [e for e, _ in c.applied]
        for a, b in zip(seen, seen[1:] + [ids[-1] + 1 if ids else 0]):
            lo = bisect.bisect_right(ids, a)
            if lo < len(ids) and ids[lo] < b:
                c.count("list_gap_unfilled", 1)
    for c in items:
        mine = {e for e in ids if committed[e][1] == c.item_id}
        got = [(e, t) for e, t in c.applied if e in mine]
        expected += len(mine)
        delivered += len(got)
        tally(c, "item", got)
        missing = len(mine) - len(got)
        if missing:
            anomalies["item_events_missing"] = anomalies.get("item_events_missing", 0) + missing
    latencies = by_kind["list"] + by_kind["item"]
    for c in [*lists, *items]:
        for k, v in c.requests.items():
            reasons[k] = reasons.get(k, 0) + v
        for k, v in c.anomalies.items():
            anomalies[k] = anomalies.get(k, 0) + v
        if c.closed_early:
            anomalies[c.closed_early] = anomalies.get(c.closed_early, 0) + 1
    states = {"full": 0, "patch": 0, "mismatch": 0}
    for w in items:
        for k, v in w.states.items():
            states[k] += v
    span = (max(t for t, _ in committed.values()) - res["data"]["t0"]) if committed else 0.0
    recounts = sum(c.recounts for c in lists) * LIST_STATUSES
    lag = res["lag"]
    out = {
        "watchers": args.watchers,
        "events_per_s": round(events / span, 2) if span > 0 else 0.0,
        "http_requests_per_event": round(sum(reasons.values()) / events, 3) if events else None,
        **harness.p50_p99(latencies, digits=1),
        "server_cpu_ms_per_event": round(res["cpu"] * 1000 / events, 2) if events else None,
        "db": args.db,
        "layer": "redis" if args.db == "postgres" else "memory",
        "list_watchers": len(lists),
        "item_watchers": len(items),
        "items": args.items,
        "events": events,
        "delivered_ratio": round(delivered / expected, 4) if expected else None,
        "requests": reasons,
        "list_recount_requests_per_event": round(recounts / events, 3) if events else None,
        "state_messages": states,
        "anomalies": anomalies,
        "max_ms": round(max(latencies) * 1000, 1) if latencies else None,
        **{f"{k}_p99_ms": round(pct(v, 0.99) * 1000, 1) for k, v in by_kind.items() if v},
        "clients_late_over_1s": {k: len(v) for k, v in late.items()},
        "server_cpu_share": round(res["cpu"] / res["window"], 2),
        "client_cpu_share": round(res["client_cpu"] / res["window"], 2),
        "client_lag_p99_ms": round(pct(lag, 0.99) * 1000, 1) if lag else None,
        "client_lag_max_ms": round(max(lag) * 1000, 1) if lag else None,
        "appender_behind_ms": round(res["data"]["behind_s"] * 1000, 1),
        "drain_s": round(res["drain"], 2),
    }
    log(f"db {out['db']} (layer {out['layer']}), {out['list_watchers']} list + {out['item_watchers']} item watchers "
        f"over {args.items} busy items, {events} events in {span:.1f} s ({out['events_per_s']}/s; "
        f"calls {res['data']['calls']}, appender at most {out['appender_behind_ms']} ms behind schedule)")
    log(f"commit -> applied: p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms, max {out['max_ms']} ms; "
        f"delivered {delivered}/{expected} ({out['delivered_ratio']}), drain {out['drain_s']} s")
    log(f"  p99 list watchers {out.get('list_p99_ms')} ms, item watchers {out.get('item_p99_ms')} ms; clients with a "
        f"message > 1 s late: {out['clients_late_over_1s']}")
    if late_ids:
        offsets = sorted(committed[e][0] - res["data"]["t0"] for e in late_ids)
        log(f"  {len(late_ids)} events were > 1 s late for some client, committed between {offsets[0]:.2f} and "
            f"{offsets[-1]:.2f} s into the run")
    buckets: dict[int, list[float]] = {}
    for e, lat in pair_latency:
        buckets.setdefault(int((committed[e][0] - res["data"]["t0"]) // 5), []).append(lat)
    log("  p99 by 5 s of the run (ms): " + " ".join(f"{round(pct(v, 0.99) * 1000)}" for _, v in sorted(buckets.items())))
    log(f"http requests: {sum(reasons.values())} ({out['http_requests_per_event']}/event) {reasons or ''}; "
        f"list recounts (not counted above) {recounts} ({out['list_recount_requests_per_event']}/event)")
    over = res["data"].get("over_capacity") or {}
    if over.get("reports"):
        out["layer_over_capacity"] = over
        log(f"channel layer: {over['reports']} group sends of the appender found channels over capacity "
            f"({over['channels']} channel deliveries dropped; the consumers re-read those from the database)")
    log(f"item state messages: {states}; anomalies: {anomalies or 'none'}")
    log(f"server CPU {res['cpu']:.2f} s = {out['server_cpu_ms_per_event']} ms/event ({out['server_cpu_share']} of a "
        f"core); clients: {out['client_cpu_share']} of a core, loop lag p99 {out['client_lag_p99_ms']} ms, "
        f"max {out['client_lag_max_ms']} ms")
    text = daphne_log.read_text(errors="replace")
    bad = [ln for ln in text.splitlines() if ("WARNING" in ln or "ERROR" in ln or "Traceback" in ln)
           and "static files:" not in ln]  # the start-up note about uncollected static files
    if bad:
        out["server_log_warnings"] = len(bad)
        log(f"daphne log: {len(bad)} warning/error lines, e.g.:\n  " + "\n  ".join(bad[:5]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = harness.argument_parser(__doc__, db=True)
    ap.add_argument("--watchers", type=int, default=10, help="K websocket clients (default 10)")
    ap.add_argument("--rate", type=float, default=20.0, help="events appended per second (default 20)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long to append (default 20)")
    ap.add_argument("--items", type=int, default=10, help="busy items the item watchers watch (default 10)")
    ap.add_argument("--appender", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.appender:
        return appender_main(args)
    if args.watchers < 1 or args.items < 1 or args.rate <= 0 or args.seconds <= 0:
        ap.error("--watchers, --items, --rate and --seconds must be positive")

    token, busy = setup(args)
    workdir = Path(tempfile.mkdtemp(prefix="wc-watch-bench-"))
    daphne_log, commit_log = workdir / "daphne.log", workdir / "commits.json"
    daphne = appender = None
    try:
        daphne = harness.start_server(daphne_log, env=harness.server_env())
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        appender = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--appender",
                                     "--rate", str(args.rate), "--seconds", str(args.seconds),
                                     "--items", str(args.items), "--log", str(commit_log)],
                                    cwd=harness.REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        res = asyncio.run(run_clients(args, daphne.port, token, busy, appender, daphne.pid, commit_log))
        out = report(args, res, daphne_log)
        log(f"server log and commit log kept in {workdir}")
    finally:
        harness.stop(appender, daphne)
    harness.emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
