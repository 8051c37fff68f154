"""Guarded writes: the one way the store updates rows, hot path and cold paths alike.

An update names its rows and its fence with a bound guard of `guards.py` (`Fence`) and the
values it sets; its statement is built here, once per shape, and its row count is checked: every
row the fence names must be hit (DOMAIN §2.7, §6). Three forms of the same write:

* `Writes(cur).update(fence, values)`: one of a step's writes. The claim and the submission send
  theirs as a batch (on PostgreSQL one statement of data-modifying CTEs, checked at `flush`);
* `update(fence, values)`: one write now, a miss raises FenceLost (the transaction rolls back);
* `update_if(fence, values)`: one write now, a miss answers False (a worker call whose fence
  failed before anything was written answers "nothing happened", DOMAIN §6.4).

`Writes.add` takes a statement of the catalogue (an insert) with the row count it must have.
"""
from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections

from ..errors import FenceLost
from .guards import ARG, IS_NULL, Fence, Guard
from .hot import hot_execute
from .rows import adapters, db_values

_BUILT: dict = {}
_BOUND_IN_ORDER: list = []


def lost(what: str | None) -> FenceLost:
    """The error of a guarded write that missed a row (`what`: its guard's name)."""
    return FenceLost(f"stale Run: a guarded write lost its fence{f' ({what})' if what else ''}; nothing was changed")


def _where(guard: Guard, quote, count: int | None, nulls: tuple | None) -> tuple[str, list]:
    """The WHERE of `guard` over one row (`count` None) or `count` rows, with `nulls` the ARG
    values bound as None (or None when there are none); and how to fill its parameters after
    the primary keys: (False, constant) or (True, index of the bound value)."""
    meta = guard.model._meta
    pk = quote(meta.pk.column)
    parts = [f"{pk} = %s" if count is None else f"{pk} IN ({', '.join(['%s'] * count)})"]
    plan: list = []
    i = 0
    for field, want in guard.conditions:
        col = quote(field.column)
        if want is ARG:
            if nulls is not None and nulls[i]:
                parts.append(f"{col} IS NULL")
            else:
                parts.append(f"{col} = %s")
                plan.append((True, i))
            i += 1
        elif want is IS_NULL:
            parts.append(f"{col} IS NULL")
        elif isinstance(want, tuple):
            parts.append(f"{col} IN ({', '.join(['%s'] * len(want))})")
            plan.extend((False, v) for v in want)
        else:
            parts.append(f"{col} = %s")
            plan.append((False, want))
    return " AND ".join(parts), plan


def update_sql(conn, fence: Fence, values: dict) -> tuple[str, list]:
    """`UPDATE … SET values WHERE <the fence>` and its arguments for `conn`'s database.

    `values` maps attribute names to Python values, adapted by their fields."""
    guard, args, pks = fence.guard, fence.args, fence.pks
    nulls = None if None not in args else tuple(a is None for a in args)
    key = (conn.vendor, guard, tuple(values), None if pks is None else len(pks), nulls)
    cached = _BUILT.get(key)
    if cached is None:
        meta, quote = guard.model._meta, conn.ops.quote_name
        fields = [meta.get_field(k) for k in values]
        where, plan = _where(guard, quote, key[3], nulls)
        sets = ", ".join(f"{quote(f.column)} = %s" for f in fields)
        arg_adapts = adapters([f for f, want in guard.conditions if want is ARG])
        if plan == [(True, i) for i in range(len(args))]:
            plan = _BOUND_IN_ORDER  # the bound values as they are, in order (no constant between)
        cached = _BUILT[key] = (f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {where}", adapters(fields), plan,
                                arg_adapts if any(arg_adapts) else None)
    sql, adapts, plan, arg_adapts = cached
    ops = conn.ops
    out = db_values(adapts, values.values(), ops)
    if pks is None:
        out.append(fence.pk)
    else:
        out.extend(pks)
    if arg_adapts is not None:
        args = db_values(arg_adapts, args, ops)
    if plan is _BOUND_IN_ORDER:
        out.extend(args)
    elif plan:
        out += [args[v] if bound else v for bound, v in plan]
    return sql, out


def update(fence: Fence, values: dict, conn=None) -> None:
    """One guarded update now; a miss raises FenceLost (the caller's transaction rolls back)."""
    if not update_if(fence, values, conn):
        raise lost(fence.guard.name)


def update_if(fence: Fence, values: dict, conn=None) -> bool:
    """One guarded update now: whether it hit every row its fence names (no rows: nothing to do).

    It runs on the connection's ORM cursor: a cold path's statements vary with what they set, and
    preparing them (the hot cursor) would only crowd the hot path's out of the prepared ones."""
    if fence.pks is not None and not fence.pks:
        return True
    if conn is None:
        conn = connections[DEFAULT_DB_ALIAS]
    sql, args = update_sql(conn, fence, values)
    with conn.cursor() as cur:
        hot_execute(cur, sql, args)
        return cur.rowcount == fence.expect


def _returning(conn, column: str) -> str:
    return conn.ops.quote_name(column)  # a quoted name stays as it is


def insert_returning(cur, statement: str, params: list, column: str):
    """Run an INSERT of one row (a catalogue statement) and return `column` of the row written."""
    hot_execute(cur, f"{statement} RETURNING {_returning(cur.db, column)}", params)
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

    def update(self, fence: Fence, values: dict) -> None:
        """A guarded update (`update_sql`): it must hit every row its fence names."""
        if fence.pks is not None and not fence.pks:
            return
        sql, args = update_sql(self.cur.db, fence, values)
        self._add(sql, args, fence.expect, None, None, fence.guard.name)

    def add(self, sql: str, params: list, *, expect: int | None = 1, returning: str | None = None,
            on_result=None) -> None:
        """`sql` (a catalogue INSERT or UPDATE, without RETURNING) must hit `expect` rows (None: any
        number); with `returning` (a column) `on_result` receives its value from the one row written.

        On PostgreSQL `{prev}` in `sql` names the rows the batch's previous write returned (a
        statement that reads what that one wrote: the outbox reads the event's id)."""
        if returning is not None:
            returning = _returning(self.cur.db, returning)
        self._add(sql, params, expect, returning, on_result, None)

    def _add(self, sql, params, expect, returning, on_result, what) -> None:
        if not self.pg:
            cur = self.cur
            if returning is not None:
                hot_execute(cur, f"{sql} RETURNING {returning}", params)
                row = cur.fetchone()
                if row is None:
                    raise lost(what)
                on_result(row[0])
            else:
                hot_execute(cur, sql, params)
                if expect is not None and cur.rowcount != expect:
                    raise lost(what)
            return
        self.pending.append((sql, params, expect, returning, on_result, what))

    def flush(self, tail: str | None = None, tail_params=()) -> list[tuple]:
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
            ctes = ", ".join(f"w{i} AS ({p[0].replace('{prev}', f'w{i - 1}')} RETURNING {p[3] or 1})"
                             for i, p in enumerate(pending))
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
        for _sql, _params, expect, returning, on_result, what in pending:
            if expect is not None and head[k] != expect:
                raise lost(what)
            k += 1
            if returning:
                on_result(head[k])
                k += 1
        if tail is None:
            return []
        return [row[k:] for row in rows if row[k] is not None]
