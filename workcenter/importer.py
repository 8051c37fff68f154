"""Import a database written by the reference design (DOMAIN §2.5, API.md §5 `import_reference_db`).

The reference store is one SQLite file with the tables `schema_meta`, `work_items`, `actions`,
`runs` and `events`: JSON kept in text columns with camelCase keys, timestamps as integer
milliseconds. Its migrations (schema versions 1-11) only ever added columns, so the importer reads
whatever columns a table has (PRAGMA table_info) and gives every missing one the default of
DOMAIN §2.1-§2.3.

Two phases:

1. *Read*: open the file read-only, check that it is a reference database, and convert every row
   into model instances in memory (timestamps to aware UTC datetimes, JSON parsed, keys inside JSON
   values converted to snake_case, defaults applied, run evidence and checkpoints and the
   evidence inside action context entries normalised as on write: DOMAIN §12.4, §12.5). Any
   problem raises `ReferenceImportError` before anything is written.
2. *Write*: one store transaction. Work items already present (by id) are skipped together with
   their actions, runs and events, which makes a second import of the same file a no-op; new items
   are inserted with their ids, their actions and runs keep their ids and statuses (a `running` run
   stays `running` until a recovery interrupts it), and their events are appended in the source's
   id order with new ids from this database's sequence and `actor = "system"`. The derived
   `claimable` flag is then recomputed for every imported item.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable

from django.db import DataError, IntegrityError, connection

from . import db
from .errors import InvalidInput
from .events import EVENT_ORDER_LOCK
from .work_dirs import canonicalize_dir
from .models import (
    COUNTER_FIELDS,
    Action,
    ActionStatus,
    Event,
    Run,
    RunStatus,
    WorkItem,
    WorkItemStatus,
    WorkspaceMode,
)
from .services.common import store_transaction
from .services.graph import sync_claimable
from .domain.normalize import context_on_read, normalize_checkpoint, normalize_evidence

SQLITE_HEADER = b"SQLite format 3\x00"
REQUIRED_TABLES = ("work_items", "actions", "runs", "events")
MIN_SCHEMA_VERSION = 1
MAX_SCHEMA_VERSION = 11
BATCH = 500

# Columns without which a row cannot be imported; every other column has a default.
REQUIRED_COLUMNS = {
    "work_items": ("id", "title", "goal", "status", "created_at"),
    "actions": ("id", "work_item_id", "sequence", "type", "status", "created_at"),
    "runs": ("id", "action_id", "status", "started_at"),
    "events": ("id", "work_item_id", "type", "created_at"),
}

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class ReferenceImportError(InvalidInput):
    """The file is not an importable reference database, or one of its rows is unusable."""

    def __init__(self, message: str):
        super().__init__(message, fields=["path"])


# --- value conversion ------------------------------------------------------------------------

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def snake_case(key: str) -> str:
    """`workItemType` -> `work_item_type`, `nameZh` -> `name_zh`, `HTTPServer` -> `http_server`.

    Only identifier-like keys with an upper-case letter are converted; keys such as paths,
    header names or slugs (`fix-lost-update`) are left as they are.
    """
    if not isinstance(key, str) or not _IDENTIFIER.match(key) or key.islower():
        return key
    if not any(c.isupper() for c in key):
        return key
    return _CAMEL_BOUNDARY.sub("_", key).lower()


def snake_keys(value: Any) -> Any:
    """Convert the keys of every object inside `value` to snake_case, recursively; values untouched.

    If a camelCase key and its snake_case spelling are both present, the snake_case one wins.
    """
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    exact: set[str] = set()
    for k, v in value.items():
        new = snake_case(k)
        if new == k:
            out[new] = snake_keys(v)
            exact.add(new)
        elif new not in exact:
            out[new] = snake_keys(v)
    return out


def ms_to_datetime(value: Any) -> datetime | None:
    """Integer milliseconds since the epoch -> aware UTC datetime (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("not a timestamp")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, float):
        ms = int(round(value))
    elif isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        text = text.strip()
        try:
            ms = int(text)
        except ValueError:
            ms = int(round(float(text)))
    else:
        raise ValueError("not a timestamp")
    return EPOCH + timedelta(milliseconds=ms)


def parse_json(value: Any, default: Any, kind: type) -> Any:
    """A JSON text column, as the reference's parseJson(value, fallback) reads it.

    Empty, unparsable, `null` or wrongly-typed content gives `default`; keys become snake_case.
    """
    if value is None:
        return _copy(default)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        if not value.strip():
            return _copy(default)
        try:
            parsed = json.loads(value)
        except ValueError:
            return _copy(default)
    else:
        parsed = value
    if not isinstance(parsed, kind):
        return _copy(default)
    return snake_keys(parsed)


def _copy(default: Any) -> Any:
    return list(default) if isinstance(default, list) else dict(default) if isinstance(default, dict) else default


def as_int(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, int):  # bool included
        return int(value)
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def as_counter(value: Any) -> int:
    """Execution counters (DOMAIN §12.1): non-numeric or negative input is 0."""
    n = as_int(value, 0)
    return n if n > 0 else 0


def as_text(value: Any, default: str = "") -> str:
    if value is None:
        return default
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def as_text_or_none(value: Any) -> str | None:
    """Optional text: empty becomes None (the reference reads these as `value || null`)."""
    text = as_text(value, "")
    return text or None


# --- reading the reference file --------------------------------------------------------------

@dataclass
class SourceRows:
    schema_version: int | None
    columns: dict[str, set[str]]
    items: list[WorkItem] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # in source id order
    orphans: dict[str, int] = field(default_factory=lambda: {"actions": 0, "runs": 0, "events": 0})


def _connect(path: Path) -> sqlite3.Connection:
    base = path.as_uri()
    last: sqlite3.Error | None = None
    # A WAL-mode file in a read-only directory may refuse a plain read-only open; `immutable`
    # then reads it as a snapshot without the shared-memory file.
    for query in ("?mode=ro", "?mode=ro&immutable=1"):
        conn = None
        try:
            conn = sqlite3.connect(base + query, uri=True)
            conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError as exc:
            last = exc
            if conn is not None:
                conn.close()
            continue
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise ReferenceImportError(f"{path} is not an SQLite database ({exc})") from exc
    raise ReferenceImportError(f"cannot open {path} read-only ({last})")


def _schema_version(conn: sqlite3.Connection, tables: set[str]) -> int | None:
    if "schema_meta" not in tables:
        return None
    try:
        row = conn.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        raise ReferenceImportError(f"unreadable schema_meta table ({exc})") from exc
    if row is None or row[0] is None:
        return None
    try:
        version = int(str(row[0]).strip())
    except ValueError:
        raise ReferenceImportError(
            f"unsupported schema_version {row[0]!r}: expected an integer between "
            f"{MIN_SCHEMA_VERSION} and {MAX_SCHEMA_VERSION}") from None
    if not MIN_SCHEMA_VERSION <= version <= MAX_SCHEMA_VERSION:
        raise ReferenceImportError(
            f"unsupported schema_version {version}: this importer reads reference schema versions "
            f"{MIN_SCHEMA_VERSION} to {MAX_SCHEMA_VERSION}")
    return version


def _status(value: Any, choices, table: str, row_id: Any) -> str:
    text = as_text(value, "")
    if text not in choices.values:
        raise ReferenceImportError(f"{table} row {row_id!r} has an unknown status {text!r}")
    return text


def _timestamp(row: dict, column: str, table: str, *, default: datetime | None = None,
               required: bool = True) -> datetime | None:
    value = row.get(column)
    try:
        dt = ms_to_datetime(value)
    except (ValueError, OverflowError, TypeError):
        raise ReferenceImportError(
            f"{table} row {row.get('id')!r} has an invalid timestamp in {column}: {value!r}") from None
    if dt is None:
        dt = default
    if dt is None and required:
        raise ReferenceImportError(f"{table} row {row.get('id')!r} has no {column}")
    return dt


def _item_from_row(r: dict, cols: set[str]) -> WorkItem:
    created = _timestamp(r, "created_at", "work_items")
    work_dir = as_text(r.get("work_dir"), "")
    if "workspace_key" in cols:
        workspace_key = as_text(r.get("workspace_key"), "")
    else:  # the schema-9 back-fill: realpath of work_dir, "" where it does not resolve
        workspace_key = canonicalize_dir(work_dir)
    return WorkItem(
        id=as_text(r["id"]),
        revision=as_int(r.get("revision"), 1),
        title=as_text(r.get("title")),
        goal=as_text(r.get("goal")),
        acceptance_criteria=parse_json(r.get("acceptance_criteria"), [], list),
        workflow_template=as_text(r.get("workflow_template"), "") or "software-change",
        workflow_snapshot=parse_json(r.get("workflow_snapshot"), None, dict),
        status=_status(r.get("status"), WorkItemStatus, "work_items", r["id"]),
        current_action_id=as_text_or_none(r.get("current_action_id")),
        current_run_id=as_text_or_none(r.get("current_run_id")),
        work_dir=work_dir,
        workspace_key=workspace_key,
        reuse_memory=as_int(r.get("reuse_memory"), 1) != 0,
        origin=parse_json(r.get("origin"), None, dict),
        linked_session_ids=parse_json(r.get("linked_session_ids"), [], list),
        session_context=parse_json(r.get("session_context"), [], list),
        attachments=parse_json(r.get("attachments"), [], list),
        created_at=created,
        updated_at=_timestamp(r, "updated_at", "work_items", default=created),
    )


def _action_from_row(r: dict) -> Action:
    created = _timestamp(r, "created_at", "actions")
    type_ = as_text(r.get("type"))
    mode = as_text(r.get("workspace_mode"), "")
    if mode not in WorkspaceMode.values:
        mode = WorkspaceMode.SHARED
    if r.get("sequence") is None:
        raise ReferenceImportError(f"actions row {r['id']!r} has no sequence")
    return Action(
        id=as_text(r["id"]),
        work_item_id=as_text(r["work_item_id"]),
        sequence=as_int(r.get("sequence"), 0),
        type=type_,
        stage_id=as_text_or_none(r.get("stage_id")) or type_,
        assignment_policy=parse_json(r.get("assignment_policy"), None, dict),
        model_policy=parse_json(r.get("model_policy"), None, dict),
        depends_on_stage_ids=parse_json(r.get("depends_on_stage_ids"), [], list),
        workspace_mode=mode,
        changes_requested_stage_id=as_text_or_none(r.get("changes_requested_stage_id")),
        workspace=parse_json(r.get("workspace"), None, dict),
        required_role=as_text(r.get("required_role"), ""),
        instruction=as_text(r.get("instruction"), ""),
        brief=parse_json(r.get("brief"), None, dict),
        context=context_on_read(parse_json(r.get("context"), [], list)),
        contract_revision=as_int(r.get("contract_revision"), 1),
        status=_status(r.get("status"), ActionStatus, "actions", r["id"]),
        attempt=as_int(r.get("attempt"), 0),
        max_attempts=as_int(r.get("max_attempts"), 2),
        current_run_id=as_text_or_none(r.get("current_run_id")),
        lease_epoch=as_int(r.get("lease_epoch"), 0),
        claimable=False,
        created_at=created,
        updated_at=_timestamp(r, "updated_at", "actions", default=created),
    )


def _run_from_row(r: dict, work_item_id: str) -> Run:
    started = _timestamp(r, "started_at", "runs")
    review = as_text_or_none(r.get("review_decision"))
    run = Run(
        id=as_text(r["id"]),
        action_id=as_text(r["action_id"]),
        work_item_id=work_item_id,
        owner_boot_id=as_text(r.get("owner_boot_id"), ""),
        lease_epoch=as_int(r.get("lease_epoch"), 0),
        status=_status(r.get("status"), RunStatus, "runs", r["id"]),
        started_at=started,
        expires_at=_timestamp(r, "expires_at", "runs", default=started),
        ended_at=_timestamp(r, "ended_at", "runs", required=False),
        role_snapshot=parse_json(r.get("role_snapshot"), None, dict),
        vp_snapshot=parse_json(r.get("vp_snapshot"), None, dict),
        model_snapshot=parse_json(r.get("model_snapshot"), None, dict),
        tool_policy_snapshot=parse_json(r.get("tool_policy_snapshot"), None, dict),
        response=as_text(r.get("response"), ""),
        summary=as_text(r.get("summary"), ""),
        evidence=normalize_evidence(parse_json(r.get("evidence"), [], list)),
        waiting_reason=as_text_or_none(r.get("waiting_reason")),
        error=as_text_or_none(r.get("error")),
        review_decision=review if review in ("approved", "changes_requested") else None,
        contract_patch=parse_json(r.get("contract_patch"), None, dict),
        acceptance_checks=parse_json(r.get("acceptance_checks"), [], list),
        progress_revision=max(0, as_int(r.get("progress_revision"), 0)),
        checkpoint=normalize_checkpoint(parse_json(r.get("checkpoint"), None, dict)),
    )
    for name in COUNTER_FIELDS:
        setattr(run, name, as_counter(r.get(name)))
    return run


def _event_from_row(r: dict) -> Event:
    return Event(
        work_item_id=as_text(r["work_item_id"]),
        action_id=as_text_or_none(r.get("action_id")),
        run_id=as_text_or_none(r.get("run_id")),
        type=as_text(r.get("type")),
        data=parse_json(r.get("data"), {}, dict),
        actor="system",
        created_at=_timestamp(r, "created_at", "events"),
    )


def _rows(conn: sqlite3.Connection, sql: str) -> Iterable[dict]:
    cur = conn.execute(sql)
    names = [d[0] for d in cur.description]
    for row in cur:
        yield dict(zip(names, row))


def read_reference_db(path: str | os.PathLike) -> SourceRows:
    """Phase 1: validate the file and convert all its rows in memory. Writes nothing."""
    p = Path(os.fspath(path)).expanduser()
    if not p.exists():
        raise ReferenceImportError(f"{p} does not exist")
    if not p.is_file():
        raise ReferenceImportError(f"{p} is not a file")
    try:
        with p.open("rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise ReferenceImportError(f"cannot read {p} ({exc})") from exc
    if header != SQLITE_HEADER:
        raise ReferenceImportError(f"{p} is not an SQLite database")
    conn = _connect(p.resolve())
    try:
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            missing = [t for t in REQUIRED_TABLES if t not in tables]
            if missing:
                raise ReferenceImportError(
                    f"{p} is not a reference Work Center database: missing table(s) {', '.join(missing)}")
            version = _schema_version(conn, tables)
            columns = {t: {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')} for t in REQUIRED_TABLES}
            for table, required in REQUIRED_COLUMNS.items():
                lacking = [c for c in required if c not in columns[table]]
                if lacking:
                    raise ReferenceImportError(
                        f"{p} is not a reference Work Center database: table {table} lacks "
                        f"column(s) {', '.join(lacking)}")
            src = SourceRows(schema_version=version, columns=columns)
            src.items = [_item_from_row(r, columns["work_items"])
                         for r in _rows(conn, "SELECT * FROM work_items ORDER BY created_at, id")]
            item_ids = {i.pk for i in src.items}
            if len(item_ids) != len(src.items):
                raise ReferenceImportError("duplicate work item ids in the reference database")
            action_item: dict[str, str] = {}
            for r in _rows(conn, "SELECT * FROM actions ORDER BY work_item_id, sequence, id"):
                action = _action_from_row(r)
                if action.work_item_id not in item_ids:
                    src.orphans["actions"] += 1
                    continue
                src.actions.append(action)
                action_item[action.pk] = action.work_item_id
            has_run_item = "work_item_id" in columns["runs"]
            for r in _rows(conn, "SELECT * FROM runs ORDER BY started_at, id"):
                owner = action_item.get(as_text(r["action_id"]))
                stated = as_text(r.get("work_item_id")) if has_run_item else owner
                if owner is None or stated != owner:
                    src.orphans["runs"] += 1
                    continue
                src.runs.append(_run_from_row(r, owner))
            for r in _rows(conn, "SELECT * FROM events ORDER BY id"):
                event = _event_from_row(r)
                if event.work_item_id not in item_ids:
                    src.orphans["events"] += 1
                    continue
                src.events.append(event)
            return src
        except sqlite3.Error as exc:
            raise ReferenceImportError(f"cannot read {p} as a reference database ({exc})") from exc
    finally:
        conn.close()


# --- writing ---------------------------------------------------------------------------------

def _chunks(seq: list, size: int = BATCH) -> Iterable[list]:
    for i in range(0, len(seq), size):
        yield seq[i:i + size]


def _existing(model, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for chunk in _chunks(ids):
        found.update(model.objects.filter(pk__in=chunk).values_list("pk", flat=True))
    return found


def _write(src: SourceRows) -> dict[str, Any]:
    present = _existing(WorkItem, [i.pk for i in src.items])
    new_items = [i for i in src.items if i.pk not in present]
    new_ids = {i.pk for i in new_items}
    actions = [a for a in src.actions if a.work_item_id in new_ids]
    runs = [r for r in src.runs if r.work_item_id in new_ids]
    events = [e for e in src.events if e.work_item_id in new_ids]

    taken = _existing(Action, [a.pk for a in actions])
    if taken:
        raise ReferenceImportError(
            f"action id(s) already used by other work items in this database: {', '.join(sorted(taken)[:5])}")
    taken = _existing(Run, [r.pk for r in runs])
    if taken:
        raise ReferenceImportError(
            f"run id(s) already used by other work items in this database: {', '.join(sorted(taken)[:5])}")

    WorkItem.objects.bulk_create(new_items, batch_size=BATCH)
    Action.objects.bulk_create(actions, batch_size=BATCH)
    Run.objects.bulk_create(runs, batch_size=BATCH)
    if events:
        if connection.vendor == "postgresql":
            # The stream key of events.event_append, taken exclusively: stream readers wait for the import's commit.
            with connection.cursor() as cur:
                cur.execute(db.sql("event_order_lock"), [EVENT_ORDER_LOCK])
        # One row at a time in source order: the new ids follow the original id order.
        for event in events:
            event.save(force_insert=True)

    by_item: dict[str, list[Action]] = {}
    for a in actions:
        by_item.setdefault(a.work_item_id, []).append(a)
    for item in new_items:
        sync_claimable(item, by_item.get(item.pk, []))

    def counts(total: int, imported: int, orphans: int = 0) -> dict[str, int]:
        return {"imported": imported, "skipped": total - imported + orphans}

    return {
        "schema_version": src.schema_version,
        "work_items": counts(len(src.items), len(new_items)),
        "actions": counts(len(src.actions), len(actions), src.orphans["actions"]),
        "runs": counts(len(src.runs), len(runs), src.orphans["runs"]),
        "events": counts(len(src.events), len(events), src.orphans["events"]),
    }


def import_reference_db(path: str | os.PathLike) -> dict[str, Any]:
    """Import a reference database file; idempotent. Returns the counts per table.

    `{"schema_version": 8 | None, "work_items": {"imported": n, "skipped": m}, "actions": {...},
    "runs": {...}, "events": {...}}`. Raises `ReferenceImportError` (an `InvalidInput`) for a
    file that is not an importable reference database; nothing is written then, nor when any
    later step fails (one transaction).
    """
    src = read_reference_db(path)
    try:
        with store_transaction():
            return _write(src)
    except (IntegrityError, DataError) as exc:
        raise ReferenceImportError(f"the reference rows do not fit this database ({exc})") from exc
