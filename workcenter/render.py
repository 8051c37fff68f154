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
(dashboard/stream/consumers.py), so both are the same compact UTF-8 JSON.
"""
from __future__ import annotations

import inspect
import json
import threading
import types
import typing
from typing import Any, Callable

import orjson
from django.http import HttpResponse
from pydantic import BaseModel, PlainSerializer
from pydantic_core import PydanticUndefined

_MISSING = object()
_plans: dict[type, Callable[[Any], dict]] = {}
_compiling: dict[type, Callable[[Any], dict]] = {}
_compile_lock = threading.RLock()


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
    """What turns a stored value other than None into its JSON-ready form (None: it already is).
    A list's None items stay None."""
    bare, extra = _unwrap(annotation)
    metadata = list(metadata) + extra
    for m in metadata:
        if isinstance(m, PlainSerializer):
            return m.func
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return compile_schema(bare)
    if typing.get_origin(bare) is list:
        (inner,) = typing.get_args(bare) or (Any,)
        conv = _converter(inner, [])
        if conv is not None:
            return lambda v, c=conv: [None if x is None else c(x) for x in v]
    return None


def compile_schema(schema: type[BaseModel]) -> Callable[[Any], dict]:
    """obj -> the dict ninja would render for `schema` (attributes or dict keys, resolvers first).

    The plan is Python source generated from the schema's fields and compiled once: one
    straight-line function per schema (a branch for dict objects, one for attribute objects),
    with no per-field loop, tuple unpacking or `getattr` call at render time (a fifth less time
    per work item detail than a loop over the fields).
    """
    plan = _plans.get(schema)
    if plan is not None:
        return plan
    # Request threads render concurrently: one compiles, the others wait for its plan. The
    # placeholder that lets a schema nesting itself refer to its own plan is only seen by the
    # compiling thread (the lock is re-entrant for the nested schemas it compiles).
    with _compile_lock:
        plan = _plans.get(schema) or _compiling.get(schema)
        if plan is not None:
            return plan
        _compiling[schema] = _pending(schema)
        try:
            plan = _plans[schema] = _generate(schema)
        finally:
            del _compiling[schema]
    return plan


def _generate(schema: type[BaseModel]) -> Callable[[Any], dict]:
    """The source of `schema`'s plan, compiled (pydantic field names are identifiers, never keywords)."""
    env: dict[str, Any] = {"_missing": _MISSING, "_schema": schema.__name__, "_absent": _absent}
    branches: dict[str, list[str]] = {"dict": [], "attr": []}
    for i, (name, field) in enumerate(schema.model_fields.items()):
        resolver = inspect.getattr_static(schema, f"resolve_{name}", None)
        if resolver is not None and not isinstance(resolver, staticmethod):
            raise TypeError(f"{schema.__name__}.resolve_{name}: only static resolvers are supported here")
        if field.default_factory is not None:
            env[f"d{i}"] = field.default_factory
        elif field.default is not PydanticUndefined:
            env[f"d{i}"] = (lambda d=field.default: d)
        absent = f"d{i}()" if f"d{i}" in env else f"_absent(obj, {name!r}, _schema)"
        conv = _converter(field.annotation, field.metadata)
        if conv is not None:
            env[f"c{i}"] = conv
        if resolver is not None:
            env[f"r{i}"] = resolver.__func__
        for source, lines in branches.items():
            if resolver is not None:
                lines.append(f"v{i} = r{i}(obj)")
            elif source == "dict":
                lines += [f"v{i} = obj.get({name!r}, _missing)", f"if v{i} is _missing:", f"    v{i} = {absent}"]
            else:
                lines += ["try:", f"    v{i} = obj.{name}", "except AttributeError:", f"    v{i} = {absent}"]
            if conv is not None:
                lines += [f"if v{i} is not None:", f"    v{i} = c{i}(v{i})"]
    result = "return {" + ", ".join(f"{name!r}: v{i}" for i, name in enumerate(schema.model_fields)) + "}"
    source = "\n".join(["def plan(obj, _dict=dict):", "    if isinstance(obj, _dict):",
                        *("        " + line for line in branches["dict"] + [result]),
                        *("    " + line for line in branches["attr"] + [result])])
    exec(compile(source, f"<render plan of {schema.__module__}.{schema.__qualname__}>", "exec"), env)
    return env["plan"]


def _pending(schema):
    def plan(obj):  # a self-nesting schema's reference to its own plan, compiled by the time it runs
        return _plans[schema](obj)
    return plan


def _absent(obj, name: str, schema: str):
    raise AttributeError(f"{type(obj).__name__} has no {name!r} for {schema}")


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
