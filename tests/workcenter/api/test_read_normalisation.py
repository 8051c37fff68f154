"""Normalisation on read (DOMAIN §12.4 evidence, §12.5 checkpoints): rows holding the raw forms of
older versions — imported from a reference database of any schema, or written by hand straight
into the tables — read exactly as the same item written through the services.

Each test builds an item through the API with raw evidence and checkpoints (the services
normalise them on write), keeps a copy of its rows with the *raw* values put back, and compares
the API's answers (detail, graph, claim, submit) for the copy with those for the original. The
copy's ids are the original's with a prefix, so the answers compare equal once the prefix is
removed (events get ids of their own and imported ones the actor `system`: both are left out).
"""
from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.db import connection

from workcenter import selectors
from workcenter.importer import import_reference_db
from workcenter.models import Action, Event, Run, WorkItem
from workcenter.domain.normalize import normalize_checkpoint, normalize_evidence

from ..test_importer import CHECKPOINT_FORMS, EVIDENCE_FORMS, NOT_JSON, SCHEMA1_DDL, SCHEMA4_DDL, SCHEMA11_DDL
from .conftest import fence

pytestmark = pytest.mark.django_db

PREFIX = "copy-"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# --- the raw forms ---------------------------------------------------------------------------

# Every element form of DOMAIN §12.4: bare strings, `{tool, is_error, stdout}` objects, objects
# with extra keys, unknown kinds, blanks, non-objects; labels and refs beyond their caps.
RAW_EVIDENCE = [
    "  ran the planner  ",
    "   ",
    {"tool": "Bash", "is_error": True, "stdout": "Traceback (most recent call last): ..."},
    {"tool": " Read ", "isError": False, "stdout": "file contents"},
    {"tool": "Grep", "stdout": "3 matches", "exit_code": 0},
    {"tool": "   ", "is_error": True},
    {"kind": "test", "label": "pytest -q", "status": "passed", "stdout": "12 passed", "duration_ms": 310},
    {"kind": "link", "label": " docs ", "ref": "  https://example.com/d  ", "status": "bogus"},
    {"kind": "commit", "label": "abc123", "ref": "   ", "author": "dana"},
    {"kind": "file", "label": "x" * 600, "ref": "r" * 1200},
    {"kind": "nope", "label": "unknown kind"},
    {"kind": "file", "label": "   "},
    {"label": "no kind"},
    42,
    None,
    ["nested"],
    True,
]
RAW_EVIDENCE_CANONICAL = [
    {"kind": "text", "label": "ran the planner"},
    {"kind": "tool", "label": "Bash", "status": "error"},
    {"kind": "tool", "label": "Read", "status": "completed"},
    {"kind": "tool", "label": "Grep", "status": "completed"},
    {"kind": "test", "label": "pytest -q", "status": "passed"},
    {"kind": "link", "label": "docs", "ref": "https://example.com/d"},
    {"kind": "commit", "label": "abc123"},
    {"kind": "file", "label": "x" * 500, "ref": "r" * 1000},
]

# Every event form of DOMAIN §12.5 in the reference's camelCase spelling, without `version`; 17
# valid events, of which the last 16 are kept.
RAW_CHECKPOINT = {
    "toolEvents": [
        {"name": " Bash ", "status": "running", "input": "ls -la", "output": "total 0"},
        {"name": "Fetch", "status": "error", "resource": "https://user:secret@example.com:8443/a/b?token=s#frag"},
        {"name": "", "status": "completed"},
        "not an event",
        {"name": "n" * 100, "resource": "  /etc/hosts  ", "durationMs": 12},
    ] + [{"name": f"Step {i}", "status": "completed" if i % 2 else "error"} for i in range(14)],
    "cursor": 41,
}
RAW_CHECKPOINT_CANONICAL = {
    "version": 1,
    "tool_events": [
        {"name": "Fetch", "status": "error", "resource": "https://example.com:8443/a/b"},
        {"name": "n" * 80, "status": "completed", "resource": "/etc/hosts"},
    ] + [{"name": f"Step {i}", "status": "completed" if i % 2 else "error"} for i in range(14)],
}

# The retried run: evidence that is not a list, a checkpoint with events but no version.
RAW_EVIDENCE_NOT_A_LIST = {"kind": "text", "label": "an object, not a list"}
RAW_CHECKPOINT_NO_VERSION = {"tool_events": [{"name": "Edit", "resource": "src/app.py", "diff": "@@ -1 +1 @@"}]}


def test_the_raw_forms_normalise_as_documented():
    assert normalize_evidence(RAW_EVIDENCE) == RAW_EVIDENCE_CANONICAL
    assert normalize_checkpoint(RAW_CHECKPOINT) == RAW_CHECKPOINT_CANONICAL
    assert normalize_evidence(RAW_EVIDENCE_NOT_A_LIST) == []
    assert normalize_checkpoint(RAW_CHECKPOINT_NO_VERSION) == {
        "version": 1, "tool_events": [{"name": "Edit", "status": "completed", "resource": "src/app.py"}]}


# --- building the item through the API --------------------------------------------------------

def build_linear(api, clock) -> dict:
    """A linear item whose triage completed with raw evidence and checkpoint, then whose implement
    run ended `retryable` with more raw forms; the implement action is ready again. Returns
    {item id, run ids by stage, the raw values put back into the copy}."""
    item = api.create(title="Read me", goal="Reads as fresh", acceptance_criteria=["works"],
                      work_item_type="software-change")
    assert item["execution_mode"] == "linear" and item["actions"][0]["type"] == "triage"
    clock.advance(1000)
    triage = api.claim()
    clock.advance(1000)
    r = api.post(f"/runs/{triage['run']['id']}/progress",
                 {**fence(triage), "response": "planning", "checkpoint": {"toolEvents": [{"name": "Early"}]}})
    assert r.status_code == 200, r.content
    clock.advance(1000)
    api.complete(triage, evidence=RAW_EVIDENCE, checkpoint=RAW_CHECKPOINT)
    clock.advance(1000)
    implement = api.claim()
    assert implement["action"]["type"] == "implement"
    clock.advance(1000)
    body = api.submit(implement, outcome="retryable", error="flaky", response="half way",
                      evidence=RAW_EVIDENCE_NOT_A_LIST, checkpoint=RAW_CHECKPOINT_NO_VERSION)
    assert body["run"]["status"] == "retryable" and body["action"]["status"] == "ready"
    clock.advance(1000)
    raw = {
        triage["run"]["id"]: {"evidence": RAW_EVIDENCE, "checkpoint": RAW_CHECKPOINT},
        implement["run"]["id"]: {"evidence": RAW_EVIDENCE_NOT_A_LIST, "checkpoint": RAW_CHECKPOINT_NO_VERSION},
        # the implement action's context carries the triage result, evidence included
        implement["action"]["id"]: {"context_evidence": RAW_EVIDENCE},
    }
    return {"item_id": item["id"], "raw": raw, "implement_action": implement["action"]["id"]}


def build_graph(api, clock) -> dict:
    """A planned graph item: triage, then `scan` completed with raw evidence and checkpoint;
    `write` (depends on scan) is ready and receives scan's result as a dependency."""
    item = api.create(title="Graph reads", goal="Reads as fresh", acceptance_criteria=[], work_item_type="analysis")
    clock.advance(1000)
    triage = api.claim()
    plan = {"work_item_type": "analysis", "actions": [
        {"id": "scan", "type": "research", "objective": "Scan the code", "depends_on_action_ids": []},
        {"id": "write", "type": "implement", "objective": "Write it", "depends_on_action_ids": ["scan"]},
    ]}
    clock.advance(1000)
    api.complete(triage, plan=plan, evidence=["planned"])
    clock.advance(1000)
    scan = api.claim()
    assert scan["action"]["stage_id"] == "scan"
    clock.advance(1000)
    api.complete(scan, evidence=RAW_EVIDENCE, checkpoint=RAW_CHECKPOINT)
    clock.advance(1000)
    raw = {scan["run"]["id"]: {"evidence": RAW_EVIDENCE, "checkpoint": RAW_CHECKPOINT}}
    return {"item_id": item["id"], "raw": raw}


# --- copies of an item's rows, with the raw values put back -----------------------------------

def item_rows(item_id: str) -> dict[str, list[dict]]:
    return {
        "work_items": list(WorkItem.objects.filter(pk=item_id).values()),
        "actions": list(Action.objects.filter(work_item_id=item_id).order_by("sequence").values()),
        "runs": list(Run.objects.filter(work_item_id=item_id).order_by("started_at").values()),
        "events": list(Event.objects.filter(work_item_id=item_id).order_by("id").values()),
    }


def _p(value):
    return None if value is None else PREFIX + value


def copied_rows(rows: dict[str, list[dict]], raw: dict) -> dict[str, list[dict]]:
    """The rows with every id prefixed and the raw evidence, checkpoints and context evidence."""
    out = {"work_items": [], "actions": [], "runs": [], "events": []}
    for r in rows["work_items"]:
        out["work_items"].append({**r, "id": _p(r["id"]), "current_action_id": _p(r["current_action_id"]),
                                  "current_run_id": _p(r["current_run_id"])})
    for r in rows["actions"]:
        row = {**r, "id": _p(r["id"]), "work_item_id": _p(r["work_item_id"]),
               "current_run_id": _p(r["current_run_id"])}
        if r["id"] in raw and "context_evidence" in raw[r["id"]]:
            row["context"] = [{**e, "evidence": raw[r["id"]]["context_evidence"]} if e.get("evidence") else e
                              for e in r["context"]]
            assert row["context"] != r["context"]
        out["actions"].append(row)
    for r in rows["runs"]:
        row = {**r, "id": _p(r["id"]), "action_id": _p(r["action_id"]), "work_item_id": _p(r["work_item_id"])}
        row.update(raw.get(r["id"], {}))
        out["runs"].append(row)
    for r in rows["events"]:
        out["events"].append({**r, "work_item_id": _p(r["work_item_id"]), "action_id": _p(r["action_id"]),
                              "run_id": _p(r["run_id"])})
    return out


JSON_COLUMNS = {"runs": ("evidence", "checkpoint"), "actions": ("context",)}


def write_raw_into_tables(rows: dict[str, list[dict]]) -> None:
    """Insert the copied rows, then overwrite their JSON columns with the raw text by SQL: rows as
    an older version (or a person) left them, which no service has normalised."""
    WorkItem.objects.bulk_create([WorkItem(**r) for r in rows["work_items"]])
    Action.objects.bulk_create([Action(**r) for r in rows["actions"]])
    Run.objects.bulk_create([Run(**r) for r in rows["runs"]])
    Event.objects.bulk_create([Event(**{k: v for k, v in r.items() if k != "id"}) for r in rows["events"]])
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cur:
        for table, model in (("runs", Run), ("actions", Action)):
            for r in rows[table]:
                for column in JSON_COLUMNS[table]:
                    cur.execute(f'UPDATE {model._meta.db_table} SET "{column}" = %s{cast} WHERE "id" = %s',
                                [json.dumps(r[column]), r["id"]])
    # the raw text really is what the tables hold now
    with connection.cursor() as cur:
        cur.execute(f'SELECT "evidence" FROM {Run._meta.db_table} WHERE "id" LIKE %s', [PREFIX + "%"])
        stored = [json.loads(v) if isinstance(v, str) else v for (v,) in cur.fetchall()]
    assert any(s in (RAW_EVIDENCE, RAW_EVIDENCE_NOT_A_LIST) for s in stored)


def _ms(value: datetime) -> int:
    return (value - EPOCH) // timedelta(milliseconds=1)


def write_legacy_file(path: Path, ddl: str, rows: dict[str, list[dict]], version: str) -> Path:
    """The copied rows as a reference database of that schema: only the columns its tables have,
    JSON as text, timestamps as integer milliseconds."""
    conn = sqlite3.connect(path)
    conn.executescript(ddl)
    conn.execute("CREATE TABLE schema_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO schema_meta VALUES ('schema_version', ?)", (version,))
    for table, items in rows.items():
        columns = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
        for row in items:
            values = {}
            for k, v in row.items():
                if k not in columns:
                    continue
                if isinstance(v, datetime):
                    v = _ms(v)
                elif isinstance(v, bool):
                    v = int(v)
                elif isinstance(v, (dict, list)) or (k in ("evidence", "checkpoint", "context") and v is not None):
                    v = json.dumps(v)
                values[k] = v
            marks = ", ".join("?" for _ in values)
            conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", list(values.values()))
    conn.commit()
    conn.close()
    return path


LAYOUTS = {  # how the copy gets into this database: (reference schema DDL, version) or by hand
    "written-raw": None,
    "schema-11": (SCHEMA11_DDL, "11"),
    "schema-4": (SCHEMA4_DDL, "4"),
    "schema-1": (SCHEMA1_DDL, "1"),
}


def place_copy(layout: str, rows: dict, tmp_path: Path) -> None:
    if LAYOUTS[layout] is None:
        write_raw_into_tables(rows)
        return
    ddl, version = LAYOUTS[layout]
    path = write_legacy_file(tmp_path / f"{layout}.sqlite", ddl, rows, version)
    counts = import_reference_db(path)
    assert counts["runs"]["imported"] == len(rows["runs"])


# --- comparing answers --------------------------------------------------------------------------

def masked(body, *, replace=(), full=True):
    """`body` with the copy's ids mapped back to the original's; events without `id` and `actor`
    (a copy's events have ids of their own, imported ones the actor `system`) and no
    `last_event_id`. With `full=False` (an older schema lacks columns, so the item differs in
    what they would hold) only what normalisation decides is kept: runs' evidence and checkpoint,
    actions' context and the dependencies' evidence, by id."""
    text = json.dumps(body, sort_keys=True)
    for old, new in replace:
        text = text.replace(old, new)
    data = json.loads(text.replace(PREFIX, ""))
    if full:
        return _strip_events(data)
    return _normalised_parts(data)


def _strip_events(value):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "last_event_id":
                continue
            if k == "events" and isinstance(v, list):
                out[k] = [{f: x for f, x in e.items() if f not in ("id", "actor")} for e in v]
            else:
                out[k] = _strip_events(v)
        return out
    if isinstance(value, list):
        return [_strip_events(v) for v in value]
    return value


def _normalised_parts(value) -> dict:
    parts: dict = {}

    def walk(v):
        if isinstance(v, dict):
            if "owner_boot_id" in v and "evidence" in v:  # a run
                parts[("run", v["id"])] = (v["evidence"], v.get("checkpoint"))
            elif "context" in v and "sequence" in v:  # an action
                parts[("action", v["id"])] = v["context"]
            elif "vp_id" in v and "action_id" in v and "evidence" in v:  # a dependency
                parts[("dependency", v["action_id"])] = v["evidence"]
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return parts


def new_action_ids(copy_detail: dict, fresh_detail: dict) -> list[tuple[str, str]]:
    """(copy id, original id) of the actions a submit created, matched by sequence."""
    fresh = {a["sequence"]: a["id"] for a in fresh_detail["actions"]}
    return [(a["id"], fresh[a["sequence"]]) for a in copy_detail["actions"] if not a["id"].startswith(PREFIX)]


def assert_no_raw_fields(body) -> None:
    text = json.dumps(body)
    for raw in ("stdout", "is_error", "isError", "toolEvents", "secret", "token=s", "durationMs", "exit_code"):
        assert raw not in text, raw


# --- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_linear_item_from_raw_rows_reads_as_written_through_the_services(api, frozen_clock, tmp_path, layout):
    built = build_linear(api, frozen_clock)
    item_id = built["item_id"]
    rows = copied_rows(item_rows(item_id), built["raw"])
    full = layout in ("written-raw", "schema-11")
    fresh_detail = api.get(f"/work-items/{item_id}").json()
    fresh_graph = api.get(f"/work-items/{item_id}/graph").json()
    assert [r["evidence"] for r in fresh_detail["runs"]] == [[], RAW_EVIDENCE_CANONICAL]
    assert fresh_detail["runs"][1]["checkpoint"] == RAW_CHECKPOINT_CANONICAL
    fresh_claim = api.claim()
    assert fresh_claim["work_item"]["id"] == item_id

    place_copy(layout, rows, tmp_path)

    copy_id = PREFIX + item_id
    detail = api.get(f"/work-items/{copy_id}")
    assert detail.status_code == 200, detail.content
    detail = detail.json()
    assert_no_raw_fields(detail)
    ignore = {"written-raw": (), "schema-1": ("acceptance_checks", "checkpoint")}.get(
        layout, ("acceptance_checks",))  # columns the reference layout does not have
    assert masked(drop(detail, ignore), full=full) == masked(drop(fresh_detail, ignore), full=full)
    graph = api.get(f"/work-items/{copy_id}/graph").json()
    assert masked(graph, full=full) == masked(fresh_graph, full=full)

    # the same claim, at the same moment, of the copy's implement action
    claim = api.claim()
    assert claim is not None and claim["work_item"]["id"] == copy_id
    assert_no_raw_fields(claim)
    mapping = [(claim["run"]["id"], fresh_claim["run"]["id"])]
    assert (masked(drop(claim, ignore), replace=mapping, full=full)
            == masked(drop(fresh_claim, ignore), replace=mapping, full=full))
    assert claim["action"]["context"][-1]["evidence"] == RAW_EVIDENCE_CANONICAL

    # the retried run's resume data (DOMAIN §9.3) reads the copy's checkpoint as the original's
    if "checkpoint" not in ignore:
        assert (selectors.action_resume_context(PREFIX + built["implement_action"], claim["run"]["id"])
                == selectors.action_resume_context(built["implement_action"], fresh_claim["run"]["id"]))
        resume = selectors.action_resume_context(PREFIX + built["implement_action"], claim["run"]["id"])
        assert resume["checkpoint"]["tool_events"] == [
            {"name": "Edit", "status": "completed", "resource": "src/app.py"}]

    # submits of both: the answers carry every other run, read normalised
    result = {"outcome": "completed", "summary": "implemented", "evidence": ["  done  "],
              "acceptance_checks": [{"criterion": "works", "status": "passed", "evidence": "ran it"}]}
    fresh_submit = api.submit(fresh_claim, **result)
    submit = api.submit(claim, **result)
    assert_no_raw_fields(submit)
    mapping += new_action_ids(submit["work_item"], fresh_submit["work_item"])
    assert (masked(drop(submit, ignore), replace=mapping, full=full)
            == masked(drop(fresh_submit, ignore), replace=mapping, full=full))


@pytest.mark.parametrize("layout", ["written-raw", "schema-11"])
def test_graph_item_from_raw_rows_reads_as_written_through_the_services(api, frozen_clock, tmp_path, layout):
    built = build_graph(api, frozen_clock)
    item_id = built["item_id"]
    rows = copied_rows(item_rows(item_id), built["raw"])
    fresh_detail = api.get(f"/work-items/{item_id}").json()
    fresh_graph = api.get(f"/work-items/{item_id}/graph").json()
    fresh_claim = api.claim()
    assert fresh_claim["action"]["stage_id"] == "write"
    assert fresh_claim["dependencies"][0]["evidence"] == RAW_EVIDENCE_CANONICAL

    place_copy(layout, rows, tmp_path)

    copy_id = PREFIX + item_id
    ignore = () if layout == "written-raw" else ("acceptance_checks",)
    detail = api.get(f"/work-items/{copy_id}").json()
    assert_no_raw_fields(detail)
    assert masked(drop(detail, ignore)) == masked(drop(fresh_detail, ignore))
    assert masked(api.get(f"/work-items/{copy_id}/graph").json()) == masked(fresh_graph)
    claim = api.claim()
    assert claim is not None and claim["work_item"]["id"] == copy_id
    assert_no_raw_fields(claim)
    mapping = [(claim["run"]["id"], fresh_claim["run"]["id"])]
    assert masked(drop(claim, ignore), replace=mapping) == masked(drop(fresh_claim, ignore), replace=mapping)


def test_progress_answer_reads_the_stored_evidence_normalised(api, frozen_clock):
    """A running run left with raw evidence by an older version: the progress answer (its run)
    shows it normalised."""
    built = build_linear(api, frozen_clock)
    claim = api.claim()
    assert claim["work_item"]["id"] == built["item_id"]
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cur:
        cur.execute(f'UPDATE {Run._meta.db_table} SET "evidence" = %s{cast} WHERE "id" = %s',
                    [json.dumps(RAW_EVIDENCE), claim["run"]["id"]])
    r = api.post(f"/runs/{claim['run']['id']}/progress", {**fence(claim), "response": "still going"})
    assert r.status_code == 200, r.content
    assert r.json()["run"]["evidence"] == RAW_EVIDENCE_CANONICAL
    assert api.get(f"/work-items/{built['item_id']}").json()["runs"][0]["evidence"] == RAW_EVIDENCE_CANONICAL


def drop(body, fields):
    """`body` without the keys `fields`, at any depth."""
    if not fields:
        return body
    if isinstance(body, dict):
        return {k: drop(v, fields) for k, v in body.items() if k not in fields}
    if isinstance(body, list):
        return [drop(v, fields) for v in body]
    return body


# --- each raw form written straight into the tables ---------------------------------------------

def _write_column(model, pk: str, column: str, text) -> None:
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cur:
        cur.execute(f'UPDATE {model._meta.db_table} SET "{column}" = %s{cast} WHERE "id" = %s', [text, pk])


def _json_text(value):
    return None if value is None else json.dumps(value)


# (text that is not JSON cannot be in these tables: SQLite checks JSON_VALID, PostgreSQL's jsonb parses)
@pytest.mark.parametrize("form", [f for f in EVIDENCE_FORMS if EVIDENCE_FORMS[f] is not NOT_JSON])
def test_raw_evidence_written_into_the_table_reads_normalised(api, form):
    raw = EVIDENCE_FORMS[form]
    item = api.create(title="raw evidence", goal="g", work_item_type="software-change")
    claim = api.claim()
    twin = api.submit(claim, outcome="failed", error="x", evidence=raw)["run"]
    assert twin["evidence"] == normalize_evidence(raw)
    # when the stored value is put back raw (the text as an older version wrote it)
    _write_column(Run, twin["id"], "evidence", json.dumps(raw))
    _write_column(Action, item["actions"][0]["id"], "context", json.dumps([{"type": "triage", "summary": "s",
                                                                            "evidence": raw}]))
    # then every read shows the normal form, as the services wrote it
    detail = api.get(f"/work-items/{item['id']}").json()
    [run] = detail["runs"]
    assert run == twin
    assert Run.objects.get(pk=twin["id"]).evidence == normalize_evidence(raw)
    assert [e["evidence"] for e in detail["actions"][0]["context"]] == [normalize_evidence(raw)]


@pytest.mark.parametrize("form", [f for f in CHECKPOINT_FORMS if CHECKPOINT_FORMS[f] is not NOT_JSON])
def test_raw_checkpoint_written_into_the_table_reads_normalised(api, form):
    raw = CHECKPOINT_FORMS[form]
    api.create(title="raw checkpoint", goal="g", work_item_type="software-change")
    claim = api.claim()
    twin = api.submit(claim, outcome="failed", error="x", evidence=["e"], checkpoint=raw)["run"]
    assert twin["checkpoint"] == normalize_checkpoint(raw)
    _write_column(Run, twin["id"], "checkpoint", _json_text(raw))
    [run] = api.get(f"/work-items/{claim['work_item']['id']}").json()["runs"]
    assert run == twin
    assert Run.objects.get(pk=twin["id"]).checkpoint == normalize_checkpoint(raw)
    assert Run.objects.filter(pk=twin["id"]).values_list("checkpoint", flat=True).get() == normalize_checkpoint(raw)


def test_admin_pages_show_stored_raw_forms_normalised(api, client, django_user_model):
    api.create(title="admin view", goal="g", work_item_type="software-change")
    triage = api.claim()
    api.complete(triage, evidence=["ok"])
    run_id, action_id = triage["run"]["id"], api.claim()["action"]["id"]
    _write_column(Run, run_id, "evidence", json.dumps(RAW_EVIDENCE))
    _write_column(Run, run_id, "checkpoint", json.dumps(RAW_CHECKPOINT))
    _write_column(Action, action_id, "context",
                  json.dumps([{"type": "triage", "summary": "s", "evidence": RAW_EVIDENCE}]))
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    for url in (f"/admin/workcenter/run/{run_id}/change/", f"/admin/workcenter/action/{action_id}/change/"):
        page = client.get(url)
        assert page.status_code == 200
        text = page.content.decode()
        assert "ran the planner" in text
        for raw in ("stdout", "Traceback", "secret", "token=s", "durationMs"):
            assert raw not in text, (url, raw)
