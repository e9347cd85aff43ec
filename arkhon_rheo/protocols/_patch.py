"""`Patch`: the change a stage proposes, by field name, never the whole state."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Patch"]

# Shared by every patch that assigns or appends nothing; never mutated.
_EMPTY: dict[str, Any] = {}


class Patch:
    """Field assignments plus appends to sequence fields, proposed by a stage.

    ``Patch(answer="42")`` assigns a field; ``.append("steps", step, ...)``
    adds items at the end of a sequence field (a `History` shares its past, so
    the history is not rewritten). A field may be assigned or appended to,
    not both. Patches are immutable; the builder methods return new ones.

    Args:
        **values: The fields to assign and their new values.
    """

    # Plain dicts, read through fresh read-only views: a patch lives on in its
    # event, and a dict of plain values is one object the cyclic GC need not
    # track, where a kept mappingproxy is one more it scans on every collection.
    __slots__ = ("_appends", "_values")

    def __init__(self, **values: Any) -> None:
        self._values: dict[str, Any] = values if values else _EMPTY
        self._appends: dict[str, tuple[Any, ...]] = _EMPTY

    @classmethod
    def of(
        cls, values: Mapping[str, Any], appends: Mapping[str, tuple[Any, ...]] | None = None
    ) -> Patch:
        """Build a patch from mappings (field names need not be identifiers)."""
        patch = cls(**dict(values))
        if appends:
            patch._appends = {k: tuple(v) for k, v in appends.items()}
        return patch

    @classmethod
    def _from_parts(cls, values: dict[str, Any], appends: dict[str, tuple[Any, ...]]) -> Patch:
        """A patch over ``values`` and ``appends`` as `_parts` gave them (nothing copied)."""
        patch = cls.__new__(cls)
        patch._values = values if values else _EMPTY
        patch._appends = appends if appends else _EMPTY
        return patch

    def _parts(self) -> tuple[dict[str, Any], dict[str, tuple[Any, ...]]]:
        """The patch's own dicts, for a log that keeps them (never to be mutated)."""
        return self._values, self._appends

    @property
    def values(self) -> Mapping[str, Any]:
        """The assignments, by field name (a read-only view)."""
        return MappingProxyType(self._values)

    @property
    def appends(self) -> Mapping[str, tuple[Any, ...]]:
        """The items to append, by field name (a read-only view)."""
        return MappingProxyType(self._appends)

    @property
    def fields(self) -> frozenset[str]:
        """Every field the patch writes."""
        return frozenset(self._values) | frozenset(self._appends)

    def append(self, field: str, *items: Any) -> Patch:
        """Return a patch that also appends ``items`` to the sequence ``field``."""
        appends = dict(self._appends)
        appends[field] = (*appends.get(field, ()), *items)
        # The assignments are shared, not copied: no patch changes its dicts.
        return Patch._from_parts(self._values, appends)

    def set(self, **values: Any) -> Patch:
        """Return a patch that also assigns ``values``."""
        return Patch.of({**self._values, **values}, self._appends)

    def __bool__(self) -> bool:
        return bool(self._values or self._appends)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Patch):
            return NotImplemented
        return dict(self._values) == dict(other._values) and dict(self._appends) == dict(
            other._appends
        )

    def __hash__(self) -> int:
        return hash((tuple(sorted(self._values)), tuple(sorted(self._appends))))

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self._values.items()]
        parts += [f"+{k}={list(v)!r}" for k, v in self._appends.items()]
        return f"Patch({', '.join(parts)})"
