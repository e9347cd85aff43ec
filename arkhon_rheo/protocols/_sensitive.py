"""`Sensitive`: the marker of a state field whose value is a secret.

A user's token or a customer's personal data may have to live in a session's
state. Mark the field, with ``Annotated``::

    class Account(AgentState):
        lifecycle: Step = Step.START
        token: Annotated[str, Sensitive()] = ""

and the library keeps its value out of everything it writes or shows:

- the store holds it sealed (AES-256-GCM, with the key of the `Keyring` the
  `AgentSystem` is given: ``AgentSystem(secrets=Keyring(key))``), in snapshots
  and in event patches alike; a sequence field's items are sealed one by one,
  so an append still costs the appended items only;
- the state's ``repr``, the command line, the inspector and replay reports show
  ``[SENSITIVE]`` (`SENSITIVE`) in its place;
- while a session whose state holds a value runs (or is replayed), the value
  is registered for scrubbing like a model client's API key (see ``_redact``):
  log lines, span events, failure records, gate questions and recorded
  requests and responses show ``[REDACTED]`` where it appears.

The marker goes on a field of the state type itself, and seals the field's
whole value: `Machine` refuses it on the fields every state has (``lifecycle``,
``session_id``...), inside another type (a nested model's field, a tuple's
items: mark the state's field instead) and used as a default value. This
module imports nothing of the package beyond `protocols`.
"""

from __future__ import annotations

import dataclasses
import enum
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel

__all__ = ["SENSITIVE", "Sensitive", "secret_texts", "sensitive_fields", "sensitive_problem"]

#: What is shown in place of a sensitive value.
SENSITIVE = "[SENSITIVE]"

#: Texts shorter than this are not registered for scrubbing (see ``_redact``).
_MIN_TEXT = 4


class Sensitive:
    """``Annotated`` marker of a state field whose value is a secret (see the module's doc).

    Example::

        class Account(AgentState):
            lifecycle: Step = Step.START
            token: Annotated[str, Sensitive()] = ""
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "Sensitive()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sensitive)

    def __hash__(self) -> int:
        return hash(Sensitive)


_FIELDS: weakref.WeakKeyDictionary[type, frozenset[str]] = weakref.WeakKeyDictionary()


def sensitive_fields(state_type: type[BaseModel]) -> frozenset[str]:
    """The names of ``state_type``'s fields marked `Sensitive` (computed once per type)."""
    found = _FIELDS.get(state_type)
    if found is None:
        found = frozenset(
            name
            for name, info in state_type.model_fields.items()
            if any(isinstance(meta, Sensitive) for meta in info.metadata)
        )
        _FIELDS[state_type] = found
    return found


def sensitive_problem(state_type: type[BaseModel], base_fields: frozenset[str]) -> str | None:
    """What is wrong with how ``state_type`` marks its sensitive fields (``None``: nothing).

    Args:
        state_type: The machine's state type.
        base_fields: The fields every state has, which cannot be sensitive.
    """
    name = state_type.__name__
    marked = sensitive_fields(state_type)
    for field, info in state_type.model_fields.items():
        if isinstance(info.default, Sensitive):
            return (
                f"field {field!r} of {name} has Sensitive() as its default value; mark its "
                f"type instead: {field}: Annotated[<type>, Sensitive()]"
            )
        if field in marked and field in base_fields:
            return f"field {field!r} of {name} is one every state has: it cannot be sensitive"
        inside = _marked_inside(info.annotation, set())
        if inside is not None:
            return (
                f"field {field!r} of {name} marks {inside} Sensitive(); the marker seals a "
                f"state field's whole value: write {field}: Annotated[<its type>, Sensitive()]"
            )
    return None


def _marked_inside(annotation: Any, seen: set[type]) -> str | None:
    """Where a `Sensitive` marker sits inside ``annotation`` (a part of a field's type)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        if any(isinstance(meta, Sensitive) for meta in annotation.__metadata__):
            return f"a part of its type ({args[0]!r})"
        return _marked_inside(args[0], seen)
    for arg in args:
        if arg is not Ellipsis and (found := _marked_inside(arg, seen)) is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return None
        seen.add(annotation)
        for name, info in annotation.model_fields.items():
            if any(isinstance(meta, Sensitive) for meta in info.metadata):
                return f"field {name!r} of the nested {annotation.__name__}"
            if (found := _marked_inside(info.annotation, seen)) is not None:
                return found
    return None


def secret_texts(value: Any) -> Iterator[str]:
    """The texts a sensitive value may show up as: its strings, and its numbers written out.

    Texts shorter than four characters are left out (masking them would mangle
    ordinary text); so are booleans and ``None``.
    """
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str | int | float):
        text = value if isinstance(value, str) else str(value)
        if len(text) >= _MIN_TEXT:
            yield text
        return
    for part in _parts(value):
        yield from secret_texts(part)


def _parts(value: Any) -> Iterable[Any]:
    """What a composite value is made of (a mapping's keys and values, a model's fields...)."""
    if isinstance(value, BaseModel):
        return value.__dict__.values()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, Mapping):
        return [part for pair in value.items() for part in pair]
    if isinstance(value, Iterable) and not isinstance(value, type):
        return value  # a tuple, a frozenset, a `History`...
    return ()
