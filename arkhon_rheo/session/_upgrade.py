"""Reading what an earlier form of a machine stored: upgrades applied as it is loaded.

A session's record keeps the fingerprint of the machine that started it. Its
log is never rewritten: once a machine of another form writes to it, an
``upgrade`` event marks where the new form starts (its patch: the whole
upgraded state; its ``info``: the new fingerprint), and every snapshot written
from then on carries a small mark, ``"__form__": {"version", "form"}``, so a
load knows the form of its snapshot without reading the log. A field name
never starts with an underscore, so the mark is no field.

`Upgrader` turns JSON stored under one fingerprint into the current
machine's form: the upgrades from the stored version to the current one,
version by version, on a snapshot, a patch and an event's read and write
sets. A compatible change needs none: the JSON is read as it is.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ..core._seams import EventCodec, same_form, version_of
from ..protocols._seams import EncodedJson

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ..core._seams import Sealer
    from ..protocols import AgentState, Machine, StoredEvent, Upgrade

__all__ = ["MARK", "MarkedCodec", "Upgrader", "mark_of", "read_events", "unmarked"]

#: The key of a snapshot's form mark.
MARK = "__form__"
#: The kind of the event that marks where a new form starts.
UPGRADE = "upgrade"


def mark_of(snapshot: Any) -> Mapping[str, Any] | None:
    """The form mark of a stored snapshot (``None``: it has none)."""
    if isinstance(snapshot, dict):
        mark = snapshot.get(MARK)
        if isinstance(mark, dict):
            return mark
    return None


def unmarked(snapshot: Any) -> Any:
    """A stored snapshot without its form mark."""
    if isinstance(snapshot, dict) and MARK in snapshot:
        return {key: value for key, value in snapshot.items() if key != MARK}
    return snapshot


def form_mark(current: Mapping[str, Any]) -> dict[str, Any]:
    """The mark of snapshots of fingerprint ``current``."""
    return {"version": current["version"], "form": current["form"]}


class MarkedCodec(EventCodec):
    """A machine's codec whose snapshots carry a form mark (see the module's doc).

    A session with sensitive fields writes through a `SealedCodec` made over
    it (``SealedCodec.over``): its snapshots are marked, then sealed.

    Args:
        codec: The machine's own codec, whose adapters it shares.
        mark: The mark (`form_mark`).
    """

    __slots__ = ("_mark", "_mark_json")

    def __init__(self, codec: EventCodec, mark: Mapping[str, Any]) -> None:
        for name in EventCodec.__slots__:
            object.__setattr__(self, name, getattr(codec, name))
        self._mark = dict(mark)
        text = json.dumps(self._mark, separators=(",", ":"), sort_keys=True)
        self._mark_json = f'{{"{MARK}":{text},'.encode()

    def encode_state(self, state: AgentState) -> dict[str, Any]:
        """The state as JSON data, marked."""
        return {MARK: dict(self._mark), **super().encode_state(state)}

    def state_json(self, state: AgentState) -> EncodedJson:
        """The state as compact JSON bytes, marked."""
        return EncodedJson(self._mark_json + super().state_json(state)[1:])


class Upgrader:
    """Reads JSON stored under fingerprint ``stored`` as ``machine`` stores it.

    Args:
        machine: The machine that reads.
        stored: The fingerprint the JSON was stored under (``None``: the
            machine's own form, read as it is).
        current: The machine's fingerprint.
        opener: What opens the session's sealed values (`arkhon_rheo.core`
            ``_sealed.opener``): an upgrade runs on them opened, under the
            names they were stored by. ``None``: none is opened.
    """

    __slots__ = ("fields", "label", "opener", "steps")

    def __init__(
        self,
        machine: Machine[Any],
        stored: Mapping[str, Any] | None,
        current: Mapping[str, Any],
        *,
        opener: Sealer | None = None,
    ) -> None:
        old = version_of(stored)
        self.steps: list[Upgrade] = (
            []
            if stored is None or same_form(stored, current)
            else [machine.upgrades[v] for v in range(old, machine.version) if v in machine.upgrades]
        )
        self.fields = frozenset(machine.state_type.model_fields)
        self.label = f"version {old} of machine {machine.name!r}, read by version {machine.version}"
        self.opener = opener

    def state(self, data: Any) -> Any:
        """A stored snapshot (unmarked), upgraded."""
        data = unmarked(data)
        if not self.steps or not isinstance(data, dict):
            return data
        if self.opener is not None:
            data = self.opener.open_stored_state(data)
        data = copy.deepcopy(data)
        for step in self.steps:
            data = step.state(data)
        self._known(data, "its state")
        return data

    def patch(self, data: Any) -> Any:
        """A stored patch, upgraded."""
        if not self.steps or not isinstance(data, dict):
            return data
        if self.opener is not None:
            data = self.opener.open_stored_patch(data)
        data = copy.deepcopy(data)
        for step in self.steps:
            data = step.patch(data)
        for part in ("set", "append"):
            self._known(data.get(part, {}), "a patch")
        return data

    def names(self, names: Iterable[str]) -> tuple[str, ...]:
        """An event's read or write set, upgraded."""
        found = list(names)
        for step in self.steps:
            found = step.names(found)
        return tuple(sorted(set(found)))

    def event(self, stored: StoredEvent) -> StoredEvent:
        """A stored event, its patch and field names upgraded."""
        if not self.steps:
            return stored
        io = stored.io if self.opener is None else self.opener.open_io(stored.io)
        return dataclasses.replace(
            stored,
            patch=self.patch(stored.patch),
            io=io,
            reads=self.names(stored.reads),
            writes=self.names(stored.writes),
        )

    def _known(self, data: Mapping[str, Any], what: str) -> None:
        unknown = sorted(name for name in data if name not in self.fields)
        if unknown:
            raise ConfigurationError(
                f"{self.label}: after its upgrades, {what} has {unknown}, which the state "
                "type does not have; remove or rename them in the upgrade "
                "(Upgrade(remove=[...]) or rename={...})"
            )


def read_events(
    machine: Machine[Any],
    current: Mapping[str, Any],
    form: Mapping[str, Any] | None,
    events: Sequence[StoredEvent],
    opener: Sealer | None = None,
) -> list[StoredEvent]:
    """``events`` (stored in that order, the first in ``form``) in the current form.

    An ``upgrade`` event starts its own form: its patch, and the events after
    it, are read from the fingerprint it names. ``opener`` opens the sealed
    values of those an upgrade reads (see `Upgrader`).
    """
    upgrader = Upgrader(machine, form, current, opener=opener)
    found = []
    for event in events:
        if event.kind == UPGRADE:
            target = (event.io or {}).get("fingerprint")
            upgrader = Upgrader(machine, target, current, opener=opener)
        found.append(upgrader.event(event))
    return found
