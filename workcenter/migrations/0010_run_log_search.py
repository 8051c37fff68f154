"""The index behind log search (workcenter/run_logs.py `search`): a substring of a chunk's text,
case-insensitive, found without reading every chunk.

PostgreSQL: a trigram GIN index on the text (extension pg_trgm, which a database owner may create:
it is a trusted extension), used by `text ILIKE '%…%'`. SQLite: an FTS5 table with the trigram
tokenizer over the chunks' text (external content: it keeps no second copy of the text), kept
in step by triggers on insert and delete, queried with a phrase of the text."""
from django.db import migrations

FTS = "wc_runlogchunk_fts"
CHUNKS = "workcenter_runlogchunk"

SQLITE_UP = [
    f"CREATE VIRTUAL TABLE {FTS} USING fts5(text, content='{CHUNKS}', content_rowid='id', tokenize='trigram')",
    f"CREATE TRIGGER wc_runlogchunk_fts_insert AFTER INSERT ON {CHUNKS} BEGIN "
    f"INSERT INTO {FTS}(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER wc_runlogchunk_fts_delete AFTER DELETE ON {CHUNKS} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, text) VALUES ('delete', old.id, old.text); END",
    f"CREATE TRIGGER wc_runlogchunk_fts_update AFTER UPDATE OF text ON {CHUNKS} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {FTS}(rowid, text) VALUES (new.id, new.text); END",
    f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS wc_runlogchunk_fts_update",
    "DROP TRIGGER IF EXISTS wc_runlogchunk_fts_delete",
    "DROP TRIGGER IF EXISTS wc_runlogchunk_fts_insert",
    f"DROP TABLE IF EXISTS {FTS}",
]
POSTGRES_UP = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS wc_runlogchunk_trgm ON {CHUNKS} USING gin (text gin_trgm_ops)",
]
POSTGRES_DOWN = ["DROP INDEX IF EXISTS wc_runlogchunk_trgm"]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('workcenter', '0009_run_logs'),
    ]

    operations = [
        migrations.RunPython(_run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
                             _run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN})),
    ]
