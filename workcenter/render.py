"""Response rendering without per-request validation, derived from the response schemas.

django-ninja validates every response object against its schema (a pydantic model built through
a getter per attribute) and then dumps it: for the worker protocol's claim and submit, whose
bodies carry the whole WorkItemDetail (every action, run and the newest 500 events), that was
about half of the server time of a call. The objects these routes render come from the store's
own rows, already of the schema's types, so validating them again checks nothing a client could
have sent. `render(schema, obj)` walks a plan compiled once per schema from the schema itself
(fields, resolvers, nested schemas, the timestamp serializer), so the output cannot drift from
the documented shape; tests/workcenter/api/test_render.py compares it with ninja's own rendering
for every schema it is used with. Requests are still validated as before.

`dumps` encodes the responses rendered here and every message of the live stream
(dashboard/consumers.py), so both are the same compact UTF-8 JSON.
"""
from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any, Callable

import orjson
from django.http import HttpResponse
from pydantic import BaseModel, PlainSerializer
from pydantic_core import PydanticUndefined

_MISSING = object()
_plans: dict[type, Callable[[Any], dict]] = {}


def _unwrap(annotation) -> tuple[Any, list]:
    """(the bare type, the Annotated metadata) of a field annotation, Optional removed."""
    metadata: list = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            metadata.extend(extra)
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation, metadata  # a real union: values pass as they are
            annotation = args[0]
        else:
            return annotation, metadata


def _converter(annotation, metadata: list) -> Callable[[Any], Any] | None:
    """What turns a stored value into its JSON-ready form (None: it already is)."""
    bare, extra = _unwrap(annotation)
    metadata = list(metadata) + extra
    for m in metadata:
        if isinstance(m, PlainSerializer):
            func = m.func
            return lambda v, f=func: None if v is None else f(v)
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        plan = compile_schema(bare)
        return lambda v, p=plan: None if v is None else p(v)
    if typing.get_origin(bare) is list:
        (inner,) = typing.get_args(bare) or (Any,)
        conv = _converter(inner, [])
        if conv is not None:
            return lambda v, c=conv: None if v is None else [c(x) for x in v]
    return None


def compile_schema(schema: type[BaseModel]) -> Callable[[Any], dict]:
    """obj -> the dict ninja would render for `schema` (attributes or dict keys, resolvers first)."""
    plan = _plans.get(schema)
    if plan is not None:
        return plan
    steps = []
    for name, field in schema.model_fields.items():
        resolver = inspect.getattr_static(schema, f"resolve_{name}", None)
        if resolver is not None and not isinstance(resolver, staticmethod):
            raise TypeError(f"{schema.__name__}.resolve_{name}: only static resolvers are supported here")
        get = resolver.__func__ if resolver is not None else None
        if field.default_factory is not None:
            default = field.default_factory
        elif field.default is PydanticUndefined:
            default = None
        else:
            default = (lambda d=field.default: d)
        steps.append((name, get, default, _converter(field.annotation, field.metadata)))

    def plan(obj, _steps=steps, _missing=_MISSING) -> dict:
        out = {}
        is_dict = isinstance(obj, dict)
        for name, get, default, conv in _steps:
            if get is not None:
                value = get(obj)
            else:
                value = obj.get(name, _missing) if is_dict else getattr(obj, name, _missing)
                if value is _missing:
                    if default is None:
                        raise AttributeError(f"{type(obj).__name__} has no {name!r} for {schema.__name__}")
                    value = default()
            out[name] = value if conv is None or value is None else conv(value)
        return out

    _plans[schema] = plan
    return plan


def render(schema: type[BaseModel], obj: Any) -> dict:
    return compile_schema(schema)(obj)


_fallback = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps(data: Any) -> bytes:
    """Compact UTF-8 JSON (orjson; integers beyond 64 bits, which orjson refuses, by json)."""
    try:
        return orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError):
        return _fallback(data).encode("utf-8")


def loads(data: str | bytes) -> Any:
    """JSON text (orjson) as Python data."""
    return orjson.loads(data)


def response(schema: type[BaseModel], obj: Any, status: int = 200) -> HttpResponse:
    """The JSON response of `obj` rendered as `schema` (UTF-8, compact)."""
    return HttpResponse(dumps(render(schema, obj)), status=status, content_type="application/json; charset=utf-8")
