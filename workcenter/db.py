"""The database toolkit under the services: the named-statement catalogue and the hot path.

Every fixed SQL statement lives in `queries.sql` beside this module, by name, with one header
line saying what it does and what it locks; `sql(name)` gives its text for the connection's
database, expanded once. Nothing above this module formats SQL: the statements built here from
their parts (`update_sql`, the `Writes` batch, the `{ids}`/`{values}` lists) are the toolkit's.

The hot path (claim → submit, the API's reads) runs these statements instead of the ORM, which
compiles every query anew (≈0.4 ms each on a 2-core machine, 30× the statement itself). Values
pass through the fields' own adapters (`get_db_prep_save`) and rows through the converters the
ORM applies, so what is read and written is exactly what the ORM would read and write.
This module sits directly above the models (it reads their fields) and below everything else.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Iterable

import orjson
import psycopg
from psycopg.types.datetime import TimestamptzLoader

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.utils import CursorWrapper
from django.db.models.base import ModelState

from .constants import COUNTER_FIELDS
from .errors import FenceLost
from .models import Action, ApiToken, Event, Run, WorkItem


def is_postgres(conn=None) -> bool:
    return (conn or connection).vendor == "postgresql"


def lock_key(text: str) -> int:
    """A signed 64-bit advisory-lock key for a text (PostgreSQL)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


# --- the hot path's cursor and rows ------------------------------------------------------------

def qn(name: str) -> str:
    return connection.ops.quote_name(name)


def hot_cursor(conn=None):
    """The cursor of the hot path. On PostgreSQL it binds parameters server-side, so psycopg
    prepares each fixed statement after a few executions on a connection: parsed and planned
    once instead of per call (the ORM's default cursor interpolates parameters client-side).

    `conn`: the connection wrapper (`connections[DEFAULT_DB_ALIAS]`) if the caller resolved it;
    each attribute read through the `connection` proxy costs a thread-local lookup. The cursor's
    `db` is that wrapper, so code holding the cursor needs no proxy at all.
    """
    if conn is None:
        conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor != "postgresql":
        return conn.cursor()
    conn.close_if_health_check_failed()  # what connection.cursor() does first
    conn.ensure_connection()
    return conn._prepare_cursor(_new_hot_cursor(conn))


def _new_hot_cursor(conn) -> HotCursor:
    cur = HotCursor(conn.connection)
    if conn.timezone is _UTC and conn.timezone_name == "UTC":
        # psycopg's own timestamptz loader (its C version with psycopg[binary]) in place of
        # Django's, a Python subclass that parses in Python and then replaces the tzinfo: on a
        # session whose TimeZone Django set to UTC both give aware values in datetime.timezone.utc,
        # 0.5 µs a value instead of 3.7 µs (a six-action item's detail reads about forty).
        # Only this cursor: the ORM's cursors check that the connection's loader is Django's.
        cur.adapters.register_loader(TIMESTAMPTZ_OID, TimestamptzLoader)
    return cur


_UTC = datetime.timezone.utc
TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid


_DOLLAR: dict[str, str] = {}
_PLACEHOLDER = re.compile(r"%[s%]|%")


def _dollar_query(query: str) -> str:
    """`%s` placeholders as PostgreSQL's `$1, $2, …` (`%%` as `%`); any other `%` is refused."""
    n = 0

    def repl(m):
        nonlocal n
        if m.group(0) == "%%":
            return "%"
        if m.group(0) == "%s":
            n += 1
            return f"${n}"
        raise ValueError(f"unsupported placeholder in hot statement: {query[:80]!r}")
    return _PLACEHOLDER.sub(repl, query)


class HotCursor(psycopg.RawCursor):
    """psycopg's RawCursor (native `$n` placeholders: no client-side parsing of the query) that
    accepts the `%s` statements of the hot path, converted once per statement text. psycopg's
    own %s cursor re-parses statements longer than 4,096 characters or with more than 50
    parameters on every call (it caches only smaller ones) — the claim and submit batches and
    the full-row reads are all of that size."""

    def execute(self, query, params=None, **kwargs):
        q = _DOLLAR.get(query)
        if q is None:
            q = _DOLLAR[query] = _dollar_query(query)
        return super().execute(q, params, **kwargs)


_QMARK: dict[str, str] = {}


def hot_execute(cur, sql: str, params=None):
    """`cur.execute(sql, params)` for the fixed statements of the hot path (positional `%s`).

    On SQLite, when nothing observes the statements (no debug cursor logging queries, no
    execute wrappers), the statement goes to the sqlite3 cursor with its placeholders converted
    once per statement text instead of by a regex per call. Everything else `CursorWrapper`
    does is kept: the broken-transaction check and the mapping of database errors to Django's.
    """
    conn = cur.db
    if type(cur) is not CursorWrapper or conn.vendor != "sqlite" or conn.execute_wrappers or params is None:
        return cur.execute(sql, params)
    raw = cur.cursor
    q = _QMARK.get(sql)
    if q is None:
        q = _QMARK[sql] = raw.convert_query(sql)
    conn.validate_no_broken_transaction()
    with conn.wrap_database_errors:
        return _sqlite_execute(raw, q, params)


_sqlite_execute = sqlite3.Cursor.execute


def read_all(statements: list[tuple[str, list]], conn=None) -> list[list[tuple]]:
    """The rows of several independent reads (statement name, parameters), in order.

    On PostgreSQL they go out together in psycopg's pipeline mode (one read goes out alone): the
    server receives them at once and the thread waits for their results once, not once per
    statement (a work item's detail is four reads, and the worker's submit with `claim_next`
    reads two details). Each statement runs on the connection's own cursor for that statement
    (`_statement_cursor`). On SQLite, one after the other on one cursor."""
    if conn is None:
        conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor != "postgresql":
        with hot_cursor(conn) as cur:
            out = []
            for name, params in statements:
                hot_execute(cur, sql(name, conn), params)
                out.append(cur.fetchall())
            return out
    if conn.queries_logged or conn.execute_wrappers or len({n for n, _ in statements}) < len(statements):
        # what observes statements sees these too; a statement twice needs a cursor per run
        return _read_all_wrapped(statements, conn)
    conn.close_if_health_check_failed()  # what connection.cursor() does first
    conn.ensure_connection()
    conn.validate_no_broken_transaction()  # what CursorWrapper.execute() does first
    cursors = [_statement_cursor(conn, name) for name, _ in statements]
    with conn.wrap_database_errors:
        if len(statements) == 1:
            return [cursors[0].execute(sql(statements[0][0], conn), statements[0][1]).fetchall()]
        with conn.connection.pipeline():
            for cur, (name, params) in zip(cursors, statements):
                cur.execute(sql(name, conn), params)
            return [cur.fetchall() for cur in cursors]


def _read_all_wrapped(statements: list[tuple[str, list]], conn) -> list[list[tuple]]:
    cursors = [hot_cursor(conn) for _ in statements]
    try:
        with conn.wrap_database_errors, conn.connection.pipeline():
            for cur, (name, params) in zip(cursors, statements):
                cur.execute(sql(name, conn), params)
            return [cur.fetchall() for cur in cursors]
    finally:
        for cur in cursors:
            cur.close()


def _statement_cursor(conn, name: str) -> HotCursor:
    """The PostgreSQL connection's own cursor for the read `name`, made on first use and kept
    while the connection lives. psycopg gives a cursor a new adaptation context (Transformer)
    whenever it runs another query text, and a new cursor starts with empty dumper and loader
    caches, so a fresh cursor per read looked up the adapters of every parameter and column on
    every call; a cursor that runs only its own statement keeps them. Read by `read_all` only,
    which fetches every row before it returns, so a cursor never holds a result anyone still
    reads (it keeps the last one until its next run: one result per statement and connection).
    Connections are per thread in Django, and so are these cursors."""
    raw = conn.connection
    cache = conn.__dict__.get("_statement_cursors")
    if cache is None or cache[0] is not raw:
        cache = conn.__dict__["_statement_cursors"] = (raw, {})
    cur = cache[1].get(name)
    if cur is None:
        cur = cache[1][name] = _new_hot_cursor(conn)
    return cur


_JSON_LITERALS = {"[]": list, "{}": dict}


def _json_from_db(value, expression, conn, _loads=orjson.loads, _literals=_JSON_LITERALS):
    """`JSONField.from_db_value` for a plain column of a field without a custom decoder; the
    empty list and object, the most common values of these rows, are built without the parser.
    orjson parses what json.loads parses, several times faster; the non-standard literals
    json.loads also accepts (NaN, Infinity) fall back to it."""
    if value is None:
        return None
    make = _literals.get(value)
    if make is not None:
        return make()
    try:
        return _loads(value)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _sqlite_utc(value, expression, conn, _dt=datetime.datetime, _parse=datetime.datetime.fromisoformat,
                _utc=datetime.timezone.utc):
    """The SQLite backend's `convert_datetimefield_value` for a connection whose time zone is UTC
    (USE_TZ, no per-database TIME_ZONE): the value arrives parsed by sqlite3's `timestamp`
    converter as a naive datetime, which is UTC. Django's own takes the connection's time zone
    through a lazy settings proxy per value, a quarter of a work item's detail read."""
    if value is None:
        return None
    if not isinstance(value, _dt):
        value = _parse(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=_utc)


def _chain(convs):
    """One callable applying the converters in order (None when there are none)."""
    if not convs:
        return None
    if len(convs) == 1:
        return convs[0]

    def chained(value, expression, conn):
        for conv in convs:
            value = conv(value, expression, conn)
        return value
    return chained


class RowSpec:
    """A column list of one model under a table alias, and the rows it reads as instances."""

    def __init__(self, model, alias: str, names: Iterable[str] | None = None):
        self.model = model
        self.alias = alias
        meta = model._meta
        # in model field order: Model.from_db maps a partial row by that order
        wanted = None if names is None else {meta.get_field(n).attname for n in names}
        self.fields = [f for f in meta.concrete_fields if wanted is None or f.attname in wanted]
        self.attnames = [f.attname for f in self.fields]
        self._converters: dict = {}

    def columns(self) -> str:
        return ", ".join(f"{self.alias}.{qn(f.column)}" for f in self.fields)

    def converters(self, conn=None) -> list:
        """(index, attname, converter, column) for the columns that need converting, in the order
        the ORM applies them (backend first, then the field's)."""
        if conn is None:
            conn = connections[DEFAULT_DB_ALIAS]
        ops = conn.ops  # converters are bound to a connection's operations (one per thread)
        out = self._converters.get(ops)
        if out is None:
            out = []
            utc_sqlite = conn.vendor == "sqlite" and settings.USE_TZ and conn.timezone_name == "UTC"
            sqlite_datetime = type(ops).convert_datetimefield_value if utc_sqlite else None
            for i, f in enumerate(self.fields):
                col = f.get_col(self.alias)
                convs = ops.get_db_converters(col) + col.get_db_converters(conn)
                # the field's own from_db_value, unless a subclass or custom decoder changes it
                convs = [_json_from_db if (type(f) is models.JSONField and f.decoder is None
                                           and getattr(c, "__func__", None) is models.JSONField.from_db_value)
                         else _sqlite_utc if (utc_sqlite and getattr(c, "__func__", None) is sqlite_datetime)
                         else c for c in convs]
                fn = _chain(convs)
                if fn is not None:
                    out.append((i, f.attname, fn, col))
            self._converters[ops] = out
        return out

    def build(self, values):
        """A model instance as `Model.from_db` loads it (columns outside the spec are deferred).

        The attributes are set directly rather than through `Model.__init__` (4× cheaper); the
        only thing skipped is the pre_init/post_init signals, which no receiver uses for these
        models.
        """
        return self.build_many([values])[0]

    def build_many(self, rows, conn=None) -> list:
        """`build` for several rows, resolving the connection's converters and alias once."""
        if conn is None:
            conn = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: one proxy lookup, not one per value
        converters, alias, model, attnames = self.converters(conn), conn.alias, self.model, self.attnames
        new = model.__new__
        out = []
        for values in rows:
            obj = new(model)
            state = ModelState()
            state.adding, state.db = False, alias
            d = obj.__dict__
            d["_state"] = state
            d.update(zip(attnames, values))
            for i, name, conv, col in converters:
                d[name] = conv(values[i], col, conn)
            out.append(obj)
        return out


_DEFAULTS: dict = {}


def new_instance(model, alias: str, values: dict):
    """`model(**values)` for a row this process is inserting, built as `RowSpec.build` builds
    loaded rows: every concrete field gets its default unless given, `_state.db` is `alias` and
    `_state.adding` False (the caller inserts it). Values are attribute names (`action_id`).
    Skipped: `Model.__init__`'s generic keyword handling and its pre/post_init signals, which
    no receiver uses for these models."""
    spec = _DEFAULTS.get(model)
    if spec is None:
        fixed, called = {}, []
        for f in model._meta.concrete_fields:
            if f.has_default() and callable(f.default):
                called.append((f.attname, f.get_default))  # a fresh value per instance (list, dict)
            else:
                fixed[f.attname] = f.get_default()
        spec = _DEFAULTS[model] = (fixed, called)
    fixed, called = spec
    obj = model.__new__(model)
    state = ModelState()
    state.adding, state.db = False, alias
    d = obj.__dict__
    d["_state"] = state
    d.update(fixed)
    for name, default in called:
        if name not in values:
            d[name] = default()
    d.update(values)
    return obj




ITEM_ROW = RowSpec(WorkItem, "i")
ACTION_ROW = RowSpec(Action, "a")
RUN_ROW = RowSpec(Run, "r")
# what graph refresh and the claimable flags read (DOMAIN §5.3, §7.6)
GRAPH_ACTION_ROW = RowSpec(Action, "a", ["id", "status", "current_run_id", "depends_on_stage_ids", "stage_id",
                                         "type", "sequence", "claimable"])


EVENT_ROW = RowSpec(Event, "e")
_USER_ROW: list = []


def user_row() -> RowSpec:
    """The user model's row spec (alias `u`), made when first needed: the user model is swappable
    and resolved only once the apps are loaded."""
    if not _USER_ROW:
        _USER_ROW.append(RowSpec(get_user_model(), "u"))
    return _USER_ROW[0]


# --- the named-statement catalogue ------------------------------------------------------------

QUERIES_FILE = Path(__file__).with_name("queries.sql")
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
        "Permission": Permission, "ContentType": ContentType,
        "UserPermissions": User._meta.get_field("user_permissions").remote_field.through,
        "UserGroups": User._meta.get_field("groups").remote_field.through,
        "GroupPermissions": Group._meta.get_field("permissions").remote_field.through,
    }


def row_specs() -> dict[str, RowSpec]:
    return {"WorkItem": ITEM_ROW, "Action": ACTION_ROW, "Run": RUN_ROW, "GraphAction": GRAPH_ACTION_ROW,
            "Event": EVENT_ROW, "User": user_row()}


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


# --- statements built from their parts ---------------------------------------------------------

_BUILT: dict = {}

def adapters(fields) -> list:
    """Per field, how the services adapt its values for the database (what
    `field.get_db_prep_save` would do, without its per-call work): ("json", encoder), ("dt", None),
    ("bool", None) or None (passed as is); `db_values` applies them."""
    out = []
    for f in fields:
        kind = f.get_internal_type()
        out.append(("json", f.encoder) if kind == "JSONField" else ("dt", None) if kind == "DateTimeField"
                   else ("bool", None) if kind == "BooleanField" else None)
    return out


def db_values(adapts: list, values: Iterable, ops) -> list:
    """A row's values adapted by the `adapters` of their fields."""
    out = []
    for adapt, value in zip(adapts, values):
        if value is None or adapt is None:
            out.append(value)
        elif adapt[0] == "json":
            out.append(ops.adapt_json_value(value, adapt[1]))
        elif adapt[0] == "dt":
            out.append(ops.adapt_datetimefield_value(value))
        else:
            out.append(bool(value))
    return out


def update_sql(conn, model, pk: str, values: dict, where: str = "", params: Iterable = ()) -> tuple[str, list]:
    """`UPDATE … SET values WHERE pk = … [AND where]` and its arguments.

    `values` maps attribute names to Python values (adapted by their fields); `where` is SQL over
    quoted column names with `%s` placeholders for `params`.
    """
    key = (conn.vendor, model, tuple(values), where)
    cached = _BUILT.get(key)
    if cached is None:
        meta, qn_ = model._meta, conn.ops.quote_name
        fields = [meta.get_field(k) for k in values]
        sets = ", ".join(f"{qn_(f.column)} = %s" for f in fields)
        sql = f"UPDATE {qn_(meta.db_table)} SET {sets} WHERE {qn_(meta.pk.column)} = %s" + (f" AND {where}" if where else "")
        cached = _BUILT[key] = (sql, adapters(fields))
    sql, adapts = cached
    args = db_values(adapts, values.values(), conn.ops)
    args.append(pk)
    args.extend(params)
    return sql, args


def insert_returning(cur, statement: str, params: list, column: str):
    """Run an INSERT of one row and return `column` of the row written."""
    hot_execute(cur, f"{statement} RETURNING {column}", params)
    return cur.fetchone()[0]


class Writes:
    """The writes of one step of a service, each with the row count it must have.

    SQLite runs each write when it is added. PostgreSQL sends them all at `flush()` as one
    statement of data-modifying CTEs (one round trip instead of one per write) and checks every
    row count from its result. Either way a write that misses its count raises FenceLost, which
    rolls the whole transaction back: a fence is a guarded write with a row-count check
    (DOMAIN §2.7, §6). The writes of one batch must touch different rows: in one PostgreSQL
    statement they all see the rows as they were before it.

    `flush(tail=...)` may end with one read (SQL without placeholders after its FROM, or with
    `tail_params`): on PostgreSQL it runs in the same statement and therefore sees the rows
    *before* the batch's writes; the caller patches what it wrote.
    """

    __slots__ = ("cur", "pg", "pending")

    def __init__(self, cur):
        self.cur = cur
        self.pg = cur.db.vendor == "postgresql"
        self.pending: list = []

    def update(self, model, pk: str, values: dict, where: str = "", params: Iterable = ()) -> None:
        """A guarded update of one row (`update_sql`): it must hit exactly that row."""
        sql, args = update_sql(self.cur.db, model, pk, values, where, params)
        self.add(sql, args)

    def add(self, sql: str, params: list, *, expect: int = 1, returning: str | None = None, on_result=None) -> None:
        """`sql` (an UPDATE or INSERT without RETURNING) must hit `expect` rows; with `returning`
        (a column) `on_result` receives its value from the one row written."""
        if not self.pg:
            if returning is not None:
                hot_execute(self.cur, f"{sql} RETURNING {returning}", params)
                row = self.cur.fetchone()
                if row is None:
                    raise FenceLost("stale Run: a guarded write lost its fence; nothing was changed")
                on_result(row[0])
            else:
                hot_execute(self.cur, sql, params)
                if self.cur.rowcount != expect:
                    raise FenceLost("stale Run: a guarded update lost its fence; nothing was changed")
            return
        self.pending.append((sql, params, expect, returning, on_result))

    def flush(self, tail: str | None = None, tail_params: Iterable = ()) -> list[tuple]:
        """Send what is pending (PostgreSQL) and run `tail`; returns the tail's rows."""
        cur, pending = self.cur, self.pending
        if not pending:
            if tail is None:
                return []
            hot_execute(cur, tail, list(tail_params))
            return cur.fetchall()
        self.pending = []
        key = ("writes", tuple((p[0], p[3]) for p in pending), tail)
        sql = _BUILT.get(key)
        if sql is None:
            ctes = ", ".join(f"w{i} AS ({p[0]} RETURNING {p[3] or 1})" for i, p in enumerate(pending))
            cols = ", ".join(f"(SELECT count(*) FROM w{i})" + (f", (SELECT {p[3]} FROM w{i} LIMIT 1)" if p[3] else "")
                             for i, p in enumerate(pending))
            sql = f"WITH {ctes} SELECT {cols}"
            if tail is not None:
                sql += f", t.* FROM (SELECT 1) AS one LEFT JOIN ({tail}) AS t ON true"
            _BUILT[key] = sql
        args: list = []
        for p in pending:
            args.extend(p[1])
        args.extend(tail_params)
        hot_execute(cur, sql, args)
        rows = cur.fetchall()
        head, k = rows[0], 0
        for _sql, _params, expect, returning, on_result in pending:
            if head[k] != expect:
                raise FenceLost("stale Run: a guarded write lost its fence; nothing was changed")
            k += 1
            if returning:
                on_result(head[k])
                k += 1
        if tail is None:
            return []
        return [row[k:] for row in rows if row[k] is not None]

