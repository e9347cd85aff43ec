"""Response types whose validation already proves their record is JSON.

`CallRecorder.call` dumps a response through ``returns``, checks that the dump
is JSON (no NaN or infinity, string keys: ``check_json``, a whole encoding),
and validates it back: the stage gets what a replay will. For a model whose
fields hold only strings, ints, bools, ``None``, literals of those, tuples or
lists of such values, and such models, with no validators, serializers,
aliases, extra fields or settings that change values, a dump that validates
back holds nothing else: no float (so no NaN), no key but a field's name. The
encoding is then left out; a dump that does not validate is checked as
before, so a call fails with the same error either way.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["validation_checks_json"]

#: The model settings that neither let a value through unvalidated nor change one.
_NEUTRAL_CONFIG = frozenset(
    {"frozen", "extra", "title", "json_schema_extra", "protected_namespaces", "defer_build"}
)

#: The models being looked at (one that holds itself is not taken).
_SEEN: set[type] = set()


@functools.lru_cache(maxsize=256)
def validation_checks_json(returns: Any) -> bool:
    """Whether a dump of a ``returns`` value that validates back is plain JSON, as said above."""
    return _safe(returns)


def _safe(annotation: Any) -> bool:
    if annotation in (str, int, bool, None, type(None)):
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return all(type(arg) in (str, int, bool) for arg in args)
    if origin is typing.Union or origin is types.UnionType:
        return all(_safe(arg) for arg in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _safe(args[0])
    if origin in (tuple, list) and args:
        return all(_safe(arg) for arg in args if arg is not Ellipsis)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in _SEEN:
            return False
        _SEEN.add(annotation)
        try:
            return _safe_model(annotation)
        finally:
            _SEEN.discard(annotation)
    return False


def _safe_model(model: type[BaseModel]) -> bool:
    config = model.model_config
    if config.get("extra") == "allow" or set(config) - _NEUTRAL_CONFIG:
        return False
    decorators = model.__pydantic_decorators__
    if any(
        (
            decorators.validators,
            decorators.field_validators,
            decorators.root_validators,
            decorators.field_serializers,
            decorators.model_serializers,
            decorators.model_validators,
            decorators.computed_fields,
        )
    ):
        return False
    for field in model.model_fields.values():
        if field.alias or field.validation_alias or field.serialization_alias or field.exclude:
            return False
        if not _safe(field.annotation):
            return False
    return True
