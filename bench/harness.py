"""What the bench scripts share: local ports, daphne servers with their logs, a fresh database
(SQLite or PostgreSQL, migrated), the API user a benchmark drives or watches with and its token,
percentiles, and the JSON line a script ends with. Not a benchmark itself.

A script imports it as `import harness`: Python puts the folder of the script it runs (bench/)
first on sys.path, so `python bench/<name>.py` finds it from any working directory. Importing it
puts the checkout on sys.path too, for `workcenter`, `dashboard` and the Django settings, so a
script runs without an installed package.
"""
from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ASGI_APP = "workcenter.asgi:application"
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/workcenter_bench"
SERVER_START_TIMEOUT = 60.0
VIEWER = ("view_workitem",)                                   # may watch
RUNNER = ("view_workitem", "change_workitem", "run_actions")  # may also edit and run actions


def log(msg: str) -> None:
    print(msg, flush=True)


def argument_parser(doc: str, *, db: bool = False) -> argparse.ArgumentParser:
    """A script's command line: described by the first paragraph of its docstring `doc`, with
    --json and, with `db`, --db sqlite|postgres; the script adds its own options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if db:
        ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object, last line")
    return ap


# --------------------------------------------------------------------------- ports and servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, timeout: float = 0.5) -> bool:
    with socket.socket() as s:
        s.settimeout(timeout)
        return s.connect_ex(("127.0.0.1", port)) == 0


def production_env() -> dict[str, str]:
    """Debug off, as in production: a server then refuses the development key and any host."""
    return {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}


def production_settings() -> None:
    """Debug off in this process and in every process it starts (they inherit os.environ), logs
    at WARNING unless asked otherwise. Before `django_setup`."""
    os.environ.update(production_env())
    os.environ.setdefault("WORKCENTER_LOG_LEVEL", "WARNING")


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a Work Center server started here: this one (its database and channel
    layer), debug off, logs at WARNING, output unbuffered; `extra` on top."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="workcenter.settings", WORKCENTER_LOG_LEVEL="WARNING",
               PYTHONUNBUFFERED="1", **production_env())
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # servers keep Django's async safety checks
    env.update(extra)
    return env


def daphne_command(port: int, app: str = ASGI_APP) -> list[str]:
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]


@dataclass
class Server:
    """A daphne process started by `start_server`, its output in `log`."""

    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_server(log: Path, *, app: str = ASGI_APP, cwd: Path = REPO, env: dict | None = None) -> Server:
    """`python -m daphne APP` on a free local port (run from `cwd`), its output in `log`; returns
    once it listens, exits with the log's end if it does not."""
    port = free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(daphne_command(port, app), cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while not port_open(port):
        if proc.poll() is not None:
            sys.exit(f"daphne exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        if time.monotonic() > deadline:
            stop(proc)
            sys.exit(f"daphne did not listen on port {port} within {SERVER_START_TIMEOUT:.0f} s")
        time.sleep(0.1)
    return Server(proc, port, log)


def stop(*procs: Server | subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM every process still running (servers or plain processes; None is skipped), then
    SIGKILL those that have not exited within `timeout` seconds."""
    popens = [p.proc if isinstance(p, Server) else p for p in procs if p is not None]
    for p in popens:
        if p.poll() is None:
            p.terminate()
    for p in popens:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def http_get(port: int, path: str, token: str) -> dict:
    """GET a JSON document of the server on `port` with the API token."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path} -> {response.status}: {body[:300]!r}")
        return json.loads(body)
    finally:
        conn.close()


# --------------------------------------------------------------------------- database


def django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workcenter.settings")
    # Production-like: with DEBUG on, Django records every query (CursorDebugWrapper).
    os.environ.setdefault("DJANGO_DEBUG", "0")
    import django

    django.setup()


def bench_pg_url(default: str) -> str:
    """DATABASE_URL when it names a PostgreSQL database whose name contains "bench" (so concurrent
    runs can use their own), else `default`."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")) and "bench" in url.rsplit("/", 1)[-1]:
        return url
    return default


def prepare_database(db: str, pg_url: str | None = None) -> None:
    """Point DATABASE_URL at a fresh, empty database (before django_setup; children inherit it):
    `sqlite`, a file in a temporary directory that is removed as this process exits (after the
    servers it started are stopped); `postgres`, `pg_url` (default DATABASE_URL, else
    DEFAULT_PG_URL) dropped and recreated, refused unless the database's name contains "bench"."""
    if db == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="wc-bench-")
        atexit.register(tmp.cleanup)
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(tmp.name) / 'bench.sqlite3'}"
        return
    url = pg_url or os.environ.get("DATABASE_URL") or DEFAULT_PG_URL
    if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
        sys.exit(f"--db postgres needs a PostgreSQL DATABASE_URL, got {url!r}")
    import dj_database_url
    import psycopg
    from psycopg import sql

    cfg = dj_database_url.parse(url)
    name = cfg["NAME"]
    if "bench" not in name:
        sys.exit(f"refusing to drop and recreate database {name!r}: its name must contain 'bench'")
    with psycopg.connect(host=cfg["HOST"] or None, port=cfg["PORT"] or None, user=cfg["USER"] or None,
                         password=cfg["PASSWORD"] or None, dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    os.environ["DATABASE_URL"] = url


def fresh_database(db: str, pg_url: str | None = None) -> None:
    """`prepare_database`, Django set up on it, migrated; no connection left open (a server or
    worker process started next opens its own)."""
    prepare_database(db, pg_url)
    django_setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0, interactive=False)
    connections.close_all()


def use_channel_layer(redis_url: str | None) -> None:
    """Redis at `redis_url` (flushed first) as the channel layer of this process and the ones it
    starts; None: the in-memory layer."""
    if redis_url is None:
        os.environ.pop("REDIS_URL", None)
        return
    import redis

    os.environ["REDIS_URL"] = redis_url
    redis.Redis.from_url(redis_url).flushdb()


def api_user(username: str, codenames: tuple[str, ...] = VIEWER, token_name: str | None = None) -> str:
    """The user `username` (created if new) holding exactly the workcenter permissions
    `codenames`, and a new API token of theirs named `token_name` (default the username); returns
    the token. After django_setup, on a migrated database."""
    from django.contrib.auth.models import Permission, User

    from workcenter.auth import api_token_create

    user, _ = User.objects.get_or_create(username=username)
    perms = Permission.objects.filter(content_type__app_label="workcenter", codename__in=codenames)
    if perms.count() != len(codenames):
        sys.exit(f"the workcenter permissions {'/'.join(codenames)} are missing")
    user.user_permissions.set(perms)
    return api_token_create(user=user, name=token_name or username)[1]


# --------------------------------------------------------------------------- figures


def cpu_seconds(pid: int, gone: float | None = None) -> float:
    """User + system CPU time of process `pid` so far, from /proc/<pid>/stat (fields 14 and 15, in
    clock ticks of 10 ms). A process that has exited raises, unless `gone` is given: then that."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        if gone is None:
            raise
        return gone


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of `values` (nearest rank), None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def p50_p99(values: list[float], key: str = "", *, scale: float = 1000.0, digits: int = 3) -> dict:
    """{"<key>_p50_ms": …, "<key>_p99_ms": …} ("p50_ms", "p99_ms" without a key): the percentiles
    of `values` × `scale` (seconds to milliseconds by default), rounded to `digits`; None for no
    values."""
    prefix = f"{key}_" if key else ""
    out = {}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        v = pct(values, q)
        out[f"{prefix}{name}_ms"] = None if v is None else round(v * scale, digits)
    return out


def emit(figures: dict, enabled: bool = True) -> None:
    """The figures as one JSON object on the last line printed (what --json asks for)."""
    if enabled:
        print(json.dumps(figures), flush=True)


def run_json(cmd: list[str], *, env: dict | None = None, echo: str = "  | ") -> dict | None:
    """Run another bench script with --json (`cmd`, from the checkout), print its lines but the
    last one (each after `echo`) and return the JSON object of that last line; None, after saying
    why, when the script failed."""
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(f"{echo}{line}", flush=True)
    name = f"bench/{Path(cmd[1]).name}"
    if proc.returncode != 0 or not lines:
        print(f"  {name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return None
    try:
        return json.loads(lines[-1])
    except ValueError:
        print(f"  could not parse the last line of {name}:\n{lines[-1][-2000:]}")
        return None
