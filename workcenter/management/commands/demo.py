"""`python manage.py demo`: a live Work Center on the embedded SQLite database in one command."""
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand

from workcenter import services
from workcenter.constants import DEMO_LOGIN_ENV
from workcenter.demo_login import demo_login_path
from workcenter.models import WorkItem

LEAD = ("lead", "lead-demo-password")
ADMIN = ("admin", "admin-demo-password")
BOOT = "demo-seed"

SEED = [
    # (title, goal, criteria, how far the seed drives it)
    ("Add rate limiting to the public API", "Protect the API from bursts of traffic",
     ["Requests above 100/min get 429", "Limits are configurable"], "ready"),
    ("Survey flaky integration tests", "Find out which integration tests are flaky and why",
     ["A list of flaky tests with causes"], "ready"),
    ("Upgrade the ORM to the next major version", "Move to the supported ORM release", ["All tests pass"], "ready"),
    ("Document the deployment runbook", "Write down how we deploy and roll back", [], "ready"),
    ("Split the monolith's billing module", "Extract billing into its own package", ["No import cycles"], "ready"),
    ("Fix timezone bug in weekly reports", "Reports must use the customer's timezone", ["Report dates match"], "ready"),
    ("Choose a message broker", "Pick a broker for the event bus", ["Decision recorded"], "waiting"),
    ("Migrate CI to the new runners", "Run CI on the new runner pool", ["Pipeline green"], "needs_attention"),
    ("Rotate the staging credentials", "Replace all staging secrets", ["Old secrets revoked"], "done"),
    ("Prototype dark mode", "Explore a dark theme for the dashboard", [], "cancelled"),
    ("Plan Q1 performance work", "Collect candidates for performance work", [], "draft"),
]


# New work that keeps arriving while the demo runs, so the dashboard stays alive after the seed is done.
FEED = [
    ("Add audit logging to admin actions", "Every admin change is traceable", ["Audit rows for each change"]),
    ("Cache the pricing lookups", "Cut pricing latency in half", ["p50 below 20 ms"]),
    ("Retire the legacy export endpoint", "Remove the unused v0 export", ["No callers left"]),
    ("Harden the file upload path", "Reject oversized and malformed uploads", ["Limits enforced", "Clear errors"]),
    ("Speed up the nightly reindex", "Finish the reindex before 6 am", ["Runs under 2 hours"]),
    ("Translate the onboarding emails", "Onboarding mails in German and French", ["Both languages sent"]),
    ("Investigate the memory growth in workers", "Find the leak in long-running workers", ["Cause identified"]),
    ("Add SSO for the support team", "Support signs in with the company IdP", ["SSO login works"]),
]


def feed_item(n: int):
    """The n-th item of the demo's feed, created and started as the team lead would."""
    title, goal, criteria = FEED[n % len(FEED)]
    round_ = n // len(FEED)
    return services.work_item_create(title=title if round_ == 0 else f"{title} (#{round_ + 1})", goal=goal,
                                     acceptance_criteria=criteria, start=True,
                                     origin={"created_by": "demo-feed"}, actor="user:lead")


def _completed(criteria, **extra):
    return {"outcome": "completed", "summary": "Seeded by the demo", "evidence": ["demo seed"],
            "acceptance_checks": [{"criterion": c, "status": "passed", "evidence": "demo"} for c in criteria], **extra}


def seed_items(stdout=None) -> int:
    if WorkItem.objects.filter(origin__created_by="demo").exists():
        return 0
    count = 0
    # items the seed drives come first, while no other work is claimable
    driven = ("waiting", "needs_attention", "done")
    ordered = [s for s in SEED if s[3] in driven] + [s for s in SEED if s[3] not in driven]
    for title, goal, criteria, target in ordered:
        item = services.work_item_create(title=title, goal=goal, acceptance_criteria=criteria,
                                         start=target != "draft", origin={"created_by": "demo"},
                                         work_item_type="software-change" if target in ("waiting", "needs_attention", "done") else None,
                                         actor="user:lead")
        count += 1
        if target in ("ready", "draft"):
            continue
        if target == "cancelled":
            services.work_item_cancel(item_id=item.pk, actor="user:lead")
            continue
        # drive it with the service layer, as a worker would
        while True:
            claim = services.action_claim(owner_boot_id=BOOT)
            if claim is None or claim.work_item.pk != item.pk:
                if claim is not None:
                    services.run_interrupt(run_id=claim.run.pk, owner_boot_id=BOOT, lease_epoch=claim.run.lease_epoch,
                                           reason="demo seed")
                break
            fence = dict(run_id=claim.run.pk, owner_boot_id=BOOT, lease_epoch=claim.run.lease_epoch)
            stage = claim.action.effective_stage_id
            if target == "waiting" and stage == "implement":
                services.run_submit(**fence, result={"outcome": "waiting",
                                                     "waiting_reason": "Kafka or RabbitMQ? Both fit the load."})
                break
            if target == "needs_attention" and stage == "implement":
                services.run_submit(**fence, result={"outcome": "failed", "error": "Runner image lacks docker"})
                break
            extra = {"review_decision": "approved"} if claim.action.type == "review" else {}
            services.run_submit(**fence, result=_completed(criteria, **extra))
            if WorkItem.objects.get(pk=item.pk).status == "done":
                break
    return count


def ensure_users():
    """The demo lead (view + change) and admin (superuser); returns the lead."""
    User = get_user_model()
    lead, _ = User.objects.get_or_create(username=LEAD[0], defaults={"first_name": "Team", "last_name": "Lead"})
    lead.set_password(LEAD[1])
    lead.save()
    lead.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workcenter", codename__in=["view_workitem", "change_workitem"]))
    admin, _ = User.objects.get_or_create(username=ADMIN[0], defaults={"is_staff": True, "is_superuser": True})
    admin.is_staff = admin.is_superuser = True
    admin.set_password(ADMIN[1])
    admin.save()
    return lead


class Command(BaseCommand):
    help = ("Migrate, create demo users and work items, start the web server and simulated workers. "
            "Live updates: with REDIS_URL set every process (web server and workers) publishes to Redis; "
            "without it the web server reads the workers' events from the database every "
            "WORKCENTER_EVENT_POLL_MS (default 50) while a dashboard is open. Progress output of the "
            "simulated workers shows live only with REDIS_URL.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1",
                            help="address the web server listens on (default 127.0.0.1: this machine only)")
        parser.add_argument("--port", type=int, default=8000, help="port of the web server (default 8000)")
        parser.add_argument("--no-workers", action="store_true",
                            help="start no simulated workers: the work items stay where the seed left them")
        parser.add_argument("--workers", type=int, default=2,
                            help="how many simulated worker processes to start (default 2, 3 runs each)")
        parser.add_argument("--no-serve", action="store_true",
                            help="prepare the database (migrate, users, work items) and exit")
        parser.add_argument("--feed-seconds", type=float, default=25.0,
                            help="create a new work item this often while running (default 25; 0 = never), "
                                 "so work keeps arriving")
        parser.add_argument("--access-log", action="store_true",
                            help="print a line for every HTTP request the web server answers (off by default)")

    def handle(self, *args, **opts):
        call_command("migrate", verbosity=0)
        lead = ensure_users()
        n = seed_items()
        self.stdout.write(f"Database ready ({settings.DATABASES['default']['NAME']}); {n} demo work items created.")
        if opts["no_serve"]:
            return
        env = dict(os.environ)
        # a local trial: debug on (development key, any host, static files from the app
        # directories) unless DJANGO_DEBUG says otherwise
        env.setdefault("DJANGO_DEBUG", "1")
        env.setdefault("WORKCENTER_SIM_SCALE", "2.0")
        # only this web server honours the one-time sign-in link printed below
        server_env = dict(env, **{DEMO_LOGIN_ENV: "1"})
        # daphne logs every request unless told where else to write its access log
        access_log = "-" if opts["access_log"] else os.devnull
        procs = [subprocess.Popen([sys.executable, "-m", "daphne", "-b", opts["host"], "-p", str(opts["port"]),
                                   "--access-log", access_log, "workcenter.asgi:application"], env=server_env)]
        # the webhook sender: the demo has no webhook until someone adds one (admin, API), then it delivers
        env.setdefault("WORKCENTER_BASE_URL", f"http://{opts['host']}:{opts['port']}")
        procs.append(subprocess.Popen([sys.executable, "manage.py", "deliver_webhooks", "--threads", "2"], env=env,
                                      cwd=str(settings.BASE_DIR), stdout=subprocess.DEVNULL))
        if not opts["no_workers"]:
            for _ in range(max(0, opts["workers"])):
                procs.append(subprocess.Popen([sys.executable, "manage.py", "workcenter_worker", "--concurrency", "3",
                                               "--poll-ms", "1000", "--lease-ms", "20000"], env=env,
                                              cwd=str(settings.BASE_DIR)))
        url = f"http://{opts['host']}:{opts['port']}/"
        self.stdout.write(self.style.SUCCESS(f"\nWork Center is live at {url}"))
        self.stdout.write(f"  Open the dashboard signed in as the team lead (link works once): "
                          f"{url.rstrip('/')}{demo_login_path(lead)}")
        self.stdout.write(f"  API docs:  {url}api/v1/docs")
        self.stdout.write(f"  Sign in as the team lead: {LEAD[0]} / {LEAD[1]}   (admin: {ADMIN[0]} / {ADMIN[1]}, {url}admin/)")
        self.stdout.write("  Press Ctrl-C to stop.\n")
        self.stdout.flush()
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        feed_every = max(0.0, opts["feed_seconds"])
        next_feed = time.monotonic() + feed_every
        fed = WorkItem.objects.filter(origin__created_by="demo-feed").count()
        try:
            while not stopping and all(p.poll() is None for p in procs[:1]):
                time.sleep(0.5)
                if feed_every and time.monotonic() >= next_feed:
                    next_feed = time.monotonic() + feed_every
                    try:
                        feed_item(fed)
                        fed += 1
                    except Exception as exc:  # the demo goes on; say why the feed skipped a beat
                        self.stderr.write(f"demo feed: could not create a work item: {exc}")
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
