"""`python manage.py import_reference_db PATH` (API.md §5): import a reference-design database."""
from django.core.management.base import BaseCommand, CommandError

from workcenter.errors import WorkcenterError
from workcenter.importer import import_reference_db


class Command(BaseCommand):
    help = ("Import a database written by the reference design (schema versions 1-11) into this "
            "database, applying the defaults of DOMAIN §2.5. Idempotent: items already present are skipped.")

    def add_arguments(self, parser):
        parser.add_argument("path", help="path of the reference SQLite database (opened read-only)")

    def handle(self, *args, path, **options):
        try:
            counts = import_reference_db(path)
        except WorkcenterError as exc:
            raise CommandError(f"import_reference_db: {exc.message}") from exc
        version = counts["schema_version"]
        self.stdout.write(f"Imported {path} (reference schema version {version if version is not None else 'unknown'}):")
        for key, label in (("work_items", "work items"), ("actions", "actions"), ("runs", "runs"), ("events", "events")):
            c = counts[key]
            self.stdout.write(f"  {label}: {c['imported']} imported, {c['skipped']} skipped")
