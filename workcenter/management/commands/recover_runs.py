"""`recover_runs`: one recovery pass (DOMAIN §9.2) with a fresh boot id; prints the count."""
import uuid

from django.core.management.base import BaseCommand

from workcenter import services


class Command(BaseCommand):
    help = ("Recover runs left running by dead or expired workers (one pass with a fresh boot id, so every "
            "running run counts as foreign) and print how many were recovered.")

    def handle(self, *args, **options):
        boot_id = str(uuid.uuid4())
        count = services.runs_recover(current_boot_id=boot_id)
        if options["verbosity"] > 1:
            self.stderr.write(f"recovery boot id {boot_id}")
        self.stdout.write(str(count))
