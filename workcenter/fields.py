"""JSON model fields whose stored values are normalised whenever they are read.

DOMAIN §12.4 normalises run evidence on write *and on read*, and §12.5 does the same for
checkpoints; the evidence inside action context entries is the same evidence carried forward.
Rows written by an older version, imported from a reference database of any schema or edited by
hand may hold the raw forms (a bare string, a `{tool, is_error, stdout}` object, an object with
extra keys, a camelCase checkpoint), so these fields apply the normalisers of
`domain/normalize.py` in `from_db_value`: every way a row becomes an object — the ORM, the
store's own fixed statements (`db.RowSpec` uses the field's converters) and so the
API, the live stream and the admin — sees the normal form. A value already in normal form, as
everything this store writes is, costs one cheap check and is returned as decoded.

For migrations these are plain `JSONField`s: the column and its contents are the same.
"""
from __future__ import annotations

import json

import orjson
from django.db import models
from django.db.models.fields.json import KeyTransform

from .domain import normalize

_LITERALS = {"[]": list, "{}": dict}


def _decode(value):
    """The column's text as JSON (orjson, json for what only json reads: NaN, Infinity); text
    that is not JSON stays as it is (the normaliser then drops it), as JSONField does."""
    if value.__class__ is not str:
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode("utf-8", errors="replace")
        else:
            return value  # already decoded by the driver (or None)
    make = _LITERALS.get(value)
    if make is not None:
        return make()
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(value)
    except ValueError:
        return value


class _NormalizedOnReadJSONField(models.JSONField):
    """A JSONField passing every value it loads through `domain.normalize.<reader>`."""

    reader = staticmethod(lambda value: value)  # the read normaliser of workcenter.domain.normalize

    def from_db_value(self, value, expression, connection):
        if isinstance(expression, KeyTransform):  # a key inside the value, not the stored value
            return super().from_db_value(value, expression, connection)
        return self.reader(_decode(value))

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class EvidenceField(_NormalizedOnReadJSONField):
    """Run evidence (DOMAIN §12.4): always a list of normalised items when read."""

    reader = staticmethod(normalize.evidence_on_read)


class CheckpointField(_NormalizedOnReadJSONField):
    """Run checkpoint (DOMAIN §12.5): null or `{version: 1, tool_events}` when read."""

    reader = staticmethod(normalize.checkpoint_on_read)


class ContextField(_NormalizedOnReadJSONField):
    """Action context: a list whose entries' `evidence` is normalised when read (DOMAIN §12.4)."""

    reader = staticmethod(normalize.context_on_read)
