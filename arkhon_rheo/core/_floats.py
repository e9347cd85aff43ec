"""Which field types may serialize a float: only those can hide a NaN in their JSON.

pydantic writes NaN and the infinities as ``null`` in JSON, where the store
must refuse them; `StateHasher.encode` looks again, with the exact encoder, at
a value whose JSON holds ``null`` — but only when its field's type may hold a
float at all. The answer errs on the side of "may": ``Any``, bare containers,
unknown classes, custom serializers and computed fields all may.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import typing
import uuid
from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, PlainSerializer, WrapSerializer

__all__ = ["may_hold_floats"]

#: Types whose JSON never holds a float.
_NO_FLOAT = frozenset(
    {
        str,
        int,
        bool,
        bytes,
        type(None),
        datetime.datetime,
        datetime.date,
        datetime.time,
        uuid.UUID,
        decimal.Decimal,
    }
)
_SERIALIZERS = (PlainSerializer, WrapSerializer)


def may_hold_floats(annotation: Any, _seen: set[int] | None = None) -> bool:
    """Whether the JSON of a value of ``annotation`` may hold a float."""
    seen = set() if _seen is None else _seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    if annotation in _NO_FLOAT:
        return False
    if annotation is float or annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        if any(isinstance(meta, _SERIALIZERS) for meta in args[1:]):
            return True
        return may_hold_floats(args[0], seen)
    if origin is Literal:
        return any(isinstance(value, float) for value in args)
    if isinstance(annotation, type):
        return _class_may_hold_floats(annotation, seen)
    if origin is None or not args:
        return True  # a type variable, a forward reference...: unknown
    return any(may_hold_floats(arg, seen) for arg in args if arg is not Ellipsis)


def _class_may_hold_floats(cls: type, seen: set[int]) -> bool:
    if issubclass(cls, enum.Enum):
        return any(isinstance(member.value, float) for member in cls)
    if issubclass(cls, PurePath):
        return False
    if issubclass(cls, BaseModel):
        decorators = cls.__pydantic_decorators__
        if decorators.field_serializers or decorators.model_serializers:
            return True
        if cls.model_computed_fields:
            return True
        return any(
            any(isinstance(meta, _SERIALIZERS) for meta in field.metadata)
            or may_hold_floats(field.annotation, seen)
            for field in cls.model_fields.values()
        )
    hinted = dataclasses.is_dataclass(cls) or (
        issubclass(cls, (tuple, dict)) and isinstance(getattr(cls, "__annotations__", None), dict)
    )
    if hinted:  # a dataclass, a NamedTuple, a TypedDict
        if getattr(cls, "__pydantic_decorators__", None) is not None:
            return True  # a pydantic dataclass may have serializers of its own
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:  # an unresolvable annotation: unknown
            return True
        return any(may_hold_floats(hint, seen) for hint in hints.values())
    return True  # a bare container, or a class pydantic serializes in its own way
