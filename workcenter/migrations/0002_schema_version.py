from django.db import migrations


def record_version(apps, schema_editor):
    SchemaMeta = apps.get_model("workcenter", "SchemaMeta")
    SchemaMeta.objects.update_or_create(key="schema_version", defaults={"value": "11"})


class Migration(migrations.Migration):
    dependencies = [("workcenter", "0001_initial")]
    operations = [migrations.RunPython(record_version, migrations.RunPython.noop)]
