"""From states and events to the plain JSON data a store keeps, and back.

Every value is turned into JSON through the adapter of its own field, so what
comes back is validated exactly like a patch (and folds, with `apply_event`,
to the state the supervisor committed).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from .._errors import KeyringError, StoreCorrupt, UnserializablePatch
from ..protocols import (
    AgentState,
    EventKind,
    FailureRecord,
    Machine,
    Patch,
    StoredEvent,
    TransitionEvent,
)
from ..protocols._seams import SENSITIVE, EncodedJson, sensitive_fields
from ._schemas import item_type

if TYPE_CHECKING:
    import enum

__all__ = ["EventCodec"]

_NAMES_MAX = 1024

#: The slots of `StoredEvent`, set one by one by `_stored_event`: its frozen
#: ``__init__`` sets each field through ``object.__setattr__``, twice the cost.
_SLOTS = tuple(getattr(StoredEvent, each.name).__set__ for each in dataclasses.fields(StoredEvent))
(
    _SESSION_ID,
    _SEQ,
    _KIND,
    _STAGE,
    _FROM_STATE,
    _TO_STATE,
    _READS,
    _WRITES,
    _PATCH,
    _ATTEMPT,
    _STARTED_AT,
    _FINISHED_AT,
    _ERROR,
    _IO,
    _DIGEST,
) = _SLOTS
_new = object.__new__


def _stored_event(
    session_id: str,
    seq: int,
    kind: str,
    stage: str | None,
    from_state: str,
    to_state: str,
    reads: tuple[str, ...],
    writes: tuple[str, ...],
    patch: Any,
    attempt: int,
    started_at: float,
    finished_at: float,
    error: Any,
    io: Any,
    digest: int | None,
) -> StoredEvent:
    """``StoredEvent(...)`` with these values, made at half the cost (see `_SLOTS`)."""
    stored: StoredEvent = _new(StoredEvent)
    _SESSION_ID(stored, session_id)
    _SEQ(stored, seq)
    _KIND(stored, kind)
    _STAGE(stored, stage)
    _FROM_STATE(stored, from_state)
    _TO_STATE(stored, to_state)
    _READS(stored, reads)
    _WRITES(stored, writes)
    _PATCH(stored, patch)
    _ATTEMPT(stored, attempt)
    _STARTED_AT(stored, started_at)
    _FINISHED_AT(stored, finished_at)
    _ERROR(stored, error)
    _IO(stored, io)
    _DIGEST(stored, digest)
    return stored


class EventCodec:
    """Encodes one machine's states and events as JSON data, and decodes them.

    Args:
        machine: The machine whose state type and lifecycle enum apply.
    """

    __slots__ = (
        "_dump_items",
        "_dump_values",
        "_items",
        "_lifecycle",
        "_machine",
        "_names",
        "_sensitive",
        "_values",
    )

    def __init__(self, machine: Machine[Any]) -> None:
        self._machine = machine
        state_type = machine.state_type
        self._values: dict[str, TypeAdapter[Any]] = {}
        self._items: dict[str, TypeAdapter[Any]] = {}
        for name, info in state_type.model_fields.items():
            self._values[name] = TypeAdapter(info.rebuild_annotation())
            item = item_type(info.annotation)
            if item is not None:
                self._items[name] = TypeAdapter(item)
        # Each field's serializer, called directly: `TypeAdapter.dump_python` costs
        # several times the serialization of a small value in argument handling.
        self._dump_values = {name: a.serializer.to_python for name, a in self._values.items()}
        self._dump_items = {name: a.serializer.to_python for name, a in self._items.items()}
        self._lifecycle = type(machine.initial)
        #: Sorted read and write sets, which repeat from event to event.
        self._names: dict[frozenset[str], tuple[str, ...]] = {}
        #: The state's `Sensitive` fields (a `SealedCodec` seals them in what is stored).
        self._sensitive = sensitive_fields(state_type)

    def adapter(self, name: str, *, item: bool = False) -> TypeAdapter[Any]:
        """The adapter of field ``name``, or with ``item`` that of its items."""
        return (self._items if item else self._values)[name]

    def is_sequence(self, name: str) -> bool:
        """Whether field ``name`` is a sequence (its items have an adapter of their own)."""
        return name in self._items

    # -- digests as stored ---------------------------------------------------------

    def stored_digest(self, value: int) -> int:
        """The form digest ``value`` is stored in (itself; keyed by a `SealedCodec`)."""
        return value

    def digest_fits(self, value: int, stored: int) -> bool:
        """Whether ``stored`` is digest ``value`` as it was stored."""
        return value == stored

    # -- states ------------------------------------------------------------------

    @property
    def machine(self) -> Machine[Any]:
        """The machine whose states and events this codec handles."""
        return self._machine

    def encode_state(self, state: AgentState) -> dict[str, Any]:
        """The state as JSON data."""
        return state.model_dump(mode="json")

    def state_json(self, state: AgentState) -> EncodedJson:
        """The state as compact JSON bytes (what `encode_state` gives, encoded)."""
        return EncodedJson(state.__pydantic_serializer__.to_json(state))

    def decode_state(self, data: Any) -> AgentState:
        """A state from JSON data.

        A snapshot's form mark (``"__form__"``, see `_upgrade`) is no field: it is left out.

        Raises:
            StoreCorrupt: If the data does not validate as the machine's state.
        """
        if type(data) is dict and "__form__" in data:
            data = {key: value for key, value in data.items() if key != "__form__"}
        try:
            state: AgentState = self._machine.state_type.model_validate(data)
        except ValidationError as exc:
            raise StoreCorrupt(f"a stored state does not validate: {exc}") from exc
        return state

    # -- patches -----------------------------------------------------------------

    def encode_patch(self, patch: Patch, *, stage: str | None = None) -> dict[str, Any]:
        """The patch as ``{"set": {...}, "append": {...}}`` JSON data.

        Raises:
            UnserializablePatch: If a value cannot be turned into JSON.
        """
        encoded: dict[str, Any] = {}
        field = ""
        try:
            if patch.values:
                values: dict[str, Any] = {}
                for name, value in patch.values.items():
                    field = name
                    values[name] = self._dump_values[name](value, mode="json")
                encoded["set"] = values
            if patch.appends:
                appends: dict[str, list[Any]] = {}
                for name, items in patch.appends.items():
                    field = name
                    dump = self._dump_items[name]
                    appends[name] = [dump(item, mode="json") for item in items]
                encoded["append"] = appends
        except (PydanticSerializationError, ValueError, TypeError, KeyError) as exc:
            raise UnserializablePatch(stage=stage, field=field, reason=str(exc)) from exc
        return encoded

    def describe_patch(self, patch: Patch, *, stage: str | None = None) -> dict[str, Any]:
        """The patch as JSON data to show: each `Sensitive` field's values as ``[SENSITIVE]``."""
        data = EventCodec.encode_patch(self, patch, stage=stage)
        hidden = self._sensitive
        if hidden:
            for part in ("set", "append"):
                if part in data:
                    data[part] = {
                        name: SENSITIVE if name in hidden else value
                        for name, value in data[part].items()
                    }
        return data

    def decode_patch(self, data: Any) -> Patch:
        """A patch from JSON data, each value validated by its field.

        Raises:
            StoreCorrupt: If a value does not validate.
        """
        try:
            values = {
                name: self._values[name].validate_python(value)
                for name, value in (data or {}).get("set", {}).items()
            }
            appends = {
                name: tuple(self._items[name].validate_python(item) for item in items)
                for name, items in (data or {}).get("append", {}).items()
            }
        except (ValidationError, KeyError) as exc:
            raise StoreCorrupt(f"a stored patch does not validate: {exc}") from exc
        return Patch.of(values, appends)

    # -- events ------------------------------------------------------------------

    def encode_event(
        self, event: TransitionEvent, digest: int | None = None, *, patch: Any = None
    ) -> StoredEvent:
        """The event as the store keeps it, with ``digest``, that of the state it left.

        ``patch`` is its patch encoded already (an `EncodedPatch`, or its JSON
        data); without it, the patch is encoded here.

        Raises:
            UnserializablePatch: If its patch holds a value that cannot be stored.
        """
        if patch is None:
            patch = self.encode_patch(event.patch, stage=event.stage)
        return _stored_event(  # ``_value_``, ``_name_``: what ``.value``, ``.name`` read, faster
            event.session_id,
            event.seq,
            event.kind._value_,
            event.stage,
            event.from_state._name_,
            event.to_state._name_,
            self._sorted(event.reads),
            self._sorted(event.writes),
            patch,
            event.attempt,
            event.started_at,
            event.finished_at,
            None if event.error is None else event.error.model_dump(mode="json"),
            None if event.info is None else dict(event.info),
            digest,
        )

    def _sorted(self, names: frozenset[str]) -> tuple[str, ...]:
        found = self._names.get(names)
        if found is None:
            if len(self._names) >= _NAMES_MAX:
                self._names.clear()
            found = self._names[names] = tuple(sorted(names))
        return found

    def decode_event(self, stored: StoredEvent) -> TransitionEvent:
        """The event from what the store kept.

        Raises:
            StoreCorrupt: If it names unknown states or holds invalid values.
        """
        try:
            return TransitionEvent(
                session_id=stored.session_id,
                seq=stored.seq,
                kind=EventKind(stored.kind),
                stage=stored.stage,
                from_state=self._state(stored.from_state),
                to_state=self._state(stored.to_state),
                reads=frozenset(stored.reads),
                writes=frozenset(stored.writes),
                patch=self.decode_patch(stored.patch),
                attempt=stored.attempt,
                started_at=stored.started_at,
                finished_at=stored.finished_at,
                error=None if stored.error is None else FailureRecord.model_validate(stored.error),
                info=stored.io,
            )
        except KeyringError:  # a ValueError too, but not damage: the keyring given is wrong
            raise
        except (ValueError, KeyError) as exc:  # ValidationError is a ValueError
            raise StoreCorrupt(f"stored event #{stored.seq} does not decode: {exc}") from exc

    def _state(self, name: str) -> enum.Enum:
        return self._lifecycle[name]
