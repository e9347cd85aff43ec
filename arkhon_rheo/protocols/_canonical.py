"""One JSON form for values whose Python form has no fixed order (sets)."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json, to_jsonable_python

__all__ = ["NotPlain", "canonical", "check_json", "json_data", "may_hold_sets", "plain_copy"]

_UNORDERED = (set, frozenset, collections.abc.Set, collections.abc.MutableSet, typing.AbstractSet)


#: Turns JSON data into text; NaN and infinities are refused (`ValueError`).
check_json = json.JSONEncoder(allow_nan=False).encode

#: Values given back as they are, checked by exact type first (most of what is walked).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def canonical(value: Any) -> Any:
    """``value`` with every set turned into a list sorted by its items' JSON.

    A set's iteration order depends on the process's hash randomization; its sorted
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


def json_data(value: Any, *, finite: bool = False) -> Any:
    """``value`` as plain JSON data, sets sorted (see `canonical`).

    Data that is plain JSON already (dicts with string keys, lists, tuples,
    strings, ints, bools, ``None`` and finite floats, each of exactly that
    type: what a request or a dump nearly always is) is copied in one walk,
    tuples as lists; anything else is made plain by pydantic (`canonical`
    first, so sets are sorted).

    Args:
        value: What to make plain.
        finite: Also refuse what a JSON document cannot hold (NaN and
            infinities, raised as `ValueError`), as `check_json` does: data
            copied in the one walk needs no encoding to be checked.

    Raises:
        ValueError: With ``finite``, ``value`` holds a NaN or an infinity.
        pydantic_core.PydanticSerializationError: Something in ``value`` has no
            JSON form.
    """
    try:
        return plain_copy(value)
    except NotPlain:
        pass
    data = to_jsonable_python(canonical(value))
    if finite:
        check_json(data)
    return data


class NotPlain(Exception):
    """Raised by `plain_copy` at a value that is not plain JSON data."""


_NOT_PLAIN = NotPlain()


def plain_copy(value: Any) -> Any:
    """A copy of ``value`` if it is plain JSON data (see `json_data`), else `NotPlain`.

    What pydantic's ``to_jsonable_python`` makes of such a value, and what
    `check_json` accepts: one walk instead of a test, a copy and an encoding.
    """
    kind = type(value)
    if kind is dict:
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NOT_PLAIN
            inner = type(item)
            # Scalars inline: no call made per leaf (most of what is walked).
            if (
                inner is str
                or inner is int
                or inner is bool
                or item is None
                or (inner is float and item - item == 0.0)  # NaN and infinities give NaN
            ):
                copy[key] = item
            else:
                copy[key] = plain_copy(item)
        return copy
    if kind is list or kind is tuple:
        items: list[Any] = []
        append = items.append
        for item in value:
            inner = type(item)
            if (
                inner is str
                or inner is int
                or inner is bool
                or item is None
                or (inner is float and item - item == 0.0)
            ):
                append(item)
            else:
                append(plain_copy(item))
        return items
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float and value - value == 0.0:
        return value
    raise _NOT_PLAIN


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
