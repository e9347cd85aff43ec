"""One JSON form for values whose Python form has no fixed order (sets)."""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json, to_jsonable_python

__all__ = ["canonical", "json_data", "may_hold_sets"]

_UNORDERED = (set, frozenset, collections.abc.Set, collections.abc.MutableSet, typing.AbstractSet)


#: Values given back as they are, checked by exact type first (most of what is walked).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def canonical(value: Any) -> Any:
    """``value`` with every set turned into a list sorted by its items' JSON.

    A set's iteration order depends on the process's hash seed; its sorted
    form does not, so two processes record, compare and digest it alike.
    Models are dumped (sets kept) first; other containers keep their order.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:  # plain JSON data: the same as below, without the type tests before
        return {key: canonical(item) for key, item in value.items()}
    if kind is list:
        return [canonical(item) for item in value]
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(item) for item in value), key=to_json)
    if isinstance(value, dict):
        return {key: canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    return value


def json_data(value: Any) -> Any:
    """``value`` as plain JSON data, sets sorted (see `canonical`).

    Data that is plain JSON already (dicts, lists, tuples, strings, numbers)
    holds no set: it is copied once, not walked into a copy first.
    """
    return to_jsonable_python(value if _plain(value) else canonical(value))


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only dicts, lists, tuples and scalars (`canonical` changes none)."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        value = value.values()
    elif kind is not list and kind is not tuple:
        return False
    # A loop, not all(): no generator made per node (the collector counts those).
    for item in value:  # noqa: SIM110
        if type(item) not in _SCALARS and not _plain(item):
            return False
    return True


def may_hold_sets(annotation: Any, _seen: set[int] | None = None) -> bool:
    """Whether values of ``annotation`` may hold a set (or anything, as ``Any`` may)."""
    seen = set() if _seen is None else _seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    if annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin in _UNORDERED or annotation in _UNORDERED:
        return True
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return any(
                may_hold_sets(field.annotation, seen) for field in annotation.model_fields.values()
            )
        if dataclasses.is_dataclass(annotation):
            hints = typing.get_type_hints(annotation)
            return any(may_hold_sets(hint, seen) for hint in hints.values())
        declared = getattr(annotation, "__annotations__", None)
        if isinstance(declared, dict) and issubclass(annotation, (tuple, dict)):
            # NamedTuple and TypedDict fields
            resolved = typing.get_type_hints(annotation)
            return any(may_hold_sets(hint, seen) for hint in resolved.values())
        return False
    return any(may_hold_sets(arg, seen) for arg in typing.get_args(annotation))
