"""The demo's one-time sign-in link (`manage.py demo` prints it; the `demo-login` route honours it).

A token bound to the user's last_login and password, so signing in once retires the link; the
route accepts it only in a web server whose environment sets constants.DEMO_LOGIN_ENV to "1" (the
one the demo starts).
"""
from __future__ import annotations

from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.urls import reverse
from django.utils.http import urlsafe_base64_encode


class DemoLoginTokens(PasswordResetTokenGenerator):
    """A token bound to the user's last_login and password: signing in once invalidates it."""

    key_salt = "workcenter.dashboard.demo-login"


demo_login_tokens = DemoLoginTokens()


def demo_login_path(user) -> str:
    uid = urlsafe_base64_encode(str(user.pk).encode())
    return reverse("demo-login", kwargs={"uidb64": uid, "token": demo_login_tokens.make_token(user)})
