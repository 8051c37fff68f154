"""Production mode (docs/deployment.md): debug off by default, `check --deploy` clean
with the documented environment, serving processes that refuse the development key and any host,
the one-time commands that don't, static files served with debug off (collected or not), the
Content-Security-Policy header, and `manage.py demo` still one command with debug on."""
from __future__ import annotations

import contextlib
import http.client
import signal
import subprocess
import sys

import pytest

from tests.live import ROOT, database_url, free_port, port_open, stop_process, wait_until
from tests.production import DEVELOPMENT_KEY, manage, process_env, production_env
from workcenter.security import CONTENT_SECURITY_POLICY


def _get(port: int, path: str, headers: dict | None = None, host: str = "127.0.0.1") -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    conn.request("GET", path, headers={"Host": host, **(headers or {})})
    response = conn.getresponse()
    response.body = response.read()
    conn.close()
    return response


@contextlib.contextmanager
def _serving(env: dict, log_path):
    """A daphne process with `env`, listening: yields its port, stops it on the way out."""
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                 "workcenter.asgi:application"], cwd=ROOT, env=process_env(env),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: port_open(port) or proc.poll() is not None, 60, 0.1), log_path.read_text()
        assert proc.poll() is None, log_path.read_text()
        yield port
    finally:
        stop_process(proc)


def _refused(cmd_env: dict, args: list[str], port: int, tmp_path) -> str:
    """Starts `args`, expects it to exit without ever listening on `port`; its output."""
    log_path = tmp_path / "out.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, cwd=ROOT, env=process_env(cmd_env), stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            stop_process(proc)
            pytest.fail(f"{args} kept running: {log_path.read_text()}")
    assert not port_open(port)
    assert proc.returncode != 0
    return log_path.read_text()


# --- debug off by default, and what check --deploy says ----------------------------------------


def test_debug_is_off_unless_asked_for():
    show = "from django.conf import settings; print(settings.DEBUG, settings.ALLOWED_HOSTS)"
    assert manage("shell", "-v0", "-c", show, env={}).stdout.strip() == "False []"
    assert manage("shell", "-v0", "-c", show, env={"DJANGO_DEBUG": "1"}).stdout.strip() == "True ['*']"


def test_check_deploy_is_clean_with_the_documented_production_environment():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize("env,check_id,variable", [
    ({"DJANGO_SECRET_KEY": ""}, "workcenter.E001", "DJANGO_SECRET_KEY"),
    ({"DJANGO_SECRET_KEY": DEVELOPMENT_KEY}, "workcenter.E001", "DJANGO_SECRET_KEY"),
    ({"DJANGO_SECRET_KEY": "short-key"}, "workcenter.E001", "DJANGO_SECRET_KEY"),
    ({"DJANGO_ALLOWED_HOSTS": "*"}, "workcenter.E002", "DJANGO_ALLOWED_HOSTS"),
    ({"DJANGO_ALLOWED_HOSTS": ""}, "workcenter.E002", "DJANGO_ALLOWED_HOSTS"),
    ({"WORKCENTER_DEMO_LOGIN": "1"}, "workcenter.E003", "WORKCENTER_DEMO_LOGIN"),
])
def test_check_deploy_reports_the_development_key_and_any_host(env, check_id, variable):
    result = manage("check", "--deploy", env=production_env(**env))
    assert result.returncode != 0
    assert check_id in result.stderr and variable in result.stderr


# --- who refuses to start ------------------------------------------------------------------------


@pytest.mark.parametrize("env,variable", [
    ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY is not set"),
    ({"DJANGO_SECRET_KEY": "short-key"}, "DJANGO_SECRET_KEY is too weak"),
    ({"DJANGO_ALLOWED_HOSTS": "*"}, "DJANGO_ALLOWED_HOSTS=* accepts any Host header"),
    ({"DJANGO_ALLOWED_HOSTS": "example.com, *"}, "DJANGO_ALLOWED_HOSTS=* accepts any Host header"),
    ({"DJANGO_ALLOWED_HOSTS": ""}, "DJANGO_ALLOWED_HOSTS is empty"),
    ({"WORKCENTER_DEMO_LOGIN": "1"}, "WORKCENTER_DEMO_LOGIN=1 turns on the demo's one-time sign-in links"),
])
def test_daphne_refuses_to_serve_on_unsafe_production_settings(env, variable, tmp_path):
    port = free_port()
    out = _refused(production_env(**env), [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                           "workcenter.asgi:application"], port, tmp_path)
    assert "Work Center refuses to serve with debug off" in out
    assert variable in out
    assert "Traceback" not in out  # a message for an operator, not a stack


def test_runserver_refuses_the_development_key(tmp_path):
    port = free_port()
    out = _refused(production_env(DJANGO_SECRET_KEY="", DJANGO_ALLOWED_HOSTS="127.0.0.1"),
                   [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"], port, tmp_path)
    assert "DJANGO_SECRET_KEY is not set" in out


@pytest.mark.django_db(transaction=True)
def test_one_time_commands_run_on_the_development_key():
    """migrate and recover_runs sign nothing and serve nothing: they run before the secrets are
    in place, and on a machine that has none."""
    env = {"DJANGO_DEBUG": "0", "DATABASE_URL": database_url()}
    for args in (("migrate", "--check"), ("recover_runs",)):
        result = manage(*args, env=env)
        assert result.returncode == 0, (args, result.stderr)


def test_a_production_server_starts_and_answers_only_its_hosts(tmp_path):
    env = production_env(DJANGO_ALLOWED_HOSTS="wc.test", DJANGO_SECURE_PROXY="0",
                         DJANGO_STATIC_ROOT=str(tmp_path / "static"), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    with _serving(env, tmp_path / "daphne.log") as port:
        assert _get(port, "/accounts/login/", host="wc.test").status != 400
        assert _get(port, "/accounts/login/", host="evil.test").status == 400


# --- static files with debug off ----------------------------------------------------------------


def test_static_files_with_debug_off_come_from_collectstatic(tmp_path):
    static_root = tmp_path / "static"
    env = production_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", DJANGO_SECURE_PROXY="0", DJANGO_STATIC_ROOT=str(static_root),
                         DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    collect = manage("collectstatic", "--noinput", env=env)
    assert collect.returncode == 0, collect.stderr
    with _serving(env, tmp_path / "daphne.log") as port:
        plain = _get(port, "/static/dashboard/common.js")
        assert plain.status == 200
        assert plain.getheader("Content-Type").startswith("text/javascript")
        assert plain.getheader("X-Content-Type-Options") == "nosniff"
        assert plain.body == (ROOT / "static/dashboard/common.js").read_bytes()
        gzipped = _get(port, "/static/ninja/swagger-ui-bundle.js", {"Accept-Encoding": "gzip"})
        assert gzipped.status == 200 and gzipped.getheader("Content-Encoding") == "gzip"
        assert len(gzipped.body) < len((static_root / "ninja/swagger-ui-bundle.js").read_bytes()) / 2
        again = _get(port, "/static/dashboard/common.js", {"If-None-Match": plain.getheader("ETag")})
        assert again.status == 304 and again.body == b""
        assert _get(port, "/static/dashboard/no-such-file.js").status == 404
        # the admin's files too
        assert _get(port, "/static/admin/css/base.css").status == 200
    assert "collectstatic" not in (tmp_path / "daphne.log").read_text()


def test_static_files_with_debug_off_before_collectstatic_come_from_the_app_directories(tmp_path):
    env = production_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", DJANGO_SECURE_PROXY="0",
                         DJANGO_STATIC_ROOT=str(tmp_path / "never-collected"),
                         DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    with _serving(env, tmp_path / "daphne.log") as port:
        response = _get(port, "/static/dashboard/item.js")
        assert response.status == 200
        assert response.body == (ROOT / "static/dashboard/item.js").read_bytes()
        assert _get(port, "/static/ninja/swagger-ui.css").status == 200
    assert "Run `manage.py collectstatic --noinput`" in (tmp_path / "daphne.log").read_text()


# --- Content-Security-Policy --------------------------------------------------------------------


@pytest.mark.django_db
def test_every_html_page_carries_the_policy_and_json_does_not(client, settings):
    settings.DEBUG = False
    page = client.get("/accounts/login/")
    assert page["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    for directive in ("script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert directive in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert client.get("/admin/login/")["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert client.get("/api/v1/docs")["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "Content-Security-Policy" not in client.get("/api/v1/openapi.json")
    # an HTML error page with debug off is a page like any other
    assert client.get("/no-such-page/")["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


# --- the one-command demo ------------------------------------------------------------------------


@pytest.mark.demo
def test_the_demo_still_runs_in_one_command_with_debug_on(tmp_path):
    """`manage.py demo` with nothing configured: debug is off by default, the demo turns it on for
    its server, which then starts on the development key and serves pages and static files."""
    port = free_port()
    log_path = tmp_path / "demo.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port), "--no-workers",
                                 "--feed-seconds", "0"], cwd=ROOT,
                                env=process_env({"DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: port_open(port) or proc.poll() is not None, 120, 0.2), log_path.read_text()
        assert proc.poll() is None, log_path.read_text()
        assert _get(port, "/accounts/login/").status == 200
        assert _get(port, "/static/dashboard/list.js").status == 200
    finally:
        stop_process(proc, 30, signal.SIGINT)
    assert wait_until(lambda: not port_open(port), 10, 0.1)
