"""A 64-bit digest of a state, kept up to date per commit at the cost of the patch.

Each field has its own digest: BLAKE2b of its JSON (through the field's own
adapter), or, for a sequence field (``History[X]``, ``tuple[X, ...]``), a chain
over its items, so an append costs the appended items only. The state's digest
is BLAKE2b of the field digests in field order. Every stored event carries the
digest of the state it left, which lets `replay` name the first event whose
fold no longer gives the state that was committed.

The digest detects drift and damage; it is not a security feature.
"""

from __future__ import annotations

import enum
from hashlib import blake2b
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from ._validate import _item_type

if TYPE_CHECKING:
    from ..protocols import AgentState, Machine, TransitionEvent

__all__ = ["StateDigest", "StateHasher"]

_SIZE = 8
_EMPTY = bytes(_SIZE)
#: Fields the supervisor may change on any event without their being in its patch.
_DERIVED = ("lifecycle", "iteration", "last_error")


class StateHasher:
    """Digests one machine's states (the field adapters are built once).

    Args:
        machine: The machine whose state type applies.
    """

    __slots__ = ("_fields", "_items", "_members", "_values")

    def __init__(self, machine: Machine[Any]) -> None:
        fields = machine.state_type.model_fields
        self._fields = tuple(fields)
        self._members: dict[tuple[str, enum.Enum], bytes] = {}
        self._values: dict[str, TypeAdapter[Any]] = {}
        self._items: dict[str, TypeAdapter[Any]] = {}
        for name, info in fields.items():
            item = _item_type(info.annotation)
            if item is None:
                self._values[name] = TypeAdapter(info.rebuild_annotation())
            else:
                self._items[name] = TypeAdapter(item)

    def field(self, name: str, value: Any) -> bytes:
        """The digest of field ``name`` holding ``value``."""
        kind = type(value)
        if kind is int:  # the iteration count, on most commits: no adapter needed
            return blake2b(b"%d" % value, digest_size=_SIZE).digest()
        if isinstance(value, enum.Enum):  # the lifecycle: one digest per member
            digest = self._members.get((name, value))
            if digest is None:
                dumped = self._values[name].dump_json(value)
                digest = self._members[name, value] = blake2b(dumped, digest_size=_SIZE).digest()
            return digest
        adapter = self._items.get(name)
        if adapter is None:
            return blake2b(self._values[name].dump_json(value), digest_size=_SIZE).digest()
        return self.extend(name, _EMPTY, value)

    def extend(self, name: str, digest: bytes, items: Any) -> bytes:
        """The digest of sequence field ``name`` after ``items`` are appended to it."""
        dump = self._items[name].dump_json
        for item in items:
            digest = blake2b(digest + dump(item), digest_size=_SIZE).digest()
        return digest

    def start(self, state: AgentState) -> StateDigest:
        """The digest of ``state``, computed in full (O(state))."""
        fields = {name: self.field(name, getattr(state, name)) for name in self._fields}
        return StateDigest(self, fields, tuple([getattr(state, name) for name in _DERIVED]))

    def of(self, state: AgentState) -> int:
        """The digest of ``state`` as a signed 64-bit integer."""
        return self.start(state).value


class StateDigest:
    """A state's digest that follows the state from event to event.

    `after` computes the digest of the next state from an event at the cost of
    its patch and returns it without changing this one; `accept` moves on once
    the event is stored, so a write that fails leaves the digest where it was.
    """

    __slots__ = ("_derived", "_fields", "_hasher", "value")

    def __init__(
        self, hasher: StateHasher, fields: dict[str, bytes], derived: tuple[Any, ...]
    ) -> None:
        self._hasher = hasher
        self._fields = fields
        # The derived fields' values their digests were made from: an unchanged
        # value (the same object) keeps its digest, which is most of the time.
        self._derived = derived
        self.value = _combine(fields)

    def after(self, event: TransitionEvent, state: AgentState) -> StateDigest:
        """The digest of ``state``, the state ``event`` leads to from this one's."""
        hasher = self._hasher
        fields = dict(self._fields)
        patch = event.patch
        written = patch.values
        for name, value in written.items():
            fields[name] = hasher.field(name, value)
        for name, items in patch.appends.items():
            fields[name] = hasher.extend(name, fields[name], items)
        derived = tuple([getattr(state, name) for name in _DERIVED])
        for name, value, before in zip(_DERIVED, derived, self._derived, strict=True):
            if value is not before and name not in written:
                fields[name] = hasher.field(name, value)
        return StateDigest(hasher, fields, derived)

    def accept(self, other: StateDigest) -> None:
        """Become ``other`` (the digest `after` computed for an event now stored)."""
        self._fields = other._fields
        self._derived = other._derived
        self.value = other.value


def _combine(fields: dict[str, bytes]) -> int:
    digest = blake2b(b"".join(fields.values()), digest_size=_SIZE).digest()
    return int.from_bytes(digest, "big", signed=True)
