import logging
import os
import signal
import sys

from django.core.management.base import BaseCommand

from workcenter.executors import SHELL_EXECUTOR, ExecutorConfigError, load_executor
from workcenter.local_store import LocalStore
from workcenter.worker import HttpStore, Worker
from workcenter.worker_journal import Journal, default_journal_dir


class Command(BaseCommand):
    help = "Run a worker: recover, claim, renew leases, execute, submit; SIGINT/SIGTERM interrupts cleanly."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=3)
        parser.add_argument("--lease-ms", type=int, default=60_000)
        parser.add_argument("--poll-ms", type=int, default=2_000,
                            help="how often to look for work when the store cannot long-poll (beside the database, "
                                 "or a server without long-poll claims)")
        parser.add_argument("--wait-ms", type=int, default=20_000,
                            help="with --server: how long one long-poll claim waits for work (0: poll instead)")
        parser.add_argument("--executor", default=None, help="dotted path of the executor class")
        parser.add_argument("--commands", default=None, metavar="FILE",
                            help="shell executor: the commands it may run, by name (TOML, or JSON when FILE ends "
                                 "in .json; or WORKCENTER_SHELL_COMMANDS); implies --executor " + SHELL_EXECUTOR)
        parser.add_argument("--scripts", default=None, metavar="DIR",
                            help="shell executor: every executable in DIR is a command named by its file name "
                                 "(or WORKCENTER_SHELL_SCRIPTS); implies --executor " + SHELL_EXECUTOR)
        parser.add_argument("--once", action="store_true", help="one tick, wait for its runs, exit")
        parser.add_argument("--server", default=None, help="remote Work Center URL (uses the HTTP worker protocol)")
        parser.add_argument("--token", default=None, help="API token for --server (or WORKCENTER_TOKEN)")
        parser.add_argument("--journal-dir", default=None, metavar="DIR",
                            help="where finished runs' submissions wait until the store acknowledges them, so a "
                                 "restarted worker sends them again (default: $WORKCENTER_WORKER_JOURNAL, else "
                                 "~/.local/state/workcenter/worker-journal)")
        parser.add_argument("--no-journal", action="store_true",
                            help="keep finished runs' submissions in memory only (a worker restart loses them)")

    def handle(self, *args, **opts):
        log_format = "%(asctime)s %(name)s %(levelname)s %(message)s"
        logging.basicConfig(level=logging.INFO, format=log_format)
        product = logging.getLogger("workcenter")
        if product.handlers:
            # settings.LOGGING gives the product's loggers a console handler of their own: one line
            # per event, there (with the same timestamps), not a second one through the root's
            for handler in product.handlers:
                handler.setFormatter(logging.Formatter(log_format))
            product.propagate = False
        options = {k: opts[k] for k in ("commands", "scripts") if opts[k]}
        try:
            executor = load_executor(opts["executor"] or (SHELL_EXECUTOR if options else None), **options)
        except ExecutorConfigError as exc:
            self.stderr.write(f"workcenter_worker: {exc}")
            sys.exit(2)
        server = opts["server"] or os.environ.get("WORKCENTER_SERVER")
        if server:
            token = opts["token"] or os.environ.get("WORKCENTER_TOKEN")
            if not token:
                self.stderr.write("--token (or WORKCENTER_TOKEN) is required with --server")
                sys.exit(2)
            store = HttpStore(server, token)
        else:
            store = LocalStore()
        journal = None
        if not opts["no_journal"]:
            directory = opts["journal_dir"] or default_journal_dir()
            try:
                journal = Journal(directory, store.scope)
            except OSError as exc:
                self.stderr.write(f"workcenter_worker: the journal directory {directory} is not usable: {exc}")
                sys.exit(2)
        worker = Worker(store, executor, concurrency=opts["concurrency"], lease_ms=opts["lease_ms"],
                        poll_ms=opts["poll_ms"], wait_ms=opts["wait_ms"], journal=journal)
        self.stdout.write(f"worker {worker.boot_id} starting (concurrency {worker.concurrency})")
        self.stdout.flush()

        def on_signal(signum, frame):
            worker.state = "stopping"
            worker.wake.set()
            if isinstance(store, HttpStore):
                store.abort_waits()  # a long-poll claim in flight ends now, not at its deadline

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        worker.run_forever(once=opts["once"])
        report = worker.stop()
        self.stdout.write(f"worker {worker.boot_id} stopped; interrupted {sum(r['interrupted'] for r in report)} run(s)")
