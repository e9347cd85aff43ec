"""The commit rule, per state type: validate a patch, encode it, digest the state it leaves.

A commit (`Committing`, beside the supervisor) asks two things of the state's
type, compiled once per type (`StatePlan`): may this patch be written
(`PatchValidator`: permissions, values, invariants), and what is the digest of
the state it leaves (`StateHasher`, `StateDigest`: the patch encoded once, the
digest chained over those bytes). Both work at the cost of the written fields.

Patch validation: permissions, per-field value validation, invariants.

``model_copy(update=...)`` does not validate, so each written value is
validated on its own through a cached ``TypeAdapter`` of its field; appended
items through an adapter of the sequence's item type. Only the written fields
are touched, so the cost of a commit does not grow with the state's history.

A value whose validation could only give it back unchanged skips the adapter:
one of the exact types a plain field (no constraints, no field validator)
declares (``str``, ``int | None``, an enum, a pydantic model that is not
revalidated, a union or discriminated union of those), an ``int`` or
``float`` within a field's bounds (``Field(ge=0)``), a tuple of such items for
a ``tuple[X, ...]`` field, or a named tuple whose items are each of their
declared plain types.

A 64-bit digest of a state, kept up to date per commit at the cost of the patch.

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

import dataclasses
import enum
import functools
import json
import operator
import types
import typing
import weakref
from hashlib import blake2b
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin, is_typeddict

import annotated_types
from pydantic import BaseModel, PlainSerializer, TypeAdapter, ValidationError, WrapSerializer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError, to_json

from .._errors import (
    InvalidPatch,
    InvariantViolation,
    TransitionInvariantViolation,
    UndeclaredWrite,
    UnserializablePatch,
)
from ..core._seams import item_type, may_hold_floats
from ..protocols import SUPERVISOR_FIELDS, AgentState, History, Patch
from ..protocols._seams import EncodedPatch, canonical, may_hold_sets

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..core._seams import EventCodec
    from ..protocols import Condition, Machine, TransitionCondition, TransitionEvent

__all__ = [
    "PatchValidator",
    "StateDigest",
    "StateHasher",
    "check_edge",
    "check_invariants",
    "state_label",
]


def state_label(state: enum.Enum) -> str:
    """A lifecycle state as events and errors name it: its value if a string, else its name."""
    return str(state.value) if isinstance(state.value, str) else state.name


class _Fields:
    """The validation of each field of one state type: adapters and exact types.

    Args:
        state_type: The state type.
    """

    __slots__ = ("__weakref__", "checks", "exact", "exact_items", "hooked", "items", "values")

    def __init__(self, state_type: type[AgentState]) -> None:
        self.values: dict[str, TypeAdapter[Any]] = {}
        self.items: dict[str, TypeAdapter[Any] | None] = {}
        # Fields with the model's own field validators are validated through the
        # model (on a throwaway copy); the others through an adapter of their full
        # annotation, constraints and ``Annotated`` metadata included.
        self.hooked = frozenset(
            name
            for decorator in state_type.__pydantic_decorators__.field_validators.values()
            for name in decorator.info.fields
        )
        if "*" in self.hooked:
            self.hooked = frozenset(state_type.model_fields)
        #: The exact types a field's value may have to skip validation (see the module).
        self.exact: dict[str, frozenset[type]] = {}
        #: Whether an item appended to a sequence field may skip validation.
        self.exact_items: dict[str, Callable[[Any], bool]] = {}
        #: For the other fields, a test that a value validates as itself, where known.
        self.checks: dict[str, Callable[[Any], bool]] = {}
        for name, field in state_type.model_fields.items():
            annotation = field.rebuild_annotation()
            config = None if _has_config(field.annotation) else _CONFIG
            self.values[name] = TypeAdapter(annotation, config=config)
            item = item_type(field.annotation)
            self.items[name] = (
                None
                if item is None
                else TypeAdapter(item, config=None if _has_config(item) else _CONFIG)
            )
            if name in self.hooked:
                continue
            if field.metadata:
                if (bounded := _bounded_check(field.annotation, field.metadata)) is not None:
                    self.checks[name] = bounded
                continue
            if (exact := _exact_types(field.annotation)) is not None:
                self.exact[name] = exact
            if item is not None and (check := _item_check(item)) is not None:
                self.exact_items[name] = check
                if get_origin(field.annotation) is tuple:
                    self.checks[name] = _tuple_check(check)


#: Each state type's `_Fields`, made once: building pydantic adapters is the
#: dearest part of compiling a machine, and most machines of a process share
#: their state type (every ``react_agent`` has `ReactState` or a subclass).
_FIELDS: weakref.WeakKeyDictionary[type, _Fields] = weakref.WeakKeyDictionary()


class PatchValidator:
    """Validates patches against one machine's state type and invariants.

    Args:
        machine: The machine whose state type and invariants apply.
    """

    __slots__ = ("_checks", "_exact", "_exact_items", "_hooked", "_items", "_machine", "_values")

    def __init__(self, machine: Machine[Any]) -> None:
        self._machine = machine
        # The adapters depend on the state type only: machines sharing one share them.
        fields = _FIELDS.get(machine.state_type)
        if fields is None:
            fields = _FIELDS[machine.state_type] = _Fields(machine.state_type)
        self._hooked = fields.hooked
        self._values = fields.values
        self._items = fields.items
        self._exact = fields.exact
        self._exact_items = fields.exact_items
        self._checks = fields.checks

    def updates(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> dict[str, Any]:
        """Validate ``patch`` and return the field updates it makes to ``state``.

        Nothing is changed: the caller commits the updates, or drops them.

        Raises:
            UndeclaredWrite: If the patch writes outside ``writes`` (never partly merged).
            InvalidPatch: If a value fails its field's validation, a field is both
                assigned and appended to, or an append targets a non-sequence field.
        """
        return self.validate(state, patch, stage=stage, writes=writes)[0]

    def validate(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> tuple[dict[str, Any], Patch]:
        """Like `updates`, and also return the patch with its values as validated.

        The validated patch is what an event records (a dict a stage wrote for a
        model field is recorded as the model), so replaying it gives the same state.
        It is ``patch`` itself when validation changed no value.

        Raises:
            UndeclaredWrite: If the patch writes outside ``writes`` (never partly merged).
            InvalidPatch: If a value fails its field's validation, a field is both
                assigned and appended to, or an append targets a non-sequence field.
        """
        updates, patch, _ = self._validated(state, patch, stage=stage, writes=writes)
        return updates, patch

    def _validated(
        self,
        state: AgentState,
        patch: Patch,
        *,
        stage: str,
        writes: frozenset[str],
    ) -> tuple[dict[str, Any], Patch, frozenset[str]]:
        """`validate`, also returning the fields the patch writes (computed once)."""
        if not isinstance(patch, Patch):
            raise InvalidPatch(
                stage=stage,
                field="(patch)",
                reason=f"execute() returned {type(patch).__name__}, not a Patch",
            )
        values, appends = patch._parts()  # read only: no views, no copies
        written = frozenset(values) if not appends else frozenset(values).union(appends)
        if not written <= writes or not written.isdisjoint(SUPERVISOR_FIELDS):
            raise UndeclaredWrite(
                stage=stage, fields=written - (writes - SUPERVISOR_FIELDS), writes=writes
            )
        updates: dict[str, Any] = {}
        changed = False
        validated_appends: dict[str, tuple[Any, ...]] = {}
        exact, checks = self._exact, self._checks
        for name, value in values.items():
            if name in appends:
                raise InvalidPatch(
                    stage=stage, field=name, reason="a patch may assign or append, not both"
                )
            types_ = exact.get(name)
            if types_ is not None and type(value) in types_:
                updates[name] = value  # validation would give it back as it is
                continue
            check = checks.get(name)
            if check is not None and check(value):
                updates[name] = value  # likewise (a number within bounds, a tuple of such)
                continue
            try:
                if name in self._hooked:
                    scratch = state.model_copy()
                    type(state).__pydantic_validator__.validate_assignment(scratch, name, value)
                    updates[name] = getattr(scratch, name)
                else:
                    updates[name] = self._values[name].validate_python(value)
            except ValidationError as exc:
                raise InvalidPatch(stage=stage, field=name, reason=_reason(exc)) from exc
            changed = changed or updates[name] is not value
        for name, items in appends.items():
            adapter = self._items.get(name)
            if adapter is None:
                raise InvalidPatch(
                    stage=stage,
                    field=name,
                    reason="only History[...] or tuple[X, ...] fields can be appended to",
                )
            check = self._exact_items.get(name)
            if check is not None and all(map(check, items)):
                checked = items  # validation would give each back as it is
            else:
                try:
                    checked = tuple(adapter.validate_python(item) for item in items)
                except ValidationError as exc:
                    raise InvalidPatch(stage=stage, field=name, reason=_reason(exc)) from exc
                changed = changed or any(a is not b for a, b in zip(checked, items, strict=True))
            validated_appends[name] = checked
            current = getattr(state, name)
            if isinstance(current, History):
                updates[name] = current.append(*checked)
            else:
                updates[name] = (*current, *checked)
        if changed:
            patch = Patch.of({name: updates[name] for name in values}, validated_appends)
        return updates, patch, written

    def check_invariants(self, state: AgentState, lifecycle: enum.Enum, *, stage: str) -> None:
        """Check every invariant of ``lifecycle`` on ``state``.

        Raises:
            InvariantViolation: Naming the first invariant that does not hold, or
                whose predicate raised.
        """
        check_invariants(self._machine.invariants_of(lifecycle), state, lifecycle, stage=stage)

    def check_transition(self, before: AgentState, after: AgentState, *, stage: str) -> None:
        """Check the invariants of the edge from ``before.lifecycle`` to ``after.lifecycle``.

        Raises:
            TransitionInvariantViolation: Naming the first that does not hold, or
                whose predicate raised.
        """
        source, target = before.lifecycle, after.lifecycle
        check_edge(
            self._machine.transition_invariants_of(source, target), before, after, stage=stage
        )


def check_invariants(
    conditions: Iterable[Condition[Any]], state: AgentState, lifecycle: enum.Enum, *, stage: str
) -> None:
    """Check ``conditions`` (the invariants of ``lifecycle``) on ``state``.

    Raises:
        InvariantViolation: Naming the first that does not hold, or whose predicate raised.
    """
    for condition in conditions:
        try:
            holds = condition.holds(state)
        except Exception as exc:  # a broken predicate is a violation, never a crash
            raise InvariantViolation(
                stage=stage,
                invariant=f"{condition.name} (the check raised {exc!r})",
                lifecycle=state_label(lifecycle),
            ) from exc
        if not holds:
            raise InvariantViolation(
                stage=stage, invariant=condition.name, lifecycle=state_label(lifecycle)
            )


def check_edge(
    conditions: Iterable[TransitionCondition[Any]],
    before: AgentState,
    after: AgentState,
    *,
    stage: str,
) -> None:
    """Check ``conditions`` (the invariants of the edge ``before`` -> ``after``).

    Raises:
        TransitionInvariantViolation: Naming the first that does not hold, or
            whose predicate raised.
    """
    for condition in conditions:
        try:
            holds = condition.holds(before, after)
        except Exception as exc:  # a broken predicate is a violation, never a crash
            raise TransitionInvariantViolation(
                stage=stage,
                invariant=f"{condition.name} (the check raised {exc!r})",
                from_state=state_label(before.lifecycle),
                to_state=state_label(after.lifecycle),
            ) from exc
        if not holds:
            raise TransitionInvariantViolation(
                stage=stage,
                invariant=condition.name,
                from_state=state_label(before.lifecycle),
                to_state=state_label(after.lifecycle),
            )


def _reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{first.get('msg', exc)}" + (f" (at {where})" if where else "")


_CONFIG: Any = {"arbitrary_types_allowed": True}
#: Types whose exact instances pydantic's lax validation gives back as they are.
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _exact_types(annotation: Any) -> frozenset[type] | None:
    """The exact types whose values validate as themselves under ``annotation``, if known.

    A plain type, an enum, a pydantic model that is never revalidated, or a union
    of plain types (``str | None``); ``None`` for anything else (constraints,
    containers, ``Annotated`` metadata...), which is always validated.
    """
    if annotation in _PLAIN:
        return frozenset({annotation})
    if get_origin(annotation) is Annotated:  # a discriminated union, and nothing else
        inner, *extra = get_args(annotation)
        if len(extra) == 1 and _only_discriminator(extra[0]):
            return _exact_types(inner)
        return None
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return frozenset({annotation})
        if (
            issubclass(annotation, BaseModel)
            and annotation.model_config.get("revalidate_instances", "never") == "never"
        ):
            return frozenset({annotation})
        return None
    if get_origin(annotation) in (typing.Union, types.UnionType):
        # An exact instance of one member is that member's strict match: a union
        # gives it back as it is (its other members do not convert it).
        found = [_exact_types(member) for member in get_args(annotation)]
        if all(kinds is not None for kinds in found):
            return frozenset().union(*(kinds for kinds in found if kinds is not None))
    return None


def _only_discriminator(metadata: Any) -> bool:
    """Whether ``metadata`` (of an ``Annotated`` union) names a discriminator and nothing else."""
    if not isinstance(metadata, FieldInfo) or metadata.discriminator is None:
        return False
    return not metadata.metadata and isinstance(metadata.discriminator, str)


#: The bounds a number's field may declare, and the test each makes.
_BOUNDS: dict[type, tuple[str, Callable[[Any, Any], bool]]] = {
    annotated_types.Ge: ("ge", operator.ge),
    annotated_types.Gt: ("gt", operator.gt),
    annotated_types.Le: ("le", operator.le),
    annotated_types.Lt: ("lt", operator.lt),
}


def _bounded_check(annotation: Any, metadata: list[Any]) -> Callable[[Any], bool] | None:
    """A test that a value of an ``int`` or ``float`` field with bounds only is valid as it is.

    ``turns: int = Field(ge=0)``: an exact ``int`` within the bounds validates as
    itself; anything else (out of bounds, NaN, another type) goes to the adapter.
    """
    if annotation not in (int, float):
        return None
    tests: list[tuple[Callable[[Any, Any], bool], Any]] = []
    for item in metadata:
        bound = _BOUNDS.get(type(item))
        if bound is None:
            return None
        tests.append((bound[1], getattr(item, bound[0])))

    def check(value: Any) -> bool:
        if type(value) is not annotation:
            return False
        # A loop, not all(): no generator made at each commit (the collector counts those).
        for test, limit in tests:  # noqa: SIM110
            if not test(value, limit):
                return False
        return True

    return check


def _tuple_check(item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A test that a whole ``tuple[X, ...]`` validates as itself: a tuple of such items."""

    def check(value: Any) -> bool:
        if type(value) is not tuple:
            return False
        for one in value:  # noqa: SIM110 (likewise)
            if not item(one):
                return False
        return True

    return check


def _item_check(item: Any) -> Callable[[Any], bool] | None:
    """A test that an appended item would validate as itself, if one is known.

    An item of an exact type of `_exact_types`; or a named tuple whose fields are
    each of their annotation's exact plain types (a named tuple does not check
    its fields, so those are looked at one by one).
    """
    exact = _exact_types(item)
    if exact is not None:
        return lambda value: type(value) in exact
    if not (isinstance(item, type) and issubclass(item, tuple) and hasattr(item, "_fields")):
        return None
    try:
        hints = typing.get_type_hints(item)
    except Exception:  # an unresolvable annotation: validate as declared
        return None
    fields: list[frozenset[type]] = []
    for name in item._fields:
        found = _exact_types(hints.get(name, Any))
        if found is None or not found <= _PLAIN:
            return None
        fields.append(found)
    kinds = tuple(fields)
    size = len(kinds)

    def check(value: Any) -> bool:
        # ``map`` rather than a generator in ``all()``: half the cost, at every commit.
        # The length too: ``map`` stops at the shorter (a tuple built by ``tuple.__new__``).
        return (
            type(value) is item
            and len(value) == size
            and all(map(frozenset.__contains__, kinds, map(type, value)))
        )

    return check


def _has_config(annotation: Any) -> bool:
    """Whether ``annotation`` carries its own pydantic config (a model, dataclass, TypedDict).

    pydantic refuses a ``config`` for those; ``Annotated`` wrappers are looked through.
    """
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if not isinstance(annotation, type):
        return False
    return (
        issubclass(annotation, BaseModel)
        or dataclasses.is_dataclass(annotation)
        or is_typeddict(annotation)
    )


# The state digest.

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
