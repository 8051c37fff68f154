"""The production environment that docs/deployment.md documents, for tests that start
real processes with debug off, and a way to run `manage.py` in such a process."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.live import ROOT

DEVELOPMENT_KEY = "workcenter-development-key-change-me-in-production"


def production_env(**overrides: str) -> dict[str, str]:
    """Debug off, a fresh secret key, named hosts, behind a TLS-terminating proxy."""
    return {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "workcenter.example.com",
        "DJANGO_SECURE_PROXY": "1",
        "DJANGO_CSRF_TRUSTED_ORIGINS": "https://workcenter.example.com",
        **overrides,
    }


def process_env(env: dict[str, str], *, drop=()) -> dict[str, str]:
    """This process's environment without the variables a test must not pass on (the ones it
    configures, and pytest's marker that turns debug on by default), plus `env`."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "WORKCENTER_")) and k not in ("PYTEST_VERSION", "REDIS_URL", *drop)}
    base["DJANGO_SETTINGS_MODULE"] = "workcenter.settings"
    base["PYTHONUNBUFFERED"] = "1"
    return {**base, **env}


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` in a fresh process with exactly `env` on top of a clean base."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=process_env(env),
                          capture_output=True, text=True, timeout=timeout)
