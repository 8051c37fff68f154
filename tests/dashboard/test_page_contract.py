"""The dashboard's scripts against the Python they mirror: every event payload key the page reads
exists in the event catalogue (workcenter.event_types), every event type it names is one, and
its lists of workspace modes, statuses and contract fields are the models' own.

The scripts are read as text: a read of `ev.data.x` (or of an alias `const d = ev.data || {}`,
or a destructuring of `ev.data`) names a key `x` that some payload schema must declare; a page
that reads a key no event carries draws a decoration that never shows.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from workcenter.event_types import EventType, RevisionChange, payload_fields
from workcenter.models import (
    ActionStatus, RunStatus, TERMINAL_ITEM_STATUSES, WorkItemStatus, WorkspaceMode,
)

STATIC = Path(__file__).resolve().parents[2] / "static" / "dashboard"
SCRIPTS = sorted(STATIC.glob("*.js"))

# the names the page gives an event object (`ev`, `e` in callbacks, `event`, `msg.event`)
EVENT = r"\b(?:ev|e|evt|event)"
DIRECT = re.compile(EVENT + r"\.data\??\.([A-Za-z_$][\w$]*)")
BRACKET = re.compile(EVENT + r"\.data\??\.?\[\s*[\"']([\w$]+)[\"']\s*\]")
ALIAS = re.compile(r"\b(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*\(?\s*" + EVENT + r"\.data\b")
DESTRUCTURE = re.compile(r"\b(?:const|let|var)\s*\{([^}]*)\}\s*=\s*\(?\s*" + EVENT + r"\.data\b")
TYPE_LITERAL = re.compile(r"[\"'`]((?:work_item|workflow|action|run|review)\.[a-z_]+)[\"'`]")


def event_data_reads(source: str) -> set[str]:
    """The payload keys a script reads from event objects."""
    keys = set(DIRECT.findall(source)) | set(BRACKET.findall(source))
    for m in DESTRUCTURE.finditer(source):
        for part in m.group(1).split(","):
            name = part.split("=")[0].split(":")[0].strip()
            if name and not name.startswith("..."):
                keys.add(name)
    for m in ALIAS.finditer(source):
        # the alias lives until the end of the enclosing top-level function (a line opening with `}`)
        end = re.compile(r"^}", re.M).search(source, m.end())
        scope = source[m.end():end.start() if end else len(source)]
        keys |= set(re.findall(r"(?<![\w$.])" + re.escape(m.group(1)) + r"\??\.([A-Za-z_$][\w$]*)", scope))
    return keys


def js_collection(source: str, name: str) -> list[str]:
    """The string members of `const NAME = [...]`, `new Set([...])` or the keys of `{...}`."""
    m = re.search(r"\bconst\s+" + name + r"\s*=\s*(new Set\(\s*\[|\[|\{)", source)
    assert m, f"{name} is not declared"
    close = {"[": "]", "{": "}"}[m.group(1)[-1]]
    body = source[m.end():source.index(close, m.end())]
    if close == "]":
        return re.findall(r"[\"']([^\"']+)[\"']", body)
    return [a or b for a, b in re.findall(r"(?:[\"']([^\"']+)[\"']|([A-Za-z_$][\w$]*))\s*:", body)]


def read(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


# --- event payloads and types ---------------------------------------------------------------------

def test_every_event_payload_key_the_page_reads_is_in_a_schema():
    reads = {path.name: event_data_reads(path.read_text(encoding="utf-8")) for path in SCRIPTS}
    known = payload_fields()
    unknown = {f"{name}: data.{key}" for name, keys in reads.items() for key in keys if key not in known}
    assert unknown == set(), "the page reads payload keys no event carries"
    # the scan sees the reads the page is known to make (an empty scan would pass anything)
    every = set().union(*reads.values())
    assert {"owner_boot_id", "lease_epoch", "target_stage_id", "guidance", "review_decision",
            "next_action_type", "retryable", "error", "reason"} <= every


def test_every_event_type_the_page_names_is_in_the_catalogue():
    named = {(path.name, t) for path in SCRIPTS for t in TYPE_LITERAL.findall(path.read_text(encoding="utf-8"))}
    assert len(named) >= 10
    assert {f"{name}: {t}" for name, t in named if t not in set(EventType)} == set()


@pytest.mark.parametrize("snippet,key", [
    # the changes-request arrow once read a key no event has carried
    ('const decision = ev.data && ev.data.review_decision === "changes_requested" && ev.data.next_stage_id', "next_stage_id"),
    ("function f(ev) {\n  const d = ev.data || {};\n  return d.next_stage;\n}\n", "next_stage"),
    ("const { summary, stage_hint: hint = '' } = ev.data;", "stage_hint"),
    ('const x = msg.event.data["worker_host"];', "worker_host"),
    ("events.filter((e) => e.data?.review_state);", "review_state"),
])
def test_the_scan_catches_a_read_of_a_key_no_schema_has(snippet, key):
    reads = event_data_reads(snippet)
    assert key in reads and key not in payload_fields()


def test_an_alias_is_scoped_to_its_function():
    source = "function a(ev) {\n  const d = ev.data || {};\n  return d.reason;\n}\nfunction b(n) {\n  const d = n.node;\n  return d.sequence;\n}\n"
    assert event_data_reads(source) == {"reason"}


# --- mirrors of the models' enums -----------------------------------------------------------------

def test_mode_marks_are_the_workspace_modes():
    assert set(js_collection(read("graph.js"), "MODE_MARK")) == set(WorkspaceMode.values)
    styled = set(re.findall(r"\.mode\[data-mode=\"([^\"]+)\"\]", read("graph.css")))
    assert styled and styled <= set(WorkspaceMode.values)


# a state the page draws beside the store's statuses: a review stage whose newest run's decision
# was to request changes (DOMAIN §8), drawn in its own colour instead of a green "completed"
PAGE_STATES = {"changes_requested"}


def test_status_words_and_icons_cover_every_status():
    every = set(WorkItemStatus.values) | set(ActionStatus.values) | set(RunStatus.values) | PAGE_STATES
    common = read("common.js")
    assert set(js_collection(common, "STATUS_LABEL")) == every
    assert set(js_collection(common, "STATUS_ICON")) == every
    css = "".join(p.read_text(encoding="utf-8") for p in STATIC.glob("*.css"))
    styled = set(re.findall(r"data-status=\"([^\"]+)\"", css))
    assert styled and styled <= every


def test_status_lists_are_the_models_statuses():
    items = WorkItemStatus
    assert js_collection(read("list.js"), "STATUSES") == list(items.values)  # the filter chips, in order
    needs_person = {items.WAITING, items.NEEDS_ATTENTION}
    assert set(js_collection(read("list.js"), "NEEDS_ME")) == needs_person
    assert set(js_collection(read("item-needs.js"), "NEEDS")) == needs_person
    assert set(js_collection(read("item-dialogs.js"), "RETRYABLE")) == needs_person
    assert set(js_collection(read("item-core.js"), "TERMINAL")) == set(TERMINAL_ITEM_STATUSES)
    assert set(js_collection(read("list.js"), "PROGRESS_ORDER")) <= set(ActionStatus.values)
    assert set(js_collection(read("graph.js"), "HIGHLIGHT")) <= set(ActionStatus.values)


def test_contract_fields_the_edit_dialog_offers_are_the_ones_an_update_reports():
    source = read("item-dialogs.js")
    m = re.search(r"\bconst\s+EDIT_FIELDS\s*=\s*\[(.*?)\n\];", source, re.S)
    assert m, "EDIT_FIELDS is not declared"
    offered = re.findall(r"^\s*\[\s*\"([a-z_]+)\"", m.group(1), re.M)
    (field_type,) = get_args(RevisionChange.model_fields["changed_fields"].annotation)
    assert offered and set(offered) == set(get_args(field_type))
