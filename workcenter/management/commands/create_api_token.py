"""`create_api_token USERNAME [--name LABEL]`: a bearer token for programs (API.md §1).

The token is printed once, alone on the last line; only its hash is stored.
"""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workcenter.auth import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it alone on the last line (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to find and revoke the token by")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"unknown user: {username}")
        if not user.is_active:
            raise CommandError(f"user {username} is inactive")
        token, raw = api_token_create(user=user, name=name)
        label = f" '{token.name}'" if token.name else ""
        self.stdout.write(f"Created API token{label} (prefix {token.prefix}) for {username}. "
                          "It is shown only once; revoke it with: manage.py revoke_api_token "
                          f"{token.prefix}")
        self.stdout.write(raw)
