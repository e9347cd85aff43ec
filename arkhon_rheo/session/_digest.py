"""A 64-bit digest of a state, kept up to date per commit at the cost of the patch.

Each field has its own digest: BLAKE2b of its JSON (through the field's own
adapter; sets sorted, so hash randomization does not matter), or, for a sequence
field (``History[X]``, ``tuple[X, ...]``), a chain over its items, so an
append costs the appended items only (and so does assigning a sequence that
extends the old one). The state's digest
is BLAKE2b of the field digests in field order. Every stored event carries the
digest of the state it left, which lets `replay` name the first event whose
fold no longer gives the state that was committed.

The digest detects drift and damage; it is not a security feature. It is a
function of the state's JSON form: a dict's key order counts (JSON keeps it,
so a replay sees the same order), and a change to the state type (a field
added, even with a default) changes every digest.

A commit serializes each value it writes once: `StateHasher.encode` turns the
patch into JSON bytes (an `EncodedPatch`), the digest is chained over those
bytes, and the store splices the same bytes into its row.
"""

from __future__ import annotations

import enum
import functools
import json
import operator
from hashlib import blake2b
from typing import TYPE_CHECKING, Any

from pydantic import PlainSerializer, WrapSerializer
from pydantic_core import PydanticSerializationError, to_json

from .._errors import UnserializablePatch
from ..core._seams import item_type, may_hold_floats
from ..protocols._seams import EncodedPatch, canonical, may_hold_sets

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pydantic import TypeAdapter

    from ..core._seams import EventCodec
    from ..protocols import AgentState, Patch, TransitionEvent

__all__ = ["StateDigest", "StateHasher"]

_SIZE = 8
_EMPTY = bytes(_SIZE)
#: A fresh 8-byte BLAKE2b, copied for each digest: ``copy`` then ``update`` costs
#: about half of the constructor's keyword parsing, for the same bytes.
_new = blake2b(digest_size=_SIZE).copy


def _hash(data: bytes) -> bytes:
    """BLAKE2b of ``data`` in `_SIZE` bytes."""
    h = _new()
    h.update(data)
    return h.digest()


def _hash2(first: bytes, second: bytes) -> bytes:
    """BLAKE2b of ``first + second`` (no concatenation made) in `_SIZE` bytes."""
    h = _new()
    h.update(first)
    h.update(second)
    return h.digest()


#: Fields the supervisor may change on any event without their being in its patch.
_DERIVED = ("lifecycle", "iteration", "last_error")
_derived_of = operator.attrgetter(*_DERIVED)
#: Their names one by one, for `StateDigest.after`'s unrolled checks (three, or this fails).
_FIRST, _SECOND, _THIRD = _DERIVED
_REFUSED = (PydanticSerializationError, ValueError, TypeError, KeyError, RecursionError)


class StateHasher:
    """Digests one machine's states, through its codec's field adapters.

    Args:
        codec: The codec of the machine whose state type applies.
    """

    __slots__ = ("_codec", "_dumps", "_fields", "_floats", "_items", "_members")

    def __init__(self, codec: EventCodec) -> None:
        fields = codec.machine.state_type.model_fields
        self._codec = codec
        self._fields = tuple(fields)
        #: Digests of enum members by field, then the member's ``id`` (members live as
        #: long as their enum, and ``Enum.__hash__`` is a Python call).
        self._members: dict[str, dict[int, tuple[enum.Enum, bytes]]] = {name: {} for name in fields}
        self._items: set[str] = set()
        self._dumps: dict[str, Callable[[Any], bytes]] = {}
        #: Fields whose values may hold a float (and so a NaN, which JSON cannot hold).
        self._floats = frozenset(
            name
            for name, info in fields.items()
            if may_hold_floats(info.annotation)
            or any(isinstance(meta, (PlainSerializer, WrapSerializer)) for meta in info.metadata)
        )
        for name, info in fields.items():
            item = item_type(info.annotation)
            if item is None:
                annotation, adapter = info.rebuild_annotation(), codec.adapter(name)
            else:
                annotation, adapter = item, codec.adapter(name, item=True)
                self._items.add(name)
            # A set's JSON follows its iteration order, which depends on hash
            # randomization: fields that may hold one are dumped in canonical form.
            # (The serializer's own ``to_json``: `TypeAdapter.dump_json` passes it the
            # same defaults, through a Python call of a dozen keywords per value.)
            self._dumps[name] = (
                functools.partial(_canonical_json, adapter)
                if may_hold_sets(annotation)
                else adapter.serializer.to_json
            )

    def field(self, name: str, value: Any) -> bytes:
        """The digest of field ``name`` holding ``value``."""
        kind = type(value)
        if kind is int:  # the iteration count, on most commits: no adapter needed
            return _hash(b"%d" % value)
        if isinstance(value, enum.Enum):  # the lifecycle: one digest per member
            members = self._members[name]
            found = members.get(id(value))
            if found is None:
                dumped = self._dumps[name](value)
                digest = _hash(dumped)
                members[id(value)] = (value, digest)  # the member kept: its id stays
                return digest
            return found[1]
        if name in self._items:
            return self.extend(name, _EMPTY, value)
        return _hash(self._dumps[name](value))

    def extend(self, name: str, digest: bytes, items: Iterable[Any]) -> bytes:
        """The digest of sequence field ``name`` after ``items`` are appended to it."""
        dump = self._dumps[name]
        for item in items:
            digest = _hash2(digest, dump(item))
        return digest

    def encode(self, patch: Patch, *, stage: str | None = None) -> EncodedPatch:
        """Turn each value ``patch`` writes into JSON bytes, once (see the module's doc).

        The bytes are those the field's digest is made of; they are also what a
        store keeps. A value that is not JSON data, or holds NaN or an infinity, is
        refused.

        Raises:
            UnserializablePatch: Naming the field whose value cannot be stored.
        """
        values: dict[str, bytes] = {}
        appends: dict[str, list[bytes]] = {}
        items: dict[str, list[bytes]] = {}
        name = ""
        try:
            for name, value in patch.values.items():
                if name in self._items:
                    encoded = items[name] = [self._json(name, item, True) for item in value]
                    values[name] = b"[" + b",".join(encoded) + b"]"
                else:
                    values[name] = self._json(name, value, False)
            for name, appended in patch.appends.items():
                if name not in self._items:
                    raise KeyError(f"{name!r} is not a sequence field")
                appends[name] = [self._json(name, item, True) for item in appended]
        except _REFUSED as exc:
            raise UnserializablePatch(stage=stage, field=name, reason=str(exc)) from exc
        return EncodedPatch(values, appends, items)

    def _json(self, name: str, value: Any, item: bool) -> bytes:
        if type(value) is int:
            return b"%d" % value
        if isinstance(value, enum.Enum):
            return self._dumps[name](value)
        dumped = self._dumps[name](value)
        if name in self._floats and value is not None and _suspect(dumped):
            # ``null`` may stand for a NaN: make sure with the exact encoder, which refuses one.
            data = self._codec.adapter(name, item=item).serializer.to_python(value, mode="json")
            json.dumps(data, allow_nan=False)
        return dumped

    @staticmethod
    def chain(digest: bytes, encoded: Iterable[bytes]) -> bytes:
        """``digest`` extended by items already encoded (see `extend`)."""
        for item in encoded:
            digest = _hash2(digest, item)
        return digest

    def is_sequence(self, name: str) -> bool:
        """Whether field ``name`` is digested item by item."""
        return name in self._items

    def start(self, state: AgentState) -> StateDigest:
        """The digest of ``state``, computed in full (O(state))."""
        fields = {name: self.field(name, getattr(state, name)) for name in self._fields}
        derived = _derived_of(state)
        sequences = {name: getattr(state, name) for name in self._items}
        return StateDigest(self, fields, derived, sequences)

    def of(self, state: AgentState) -> int:
        """The digest of ``state`` as a signed 64-bit integer."""
        return self.start(state).value


def _suspect(dumped: bytes) -> bool:
    """Whether JSON may hold a NaN or an infinity.

    pydantic writes those as ``null`` (or as these constants, when configured so).
    """
    return b"null" in dumped or b"NaN" in dumped or b"Infinity" in dumped


def _canonical_json(adapter: TypeAdapter[Any], value: Any) -> bytes:
    return to_json(canonical(adapter.dump_python(value)))


def _extends(old: Any, new: Any) -> bool:
    """Whether sequence ``new`` starts with every item of ``old``."""
    if len(new) < len(old):
        return False
    return all(a is b or a == b for a, b in zip(old, new))  # noqa: B905 - new may be longer


class StateDigest:
    """A state's digest that follows the state from event to event.

    `after` computes the digest of the next state from an event at the cost of
    its patch and returns it without changing this one; `accept` moves on once
    the event is stored, so a write that fails leaves the digest where it was.
    """

    # The derived fields' values are three slots, not a tuple: a commit waiting for
    # its store keeps its next digest alive, and a tuple holding an enum member
    # would be one more object for the cyclic GC to walk at every collection.
    __slots__ = ("_error", "_fields", "_hasher", "_iteration", "_lifecycle", "_sequences", "value")

    def __init__(
        self,
        hasher: StateHasher,
        fields: dict[str, bytes],
        derived: tuple[Any, ...],
        sequences: dict[str, Any],
    ) -> None:
        self._hasher = hasher
        self._fields = fields
        # The derived fields' values their digests were made from: an unchanged
        # value (the same object) keeps its digest, which is most of the time.
        self._lifecycle, self._iteration, self._error = derived
        # The sequences the chains were made from: a sequence assigned whole that
        # extends the old one costs its new items only.
        self._sequences = sequences
        self.value = _combine(fields)

    @property
    def hasher(self) -> StateHasher:
        """The hasher this digest was made by."""
        return self._hasher

    def after(
        self, event: TransitionEvent, state: AgentState, encoded: EncodedPatch | None = None
    ) -> StateDigest:
        """The digest of ``state``, the state ``event`` leads to from this one's.

        ``encoded`` is the event's patch as `StateHasher.encode` made it (encoded
        here when not given).

        Raises:
            UnserializablePatch: If the patch holds a value that cannot be stored.
        """
        hasher = self._hasher
        if encoded is None:
            encoded = hasher.encode(event.patch, stage=event.stage)
        fields = self._fields.copy()
        sequences = self._sequences
        written, appends = event.patch._parts()  # read only
        values, items = encoded.values, encoded.items
        for name, value in written.items():
            chained = items.get(name) if items else None
            if chained is None:
                fields[name] = _hash(values[name])
                continue
            old = sequences.get(name)
            if old is not None and _extends(old, value):
                fields[name] = hasher.chain(fields[name], chained[len(old) :])
            else:
                fields[name] = hasher.chain(_EMPTY, chained)
        for name, appended in encoded.appends.items():
            fields[name] = hasher.chain(fields[name], appended)
        if appends or items:
            sequences = dict(sequences)
            for name in (*items, *appends):
                sequences[name] = getattr(state, name)
        derived = _derived_of(state)
        first, second, third = derived
        # Unrolled over `_DERIVED`: no iterator objects on every commit.
        if first is not self._lifecycle and _FIRST not in written:
            fields[_FIRST] = hasher.field(_FIRST, first)
        if second is not self._iteration and _SECOND not in written:
            fields[_SECOND] = hasher.field(_SECOND, second)
        if third is not self._error and _THIRD not in written:
            fields[_THIRD] = hasher.field(_THIRD, third)
        return StateDigest(hasher, fields, derived, sequences)

    def accept(self, other: StateDigest) -> None:
        """Become ``other`` (the digest `after` computed for an event now stored)."""
        self._fields = other._fields
        self._lifecycle, self._iteration, self._error = (
            other._lifecycle,
            other._iteration,
            other._error,
        )
        self._sequences = other._sequences
        self.value = other.value


_from_bytes = int.from_bytes


def _combine(fields: dict[str, bytes]) -> int:
    h = _new()
    h.update(b"".join(fields.values()))
    return _from_bytes(h.digest(), "big", signed=True)
