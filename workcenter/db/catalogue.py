"""The named-statement catalogue: every fixed SQL statement of the store, by name.

The statements live in `workcenter/queries.sql`, each with one header line saying what it does
and what it locks (see the file's preamble for the format); `sql(name)` gives a statement's text
for the connection's database, its markers expanded once. The guarded updates are not written
there: `writes.py` builds each from the values it sets and a named guard of `guards.py`.
"""
from __future__ import annotations

import re
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from ..constants import COUNTER_FIELDS
from ..models import Action, ApiToken, Event, Run, RunLogChunk, Webhook, WebhookDelivery, WorkItem
from .rows import row_specs

QUERIES_FILE = Path(__file__).resolve().parent.parent / "queries.sql"
VENDORS = ("postgresql", "sqlite")
# fields an insert writes: every concrete field but the ones the statement computes
INSERT_FIELDS = {
    "Event": [f for f in Event._meta.concrete_fields if f.attname != "id"],
    "Run": [f for f in Run._meta.concrete_fields if f.attname != "progress_revision"],
}
_PG_CASTS = {"JSONField": "::jsonb", "DateTimeField": "::timestamptz"}
_MARKER = re.compile(r"\{(table|col|cols|insert_cols|insert_params|typed_params):([A-Za-z_.]+)\}|\{counter_sums\}")


class Statement:
    """One named statement: its header and its text per database vendor (as written)."""

    __slots__ = ("name", "header", "text")

    def __init__(self, name: str, header: str, text: dict[str, str]):
        self.name, self.header, self.text = name, header, text


def parse_queries(source: str) -> dict[str, Statement]:
    """The statements of a catalogue file (see its preamble for the format)."""
    out: dict[str, Statement] = {}
    name = None
    for block in re.split(r"(?m)^-- name: ", source)[1:]:
        lines = block.rstrip().split("\n")
        name, header, body = lines[0].strip(), [], {}
        vendor, rest = None, lines[1:]
        while rest and rest[0].startswith("-- ") and rest[0][3:].rstrip(":") not in VENDORS:
            header.append(rest.pop(0)[3:].strip())
        parts: dict = {None: []}
        for line in rest:
            tag = line[3:].strip().rstrip(":") if line.startswith("-- ") else None
            if tag in VENDORS:
                vendor = tag
                parts[vendor] = []
            else:
                parts[vendor].append(line)
        for v in VENDORS:
            text = "\n".join(parts.get(v) or parts[None]).strip()
            body[v] = text
        if name in out:
            raise ValueError(f"statement {name!r} is named twice in {QUERIES_FILE.name}")
        out[name] = Statement(name, " ".join(header), body)
    return out


def _models() -> dict:
    User = get_user_model()
    return {
        "WorkItem": WorkItem, "Action": Action, "Run": Run, "Event": Event, "ApiToken": ApiToken, "User": User,
        "Webhook": Webhook, "WebhookDelivery": WebhookDelivery, "RunLogChunk": RunLogChunk,
        "Permission": Permission, "ContentType": ContentType,
        "UserPermissions": User._meta.get_field("user_permissions").remote_field.through,
        "UserGroups": User._meta.get_field("groups").remote_field.through,
        "GroupPermissions": Group._meta.get_field("permissions").remote_field.through,
    }


def expand(text: str, vendor: str, quote) -> str:
    """A statement's text with its load-time markers replaced for one database."""
    models_, specs = _models(), row_specs()

    def repl(m):
        kind, arg = m.group(1), m.group(2)
        if kind is None:  # {counter_sums}
            return ", ".join(f"SUM({quote(f)})" for f in COUNTER_FIELDS)
        if kind == "table":
            return quote(models_[arg]._meta.db_table)
        if kind == "col":
            model, field = arg.split(".")
            meta = models_[model]._meta
            return quote((meta.pk if field == "pk" else meta.get_field(field)).column)
        if kind == "cols":
            spec = specs[arg]
            return ", ".join(f"{spec.alias}.{quote(f.column)}" for f in spec.fields)
        fields = INSERT_FIELDS[arg]
        if kind == "insert_cols":
            return ", ".join(quote(f.column) for f in fields)
        if kind == "insert_params":
            return ", ".join(["%s"] * len(fields))
        return ", ".join("%s" + _PG_CASTS.get(f.get_internal_type(), "") for f in fields)  # typed_params
    return _MARKER.sub(repl, text)


_CATALOGUE: dict[str, Statement] = {}
_EXPANDED: dict = {}


def catalogue() -> dict[str, Statement]:
    if not _CATALOGUE:
        _CATALOGUE.update(parse_queries(QUERIES_FILE.read_text(encoding="utf-8")))
    return _CATALOGUE


def sql(name: str, conn=None, *, ids: int | None = None, values: int | None = None) -> str:
    """The text of statement `name` for `conn`'s database (default: the default connection).

    `ids` / `values`: how many elements the run-time list markers `{ids}` / `{values}` stand for
    (one `%s`, or one `(%s, %s)` pair, each)."""
    vendor = (conn or connection).vendor
    key = (vendor, name, ids, values)
    text = _EXPANDED.get(key)
    if text is None:
        base = _EXPANDED.get((vendor, name, None, None))
        if base is None:
            quote = (conn or connection).ops.quote_name
            base = _EXPANDED[(vendor, name, None, None)] = expand(catalogue()[name].text[vendor], vendor, quote)
        text = base
        if ids is not None:
            text = text.replace("{ids}", ", ".join(["%s"] * ids))
        if values is not None:
            text = text.replace("{values}", ", ".join(["(%s, %s)"] * values))
        _EXPANDED[key] = text
    return text

