"""Webhook delivery under failure: events to webhooks whose receiver fails a share of requests and
is down for a while, while sender processes are SIGKILLed and restarted; prints what arrived.

The events are work items created through the services at a steady rate (one `work_item.created`
event each, its commit time noted), every webhook takes that type. The receiver is a local HTTP
server that answers 500 to `--fail-rate` of the requests at random and stops listening for
`--down-seconds` in the middle of the run. `--senders` `manage.py deliver_webhooks` processes run
beside it; `--kills` times one of them is SIGKILLed (in turn) and started again. At the end every
(webhook, event) pair must have arrived: `lost` counts those that did not, `duplicates` the extra
receipts (at-least-once allows them: a sender killed between the receiver's answer and its commit
sends that delivery again). The latency is from the event's commit to its first 2xx receipt, for
the events committed while the receiver was healthy (more than HEALTHY_MARGIN_S before the outage,
or after its backlog was sent); `backlog_drained_s` says how long after the receiver's return the
outage's backlog had arrived. `sender_cpu_ms_per_delivery`: the senders' CPU time (user + system) over the deliveries.

    python bench/webhooks.py --db postgres --events 1000 --json
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import harness

# an event committed less than this before the outage may still be on its way when the receiver
# goes down: it counts with the outage's backlog, not with the healthy latency
HEALTHY_MARGIN_S = 1.0


class Receiver:
    """The local HTTP receiver: records each request, fails `fail_rate` of them, can go down."""

    def __init__(self, port: int, fail_rate: float, seed: int = 7):
        self.port, self.fail_rate = port, fail_rate
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.received: list[tuple[str, int, float]] = []  # (webhook path, event id, receipt time), 2xx only
        self.requests = self.failed = 0
        self.server = None
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.requests += 1
                    fail = receiver.random.random() < receiver.fail_rate
                    if fail:
                        receiver.failed += 1
                    else:
                        event_id = json.loads(body)["data"]["event"]["id"]
                        receiver.received.append((self.path, event_id, time.time()))
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    ap = harness.argument_parser(__doc__, db=True)
    ap.set_defaults(db="postgres")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--webhooks", type=int, default=2)
    ap.add_argument("--rate", type=float, default=40.0, help="events committed per second")
    ap.add_argument("--fail-rate", type=float, default=0.3)
    ap.add_argument("--down-seconds", type=float, default=10.0)
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the last deliveries")
    args = ap.parse_args()

    harness.fresh_database(args.db, harness.bench_pg_url(harness.DEFAULT_PG_URL) if args.db == "postgres" else None)
    os.environ["WORKCENTER_WEBHOOK_ALLOW_HOSTS"] = "127.0.0.1"
    from django.conf import settings

    settings.WORKCENTER_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    from workcenter import services
    from workcenter.services import webhooks

    port = harness.free_port()
    receiver = Receiver(port, args.fail_rate)
    for n in range(args.webhooks):
        webhooks.webhook_create(name=f"bench {n}", url=f"http://127.0.0.1:{port}/hook{n}",
                                event_types=["work_item.created"])
    env = dict(os.environ)
    sender_cpu = 0.0

    def start_sender(wait: bool = True) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "manage.py", "deliver_webhooks", "--threads", "4"], cwd=harness.REPO,
                                env=env, stdout=subprocess.PIPE, text=True)
        if wait:
            proc.stdout.readline()  # "webhook sender: N threads": it runs
        return proc

    senders = [start_sender() for _ in range(args.senders)]
    duration = args.events / args.rate
    down_at, up_at = duration * 0.4, duration * 0.4 + args.down_seconds
    kill_at = [duration * (k + 1) / (args.kills + 1) for k in range(args.kills)]
    harness.log(f"{args.events} events at {args.rate:g}/s to {args.webhooks} webhooks; receiver fails "
                f"{args.fail_rate:.0%} and is down {down_at:.1f}-{up_at:.1f} s; {args.senders} senders, "
                f"SIGKILL at {', '.join(f'{k:.1f}' for k in kill_at)} s")
    committed: dict[int, float] = {}
    start = time.time()
    down = False
    down_t = up_t = start + down_at  # no outage when --down-seconds is 0
    kills = 0
    for i in range(args.events):
        due = start + i / args.rate
        while time.time() < due:
            time.sleep(min(0.005, max(0.0, due - time.time())))
        t = time.time() - start
        if not down and down_at <= t < up_at:
            receiver.stop()
            down, down_t = True, time.time()
        elif down and t >= up_at:
            receiver.start()
            down, up_t = False, time.time()
        if kills < len(kill_at) and t >= kill_at[kills]:
            victim = senders[kills % len(senders)]
            sender_cpu += harness.cpu_seconds(victim.pid, gone=0.0)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            senders[kills % len(senders)] = start_sender(wait=False)  # the other sender goes on meanwhile
            kills += 1
        item = services.work_item_create(title=f"bench {i}", goal="deliver me", start=False)
        committed[item.events.get().id] = time.time()
    if down:
        receiver.start()
        down, up_t = False, time.time()
    wanted = {(f"/hook{n}", e) for n in range(args.webhooks) for e in committed}
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        with receiver.lock:
            if wanted <= {(p, e) for p, e, _ in receiver.received}:
                break
        time.sleep(0.2)
    for p in senders:
        sender_cpu += harness.cpu_seconds(p.pid, gone=0.0)
        p.send_signal(signal.SIGTERM)
    harness.stop(*senders)
    receiver.stop()

    first: dict[tuple[str, int], float] = {}
    for path, event_id, at in receiver.received:
        first.setdefault((path, event_id), at)
    unique = set(first) & wanted
    # healthy: committed before the outage, or once everything committed before its end had arrived
    backlog = [e for e, at in committed.items() if at < up_t]
    drained = max((first.get((f"/hook{n}", e), float("inf")) for n in range(args.webhooks) for e in backlog),
                  default=up_t)
    healthy = [first[k] - committed[k[1]] for k in unique
               if committed[k[1]] < down_t - HEALTHY_MARGIN_S or committed[k[1]] > drained]
    figures = {
        "db": args.db, "events": len(committed), "webhooks": args.webhooks, "senders": args.senders,
        "kills": kills, "fail_rate": args.fail_rate, "down_seconds": round(up_t - down_t, 1),
        "requests": receiver.requests, "failed_requests": receiver.failed,
        "delivered_unique": len(unique), "duplicates": len(receiver.received) - len(first),
        "lost": len(wanted - set(first)),
        **harness.p50_p99(healthy, "delivery", digits=1),
        "healthy_deliveries": len(healthy),
        "backlog_drained_s": round(drained - up_t, 2) if drained != float("inf") else None,
        "sender_cpu_ms_per_delivery": round(sender_cpu * 1000 / max(1, len(unique)), 3),
    }
    harness.log(f"delivered {figures['delivered_unique']} of {len(wanted)} (lost {figures['lost']}, "
                f"duplicates {figures['duplicates']}); healthy p50 {figures['delivery_p50_ms']} ms, "
                f"p99 {figures['delivery_p99_ms']} ms; sender CPU {figures['sender_cpu_ms_per_delivery']} ms/delivery")
    harness.emit(figures, args.json)
    if figures["lost"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
