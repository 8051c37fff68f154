"""`deliver_webhooks`: the webhook sender (workcenter/webhook_sender.py), until SIGINT or SIGTERM."""
import signal
import threading

from django.core.management.base import BaseCommand

from workcenter.webhook_sender import Sender


class Command(BaseCommand):
    help = ("Send the webhooks' deliveries (at least once, in event order per webhook, retried with backoff) "
            "until stopped. Several may run at once.")

    def add_arguments(self, parser):
        parser.add_argument("--threads", type=int, default=4, help="deliveries sent at the same time (default 4)")
        parser.add_argument("--poll-ms", type=int, default=100, help="how often an idle sender looks (default 100)")

    def handle(self, *args, threads, poll_ms, **options):
        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        sender = Sender(threads=threads, poll_s=poll_ms / 1000, stop=stop)
        self.stdout.write(f"webhook sender: {threads} threads", ending="\n")
        self.stdout.flush()
        sender.run()
        self.stdout.write(f"webhook sender stopped: {sender.sent} delivered, {sender.failed} failed attempts")
