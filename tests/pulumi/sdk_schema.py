"""Check recorded resource inputs against pulumi-azure-native's own input types.

Mocks accept any property; Azure does not. The installed SDK knows, for every resource, its
`<Resource>Args` input type and, nested in it, every `*Args` input type with its wire
(camelCase) property names, which properties are required (`__init__` parameters without a
default) and which values an enum-only property takes. `problems(token, inputs)` walks the
inputs as the engine received them (wire names) through those types and lists every
unknown property, missing required property and value outside an enum, by path.
"""

from __future__ import annotations

import collections.abc
import enum
import importlib
import inspect
import typing
from functools import cache
from typing import Any

from pulumi import _types

from support import unwrap


@cache
def _args_class(token: str) -> type | None:
    """`azure-native:storage:StorageAccount` -> pulumi_azure_native.storage.StorageAccountArgs (what its __init__ takes)."""
    provider, module, kind = token.split(":")
    if provider != "azure-native":
        return None
    resource = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), kind)
    # Where a nested input type has the resource's name, the SDK calls the resource's own `<Kind>InitArgs`.
    own = importlib.import_module(resource.__module__)
    return getattr(own, f"{kind}InitArgs", None) or getattr(own, f"{kind}Args")


@cache
def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """An input type's wire names -> types, and the wire names it requires."""
    types = _types.input_type_types(cls)
    to_wire = _types.input_type_py_to_pulumi_names(cls)
    params = inspect.signature(cls.__init__).parameters.values()
    required = frozenset(to_wire[p.name] for p in params
                         if p.name in to_wire and p.default is inspect.Parameter.empty)
    return types, required


def _alternatives(typ: Any) -> list[Any]:
    """The concrete types a (possibly Input/Optional/Union-wrapped) annotation allows."""
    if typing.get_origin(typ) is typing.Union:
        out = []
        for t in typing.get_args(typ):
            if t is type(None) or typing.get_origin(t) is collections.abc.Awaitable or _is_output(t):
                continue
            out += _alternatives(t)
        return out
    return [typ]


def _is_output(t: Any) -> bool:
    return getattr(typing.get_origin(t) or t, "__name__", "") == "Output"


def _check(value: Any, typ: Any, path: str) -> list[str]:
    alts = _alternatives(typ)
    if isinstance(value, dict):
        classes = [t for t in alts if isinstance(t, type) and _types.is_input_type(t)]
        if classes:
            tries = [_check_object(value, cls, path) for cls in classes]
            return min(tries, key=len)
        maps = [t for t in alts if typing.get_origin(t) in (collections.abc.Mapping, dict)]
        if maps:
            value_type = typing.get_args(maps[0])[1]
            return [p for k, v in value.items() for p in _check(v, value_type, f"{path}.{k}")]
        return []
    if isinstance(value, list):
        seqs = [t for t in alts if typing.get_origin(t) in (collections.abc.Sequence, list)]
        if seqs:
            item = typing.get_args(seqs[0])[0]
            return [p for i, v in enumerate(value) for p in _check(v, item, f"{path}[{i}]")]
        return []
    if isinstance(value, str) and alts and all(isinstance(t, type) and issubclass(t, enum.Enum) for t in alts):
        allowed = sorted({m.value for t in alts for m in t})
        if value not in allowed:
            return [f"{path}: {value!r} is not one of {allowed}"]
    return []


def _check_object(value: dict[str, Any], cls: type, path: str) -> list[str]:
    types, required = _fields(cls)
    out = [f"{path}.{k}: no such property in {cls.__name__} (known: {', '.join(sorted(types))})"
           for k in value if k not in types]
    out += [f"{path}.{k}: required by {cls.__name__}, missing" for k in sorted(required) if value.get(k) is None]
    for k, v in value.items():
        if k in types and v is not None:
            out += _check(v, types[k], f"{path}.{k}")
    return out


def problems(token: str, name: str, inputs: dict[str, Any]) -> list[str]:
    """Everything in one resource's inputs (wire names, secrets wrapped or not) the SDK's types reject."""
    cls = _args_class(token)
    if cls is None:
        return []
    return _check_object(unwrap(inputs), cls, f"{token.split(':')[-1]} {name}")  # type: ignore[arg-type]
