"""The database layer under the services: every SQL text of the store is written in it.

* `catalogue`: the named statements of `workcenter/queries.sql` (`sql(name)`), each with a header
  saying what it does and what it locks;
* `guards`: the named guards, the WHERE of every guarded update (DOMAIN §2.7, §6);
* `writes`: the guarded updates built from a guard and their values, row counts checked
  (`Writes` batches for a step, `update` / `update_if` for one write now);
* `rows`: rows read as the ORM builds them (`RowSpec`) and values adapted as it writes them;
* `hot`: the hot path's cursor, `hot_execute` and `read_all`.

Nothing above this package formats SQL, not even a fragment of a WHERE. It sits directly above
the models (it reads their fields) and below everything else; `from workcenter import db` and
`db.<name>` reach what the services use.
"""
from __future__ import annotations

from . import guards
from .catalogue import INSERT_FIELDS, VENDORS, Statement, catalogue, expand, parse_queries, sql
from .hot import HotCursor, TIMESTAMPTZ_OID, hot_cursor, hot_execute, is_postgres, lock_key, read_all
from .rows import (ACTION_ROW, DELIVERY_ROW, EVENT_ROW, GRAPH_ACTION_ROW, ITEM_ROW, RUN_ROW, RowSpec, adapters, db_values,
                   new_instance, row_specs, user_row)
from .writes import Writes, insert_returning, update, update_if, update_sql

__all__ = [
    "guards", "INSERT_FIELDS", "VENDORS", "Statement", "catalogue", "expand", "parse_queries", "sql",
    "HotCursor", "TIMESTAMPTZ_OID", "hot_cursor", "hot_execute", "is_postgres", "lock_key", "read_all",
    "ACTION_ROW", "DELIVERY_ROW", "EVENT_ROW", "GRAPH_ACTION_ROW", "ITEM_ROW", "RUN_ROW", "RowSpec", "adapters", "db_values",
    "new_instance", "row_specs", "user_row",
    "Writes", "insert_returning", "update", "update_if", "update_sql",
]
