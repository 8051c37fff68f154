"""PostgreSQL: a lease renewal notifies `workcenter_run_renewed` (LISTEN), so that the web process's
Workers stream (dashboard/workers_stream.py) reads the change when it happens instead of polling for
it. Renewals only: they are few (one per held run per third of its lease) and a NOTIFY serialises
the commits that send one; claims and ends, which are many, are read on the stream's regular tick.
Nothing on SQLite (the stream polls cheaply there)."""
from django.db import migrations

CHANNEL = "workcenter_run_renewed"

CREATE = [
    f"""CREATE OR REPLACE FUNCTION workcenter_run_renewed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END $$""",
    "DROP TRIGGER IF EXISTS workcenter_run_renewed ON workcenter_run",
    """CREATE TRIGGER workcenter_run_renewed AFTER UPDATE OF renewed_at ON workcenter_run FOR EACH ROW
WHEN (NEW.status = 'running' AND NEW.renewed_at IS DISTINCT FROM OLD.renewed_at)
EXECUTE FUNCTION workcenter_run_renewed()""",
]
DROP = [
    "DROP TRIGGER IF EXISTS workcenter_run_renewed ON workcenter_run",
    "DROP FUNCTION IF EXISTS workcenter_run_renewed()",
]


def _run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)
    return apply


class Migration(migrations.Migration):
    dependencies = [("workcenter", "0006_workers_time_indexes")]
    operations = [migrations.RunPython(_run(CREATE), _run(DROP))]
