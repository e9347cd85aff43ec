"""Classes whose instances only the package makes ("no public constructor").

It imports nothing of the package, so every layer may use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["internal_only", "make"]

T = TypeVar("T")


def internal_only(hint: str) -> Callable[..., NoReturn]:
    """An ``__init__`` that refuses to run, saying where instances come from.

    Args:
        hint: What to call instead, e.g. ``"ActorSystem.spawn() returns one"``.
    """

    def __init__(self: object, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{type(self).__name__} has no public constructor: {hint}")

    return __init__


def make(cls: type[T], **fields: object) -> T:
    """An instance of ``cls`` made without its ``__init__``, its slots set from ``fields``."""
    instance = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(instance, name, value)
    return instance
