"""The form a stored session is in, and reading what an earlier form of a machine stored.

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

`form_of` says which fingerprint a snapshot was stored under (its mark, or
else the record's), `check_form` whether the current machine reads it
(directly, as a compatible change, or through its upgrades) and, if not,
raises the `ConfigurationError` that names what differs and how to declare
it. `upgraded` reads a loaded session in the current form; `upgrade_event`
is the event that records, before anything else is written to it, that the
session is read in the current form from then on.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import ConfigurationError, StoreCorrupt
from ..core._seams import (
    EventCodec,
    checked_fingerprint,
    differences,
    legacy_schema,
    same_form,
    upgrade_hint,
    version_of,
)
from ..protocols import LoadedSession
from ..protocols._seams import EncodedJson

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ..core._seams import Sealer
    from ..protocols import AgentState, Machine, SessionRecord, Store, StoredEvent, Upgrade

__all__ = [
    "MARK",
    "MarkedCodec",
    "SessionForm",
    "Upgrader",
    "check_form",
    "decode_error",
    "form_of",
    "mark_of",
    "named",
    "read_events",
    "unmarked",
    "upgrade_info",
    "upgraded",
]

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


class SessionForm(NamedTuple):
    """The form a loaded session is stored in, as the machine that reads it sees it."""

    #: The fingerprint its latest snapshot was stored under (``None``: stored before
    #: fingerprints, read as the machine's own).
    stored: Mapping[str, Any] | None
    #: Whether it is read as it is: nothing to upgrade, no ``upgrade`` event to write.
    same: bool
    #: Whether the snapshots written for it carry a form mark (its record names
    #: another form than the machine's).
    marked: bool


def check_form(
    session_id: str,
    record_machine: str,
    machine: Machine[Any],
    mine: Mapping[str, Any],
    stored: Mapping[str, Any] | None,
) -> None:
    """Raise `ConfigurationError` unless ``machine`` reads what ``stored`` describes.

    A session stored before fingerprints (schema version 3) is checked by name
    only; one of an unnamed machine then still has the old default name.

    Raises:
        ConfigurationError: If the machine does not read it, naming what differs.
        StoreCorrupt: If ``stored`` is damaged: not of a fingerprint's shape.
    """
    stored = checked_fingerprint(session_id, stored)
    if stored is None:
        legacy = record_machine == "machine" and machine.name == mine["state"]
        if record_machine == machine.name or legacy:
            return
        found = ["the name differs"]
    elif stored.get("name", record_machine) != machine.name:
        found = [f"the session's machine is {stored.get('name')!r}"]
    else:
        try:
            found = differences(
                stored, mine, legacy=functools.partial(legacy_schema, machine.state_type)
            )
            hint = upgrade_hint(stored, mine) if found else ""
        except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
            # A fingerprint of the right keys whose JSON schemas are not of their shape.
            raise StoreCorrupt(
                f"session {session_id!r} is damaged in the store: the machine fingerprint it "
                f"was stored with does not read ({type(exc).__name__}: {exc}). Restore the "
                "store from a backup, or delete the session",
                session_id=session_id,
            ) from exc
        if found:
            raise ConfigurationError(
                f"session {session_id!r} was stored by version {version_of(stored)} of machine "
                f"{machine.name!r}, which this machine (version {machine.version}) does not "
                f"read: {'; '.join(found)}. {hint}"
            )
        return
    raise ConfigurationError(
        f"session {session_id!r} runs machine {record_machine!r}, not {machine.name!r}: "
        f"{'; '.join(found)}. Pass the machine it was started with"
    )


async def form_of(
    store: Store,
    machine: Machine[Any],
    mine: Mapping[str, Any],
    record: SessionRecord,
    snapshot: Any,
) -> SessionForm:
    """The form of ``snapshot``, a snapshot of ``record``'s session, checked readable.

    Raises:
        ConfigurationError: If the machine does not read it (see `check_form`).
        StoreCorrupt: If its mark names a form no ``upgrade`` event of the session has.
    """
    mark = mark_of(snapshot)
    if mark is None:
        stored = record.fingerprint
    elif mark.get("form") == mine["form"]:
        stored = mine
    else:
        stored = await _fingerprint_of(store, record.session_id, mark)
    check_form(record.session_id, record.machine, machine, mine, stored)
    return SessionForm(stored, same_form(stored, mine), not same_form(record.fingerprint, mine))


async def _fingerprint_of(
    store: Store, session_id: str, mark: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The fingerprint of form ``mark``, as the session's ``upgrade`` event recorded it."""
    for event in reversed(await store.history(session_id)):
        if event.kind == UPGRADE:
            fingerprint = (event.io or {}).get("fingerprint")
            if isinstance(fingerprint, dict) and fingerprint.get("form") == mark.get("form"):
                return fingerprint
    raise StoreCorrupt(
        f"a snapshot of session {session_id!r} is of form {mark.get('form')!r} (version "
        f"{mark.get('version')!r}), which no upgrade event of the session records"
    )


def upgraded(
    machine: Machine[Any],
    mine: Mapping[str, Any],
    form: SessionForm,
    loaded: LoadedSession,
    opener: Sealer | None = None,
) -> LoadedSession:
    """``loaded`` (its snapshot in ``form``) in the current form: its snapshot and events.

    ``opener`` opens the sealed values an upgrade reads (see ``Upgrader``).
    """
    if form.same and mark_of(loaded.snapshot) is None:
        return loaded
    snapshot = Upgrader(machine, form.stored, mine, opener=opener).state(loaded.snapshot)
    events = tuple(read_events(machine, mine, form.stored, loaded.events, opener))
    return LoadedSession(loaded.record, loaded.snapshot_seq, snapshot, events)


def upgrade_info(
    form: SessionForm | None, machine: Machine[Any], mine: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``info`` of the ``upgrade`` event of a session read in ``form`` by ``machine``."""
    stored = None if form is None else form.stored
    return {
        "upgrade": {"from": version_of(stored), "to": machine.version},
        "fingerprint": dict(mine),
    }


def decode_error(
    session_id: str, form: SessionForm, machine: Machine[Any], exc: Exception
) -> ConfigurationError:
    """The error for a session whose upgraded values do not validate as ``machine``'s."""
    return ConfigurationError(
        f"session {session_id!r} (version {version_of(form.stored)} of machine "
        f"{machine.name!r}) does not load as version {machine.version} after its upgrades: "
        f"{exc}. Fix the machine's upgrades (or give the fields defaults), then run "
        "`arkhon-rheo check --machine MODULE:ATTR --store PATH`"
    )


def named(session_id: str, exc: StoreCorrupt) -> StoreCorrupt:
    """``exc``, naming session ``session_id`` if it names none (a stored value not decoding)."""
    if exc.session_id is not None:
        return exc
    error = StoreCorrupt(
        f"session {session_id!r} is damaged in the store: {exc}. Restore the store from a "
        "backup, or delete the session",
        location=exc.location,
        session_id=session_id,
    )
    error.__cause__ = exc
    return error
