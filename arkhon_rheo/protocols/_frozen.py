"""`FrozenMap` and the check that a state type holds only immutable values.

A commit shares every unchanged field with the previous version, and a stage
reads the committed values themselves (no copy). Both are safe only if no
value can be changed in place: a stage that did ``view.items.append(x)`` on a
``list`` field would change the live state with no patch, no event and nothing
stored. So `Machine` refuses a state type whose field types are mutable
(`mutable_part` finds them) and the library gives an immutable type for each
mutable one: ``tuple`` or `History` for ``list``, ``frozenset`` for ``set``,
`FrozenMap` for ``dict``, ``bytes`` for ``bytearray``, frozen models and
frozen dataclasses for the others.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import ipaddress
import pathlib
import types
import typing
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar, get_args, get_origin

from pydantic import AfterValidator, BaseModel, PlainSerializer
from pydantic_core import core_schema

from ._history import History

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler

__all__ = ["TRUSTED_IMMUTABLE", "FrozenJson", "FrozenMap", "Metadata", "mutable_part"]

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V], Generic[K, V]):
    """A read-only mapping, the immutable type to use for a ``dict`` state field.

    ``options: FrozenMap[str, int] = FrozenMap()``. It validates from any
    mapping (each key and value against ``K`` and ``V``, whatever mapping they
    come in), serializes as a dict, compares equal to a dict with the same
    items, and, unlike ``MappingProxyType``, copies, pickles and hashes (when
    its values do). A patch replaces it whole: ``Patch(options={**old, "k": 1})``.

    Args:
        data: The items; copied, so later changes to ``data`` do not show.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        # A read-only proxy even inside: ``fm._data["k"] = v`` must fail too.
        self._data: Mapping[K, V] = MappingProxyType(dict(data) if data else {})

    def __reduce__(self) -> tuple[type[FrozenMap[K, V]], tuple[dict[K, V]]]:
        return type(self), (dict(self._data),)

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._data)!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        args = get_args(source)
        key, value = (args[0], args[1]) if len(args) == 2 else (Any, Any)
        as_dict = core_schema.dict_schema(
            handler.generate_schema(key), handler.generate_schema(value)
        )
        from_dict = core_schema.no_info_after_validator_function(cls, as_dict)
        python: core_schema.CoreSchema
        if key is Any and value is Any:
            python = core_schema.union_schema([core_schema.is_instance_schema(cls), from_dict])
        else:  # a FrozenMap of anything is validated item by item like a dict
            python = core_schema.no_info_wrap_validator_function(_keep_if_same, from_dict)
        return core_schema.json_or_python_schema(
            json_schema=from_dict,
            python_schema=python,
            serialization=core_schema.plain_serializer_function_ser_schema(
                dict, info_arg=False, return_schema=as_dict
            ),
        )


def _keep_if_same(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
    checked = handler(value)
    if isinstance(value, FrozenMap) and all(checked[k] is v for k, v in value._data.items()):
        return value  # validation changed nothing: keep sharing the original
    return checked


class _Trusted:
    """``Annotated`` marker: the field's validator makes every value immutable."""

    def __repr__(self) -> str:
        return "TRUSTED_IMMUTABLE"


#: Marks an ``Annotated`` field type whose own validator freezes its values
#: (as `Metadata`'s does); `mutable_part` takes it at its word.
TRUSTED_IMMUTABLE = _Trusted()


def _freeze(value: Any) -> Any:
    """``value`` with every list, dict, set and bytearray in it made immutable."""
    if isinstance(value, Mapping):
        return FrozenMap({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(_freeze(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _thaw(value: Any) -> Any:
    """The JSON-friendly form of a `_freeze` d value (mappings as dicts, tuples as lists)."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, frozenset):
        return [_thaw(v) for v in value]
    return value


#: Metadata: a read-only mapping of JSON-friendly values, frozen all the way down
#: (lists become tuples, dicts `FrozenMap` s, sets frozensets).
Metadata = Annotated[
    Mapping[str, Any],
    AfterValidator(_freeze),
    PlainSerializer(_thaw, return_type=dict[str, Any]),
    TRUSTED_IMMUTABLE,
]

#: Any JSON value (an object, an array, a string, a number, a bool or null), frozen
#: all the way down like `Metadata`, and stored as the JSON it was.
FrozenJson = Annotated[
    Any,
    AfterValidator(_freeze),
    PlainSerializer(_thaw),
    TRUSTED_IMMUTABLE,
]


# -- the check ---------------------------------------------------------------------

_SCALARS: tuple[type, ...] = (
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(None),
    decimal.Decimal,
    fractions.Fraction,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    datetime.tzinfo,
    uuid.UUID,
    enum.Enum,
    pathlib.PurePath,
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    range,
)

#: Immutable containers, checked through their item types.
_CONTAINERS = (tuple, frozenset, History, FrozenMap)

#: Mutable types by name, and the template of what to use instead (abstract ones
#: included: pydantic validates a ``Sequence`` into a list, a ``Mapping`` into a dict).
_SEQUENCE = "tuple[{0}, ...] (or History[{0}] for a sequence that grows)"
_INSTEAD: dict[str, str] = {
    **dict.fromkeys(
        ("list", "MutableSequence", "Sequence", "deque", "Iterable", "Collection"), _SEQUENCE
    ),
    **dict.fromkeys(
        ("dict", "MutableMapping", "Mapping", "OrderedDict", "defaultdict", "Counter"),
        "FrozenMap[{0}, {1}]",
    ),
    **dict.fromkeys(("set", "MutableSet", "Set", "AbstractSet"), "frozenset[{0}]"),
    "bytearray": "bytes",
}
_MUTABLE_HOMES = frozenset({"builtins", "collections", "collections.abc", "typing"})


#: ``type X = ...`` aliases (Python 3.12+, or typing_extensions).
_ALIAS_TYPES: tuple[type, ...] = tuple(
    t for t in (getattr(typing, "TypeAliasType", None),) if isinstance(t, type)
)


def _name(annotation: Any) -> str:
    """``annotation`` as one would write it: ``tuple[list[Step], ...]``, ``int | None``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Ellipsis:
        return "..."
    if annotation is None or annotation is type(None):
        return "None"
    if origin is Annotated:
        return _name(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_name(arg) for arg in args)
    if origin is Literal:
        return repr(annotation).replace("typing.", "")
    if origin is not None:
        inner = ", ".join(_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', repr(origin))}[{inner}]"
    return getattr(annotation, "__name__", repr(annotation).replace("typing.", ""))


def mutable_part(annotation: Any) -> tuple[str, str] | None:
    """The first mutable type inside a field type, and what to use instead.

    Looks through ``Annotated``, ``Optional`` and unions, type aliases and
    ``NewType``, immutable containers (``tuple``, ``frozenset``, `History`,
    `FrozenMap`) and the fields of frozen models, frozen dataclasses and named
    tuples. A type the check cannot tell is immutable (``Any``, ``object``, a
    plain class) counts as mutable: it could hold a list.

    Args:
        annotation: A field's type, as annotated.

    Returns:
        ``(found, instead)``: the mutable type as written and the immutable one
        to use; ``None`` when every value of ``annotation`` is immutable.
    """
    return _mutable(annotation, set())


def _mutable(annotation: Any, seen: set[type]) -> tuple[str, str] | None:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        if any(meta is TRUSTED_IMMUTABLE for meta in annotation.__metadata__):
            return None
        return _mutable(args[0], seen)
    if origin is Literal or annotation is None:
        return None
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            if (found := _mutable(arg, seen)) is not None:
                return found
        return None
    if isinstance(annotation, _ALIAS_TYPES):
        return _mutable(getattr(annotation, "__value__", Any), seen)
    if isinstance(annotation, typing.NewType):
        return _mutable(annotation.__supertype__, seen)
    if annotation is Any or annotation is object:
        return "Any", "a concrete immutable type (Any could hold a list or a dict)"
    if origin in _CONTAINERS:
        for arg in args:
            if arg is not Ellipsis and (found := _mutable(arg, seen)) is not None:
                return found
        return None
    kind = origin if origin is not None else annotation
    instead = _INSTEAD.get(getattr(kind, "__name__", ""))
    if instead is not None and getattr(kind, "__module__", "") in _MUTABLE_HOMES:
        names = [_name(arg) for arg in args] or (["K", "V"] if "{1}" in instead else ["X"])
        return _name(annotation), instead.format(*names)
    if isinstance(annotation, type):
        return _mutable_class(annotation, seen)
    return _name(annotation), "an immutable type the check can recognize"


def _mutable_class(cls: type, seen: set[type]) -> tuple[str, str] | None:
    if issubclass(cls, _SCALARS) or cls in seen:
        return None
    if cls in _CONTAINERS:
        return f"{cls.__name__} (items of any type)", f"{cls.__name__}[...] with its item types"
    seen.add(cls)
    if issubclass(cls, BaseModel):
        if not cls.model_config.get("frozen"):
            return f"{cls.__name__} (a model that is not frozen)", (
                f"a frozen model (model_config = ConfigDict(frozen=True) on {cls.__name__})"
            )
        if cls.model_config.get("extra") == "allow":
            return f"{cls.__name__} (a model with extra='allow')", "extra='forbid' or 'ignore'"
        hints = {name: f.rebuild_annotation() for name, f in cls.model_fields.items()}
    elif dataclasses.is_dataclass(cls):
        if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            return f"{cls.__name__} (a dataclass that is not frozen)", (
                f"a frozen dataclass (@dataclass(frozen=True) on {cls.__name__})"
            )
        every = typing.get_type_hints(cls, include_extras=True)
        hints = {f.name: every[f.name] for f in dataclasses.fields(cls)}
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple
        hints = typing.get_type_hints(cls, include_extras=True)
    else:
        return f"{cls.__name__} (a class the check cannot tell is immutable)", (
            "a frozen model, a frozen dataclass or an immutable built-in type"
        )
    for name, hint in hints.items():
        if (found := _mutable(hint, seen)) is not None:
            inner, instead = found
            return f"{inner} (in {cls.__name__}.{name})", instead
    return None
