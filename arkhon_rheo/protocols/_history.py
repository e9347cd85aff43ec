"""`History`: an immutable, append-only sequence that shares its past between versions.

Appending to a tuple copies every element, so a state that grows one step per
commit would make each commit cost grow with the session's length. A
`History` keeps its items in fixed-size chunks: appending copies at most one
chunk and a tuple of chunk pointers (1/64 of the length), and every version
shares all full chunks with the version it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args, overload

from pydantic_core import core_schema

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler

__all__ = ["History"]

T = TypeVar("T")

_CHUNK = 64


class History(Sequence[T], Generic[T]):
    """An immutable sequence whose `append` returns a new version in O(1) amortized time.

    Use it as the type of a state field that only ever grows (steps, messages,
    observations): ``steps: History[Step] = History()``. A patch appends to
    it with ``Patch(...).append("steps", step)``. It validates from any list,
    tuple or `History`, each item against ``T`` whatever it came in, and
    serializes as a list.
    """

    __slots__ = ("_chunks", "_len", "_tail")

    def __init__(self, items: Iterable[T] = ()) -> None:
        values = tuple(items)
        cut = len(values) - len(values) % _CHUNK
        self._chunks: tuple[tuple[T, ...], ...] = tuple(
            values[i : i + _CHUNK] for i in range(0, cut, _CHUNK)
        )
        self._tail: tuple[T, ...] = values[cut:]
        self._len = len(values)

    @classmethod
    def _make(
        cls, chunks: tuple[tuple[T, ...], ...], tail: tuple[T, ...], length: int
    ) -> History[T]:
        new = cls.__new__(cls)
        new._chunks, new._tail, new._len = chunks, tail, length
        return new

    def append(self, *items: T) -> History[T]:
        """Return a new history with ``items`` added at the end; this one is unchanged."""
        chunks, tail = self._chunks, self._tail
        for item in items:
            tail = (*tail, item)
            if len(tail) == _CHUNK:
                chunks, tail = (*chunks, tail), ()
        return self._make(chunks, tail, self._len + len(items))

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"history index {index} out of range (length {self._len})")
        chunk, offset = divmod(index, _CHUNK)
        if chunk < len(self._chunks):
            return self._chunks[chunk][offset]
        return self._tail[offset]

    def __iter__(self) -> Iterator[T]:
        # One C-level iterator over the chunks (a generator resumed per item costs
        # ~40% more when a prompt is built from a long conversation each turn).
        return chain(*self._chunks, self._tail)

    def __reversed__(self) -> Iterator[T]:
        yield from reversed(self._tail)
        for chunk in reversed(self._chunks):
            yield from reversed(chunk)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            if self._len != other._len:
                return False
            return self._chunks == other._chunks and self._tail == other._tail
        if isinstance(other, tuple | list):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._chunks, self._tail))

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        args = get_args(source)
        item_schema = handler.generate_schema(args[0]) if args else core_schema.any_schema()
        from_list = core_schema.no_info_after_validator_function(
            cls, core_schema.list_schema(item_schema)
        )
        python: core_schema.CoreSchema
        if not args or args[0] is Any:
            python = core_schema.union_schema([core_schema.is_instance_schema(cls), from_list])
        else:  # a History of anything is validated item by item like a list
            python = core_schema.no_info_wrap_validator_function(_keep_if_same, from_list)
        return core_schema.json_or_python_schema(
            json_schema=from_list,
            python_schema=python,
            serialization=core_schema.plain_serializer_function_ser_schema(
                list, info_arg=False, return_schema=core_schema.list_schema(item_schema)
            ),
        )


def _keep_if_same(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
    if not isinstance(value, History):
        return handler(value)
    checked = handler(list(value))
    if all(a is b for a, b in zip(checked, value, strict=True)):
        return value  # validation changed nothing: keep sharing the original's chunks
    return checked
