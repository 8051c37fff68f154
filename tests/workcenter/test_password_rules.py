"""A password a person chooses passes Django's standard checks (settings.AUTH_PASSWORD_VALIDATORS):
the admin's password form refuses a short, a common, an all-digit and a name-like password, and
takes a good one."""
from __future__ import annotations

import pytest
from django.contrib.auth.forms import AdminPasswordChangeForm
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("password, reason", [
    ("short9x", "too short"),
    ("password123", "too common"),
    ("4815162342", "entirely numeric"),
    ("margaret.hamilton", "too similar"),
])
def test_the_admin_password_form_refuses_a_weak_password(password, reason):
    user = User.objects.create_user("margaret.hamilton", email="margaret.hamilton@example.org")
    form = AdminPasswordChangeForm(user, {"password1": password, "password2": password})
    assert not form.is_valid()
    assert reason in " ".join(form.errors["password2"]), form.errors


def test_the_admin_password_form_takes_a_good_password():
    user = User.objects.create_user("margaret.hamilton")
    form = AdminPasswordChangeForm(user, {"password1": "orbit-lunar-module-1969", "password2": "orbit-lunar-module-1969"})
    assert form.is_valid(), form.errors
    form.save()
    assert User.objects.get(pk=user.pk).check_password("orbit-lunar-module-1969")
