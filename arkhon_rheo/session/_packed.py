"""An event's ``info`` with its dicts' keys numbered: what a log's row writes of it.

Every step of a session records the same few shapes of call (a model call's
request and response, a tool call's): written as they are, the keys of each
dict (``"kind"``, ``"request"``, ``"response"``, ``"usage"``, ``"prompt_tokens"``
...) are about half of a row's bytes, the same in every row. `pack` writes a
dict as a tuple of its keys' number in the machine's `Interner` (the keys
themselves once the interner is full) and its values; `unpack` reads it back,
an equal dict with its keys in the same order.

Only JSON-shaped data is packed (dicts with string keys, lists, strings,
numbers, booleans, None): a tuple in it would read back as a dict, so an
``info`` with a tuple, set or any other object in it is written as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    #: An interner's table (a tuple of keys to its number) and its numbering function.
    Interner = tuple[dict[object, int], Callable[[Any], Any]]

__all__ = ["pack", "unpack"]

#: The types written as they are.
_PLAIN = frozenset({str, int, float, bool, type(None)})


class _Unpackable(Exception):
    """Raised inside `pack` by a value it does not write (the info is written as it is)."""


def pack(info: dict[str, Any], interner: Interner) -> tuple[Any, ...] | None:
    """``info`` with each dict a tuple of its keys' number and its values; None if not JSON-shaped.

    Args:
        info: An event's ``info``.
        interner: The machine's interner's table and its ``number`` (a tuple of keys
            gets a number by value).
    """
    try:
        return _dict(info, interner)
    except (_Unpackable, RecursionError):
        return None


def _dict(data: dict[Any, Any], interner: Interner) -> tuple[Any, ...]:
    # Loops rather than a call per value: this runs at every commit that records a call.
    keys = tuple(data)
    found = interner[0].get(keys)
    if found is None:
        for key in keys:
            if type(key) is not str:
                raise _Unpackable
        found = interner[1](keys)
    return (found, *_list(data.values(), interner))


def _list(items: Iterable[Any], interner: Interner) -> list[Any]:
    out = []
    for value in items:
        kind = type(value)
        if kind in _PLAIN:
            out.append(value)
        elif kind is dict:
            out.append(_dict(value, interner))
        elif kind is list:
            out.append(_list(value, interner))
        else:
            raise _Unpackable
    return out


def unpack(packed: tuple[Any, ...], objects: list[Any]) -> dict[str, Any]:
    """The ``info`` `pack` wrote: fresh dicts and lists, equal to the ones packed.

    Args:
        packed: What `pack` returned.
        objects: The interner's objects (a key tuple's number is its place).
    """
    keys = packed[0]
    if type(keys) is int:
        keys = objects[keys]
    return {key: _read(value, objects) for key, value in zip(keys, packed[1:], strict=True)}


def _read(value: Any, objects: list[Any]) -> Any:
    kind = type(value)
    if kind is tuple:
        return unpack(value, objects)
    if kind is list:
        return [_read(item, objects) for item in value]
    return value
