"""Guarded writes: a step's updates and inserts, each with the row count it must have.

`update_sql` builds a guarded `UPDATE` of one row from the values it sets; `Writes` runs a step's
writes (on PostgreSQL one statement of data-modifying CTEs) and checks every row count
(DOMAIN §2.7, §6).
"""
from __future__ import annotations

from typing import Iterable

from ..errors import FenceLost
from .hot import hot_execute
from .rows import adapters, db_values

_BUILT: dict = {}


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
