"""Django settings for Work Center.

Configuration comes from the environment (API.md §6): DATABASE_URL, REDIS_URL,
DJANGO_SECRET_KEY, DJANGO_DEBUG, DJANGO_ALLOWED_HOSTS, WORKCENTER_DEFAULT_WORK_DIR.
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


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "workcenter-development-key-change-me-in-production")
DEBUG = _env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",") if h.strip()]

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
    # fixed statements on server-side-binding cursors (services/common.py hot_cursor): prepared
    # after 2 executions on a connection, each is parsed and planned once instead of per call,
    # which halves its server time. The ORM's client-side-binding cursors are not prepared.
    # Set WORKCENTER_PG_PREPARE_THRESHOLD=off behind a transaction-pooling proxy (pgbouncer <
    # 1.21), which cannot keep prepared statements per client.
    _threshold = os.environ.get("WORKCENTER_PG_PREPARE_THRESHOLD", "2").strip().lower()
    _db.setdefault("OPTIONS", {})["prepare_threshold"] = None if _threshold in ("off", "none", "") else int(_threshold)
DATABASES = {"default": _db}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # The Redis client's timeouts are set explicitly, whatever the URL holds: redis-py's default
    # read timeout (5 s since 8.0) would end channels_redis's blocking receive and close every
    # idle websocket (workcenter/redis_layer.py).
    from workcenter.redis_layer import redis_channel_layers

    CHANNEL_LAYERS = redis_channel_layers(REDIS_URL)
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}}

WORKCENTER_DEFAULT_WORK_DIR = os.environ.get("WORKCENTER_DEFAULT_WORK_DIR", "")
# In-memory channel layer only: how often a web server reads the events that other processes
# committed, while a websocket client is connected (dashboard/pump.py); 0 turns that off.
WORKCENTER_EVENT_POLL_MS = int(os.environ.get("WORKCENTER_EVENT_POLL_MS", "200"))
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "workcenter": {"handlers": ["console"], "level": os.environ.get("WORKCENTER_LOG_LEVEL", "INFO")},
    },
}
