"""`revoke_api_token LABEL_OR_PREFIX`: revoke live API tokens by name or prefix (API.md §1)."""
from django.core.management.base import BaseCommand, CommandError

from workcenter.auth import api_token_revoke


class Command(BaseCommand):
    help = "Revoke the live API tokens whose label or prefix is LABEL_OR_PREFIX (a full token works too)."

    def add_arguments(self, parser):
        parser.add_argument("label_or_prefix")

    def handle(self, *args, label_or_prefix, **options):
        revoked = api_token_revoke(label_or_prefix=label_or_prefix)
        if not revoked:
            raise CommandError(f"no live API token named or prefixed {label_or_prefix!r}")
        for t in revoked:
            label = f" '{t.name}'" if t.name else ""
            self.stdout.write(f"Revoked API token{label} (prefix {t.prefix}) of {t.user.get_username()}")
