"""`import_reference_db` (DOMAIN §2.5, API.md §5): reference SQLite databases of schema 1-11."""
from __future__ import annotations

import io
import json
import os
import re
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from workcenter import services
from workcenter.errors import InvalidInput
from workcenter.importer import ReferenceImportError, import_reference_db, snake_case, snake_keys
from workcenter.models import COUNTER_FIELDS, Action, Event, Run, WorkItem

# shared/ lies beside the checkout (CI lays a copy there); WORKCENTER_SHARED names another place.
_SHARED = Path(os.environ.get("WORKCENTER_SHARED") or Path(__file__).resolve().parents[3] / "shared")
FIXTURE = (_SHARED if _SHARED.is_dir() else Path("/work/shared")) / "fixtures" / "reference-schema8.sqlite"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
CAMEL = re.compile(r"^[a-z]+[A-Z]")

needs_fixture = pytest.mark.skipif(not FIXTURE.is_file(), reason=f"reference fixture missing: {FIXTURE}")


def ms(value: int) -> datetime:
    return EPOCH + timedelta(milliseconds=value)


def source_rows(path, table, order="id"):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
    finally:
        conn.close()


def all_keys(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from all_keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from all_keys(v)


def db_counts():
    return (WorkItem.objects.count(), Action.objects.count(), Run.objects.count(), Event.objects.count())


def make_db(path: Path, ddl: str, rows: dict[str, list[dict]], version: str | None) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(ddl)
    if version is not None:
        conn.execute("CREATE TABLE schema_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO schema_meta VALUES ('schema_version', ?)", (version,))
    for table, items in rows.items():
        for row in items:
            cols = ", ".join(row)
            marks = ", ".join("?" for _ in row)
            values = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()]
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", values)
    conn.commit()
    conn.close()
    return path


# --- key conversion ----------------------------------------------------------------------------

@pytest.mark.parametrize("key,expected", [
    ("workItemType", "work_item_type"),
    ("expectedOutcome", "expected_outcome"),
    ("candidateVpIds", "candidate_vp_ids"),
    ("nameZh", "name_zh"),
    ("HTTPServer", "http_server"),
    ("sha256", "sha256"),
    ("already_snake", "already_snake"),
    ("id", "id"),
    ("fix-lost-update", "fix-lost-update"),
    ("src/Stock.ts", "src/Stock.ts"),
])
def test_snake_case(key, expected):
    assert snake_case(key) == expected


def test_snake_keys_converts_keys_recursively_not_values():
    raw = {"outerKey": [{"innerKey": "keepThisValue", "deepList": [{"aB": 1}]}], "plain": "camelValue",
           "fooBar": 1, "foo_bar": 2}
    assert snake_keys(raw) == {"outer_key": [{"inner_key": "keepThisValue", "deep_list": [{"a_b": 1}]}],
                               "plain": "camelValue", "foo_bar": 2}


# --- the real schema-8 fixture -----------------------------------------------------------------

@needs_fixture
@pytest.mark.django_db
def test_import_fixture_keeps_rows_ids_statuses_and_converts_values():
    src_items = source_rows(FIXTURE, "work_items")
    src_actions = source_rows(FIXTURE, "actions")
    src_runs = source_rows(FIXTURE, "runs")
    src_events = source_rows(FIXTURE, "events")
    before_max = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0

    counts = import_reference_db(FIXTURE)

    assert counts["schema_version"] == 8
    assert counts["work_items"] == {"imported": len(src_items), "skipped": 0}
    assert counts["actions"] == {"imported": len(src_actions), "skipped": 0}
    assert counts["runs"] == {"imported": len(src_runs), "skipped": 0}
    assert counts["events"] == {"imported": len(src_events), "skipped": 0}
    assert db_counts() == (len(src_items), len(src_actions), len(src_runs), len(src_events))

    # ids and statuses kept
    assert dict(WorkItem.objects.values_list("id", "status")) == {r["id"]: r["status"] for r in src_items}
    assert dict(Action.objects.values_list("id", "status")) == {r["id"]: r["status"] for r in src_actions}
    assert dict(Run.objects.values_list("id", "status")) == {r["id"]: r["status"] for r in src_runs}
    for r in src_actions:
        a = Action.objects.get(pk=r["id"])
        assert (a.work_item_id, a.sequence, a.type, a.stage_id, a.attempt, a.lease_epoch) == (
            r["work_item_id"], r["sequence"], r["type"], r["stage_id"], r["attempt"], r["lease_epoch"])
        assert a.workspace_mode == "shared" and a.depends_on_stage_ids == [] and a.workspace is None
        assert a.changes_requested_stage_id is None
        assert a.created_at == ms(r["created_at"]) and a.updated_at == ms(r["updated_at"])

    # timestamps: integer ms -> aware UTC datetimes
    first = src_items[0]
    item = WorkItem.objects.get(pk=first["id"])
    assert item.created_at == ms(first["created_at"])
    assert item.updated_at == ms(first["updated_at"])
    assert item.created_at.utcoffset() == timedelta(0)
    assert round(item.created_at.timestamp() * 1000) == first["created_at"]
    assert item.workspace_key == first["workspace_key"]  # column present: kept as stored
    assert item.session_context == []

    # JSON parsed, keys snake_case, values untouched
    src_snapshot = json.loads(first["workflow_snapshot"])
    assert "workItemType" in src_snapshot
    assert item.workflow_snapshot["work_item_type"] == src_snapshot["workItemType"]
    assert item.workflow_snapshot["planning_mode"] == src_snapshot["planningMode"]
    for obj in WorkItem.objects.values_list("workflow_snapshot", "origin", "attachments"):
        assert not [k for k in all_keys(list(obj)) if CAMEL.match(k)]
    origin_row = next(r for r in src_items if r["origin"] not in (None, "null"))
    origin = WorkItem.objects.get(pk=origin_row["id"]).origin
    assert origin == {snake_case(k): v for k, v in json.loads(origin_row["origin"]).items()}
    assert set(origin) == {"session_id", "message_id", "created_by", "trusted_session"}
    for r in src_items:
        if r["origin"] == "null":
            assert WorkItem.objects.get(pk=r["id"]).origin is None
    for a in Action.objects.all():
        assert not [k for k in all_keys([a.brief, a.context, a.assignment_policy, a.model_policy]) if CAMEL.match(k)]
        if a.brief:
            assert "expected_outcome" in a.brief
    for r in src_runs:
        run = Run.objects.get(pk=r["id"])
        assert run.started_at == ms(r["started_at"]) and run.expires_at == ms(r["expires_at"])
        assert run.ended_at == (ms(r["ended_at"]) if r["ended_at"] is not None else None)
        for name in COUNTER_FIELDS:
            assert getattr(run, name) == r[name]
        assert run.progress_revision == r["progress_revision"]
        assert run.summary == (r["summary"] or "") and run.response == r["response"]
        assert run.acceptance_checks == []
        assert run.evidence == snake_keys(json.loads(r["evidence"]))
        assert not [k for k in all_keys([run.role_snapshot, run.vp_snapshot, run.model_snapshot,
                                         run.tool_policy_snapshot, run.checkpoint]) if CAMEL.match(k)]

    # events: new ids in source order, actor "system", snake_case payload keys, values kept
    events = list(Event.objects.order_by("id"))
    assert all(e.id > before_max for e in events)
    assert [(e.work_item_id, e.action_id, e.run_id, e.type, e.created_at) for e in events] == [
        (r["work_item_id"], r["action_id"], r["run_id"], r["type"], ms(r["created_at"])) for r in src_events]
    assert [e.data for e in events] == [snake_keys(json.loads(r["data"])) for r in src_events]
    assert {e.actor for e in events} == {"system"}
    claimed = next(e for e in events if e.type == "run.claimed")
    assert set(claimed.data) == {"owner_boot_id", "lease_epoch"}


@needs_fixture
@pytest.mark.django_db
def test_fixture_claim_queue_is_synced_and_claimable():
    import_reference_db(FIXTURE)
    expected = set()
    for item in WorkItem.objects.filter(status="ready"):
        expected.add(item.current_action_id)
    assert expected
    assert set(Action.objects.filter(claimable=True).values_list("id", flat=True)) == expected
    claim = services.action_claim(owner_boot_id="boot-import", lease_ms=60_000)
    assert claim is not None and claim.action.pk in expected
    assert claim.run.lease_epoch == 1


@needs_fixture
@pytest.mark.django_db
def test_second_import_changes_nothing():
    first = import_reference_db(FIXTURE)
    before = db_counts()
    max_event = Event.objects.order_by("-id").values_list("id", flat=True).first()
    event_rows = list(Event.objects.order_by("id").values_list("id", "type", "work_item_id"))

    second = import_reference_db(FIXTURE)

    assert db_counts() == before
    assert Event.objects.order_by("-id").values_list("id", flat=True).first() == max_event
    assert list(Event.objects.order_by("id").values_list("id", "type", "work_item_id")) == event_rows
    for key in ("work_items", "actions", "runs", "events"):
        assert second[key] == {"imported": 0, "skipped": first[key]["imported"]}


@needs_fixture
@pytest.mark.django_db
def test_command_prints_summary():
    out = io.StringIO()
    call_command("import_reference_db", str(FIXTURE), stdout=out)
    text = out.getvalue()
    assert "schema version 8" in text
    assert "work items: 4 imported, 0 skipped" in text
    assert "events: 23 imported, 0 skipped" in text
    out = io.StringIO()
    call_command("import_reference_db", str(FIXTURE), stdout=out)
    assert "work items: 0 imported, 4 skipped" in out.getvalue()


# --- bad files -------------------------------------------------------------------------------

@pytest.mark.django_db
def test_random_bytes_file_is_rejected_and_nothing_written(tmp_path):
    bad = tmp_path / "random.sqlite"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(ReferenceImportError, match="not an SQLite database"):
        import_reference_db(bad)
    with pytest.raises(CommandError, match="not an SQLite database"):
        call_command("import_reference_db", str(bad), stdout=io.StringIO())
    assert db_counts() == (0, 0, 0, 0)


@pytest.mark.django_db
def test_sqlite_header_with_garbage_is_rejected(tmp_path):
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    with pytest.raises(ReferenceImportError):
        import_reference_db(bad)
    assert db_counts() == (0, 0, 0, 0)


@pytest.mark.django_db
def test_missing_file_is_rejected(tmp_path):
    with pytest.raises(ReferenceImportError, match="does not exist"):
        import_reference_db(tmp_path / "nope.sqlite")
    with pytest.raises(CommandError):
        call_command("import_reference_db", str(tmp_path / "nope.sqlite"), stdout=io.StringIO())


@pytest.mark.django_db
def test_sqlite_without_reference_tables_is_rejected(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE work_items (id TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE something_else (x INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(ReferenceImportError, match="missing table") as info:
        import_reference_db(path)
    assert isinstance(info.value, InvalidInput)
    assert "actions" in info.value.message and "events" in info.value.message
    with pytest.raises(CommandError, match="missing table"):
        call_command("import_reference_db", str(path), stdout=io.StringIO())
    assert db_counts() == (0, 0, 0, 0)


# --- schema variants built here --------------------------------------------------------------

SCHEMA1_DDL = """
CREATE TABLE work_items (
  id TEXT PRIMARY KEY, title TEXT NOT NULL, goal TEXT NOT NULL, acceptance_criteria TEXT NOT NULL,
  status TEXT NOT NULL, current_action_id TEXT, current_run_id TEXT, work_dir TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE actions (
  id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL,
  required_role TEXT NOT NULL, instruction TEXT NOT NULL, context TEXT NOT NULL DEFAULT '[]',
  status TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 2,
  current_run_id TEXT, lease_epoch INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, UNIQUE(work_item_id, sequence));
CREATE TABLE runs (
  id TEXT PRIMARY KEY, action_id TEXT NOT NULL, work_item_id TEXT NOT NULL, owner_boot_id TEXT NOT NULL,
  lease_epoch INTEGER NOT NULL, status TEXT NOT NULL, started_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  ended_at INTEGER, summary TEXT, evidence TEXT NOT NULL DEFAULT '[]', waiting_reason TEXT, error TEXT);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, work_item_id TEXT NOT NULL, action_id TEXT, run_id TEXT,
  type TEXT NOT NULL, data TEXT NOT NULL, created_at INTEGER NOT NULL);
"""

T = 1_780_000_000_123


def schema1_rows(real_dir: str, missing_dir: str) -> dict[str, list[dict]]:
    return {
        "work_items": [
            {"id": "legacy-1", "title": "Legacy item", "goal": "Old goal", "acceptance_criteria": ["works"],
             "status": "ready", "current_action_id": "legacy-1-a2", "current_run_id": None,
             "work_dir": real_dir, "created_at": T, "updated_at": T + 50},
            {"id": "legacy-2", "title": "Gone dir", "goal": "g", "acceptance_criteria": [],
             "status": "done", "current_action_id": None, "current_run_id": None,
             "work_dir": missing_dir, "created_at": T + 1, "updated_at": T + 2},
        ],
        "actions": [
            {"id": "legacy-1-a1", "work_item_id": "legacy-1", "sequence": 1, "type": "triage", "required_role": "omni",
             "instruction": "triage it", "context": [], "status": "completed", "attempt": 1, "max_attempts": 2,
             "current_run_id": None, "lease_epoch": 1, "created_at": T, "updated_at": T + 10},
            {"id": "legacy-1-a2", "work_item_id": "legacy-1", "sequence": 2, "type": "implement",
             "required_role": "linus", "instruction": "do it",
             "context": [{"type": "triage", "summary": "plan", "reviewDecision": None}],
             "status": "ready", "attempt": 0, "max_attempts": 2, "current_run_id": None, "lease_epoch": 0,
             "created_at": T + 10, "updated_at": T + 10},
        ],
        "runs": [
            {"id": "legacy-1-r1", "action_id": "legacy-1-a1", "work_item_id": "legacy-1", "owner_boot_id": "old-boot",
             "lease_epoch": 1, "status": "completed", "started_at": T + 1, "expires_at": T + 60_001,
             "ended_at": T + 10, "summary": None, "evidence": [{"kind": "text", "label": "looked"}],
             "waiting_reason": None, "error": None},
        ],
        "events": [
            {"work_item_id": "legacy-1", "action_id": "legacy-1-a1", "run_id": None, "type": "work_item.created",
             "data": {"status": "ready"}, "created_at": T},
            {"work_item_id": "legacy-2", "action_id": None, "run_id": None, "type": "work_item.created",
             "data": {"status": "draft"}, "created_at": T + 1},
            {"work_item_id": "legacy-1", "action_id": "legacy-1-a1", "run_id": "legacy-1-r1", "type": "run.claimed",
             "data": {"ownerBootId": "old-boot", "leaseEpoch": 1}, "created_at": T + 1},
            {"work_item_id": "legacy-1", "action_id": "legacy-1-a1", "run_id": "legacy-1-r1",
             "type": "action.completed", "data": {"nextActionType": "implement", "reviewDecision": None},
             "created_at": T + 10},
        ],
    }


@pytest.mark.django_db
def test_schema1_database_gets_the_defaults(tmp_path):
    real = tmp_path / "repo"
    real.mkdir()
    link = tmp_path / "repo-link"
    link.symlink_to(real, target_is_directory=True)
    path = make_db(tmp_path / "schema1.sqlite", SCHEMA1_DDL,
                   schema1_rows(str(link), str(tmp_path / "deleted")), version="1")

    counts = import_reference_db(path)

    assert counts["schema_version"] == 1
    assert {k: counts[k]["imported"] for k in ("work_items", "actions", "runs", "events")} == {
        "work_items": 2, "actions": 2, "runs": 1, "events": 4}
    item = WorkItem.objects.get(pk="legacy-1")
    assert item.workspace_key == os.path.realpath(real)  # recomputed from work_dir
    assert item.work_dir == str(link)  # work_dir itself kept as stored
    assert WorkItem.objects.get(pk="legacy-2").workspace_key == ""  # does not resolve
    assert item.revision == 1 and item.workflow_template == "software-change"
    assert item.workflow_snapshot is None and item.origin is None
    assert item.reuse_memory is True
    assert item.linked_session_ids == [] and item.session_context == [] and item.attachments == []
    assert item.acceptance_criteria == ["works"]
    assert item.created_at == ms(T) and item.updated_at == ms(T + 50)

    a1, a2 = Action.objects.filter(work_item_id="legacy-1").order_by("sequence")
    assert a1.stage_id == "triage" and a2.stage_id == "implement"  # stage_id from type
    for a in (a1, a2):
        assert a.brief is None and a.assignment_policy is None and a.model_policy is None
        assert a.workspace_mode == "shared" and a.depends_on_stage_ids == []
        assert a.changes_requested_stage_id is None and a.workspace is None
        assert a.contract_revision == 1
    assert a1.required_role == "omni"
    assert a2.context == [{"type": "triage", "summary": "plan", "review_decision": None}]
    assert a2.claimable is True and a1.claimable is False

    run = Run.objects.get(pk="legacy-1-r1")
    for name in COUNTER_FIELDS:
        assert getattr(run, name) == 0
    assert run.progress_revision == 0
    assert run.summary == "" and run.response == ""
    assert run.role_snapshot is None and run.checkpoint is None and run.contract_patch is None
    assert run.review_decision is None and run.acceptance_checks == []
    assert run.evidence == [{"kind": "text", "label": "looked"}]

    events = list(Event.objects.order_by("id"))
    assert [(e.work_item_id, e.type) for e in events] == [
        ("legacy-1", "work_item.created"), ("legacy-2", "work_item.created"),
        ("legacy-1", "run.claimed"), ("legacy-1", "action.completed")]
    assert events[2].data == {"owner_boot_id": "old-boot", "lease_epoch": 1}
    assert events[3].data == {"next_action_type": "implement", "review_decision": None}
    assert {e.actor for e in events} == {"system"}

    again = import_reference_db(path)
    assert again["work_items"] == {"imported": 0, "skipped": 2}
    assert Event.objects.count() == 4


@pytest.mark.django_db
def test_database_without_schema_meta_is_accepted(tmp_path):
    path = make_db(tmp_path / "nometa.sqlite", SCHEMA1_DDL,
                   schema1_rows("", str(tmp_path / "x")), version=None)
    counts = import_reference_db(path)
    assert counts["schema_version"] is None
    assert counts["work_items"]["imported"] == 2
    assert WorkItem.objects.get(pk="legacy-1").workspace_key == ""


@pytest.mark.django_db
@pytest.mark.parametrize("version", ["0", "12", "eleven"])
def test_unsupported_schema_version_is_rejected(tmp_path, version):
    path = make_db(tmp_path / "v.sqlite", SCHEMA1_DDL, schema1_rows("", ""), version=version)
    with pytest.raises(ReferenceImportError, match="schema_version"):
        import_reference_db(path)
    with pytest.raises(CommandError, match="schema_version"):
        call_command("import_reference_db", str(path), stdout=io.StringIO())
    assert db_counts() == (0, 0, 0, 0)


@pytest.mark.django_db
def test_bad_row_fails_before_anything_is_written(tmp_path):
    rows = schema1_rows("", "")
    rows["runs"][0]["status"] = "exploded"
    path = make_db(tmp_path / "badrow.sqlite", SCHEMA1_DDL, rows, version="1")
    with pytest.raises(ReferenceImportError, match="unknown status"):
        import_reference_db(path)
    assert db_counts() == (0, 0, 0, 0)


@pytest.mark.django_db
def test_failure_part_way_writes_nothing(tmp_path, monkeypatch):
    path = make_db(tmp_path / "s1.sqlite", SCHEMA1_DDL, schema1_rows("", ""), version="1")
    import workcenter.importer as importer

    def boom(item, actions=None):
        raise RuntimeError("injected failure after the inserts")

    monkeypatch.setattr(importer, "sync_claimable", boom)
    with pytest.raises(RuntimeError, match="injected"):
        import_reference_db(path)
    assert db_counts() == (0, 0, 0, 0)
    monkeypatch.undo()
    assert import_reference_db(path)["events"]["imported"] == 4


@pytest.mark.django_db
def test_action_id_taken_by_another_item_is_rejected(tmp_path, clock):
    path = make_db(tmp_path / "s1.sqlite", SCHEMA1_DDL, schema1_rows("", ""), version="1")
    other = services.work_item_create(title="Here already", goal="g", acceptance_criteria=[], start=True,
                                      now=clock.tick())
    before = db_counts()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE actions SET id = ? WHERE id = 'legacy-1-a1'",
                 (Action.objects.filter(work_item_id=other.pk).values_list("id", flat=True).first(),))
    conn.commit()
    conn.close()
    with pytest.raises(ReferenceImportError, match="already used"):
        import_reference_db(path)
    assert db_counts() == before


SCHEMA11_DDL = """
CREATE TABLE work_items (
  id TEXT PRIMARY KEY, revision INTEGER NOT NULL DEFAULT 1, title TEXT NOT NULL, goal TEXT NOT NULL,
  acceptance_criteria TEXT NOT NULL, workflow_template TEXT NOT NULL, workflow_snapshot TEXT, status TEXT NOT NULL,
  current_action_id TEXT, current_run_id TEXT, work_dir TEXT NOT NULL DEFAULT '',
  workspace_key TEXT NOT NULL DEFAULT '', reuse_memory INTEGER NOT NULL DEFAULT 1, origin TEXT,
  linked_session_ids TEXT NOT NULL DEFAULT '[]', session_context TEXT NOT NULL DEFAULT '[]',
  attachments TEXT NOT NULL DEFAULT '[]', created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE actions (
  id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL,
  required_role TEXT NOT NULL, stage_id TEXT, assignment_policy TEXT, model_policy TEXT,
  depends_on_stage_ids TEXT NOT NULL DEFAULT '[]', workspace_mode TEXT NOT NULL DEFAULT 'shared',
  changes_requested_stage_id TEXT, workspace TEXT, instruction TEXT NOT NULL, brief TEXT,
  context TEXT NOT NULL DEFAULT '[]', contract_revision INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 2, current_run_id TEXT,
  lease_epoch INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
  UNIQUE(work_item_id, sequence));
CREATE TABLE runs (
  id TEXT PRIMARY KEY, action_id TEXT NOT NULL, work_item_id TEXT NOT NULL, owner_boot_id TEXT NOT NULL,
  lease_epoch INTEGER NOT NULL, status TEXT NOT NULL, started_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  ended_at INTEGER, role_snapshot TEXT, vp_snapshot TEXT, model_snapshot TEXT, tool_policy_snapshot TEXT,
  summary TEXT, evidence TEXT NOT NULL DEFAULT '[]', waiting_reason TEXT, error TEXT, review_decision TEXT,
  contract_patch TEXT, response TEXT NOT NULL DEFAULT '',
  loop_count INTEGER NOT NULL DEFAULT 0, tool_count INTEGER NOT NULL DEFAULT 0,
  llm_request_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0, total_tokens INTEGER NOT NULL DEFAULT 0,
  progress_revision INTEGER NOT NULL DEFAULT 0, checkpoint TEXT);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, work_item_id TEXT NOT NULL, action_id TEXT, run_id TEXT,
  type TEXT NOT NULL, data TEXT NOT NULL, created_at INTEGER NOT NULL);
"""

GRAPH_SNAPSHOT = {
    "version": 1, "id": "ai-planned", "name": "AI planned", "planningMode": "ai", "executionMode": "graph",
    "workItemType": "analysis", "globalInstructions": "",
    "stages": [
        {"id": "triage", "type": "triage", "maxAttempts": 2},
        {"id": "scan", "type": "research", "dependsOnStageIds": ["triage"], "workspaceMode": "read"},
        {"id": "write", "type": "implement", "dependsOnStageIds": ["triage"], "workspaceMode": "isolated-write"},
        {"id": "merge", "type": "integrate", "dependsOnStageIds": ["scan", "write"], "workspaceMode": "integrate"},
        {"id": "review", "type": "review", "dependsOnStageIds": ["merge"], "changesRequestedStageId": "write"},
    ],
}


def schema11_rows(work_dir: str) -> dict[str, list[dict]]:
    item = "graph-1"

    def action(i, stage, type_, status, deps, mode="shared", **extra):
        row = {"id": f"{item}-{stage}", "work_item_id": item, "sequence": i, "type": type_, "required_role": "",
               "stage_id": stage, "assignment_policy": {"mode": "auto", "candidateVpIds": [], "fixedVpId": None},
               "model_policy": {"mode": "inherit", "model": None}, "depends_on_stage_ids": deps,
               "workspace_mode": mode, "changes_requested_stage_id": None, "workspace": None,
               "instruction": f"do {stage}", "brief": {"objective": stage, "approach": "a", "expectedOutcome": "o"},
               "context": [], "contract_revision": 2, "status": status, "attempt": 0, "max_attempts": 3,
               "current_run_id": None, "lease_epoch": 0, "created_at": T + i, "updated_at": T + i}
        row.update(extra)
        return row

    return {
        "work_items": [
            {"id": item, "revision": 2, "title": "Graph", "goal": "parallel", "acceptance_criteria": ["a", "b"],
             "workflow_template": "ai-planned", "workflow_snapshot": GRAPH_SNAPSHOT, "status": "running",
             "current_action_id": f"{item}-write", "current_run_id": None, "work_dir": work_dir,
             "workspace_key": "/stored/key/kept", "reuse_memory": 0,
             "origin": {"sessionId": "s1", "messageId": "m1", "createdBy": "dana", "trustedSession": True},
             "linked_session_ids": ["s1"],
             "session_context": [{"role": "user", "text": "hi", "messageId": "m0"}],
             "attachments": [{"id": "att", "mimeType": "text/plain", "isImage": False}],
             "created_at": T, "updated_at": T + 100},
        ],
        "actions": [
            action(1, "triage", "triage", "completed", [], attempt=1, lease_epoch=1),
            action(2, "scan", "research", "ready", ["triage"], mode="read"),
            action(3, "write", "implement", "running", ["triage"], mode="isolated-write",
                   attempt=1, lease_epoch=1, current_run_id=f"{item}-run-write",
                   workspace={"path": "/tmp/wt/write", "baseRef": "abc123", "branchName": "wc/write"}),
            action(4, "merge", "integrate", "ready", ["scan", "write"], mode="integrate",
                   workspace={"path": "/repo", "integration": {"status": "prepared", "reservation": {
                       "token": "tok", "runId": "old", "ownerBootId": "b", "leaseEpoch": 1, "expiresAt": T}}}),
            action(5, "review", "review", "ready", ["merge"], changes_requested_stage_id="write"),
        ],
        "runs": [
            {"id": f"{item}-run-triage", "action_id": f"{item}-triage", "work_item_id": item,
             "owner_boot_id": "boot-old", "lease_epoch": 1, "status": "completed", "started_at": T + 1,
             "expires_at": T + 60_001, "ended_at": T + 5,
             "role_snapshot": {"id": "triage", "actionType": "triage"}, "vp_snapshot": {"id": "omni", "nameZh": "x"},
             "model_snapshot": {"id": "m", "policy": {"mode": "inherit"}},
             "tool_policy_snapshot": {"policyVersion": 1, "allowedToolNames": ["Bash"]},
             "summary": "planned", "evidence": [{"kind": "text", "label": "plan"}], "waiting_reason": None,
             "error": None, "review_decision": None,
             "contract_patch": {"acceptanceCriteria": ["a", "b"], "goal": "parallel"}, "response": "ok",
             "loop_count": 2, "tool_count": 3, "llm_request_count": 4, "input_tokens": 5, "output_tokens": 6,
             "cache_read_tokens": 7, "cache_write_tokens": 8, "total_tokens": 26, "progress_revision": 9,
             "checkpoint": {"version": 1, "toolEvents": [{"name": "Bash", "status": "completed"}]}},
            {"id": f"{item}-run-write", "action_id": f"{item}-write", "work_item_id": item,
             "owner_boot_id": "boot-old", "lease_epoch": 1, "status": "running", "started_at": T + 10,
             "expires_at": T + 70_010, "ended_at": None, "role_snapshot": None, "vp_snapshot": None,
             "model_snapshot": None, "tool_policy_snapshot": None, "summary": None, "evidence": [],
             "waiting_reason": None, "error": None, "review_decision": None, "contract_patch": None,
             "response": "working", "loop_count": 1, "tool_count": 0, "llm_request_count": 1,
             "input_tokens": 10, "output_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0,
             "total_tokens": 11, "progress_revision": 2, "checkpoint": None},
        ],
        "events": [
            {"work_item_id": item, "action_id": f"{item}-triage", "run_id": None, "type": "work_item.created",
             "data": {"status": "ready"}, "created_at": T},
            {"work_item_id": item, "action_id": f"{item}-triage", "run_id": f"{item}-run-triage",
             "type": "action.completed", "data": {"nextActionCount": 4, "reviewDecision": None},
             "created_at": T + 5},
            {"work_item_id": item, "action_id": f"{item}-write", "run_id": f"{item}-run-write",
             "type": "run.claimed", "data": {"ownerBootId": "boot-old", "leaseEpoch": 1}, "created_at": T + 10},
        ],
    }


@pytest.mark.django_db
def test_schema11_database_with_all_columns(tmp_path):
    path = make_db(tmp_path / "schema11.sqlite", SCHEMA11_DDL, schema11_rows(str(tmp_path)), version="11")

    counts = import_reference_db(path)

    assert counts["schema_version"] == 11
    assert {k: counts[k]["imported"] for k in ("work_items", "actions", "runs", "events")} == {
        "work_items": 1, "actions": 5, "runs": 2, "events": 3}
    item = WorkItem.objects.get(pk="graph-1")
    assert item.execution_mode == "graph"
    assert item.status == "running" and item.revision == 2
    assert item.workspace_key == "/stored/key/kept"  # column present: not recomputed
    assert item.reuse_memory is False
    assert item.origin == {"session_id": "s1", "message_id": "m1", "created_by": "dana", "trusted_session": True}
    assert item.session_context == [{"role": "user", "text": "hi", "message_id": "m0"}]
    assert item.attachments == [{"id": "att", "mime_type": "text/plain", "is_image": False}]
    assert item.workflow_snapshot["stages"][1] == {"id": "scan", "type": "research",
                                                   "depends_on_stage_ids": ["triage"], "workspace_mode": "read"}
    assert item.workflow_snapshot["stages"][4]["changes_requested_stage_id"] == "write"

    acts = {a.stage_id: a for a in Action.objects.filter(work_item=item)}
    assert acts["scan"].depends_on_stage_ids == ["triage"] and acts["scan"].workspace_mode == "read"
    assert acts["merge"].depends_on_stage_ids == ["scan", "write"] and acts["merge"].workspace_mode == "integrate"
    assert acts["merge"].workspace == {"path": "/repo", "integration": {"status": "prepared", "reservation": {
        "token": "tok", "run_id": "old", "owner_boot_id": "b", "lease_epoch": 1, "expires_at": T}}}
    assert acts["write"].workspace == {"path": "/tmp/wt/write", "base_ref": "abc123", "branch_name": "wc/write"}
    assert acts["write"].status == "running" and acts["write"].current_run_id == "graph-1-run-write"
    assert acts["review"].changes_requested_stage_id == "write"
    assert acts["scan"].brief == {"objective": "scan", "approach": "a", "expected_outcome": "o"}
    assert acts["scan"].assignment_policy == {"mode": "auto", "candidate_vp_ids": [], "fixed_vp_id": None}
    assert acts["scan"].contract_revision == 2 and acts["scan"].max_attempts == 3
    # graph readiness: only `scan` has its dependencies complete and no run
    assert {s for s, a in acts.items() if a.claimable} == {"scan"}

    done = Run.objects.get(pk="graph-1-run-triage")
    assert [getattr(done, n) for n in ("loop_count", "tool_count", "llm_request_count", "input_tokens",
                                       "output_tokens", "cache_read_tokens", "cache_write_tokens",
                                       "total_tokens")] == [2, 3, 4, 5, 6, 7, 8, 26]
    assert done.progress_revision == 9
    assert done.role_snapshot == {"id": "triage", "action_type": "triage"}
    assert done.vp_snapshot == {"id": "omni", "name_zh": "x"}
    assert done.tool_policy_snapshot == {"policy_version": 1, "allowed_tool_names": ["Bash"]}
    assert done.contract_patch == {"acceptance_criteria": ["a", "b"], "goal": "parallel"}
    assert done.checkpoint == {"version": 1, "tool_events": [{"name": "Bash", "status": "completed"}]}
    running = Run.objects.get(pk="graph-1-run-write")
    assert running.status == "running" and running.ended_at is None
    assert running.expires_at == ms(T + 70_010) and running.summary == ""

    events = list(Event.objects.filter(work_item=item).order_by("id"))
    assert [e.type for e in events] == ["work_item.created", "action.completed", "run.claimed"]
    assert events[1].data == {"next_action_count": 4, "review_decision": None}

    # a running run stays running until a recovery with a new boot id interrupts it
    assert services.runs_recover(current_boot_id="boot-new") == 1
    running.refresh_from_db()
    assert running.status == "interrupted"
    assert Event.objects.filter(work_item=item).order_by("-id").first().type == "run.interrupted"

    again = import_reference_db(path)
    assert again["runs"] == {"imported": 0, "skipped": 2}
    assert Run.objects.get(pk="graph-1-run-write").status == "interrupted"


@pytest.mark.django_db
def test_orphan_rows_are_skipped(tmp_path):
    rows = schema1_rows("", "")
    rows["actions"].append({"id": "orphan-a", "work_item_id": "no-such-item", "sequence": 1, "type": "triage",
                            "required_role": "", "instruction": "", "context": [], "status": "ready",
                            "attempt": 0, "max_attempts": 2, "current_run_id": None, "lease_epoch": 0,
                            "created_at": T, "updated_at": T})
    rows["events"].append({"work_item_id": "no-such-item", "action_id": None, "run_id": None,
                           "type": "work_item.created", "data": {}, "created_at": T})
    path = make_db(tmp_path / "orphans.sqlite", SCHEMA1_DDL, rows, version="1")
    counts = import_reference_db(path)
    assert counts["actions"] == {"imported": 2, "skipped": 1}
    assert counts["events"] == {"imported": 4, "skipped": 1}
    assert not Action.objects.filter(pk="orphan-a").exists()


# --- raw evidence and checkpoint forms (DOMAIN §12.4, §12.5: normalised on write and on read) ----

NOT_JSON = "{not json"  # a column text that does not parse (the reference reads it as the default)

# Each value as an older version could have stored it in `runs.evidence`.
EVIDENCE_FORMS = {
    "bare-string": ["ran the suite"],
    "padded-string": ["   padded   "],
    "blank-string": ["   ", ""],
    "long-string": ["s" * 499 + " tail"],
    "tool-error-stdout": [{"tool": "Bash", "is_error": True, "stdout": "Traceback ..."}],
    "tool-camel-is-error": [{"tool": "Bash", "isError": True, "stdout": "boom"}],
    "tool-ok-stdout": [{"tool": " Read ", "is_error": False, "stdout": "contents", "exitCode": 0}],
    "tool-without-flag": [{"tool": "Grep"}],
    "tool-truthy-flag": [{"tool": "Grep", "is_error": "true"}],
    "tool-blank": [{"tool": "  ", "is_error": True}],
    "tool-not-a-string": [{"tool": 5, "kind": "text", "label": "kept as text"}],
    "object-extra-keys": [{"kind": "test", "label": "pytest", "status": "passed", "stdout": "3 passed",
                           "durationMs": 40, "raw": {"nested": True}}],
    "object-trims-and-drops": [{"kind": "link", "label": " docs ", "ref": "  https://x.test/d  ", "status": "bogus"}],
    "object-blank-ref": [{"kind": "commit", "label": "abc", "ref": "   "}],
    "object-caps": [{"kind": "file", "label": "x" * 600, "ref": "r" * 1200, "status": "pending"}],
    "object-every-kind": [{"kind": k, "label": k} for k in ("text", "tool", "test", "file", "link", "pr", "commit")],
    "object-unknown-kind": [{"kind": "screenshot", "label": "x"}],
    "object-no-kind": [{"label": "no kind"}],
    "object-blank-label": [{"kind": "file", "label": "   "}],
    "object-non-string-label": [{"kind": "file", "label": 12}],
    "scalars-and-lists": [42, None, True, 1.5, ["nested"], {"nested": {"deep": 1}}],
    "more-than-50": [f"item {i}" for i in range(60)],
    "mixed": ["first", {"tool": "Bash", "stdout": "x"}, 7, {"kind": "pr", "label": "#3", "ref": "u"}],
    "already-normal": [{"kind": "text", "label": "fine"}, {"kind": "tool", "label": "Bash", "status": "error"}],
    "empty": [],
    "not-a-list-object": {"kind": "text", "label": "an object"},
    "not-a-list-string": "a string",
    "not-a-list-number": 7,
    "null": None,
    "not-json": NOT_JSON,
}

# Each value as an older version could have stored it in `runs.checkpoint`.
CHECKPOINT_FORMS = {
    "reference-camel-case": {"version": 1, "toolEvents": [{"name": "Grep", "status": "completed"}]},
    "no-version": {"tool_events": [{"name": "Edit", "status": "completed", "resource": "src/a.py"}]},
    "other-version": {"version": 2, "tool_events": [{"name": "Edit"}]},
    "extra-top-keys": {"version": 1, "tool_events": [], "cursor": 3, "startedAt": 1},
    "event-extra-keys": {"tool_events": [{"name": "Bash", "status": "completed", "input": "ls", "output": "a b"}]},
    "event-statuses": {"tool_events": [{"name": "a", "status": "running"}, {"name": "b", "status": "error"},
                                       {"name": "c", "status": "failed"}, {"name": "d"}]},
    "event-invalid": {"tool_events": [{"name": "  "}, {"status": "error"}, "Bash", 3, None, [], {"name": 9}]},
    "more-than-16": {"tool_events": [{"name": f"step {i}"} for i in range(20)]},
    "caps": {"tool_events": [{"name": "n" * 100, "resource": "p" * 300}]},
    "url-credentials-query-fragment": {"tool_events": [
        {"name": "Fetch", "resource": "https://user:secret@example.com/a/b?token=s#frag"}]},
    "url-port-and-case": {"tool_events": [{"name": "Fetch", "resource": "HTTP://Example.com:8080/Path"}]},
    "url-unparsable": {"tool_events": [{"name": "Fetch", "resource": "https://[::1/x"},
                                       {"name": "Fetch", "resource": "https:///no-host"}]},
    "resource-padded": {"tool_events": [{"name": "Read", "resource": "  /etc/hosts  "}]},
    "events-not-a-list": {"tool_events": {"name": "Bash"}},
    "empty-object": {},
    "already-normal": {"version": 1, "tool_events": [{"name": "Bash", "status": "error", "resource": "https://a.b/c"}]},
    "list": [{"name": "Bash"}],
    "string": "Bash",
    "number": 3,
    "null": None,
    "not-json": NOT_JSON,
}

SCHEMA4_DDL = """
CREATE TABLE work_items (
  id TEXT PRIMARY KEY, revision INTEGER NOT NULL DEFAULT 1, title TEXT NOT NULL, goal TEXT NOT NULL,
  acceptance_criteria TEXT NOT NULL, workflow_template TEXT NOT NULL, workflow_snapshot TEXT, status TEXT NOT NULL,
  current_action_id TEXT, current_run_id TEXT, work_dir TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE actions (
  id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL,
  required_role TEXT NOT NULL, stage_id TEXT, instruction TEXT NOT NULL, brief TEXT,
  context TEXT NOT NULL DEFAULT '[]', contract_revision INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 2, current_run_id TEXT,
  lease_epoch INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
  UNIQUE(work_item_id, sequence));
CREATE TABLE runs (
  id TEXT PRIMARY KEY, action_id TEXT NOT NULL, work_item_id TEXT NOT NULL, owner_boot_id TEXT NOT NULL,
  lease_epoch INTEGER NOT NULL, status TEXT NOT NULL, started_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  ended_at INTEGER, summary TEXT, evidence TEXT NOT NULL DEFAULT '[]', waiting_reason TEXT, error TEXT,
  review_decision TEXT, contract_patch TEXT, response TEXT NOT NULL DEFAULT '', checkpoint TEXT);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, work_item_id TEXT NOT NULL, action_id TEXT, run_id TEXT,
  type TEXT NOT NULL, data TEXT NOT NULL, created_at INTEGER NOT NULL);
"""

# The fewest columns the importer needs, plus the two JSON columns at issue: every other column of
# any schema takes its default.
SCHEMA_MINIMAL_DDL = """
CREATE TABLE work_items (id TEXT PRIMARY KEY, title TEXT NOT NULL, goal TEXT NOT NULL, status TEXT NOT NULL,
  created_at INTEGER NOT NULL);
CREATE TABLE actions (id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL,
  status TEXT NOT NULL, context TEXT, created_at INTEGER NOT NULL);
CREATE TABLE runs (id TEXT PRIMARY KEY, action_id TEXT NOT NULL, status TEXT NOT NULL, started_at INTEGER NOT NULL,
  evidence TEXT, checkpoint TEXT);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, work_item_id TEXT NOT NULL, type TEXT NOT NULL,
  created_at INTEGER NOT NULL);
"""

LEGACY_LAYOUTS = {"1": SCHEMA1_DDL, "2": SCHEMA_MINIMAL_DDL, "4": SCHEMA4_DDL, "11": SCHEMA11_DDL}


def _column_text(value) -> str:
    return value if value is NOT_JSON else json.dumps(value)


def make_legacy_db(path: Path, ddl: str, rows: dict[str, list[dict]], version: str) -> Path:
    """`make_db` keeping of each row only the columns that schema's tables have."""
    conn = sqlite3.connect(path)
    conn.executescript(ddl)
    columns = {t: {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')} for t in rows}
    conn.close()
    path.unlink()
    return make_db(path, ddl, {t: [{k: v for k, v in r.items() if k in columns[t]} for r in items]
                               for t, items in rows.items()}, version)


def raw_forms_rows(forms: dict[str, tuple], *, checkpoints: bool) -> dict[str, list[dict]]:
    """One legacy item per form: its triage completed with a run holding the raw evidence (and
    checkpoint), its implement action ready with a context entry carrying the raw evidence."""
    rows: dict[str, list[dict]] = {"work_items": [], "actions": [], "runs": [], "events": []}
    for n, (name, (evidence, checkpoint)) in enumerate(forms.items()):
        item, t = f"raw-{name}", T + 1000 * n
        rows["work_items"].append({"id": item, "title": name, "goal": "g", "acceptance_criteria": [],
                                   "workflow_template": "software-change",
                                   "status": "ready", "current_action_id": f"{item}-a2", "current_run_id": None,
                                   "work_dir": "", "created_at": t, "updated_at": t})
        rows["actions"] += [
            {"id": f"{item}-a1", "work_item_id": item, "sequence": 1, "type": "triage", "required_role": "omni",
             "instruction": "triage", "context": [], "status": "completed", "attempt": 1, "max_attempts": 2,
             "current_run_id": None, "lease_epoch": 1, "created_at": t, "updated_at": t},
            {"id": f"{item}-a2", "work_item_id": item, "sequence": 2, "type": "implement", "required_role": "linus",
             "instruction": "implement",
             "context": _column_text([{"type": "triage", "summary": "s", "evidence": evidence}])
             if evidence is not NOT_JSON else NOT_JSON,
             "status": "ready", "attempt": 0, "max_attempts": 2, "current_run_id": None, "lease_epoch": 0,
             "created_at": t + 1, "updated_at": t + 1},
        ]
        run = {"id": f"{item}-r1", "action_id": f"{item}-a1", "work_item_id": item, "owner_boot_id": "old",
               "lease_epoch": 1, "status": "failed", "started_at": t, "expires_at": t + 60_000, "ended_at": t + 1,
               "summary": "", "evidence": _column_text(evidence), "waiting_reason": None, "error": "x"}
        if checkpoints:
            run["checkpoint"] = None if checkpoint is None else _column_text(checkpoint)
        rows["runs"].append(run)
    return rows


def service_twin(store, evidence, checkpoint):
    """The same raw values submitted through the services (normalised on write)."""
    item = store.linear(title="twin")
    claim = store.claim_item(item.pk)
    store.submit(claim, {"outcome": "failed", "error": "x", "evidence": evidence, "checkpoint": checkpoint})
    return claim.run.pk


def rendered_runs(item_id: str) -> dict[str, dict]:
    from workcenter import render, selectors
    from workcenter.schemas_out import DetailView, WorkItemDetailOut

    body = render.render(WorkItemDetailOut, DetailView(selectors.work_item_detail(item_id)))
    return {r["id"]: r for r in body["runs"]}


def stored_json(model, pk: str, column: str):
    """The column's value as the table holds it, read past the model field."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f'SELECT "{column}" FROM {model._meta.db_table} WHERE "id" = %s', [pk])
        (value,) = cur.fetchone()
    return json.loads(value) if isinstance(value, str) else value


@pytest.mark.django_db
@pytest.mark.parametrize("version", list(LEGACY_LAYOUTS))
def test_every_raw_form_imports_and_reads_as_written_through_the_services(tmp_path, store, version):
    from workcenter.domain.normalize import normalize_checkpoint, normalize_evidence

    checkpoints = version != "1"  # schema 1 has no checkpoint column
    forms = {f"evidence-{k}": (v, None) for k, v in EVIDENCE_FORMS.items()}
    if checkpoints:
        forms.update({f"checkpoint-{k}": (["ok"], v) for k, v in CHECKPOINT_FORMS.items()})
    path = make_legacy_db(tmp_path / f"raw-forms-{version}.sqlite", LEGACY_LAYOUTS[version],
                          raw_forms_rows(forms, checkpoints=checkpoints), version=version)

    counts = import_reference_db(path)

    assert counts["runs"] == {"imported": len(forms), "skipped": 0}
    mismatches = {}
    for name, (evidence, checkpoint) in forms.items():
        item, run_id = f"raw-{name}", f"raw-{name}-r1"
        twin = service_twin(store, evidence, checkpoint)
        want = rendered_runs(Run.objects.get(pk=twin).work_item_id)[twin]
        got = rendered_runs(item)[run_id]
        expected = (normalize_evidence(evidence), normalize_checkpoint(checkpoint))
        # the answer equals the twin's, and the import stored the normal form (normalised on write)
        checks = {
            "api": (got["evidence"], got["checkpoint"]) == (want["evidence"], want["checkpoint"]) == expected,
            "orm": (Run.objects.get(pk=run_id).evidence, Run.objects.get(pk=run_id).checkpoint) == expected,
            "stored": (stored_json(Run, run_id, "evidence"), stored_json(Run, run_id, "checkpoint")) == expected,
            "context": [e.get("evidence") for e in Action.objects.get(pk=f"{item}-a2").context]
            == ([expected[0]] if evidence is not NOT_JSON else []),
        }
        if not all(checks.values()):
            mismatches[name] = {k: v for k, v in checks.items() if not v}
    assert mismatches == {}


@pytest.mark.django_db
def test_imported_raw_forms_leave_no_raw_field_in_any_read(tmp_path):
    forms = {"e": (EVIDENCE_FORMS["mixed"] + EVIDENCE_FORMS["object-extra-keys"],
                   CHECKPOINT_FORMS["url-credentials-query-fragment"])}
    path = make_legacy_db(tmp_path / "raw.sqlite", SCHEMA4_DDL, raw_forms_rows(forms, checkpoints=True), version="4")
    import_reference_db(path)
    run = rendered_runs("raw-e")["raw-e-r1"]
    assert run["evidence"] == [{"kind": "text", "label": "first"},
                               {"kind": "tool", "label": "Bash", "status": "completed"},
                               {"kind": "pr", "label": "#3", "ref": "u"},
                               {"kind": "test", "label": "pytest", "status": "passed"}]
    assert run["checkpoint"] == {"version": 1, "tool_events": [
        {"name": "Fetch", "status": "completed", "resource": "https://example.com/a/b"}]}
    text = json.dumps([run, list(Action.objects.filter(work_item_id="raw-e").values_list("context", flat=True))])
    for raw in ("stdout", "durationMs", "duration_ms", "secret", "token=", "frag", "nested"):
        assert raw not in text, raw
