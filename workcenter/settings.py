"""Django settings for Work Center.

Configuration comes from the environment (API.md §6): DATABASE_URL, REDIS_URL,
DJANGO_SECRET_KEY, DJANGO_DEBUG, DJANGO_ALLOWED_HOSTS, WORKCENTER_DEFAULT_WORK_DIR; behind a
TLS-terminating proxy DJANGO_SECURE_PROXY, DJANGO_CSRF_TRUSTED_ORIGINS, DJANGO_HSTS_SECONDS.
"""
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


# Production by default. Debug is on only where asked for: `manage.py demo` sets DJANGO_DEBUG=1
# for the processes it starts, and a pytest run (pytest sets PYTEST_VERSION for its own process
# and every server it starts) defaults to debug on, as `DJANGO_DEBUG=1` would.
DEBUG = _env_bool("DJANGO_DEBUG", "PYTEST_VERSION" in os.environ)
# With debug off, who refuses the development key, a weak key and ALLOWED_HOSTS `*` or empty
# (workcenter/security.py, one list of problems, each naming its variable):
# * every process that serves the site refuses to start: anything that imports workcenter.asgi,
#   i.e. daphne (or any ASGI server) and `manage.py runserver`. They sign sessions, CSRF tokens
#   and password-reset links with the key, and answer to the Host header.
# * `manage.py check --deploy` reports the same problems as errors (workcenter.E001, E002).
# * everything else starts: `manage.py migrate`, `recover_runs`, `collectstatic`, `createsuperuser`
#   and the workers sign nothing and answer no request, and a worker on another machine
#   (`workcenter_worker --server URL`) holds only its API token, not the server's secrets. So
#   the one-time steps of a deployment run before its secrets are in place, and CI's
#   `manage.py check` / `makemigrations --check` run without any.
from workcenter.security import DEVELOPMENT_SECRET_KEY  # noqa: E402 (also registers the deploy checks)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or DEVELOPMENT_SECRET_KEY
# Debug on: any host (the demo may listen on a LAN address). Debug off: only the named ones.
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "*" if DEBUG else "").split(",")
                 if h.strip()]

INSTALLED_APPS = [
    "daphne",  # must come first so runserver serves websockets
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # serves the API docs' Swagger UI from static files: the docs work offline
    "workcenter",
    "dashboard",
]

MIDDLEWARE = [
    # first: it answers for the API's paths whatever the others would (Host, body size, error pages)
    "workcenter.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "workcenter.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "workcenter.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "workcenter.asgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
# Persistent connections: the HTTP handler (workcenter/handlers.py) runs requests on a fixed pool
# of threads, each keeping its connection between requests (a PostgreSQL connect costs more than
# a claim); close_old_connections checks and recycles them at request boundaries.
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=int(os.environ.get("DJANGO_CONN_MAX_AGE", "600")),
                            conn_health_checks=True)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # Every store operation takes the write lock up front (DOMAIN §2.7): an IMMEDIATE
    # transaction serialises writers instead of failing on lock upgrade. WAL lets readers
    # (dashboard, API GETs) run beside the single writer. With synchronous=NORMAL only WAL
    # checkpoints fsync, and the commit that triggers one pays for it: checkpointing every
    # 10,000 pages (~40 MB of WAL) instead of 1,000 stalls the claim/submit path 10× less often.
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": ("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000; "
                         "PRAGMA wal_autocheckpoint=10000;"),
    }
    # Tests use a file database (not shared-cache memory) so that real threads and processes
    # exercise the same locking as production.
    import tempfile

    _db["TEST"] = {"NAME": os.environ.get("WORKCENTER_TEST_SQLITE")
                   or os.path.join(tempfile.gettempdir(), f"workcenter-test-{os.getpid()}.sqlite3")}
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Django connects with prepare_threshold=None (never prepare). The store's hot path runs
    # fixed statements on server-side-binding cursors (workcenter/db/hot.py hot_cursor): prepared
    # after 2 executions on a connection, each is parsed and planned once instead of per call,
    # which halves its server time. The ORM's client-side-binding cursors are not prepared.
    # Set WORKCENTER_PG_PREPARE_THRESHOLD=off behind a transaction-pooling proxy (pgbouncer <
    # 1.21), which cannot keep prepared statements per client.
    _threshold = os.environ.get("WORKCENTER_PG_PREPARE_THRESHOLD", "2").strip().lower()
    _db.setdefault("OPTIONS", {})["prepare_threshold"] = None if _threshold in ("off", "none", "") else int(_threshold)
DATABASES = {"default": _db}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's standard checks for a password a person chooses (createsuperuser, changepassword, the
# admin's password forms); the demo's own accounts are made in code and are not checked.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Static files are served by the web process itself (workcenter/staticfiles.py, WhiteNoise's file
# index at the ASGI level, before Django's request cycle), so a daphne process needs no separate
# file server and works offline. Debug on: straight from the app directories, re-read on every
# request (no collectstatic). Debug off: from STATIC_ROOT as `manage.py collectstatic --noinput`
# left it (one step of every deployment: gzip variants made once, served with ETag and a short
# max-age); before the first collectstatic, from the app directories, indexed once at start,
# uncompressed, with a warning in the log.
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # no hashed names: the dashboard's ES modules import each other by plain relative URLs
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Behind a TLS-terminating reverse proxy (docs/deployment.md), DJANGO_SECURE_PROXY=1:
# the proxy says a request came over HTTPS with `X-Forwarded-Proto: https` (it must set that
# header itself, overwriting what the client sent), cookies travel over HTTPS only, browsers are
# told to use HTTPS for a year (HSTS), and a plain-HTTP request is redirected. The proxy must pass
# the original Host header: Django's host and CSRF checks and the websocket Origin check
# (dashboard/routing.py) compare against it. DJANGO_CSRF_TRUSTED_ORIGINS (comma-separated
# `https://name` origins) adds origins that differ from that Host; websockets honour it too.
SECURE_PROXY = _env_bool("DJANGO_SECURE_PROXY", False)
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
if SECURE_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = _env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
    # `preload` asks browsers' built-in HSTS lists to include the domain, which anyone may then
    # submit and which is slow to undo: an operator's decision (DJANGO_HSTS_PRELOAD=1), so
    # check --deploy's reminder about it (security.W021) is silenced.
    SECURE_HSTS_PRELOAD = _env_bool("DJANGO_HSTS_PRELOAD", False)
    SILENCED_SYSTEM_CHECKS = ["security.W021"]
# (CSRF_COOKIE_HTTPONLY stays off: the pages' script reads the csrftoken cookie for the API's
# unsafe calls, static/dashboard/common.js.)

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # The Redis client's timeouts are set explicitly, whatever the URL holds: redis-py's default
    # read timeout (5 s since 8.0) would end channels_redis's blocking receive and close every
    # idle websocket (workcenter/redis_layer.py).
    from workcenter.redis_layer import redis_channel_layers

    CHANNEL_LAYERS = redis_channel_layers(REDIS_URL)
else:
    # channels' in-memory layer, its per-receive expiry sweep bounded (workcenter/memory_layer.py)
    CHANNEL_LAYERS = {"default": {"BACKEND": "workcenter.memory_layer.InMemoryLayer", "CONFIG": {"capacity": 1000}}}

WORKCENTER_DEFAULT_WORK_DIR = os.environ.get("WORKCENTER_DEFAULT_WORK_DIR", "")
# The directories a work item's work_dir may name (itself or below), separated like PATH (`:`
# on POSIX, os.pathsep): a path outside them is refused with the same message as one that does
# not exist, so the API reveals nothing of the file system beyond them. Empty (the default): any
# absolute directory except the operating system's own trees (workcenter/work_dirs.py).
WORKCENTER_WORK_DIR_ROOTS = [os.path.normpath(root) for root in
                             os.environ.get("WORKCENTER_WORK_DIR_ROOTS", "").split(os.pathsep) if root.strip()]
if any(not os.path.isabs(root) for root in WORKCENTER_WORK_DIR_ROOTS):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"WORKCENTER_WORK_DIR_ROOTS must list absolute paths: {WORKCENTER_WORK_DIR_ROOTS}")
# In-memory channel layer only: how often a web server reads the events that other processes
# committed, while a websocket client is connected (dashboard/stream/pump.py); 0 turns that off.
WORKCENTER_EVENT_POLL_MS = int(os.environ.get("WORKCENTER_EVENT_POLL_MS", "50"))
# The list stream's overview (running, waiting, finished per hour; dashboard/stream/live_state.py): pushed
# after the events that change it, at most once a second per publishing process. "0" turns the
# pushes off (the list page then shows the overview as it loaded, and counts from the events).
WORKCENTER_STREAM_OVERVIEW = os.environ.get("WORKCENTER_STREAM_OVERVIEW", "1") not in ("0", "false", "no", "")
# Seconds between two heartbeats (`{"type": "heartbeat"}`) on every open websocket (dashboard/stream/
# heartbeat.py): a page that hears nothing for about 2.5 of them says so in its connection pill.
# 0 turns them off.
WORKCENTER_STREAM_HEARTBEAT_S = float(os.environ.get("WORKCENTER_STREAM_HEARTBEAT_S", "5"))
# A bearer token that may read GET /metrics and nothing else (for a Prometheus scrape job); empty:
# only users with workcenter.view_workitem (session or API token) may.
WORKCENTER_METRICS_TOKEN = os.environ.get("WORKCENTER_METRICS_TOKEN", "")
# Seconds between two health probes of a server process (database SELECT 1, Redis ping): /healthz
# answers from the last one (workcenter/health.py).
WORKCENTER_HEALTH_INTERVAL_S = float(os.environ.get("WORKCENTER_HEALTH_INTERVAL_S", "2"))
# Threads serving HTTP requests per server process (workcenter/handlers.py), each with its own
# database connection.
WORKCENTER_HTTP_THREADS = int(os.environ.get("WORKCENTER_HTTP_THREADS", "8"))
# The largest request body in bytes: a larger one is answered with 413 before it is read
# (workcenter/handlers.py, workcenter/middleware.py). It bounds every text field too (a goal, a
# brief). The largest body a worker needs, a submission whose response holds the 65,536
# characters the store keeps (DOMAIN §12.3), is at most 0.8 MiB even when every character is
# written as a JSON escape.
WORKCENTER_MAX_BODY_BYTES = int(os.environ.get("WORKCENTER_MAX_BODY_BYTES", str(1024 * 1024)))
DATA_UPLOAD_MAX_MEMORY_SIZE = WORKCENTER_MAX_BODY_BYTES  # Django's own check, for forms (admin, sign-in)
# Long-poll claims (workcenter/dispatch/longpoll.py) that may wait at once, per API token (or session) and per
# server process: each holds a connection, so a file descriptor, for up to 30 s. Past either a
# claim that finds nothing is answered 429 `too_many_waiting_claims` with Retry-After instead.
WORKCENTER_LONG_POLL_MAX_PER_TOKEN = max(1, int(os.environ.get("WORKCENTER_LONG_POLL_MAX_PER_TOKEN", "64")))
WORKCENTER_LONG_POLL_MAX_PER_PROCESS = max(1, int(os.environ.get("WORKCENTER_LONG_POLL_MAX_PER_PROCESS", "400")))
# A run's log keeps at most this many bytes (UTF-8); past it the oldest chunks go, and the log
# says how much went (workcenter/services/run_logs.py).
WORKCENTER_RUN_LOG_MAX_BYTES = max(1024, int(os.environ.get("WORKCENTER_RUN_LOG_MAX_BYTES", str(4 * 1024 * 1024))))
# Webhooks (docs/webhooks.md): targets on loopback, link-local and private addresses are refused
# unless their host is named here (comma-separated); the address pages link to in a delivery.
WORKCENTER_WEBHOOK_ALLOW_HOSTS = os.environ.get("WORKCENTER_WEBHOOK_ALLOW_HOSTS", "")
WORKCENTER_BASE_URL = os.environ.get("WORKCENTER_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "workcenter": {"handlers": ["console"], "level": os.environ.get("WORKCENTER_LOG_LEVEL", "INFO")},
        # one logger's level apart from the rest: WORKCENTER_LOG_LEVELS="workcenter.claims=DEBUG,..."
        **{name.strip(): {"level": level.strip().upper()}
           for name, _, level in (part.partition("=") for part in os.environ.get("WORKCENTER_LOG_LEVELS", "").split(","))
           if name.strip().startswith("workcenter.") and level.strip()},
    },
}
