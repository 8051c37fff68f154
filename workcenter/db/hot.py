"""The hot path's cursor: the fixed statements of claim → submit and the API's reads, run fast.

The hot path runs the catalogue's statements instead of the ORM, which compiles every query anew
(≈0.4 ms each on a 2-core machine, 30× the statement itself). On PostgreSQL `hot_cursor` binds
parameters server-side, so each fixed statement is prepared once per connection; on SQLite
`hot_execute` hands a statement to sqlite3 with its placeholders converted once per text.
`read_all` sends several independent reads at once (PostgreSQL's pipeline mode).
"""
from __future__ import annotations

import datetime
import hashlib
import re
import sqlite3

import psycopg
from psycopg.types.datetime import TimestamptzLoader

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.utils import CursorWrapper

from .catalogue import sql


def is_postgres(conn=None) -> bool:
    return (conn or connection).vendor == "postgresql"


def lock_key(text: str) -> int:
    """A signed 64-bit advisory-lock key for a text (PostgreSQL)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


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

