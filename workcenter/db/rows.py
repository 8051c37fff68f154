"""Rows as the ORM builds them, and values as the ORM writes them, without the ORM's per-call work.

`RowSpec` is one model's column list under a table alias: the statements of the catalogue select
it (`{cols:Spec}`) and `build_many` turns their rows into instances, through the converters the
ORM applies (backend first, then the field's), so what is read is exactly what the ORM reads.
`new_instance` builds a row this process inserts. `adapters` / `db_values` adapt values for the
database as `field.get_db_prep_save` does. This module sits directly above the models.
"""
from __future__ import annotations

import datetime
import json
from typing import Iterable

import orjson

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.base import ModelState

from ..models import Action, Event, Run, WebhookDelivery, WorkItem


def qn(name: str) -> str:
    return connection.ops.quote_name(name)


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
# what a webhook sender reads of a pending delivery (webhook_sender.py)
DELIVERY_ROW = RowSpec(WebhookDelivery, "d", ["id", "webhook_id", "event_id", "attempts", "failures",
                                              "first_failed_at", "claimed_until", "created_at"])
_USER_ROW: list = []


def user_row() -> RowSpec:
    """The user model's row spec (alias `u`), made when first needed: the user model is swappable
    and resolved only once the apps are loaded."""
    if not _USER_ROW:
        _USER_ROW.append(RowSpec(get_user_model(), "u"))
    return _USER_ROW[0]


def row_specs() -> dict[str, RowSpec]:
    """The row specs by the name the catalogue's `{cols:Spec}` marker gives them."""
    return {"WorkItem": ITEM_ROW, "Action": ACTION_ROW, "Run": RUN_ROW, "GraphAction": GRAPH_ACTION_ROW,
            "Event": EVENT_ROW, "WebhookDelivery": DELIVERY_ROW, "User": user_row()}


# --- values as the fields adapt them ------------------------------------------------------------

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

