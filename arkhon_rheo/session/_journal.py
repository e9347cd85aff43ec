"""`Journal`: one session's record in the store, as the code above the supervisor sees it.

Every read and out-of-band write of a stored session by the agent system goes
through here: creating it, loading it checked against its machine (and read in
the machine's current form, see below), its state after any event, its
history, the events made outside any stage (a rollback, a human decision) and
the status it ends with. While the session runs, its `Persistence` (made here)
records each commit. Leases are the agent system's (see its claims): a journal
writes only under one. A session kept in memory only is its own record
(`MemoryJournal`, in `_decision`).

**The form a stored session is in**, and reading what an earlier form of a
machine stored, is the journal's too, since every load goes through it.

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
import json
from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import ConfigurationError, StoreCorrupt
from ..core import fold
from ..core._seams import (
    EventCodec,
    opener,
    reading,
    same_form,
    session_codec,
    version_of,
)
from ..protocols import EventKind, LoadedSession
from ..protocols._seams import EncodedJson, StoreSupport
from ._compiled import compiled
from ._decision import DECISIONS, PausedAt, gate_of, not_paused, out_of_band_event
from ._persist import Persistence

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ..core import Keyring
    from ..core._seams import Sealer
    from ..protocols import (
        AgentState,
        FailureRecord,
        Machine,
        SessionRecord,
        Store,
        StoredEvent,
        TransitionEvent,
        Upgrade,
    )

__all__ = [
    "MARK",
    "Journal",
    "MarkedCodec",
    "SessionForm",
    "Upgrader",
    "check_form",
    "decode_error",
    "form_of",
    "mark_of",
    "named",
    "read_events",
    "read_session",
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


def read_session(
    machine: Machine[Any],
    record: SessionRecord,
    snapshot: Any,
    events: Sequence[StoredEvent],
    secrets: Keyring | None,
) -> tuple[AgentState, list[TransitionEvent]]:
    """A stored session's ``snapshot`` and ``events`` (all, in order), as ``machine`` reads them.

    What a reader outside the session (the inspector's timeline) folds: a
    session of an earlier version upgraded (its sealed values opened under the
    names it stored them by first), then decoded through the session's codec
    (which opens those sealed in the current form). Nothing is checked against
    the machine's fingerprint first: ask `reading` (``arkhon_rheo.core``) for that.

    Raises:
        ConfigurationError: If a value does not fit the state type once upgraded.
        StoreCorrupt: If a stored state or event does not decode.
        KeyringError: If ``secrets`` does not open a sensitive value.
    """
    parts, session_id = compiled(machine), record.session_id
    mine, keys = parts.fingerprint, opener(secrets, session_id)
    data = Upgrader(machine, record.fingerprint, mine, opener=keys).state(snapshot)
    stored = read_events(machine, mine, record.fingerprint, events, keys)
    codec = session_codec(machine, parts.codec, secrets, session_id)
    return codec.decode_state(data), [codec.decode_event(event) for event in stored]


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
    read = reading(session_id, stored, mine, machine.state_type)
    if read.stored is None:
        legacy = record_machine == "machine" and machine.name == mine["state"]
        if record_machine == machine.name or legacy:
            return
        found = ["the name differs"]
    elif read.stored.get("name", record_machine) != machine.name:
        found = [f"the session's machine is {read.stored.get('name')!r}"]
    else:
        if read.found:
            raise ConfigurationError(
                f"session {session_id!r} was stored by version {read.version} of machine "
                f"{machine.name!r}, which this machine (version {machine.version}) does not "
                f"read: {'; '.join(read.found)}. {read.hint}"
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


class Journal:
    """The stored record of session ``session_id`` of ``machine`` in ``store``.

    A session stored by an earlier form of the machine (another version, or a
    state type changed since in a compatible way) is read in the current form:
    `load` and every read upgrade what they read, and the first write after a
    `load` records the upgrade first (an ``upgrade`` event, in the same write).

    Args:
        store: The store, already entered.
        machine: The machine the session must have been stored by, or a later
            version of it that reads it; every read checks it
            (`ConfigurationError` otherwise).
        session_id: The session.
        secrets: The keyring its `Sensitive` values are sealed with, if the
            machine has any (without one, storing or loading them raises
            `KeyringError`). Those an earlier form sealed are opened with it
            before the upgrades run, and the upgraded ones sealed again.

    Attributes:
        codec: What the session's states and events are read through: the
            machine's codec, sealing the session's sensitive values if it has any.
    """

    __slots__ = (
        "_compiled",
        "_form",
        "_opener",
        "_upgraded",
        "codec",
        "machine",
        "parent",
        "secrets",
        "session_id",
        "store",
    )

    def __init__(
        self,
        store: Store,
        machine: Machine[Any],
        session_id: str,
        *,
        secrets: Keyring | None = None,
    ) -> None:
        self.store = store
        self.machine = machine
        self.session_id = session_id
        self.secrets = secrets
        self._compiled = compiled(machine)
        self.codec: EventCodec = session_codec(machine, self._compiled.codec, secrets, session_id)
        #: Opens what an earlier form sealed, under the names it stored (before an upgrade).
        self._opener: Sealer = opener(secrets, session_id)
        #: The form `load` found the session in (``None``: not loaded yet).
        self._form: SessionForm | None = None
        #: The session's state read in the current form, while its upgrade is unrecorded.
        self._upgraded: AgentState | None = None
        #: The parent its record named at the last `load` (a fork's, or a child's).
        self.parent: str | None = None

    async def create(
        self, state: AgentState, *, parent: str | None = None, status: str = "running"
    ) -> None:
        """Store a new session whose first snapshot is ``state``.

        Raises:
            SessionError: If the store has a session of that id already.
        """
        await self.store.create_session(
            self.session_id,
            machine=self.machine.name,
            snapshot=self.codec.encode_state(state),
            parent=parent,
            status=status,
            fingerprint=self._compiled.fingerprint,
        )

    async def exists(self) -> None:
        """Raise `SessionNotFound` unless the store has the session (nothing is checked)."""
        await self.store.record(self.session_id)

    async def record(self) -> SessionRecord:
        """The session's record, checked to be a session of the machine."""
        record = await self.store.record(self.session_id)
        self.check(record)
        return record

    async def load(self) -> LoadedSession:
        """The session's latest snapshot and the events after it, checked against the machine.

        Both are in the machine's current form (upgraded if they were stored in
        an earlier one).
        """
        loaded = await self.store.load(self.session_id)
        self.parent = loaded.record.parent
        mine = self._compiled.fingerprint
        form = await form_of(self.store, self.machine, mine, loaded.record, loaded.snapshot)
        self._form = form
        return upgraded(self.machine, mine, form, loaded, self._opener)

    @property
    def upgrading(self) -> bool:
        """Whether the loaded session is stored in an earlier form (its upgrade unrecorded)."""
        return self._form is not None and not self._form.same

    def current(self, loaded: LoadedSession) -> AgentState:
        """The state ``loaded`` ends in: its snapshot with the events after it folded in.

        Raises:
            ConfigurationError: If the session, stored in an earlier form, does
                not validate as the machine's state once upgraded.
        """
        state = self._fold(self._form, loaded)
        if self.upgrading:
            self._upgraded = state
        return state

    def _fold(self, form: SessionForm | None, loaded: LoadedSession) -> AgentState:
        codec = self.codec
        try:
            return fold(
                self.machine,
                codec.decode_state(loaded.snapshot),
                [codec.decode_event(event) for event in loaded.events],
            )
        except StoreCorrupt as exc:
            if form is None or form.same:
                raise named(self.session_id, exc)  # noqa: B904 (its cause is set)
            raise decode_error(self.session_id, form, self.machine, exc) from exc

    async def state(self, seq: int | None = None) -> tuple[AgentState, SessionRecord]:
        """The stored state after event ``seq`` (``None``: the last), and the session's record.

        Raises:
            ConfigurationError: If ``seq`` is not an event number of the session.
        """
        loaded = await self.load()
        last = loaded.record.last_seq
        if seq is None or seq == last:
            return self.current(loaded), loaded.record
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
            raise ConfigurationError(
                f"event number must be between 0 (the start) and {last} for session "
                f"{self.session_id!r}, got {seq!r}"
            )
        machine, mine = self.machine, self._compiled.fingerprint
        snapshot_seq, snapshot = await self.store.snapshot_at(self.session_id, seq)
        form = await form_of(self.store, machine, mine, loaded.record, snapshot)
        history = await self.store.history(self.session_id)
        stored = tuple(event for event in history if snapshot_seq < event.seq <= seq)
        at = upgraded(
            machine,
            mine,
            form,
            type(loaded)(loaded.record, snapshot_seq, snapshot, stored),
            self._opener,
        )
        return self._fold(form, at), loaded.record

    async def history(self, *, after: int = 0) -> list[TransitionEvent]:
        """The session's events after event ``after``, decoded (in the current form), in order.

        The session is checked as `load` checks it: in the form its last
        ``upgrade`` event names, if it has one (a session a later version
        upgraded is not read by an earlier one).

        Raises:
            ConfigurationError: If the machine does not read the session (see
                `check`), or an event, stored in an earlier form, does not
                validate once upgraded (naming the session and its version).
            StoreCorrupt: If an event does not decode, naming the session.
        """
        codec, mine, machine = self.codec, self._compiled.fingerprint, self.machine
        record = await self.store.record(self.session_id)
        self.check(record)
        stored = await self.store.history(self.session_id)
        forms: list[Mapping[str, Any] | None] = []
        form = record.fingerprint
        for event in stored:
            if event.kind == UPGRADE:
                form = (event.io or {}).get("fingerprint")
                if not isinstance(form, dict):
                    raise StoreCorrupt(
                        f"session {self.session_id!r} is damaged in the store: its upgrade "
                        f"event #{event.seq} names no fingerprint. Restore the store from a "
                        "backup, or delete the session",
                        session_id=self.session_id,
                    )
            forms.append(form)
        if form is not record.fingerprint:  # its last upgrade's form: read as load reads it
            check_form(self.session_id, record.machine, machine, mine, form)
        read = read_events(machine, mine, record.fingerprint, stored, self._opener)
        found = []
        for event, stored_form in zip(read, forms, strict=True):
            if event.seq <= after:
                continue
            try:
                found.append(codec.decode_event(event))
            except StoreCorrupt as exc:
                if stored_form is None or same_form(stored_form, mine):
                    raise named(self.session_id, exc)  # noqa: B904 (its cause is set)
                upgraded_from = SessionForm(stored_form, same=False, marked=False)
                raise decode_error(self.session_id, upgraded_from, machine, exc) from exc
        return found

    async def last_seq(self, *, excluding: EventKind, loaded: LoadedSession | None = None) -> int:
        """The number of the session's last event of another kind than ``excluding`` (0: none).

        An ``upgrade`` event is never counted: it only restates the state.
        ``loaded``, the session as `load` just read it (under its lease: nothing
        was written since), spares the read of the whole history where it holds
        the answer: it has every event after its snapshot, and every event
        before that snapshot is older than those (with none before the initial one).
        """
        skipped = (excluding.value, UPGRADE)
        if loaded is not None:
            found = max((e.seq for e in loaded.events if e.kind not in skipped), default=0)
            if found or loaded.snapshot_seq == 0:
                return found
        stored = await self.store.history(self.session_id)
        return max((e.seq for e in stored if e.kind not in skipped), default=0)

    async def last_event(self, loaded: LoadedSession) -> TransitionEvent | None:
        """The session's last event (``None`` for one that has none), read once."""
        last = loaded.record.last_seq
        if last == 0:
            return None
        if loaded.events and loaded.events[-1].seq == last:
            return self.codec.decode_event(loaded.events[-1])
        events = await self.history(after=last - 1)
        return events[-1] if events else None

    async def append(
        self,
        record: SessionRecord,
        kind: EventKind,
        before: AgentState,
        after: AgentState,
        updates: Mapping[str, Any],
        *,
        info: dict[str, Any],
        status: str,
        error: FailureRecord | None = None,
    ) -> TransitionEvent:
        """Store an event made outside any stage (a rollback, a resume, a human decision).

        It follows the session's last event (``record.last_seq``; its
        ``upgrade`` event first, if it has one to record), carries ``updates``
        as its patch, and is stored with a snapshot of ``after`` and the
        session's new ``status`` in one write.
        """
        event = out_of_band_event(
            self.session_id, self.next_seq(record), kind, before, after, updates, info, error
        )
        await self.commit(event, after, status=status)
        return event

    def next_seq(self, record: SessionRecord) -> int:
        """The number the next event written through this journal takes.

        One more than the session's last, or two while its upgrade is unrecorded
        (the ``upgrade`` event goes first).
        """
        return record.last_seq + (2 if self.upgrading else 1)

    async def settle(self, record: SessionRecord) -> int:
        """Record the upgrade of the loaded session now, if it has one to record.

        For a run launched without an event of its own before it (a parked
        session woken): its first commit must find the session in the current
        form. Call it under the session's lease, after `load` and `current`.

        Returns:
            The number of the session's last event from then on.
        """
        if not self.upgrading:
            return record.last_seq
        seq = record.last_seq + 1
        state = self._upgraded_state()
        event = self._upgrade_event(seq, state)
        codec = self._codec()
        await self.store.append(
            self.session_id,
            [codec.encode_event(event, self._compiled.hasher.of(state))],
            snapshot=(seq, codec.encode_state(state)),
            status=record.status,
        )
        self._settled()
        return seq

    def _upgraded_state(self) -> AgentState:
        state = self._upgraded
        if state is None:  # a bug of the caller's: the state read must be the one restated
            raise RuntimeError("Journal: an upgrade is recorded after load() and current() only")
        return state

    def _upgrade_event(self, seq: int, state: AgentState) -> TransitionEvent:
        info = upgrade_info(self._form, self.machine, self._compiled.fingerprint)
        fields = {name: getattr(state, name) for name in type(state).model_fields}
        return out_of_band_event(
            self.session_id, seq, EventKind.UPGRADE, state, state, fields, info
        )

    def _settled(self) -> None:
        form = self._form
        if form is not None:
            self._form = form._replace(stored=self._compiled.fingerprint, same=True)
        self._upgraded = None

    def _codec(self) -> EventCodec:
        """The codec the session is written with: marked, if its form must be; sealing.

        The ``upgrade`` event's patch (the whole upgraded state) is sealed like
        any patch that writes a sensitive field, its digest keyed.
        """
        if self._form is not None and self._form.marked:
            marked = MarkedCodec(self._compiled.codec, form_mark(self._compiled.fingerprint))
            return session_codec(self.machine, marked, self.secrets, self.session_id)
        return self.codec

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
        waiting: Any = None,
    ) -> None:
        """Store ``event``, made outside any stage, with a snapshot of ``state`` and ``status``.

        The event must follow the session's last one (`next_seq`); all three go
        in one write, with inbox message ``applied`` (a decision) marked applied
        by it, if given, what the session (still paused) waits for, if
        ``waiting`` is given, and the session's ``upgrade`` event before it, if
        it has one to record.
        """
        codec = self._codec()
        hasher = self._compiled.hasher
        events = [codec.encode_event(event, hasher.of(state))]
        if self.upgrading:
            before = self._upgraded_state()
            upgrade = self._upgrade_event(event.seq - 1, before)
            events.insert(0, codec.encode_event(upgrade, hasher.of(before)))
        snapshot = (event.seq, codec.encode_state(state))
        if waiting is not None and not StoreSupport(self.store).parks:
            # A store whose append cannot park: a second write (`Store.park`).
            await self.store.append(
                self.session_id, events, snapshot=snapshot, status=status, applied=applied
            )
            await self.store.park(
                self.session_id,
                None,
                status=status,
                waiting=waiting,
                accepts=sorted(DECISIONS),
                now=event.finished_at,
            )
        elif waiting is not None:
            await self.store.append(
                self.session_id,
                events,
                snapshot=snapshot,
                status=status,
                applied=applied,
                waiting=waiting,
                accepts=sorted(DECISIONS),
            )
        elif applied is None:
            await self.store.append(self.session_id, events, snapshot=snapshot, status=status)
        else:
            await self.store.append(
                self.session_id, events, snapshot=snapshot, status=status, applied=applied
            )
        self._settled()

    async def paused(self) -> PausedAt:
        """The gate the stored session is paused at, and its state there (read under its lease).

        Raises:
            SessionError: If it is not paused.
        """
        loaded = await self.load()
        record = loaded.record
        if record.status != "paused":
            raise not_paused(self.session_id, record.status)
        state = self.current(loaded)
        pause = await self.last_event(loaded)
        after = self.next_seq(record)
        return PausedAt(state, gate_of(pause), after, after, (), record.waiting)

    async def set_status(self, status: str, *, owner: str) -> None:
        """Store the session's status (a record a crash left behind, repaired), fenced.

        The write lands only while ``owner`` holds the session's lease.

        Raises:
            LeaseLost: If another owner took the lease meanwhile: nothing is written.
        """
        await self.store.set_status(self.session_id, status, owner=owner)

    def persistence(
        self,
        state: AgentState,
        *,
        snapshot_every: int | None,
        owner: str,
        link: Mapping[str, Any] | None,
    ) -> Persistence:
        """What records each commit of a run that starts from ``state``."""
        return Persistence(
            self.store,
            self._codec(),
            self.session_id,
            snapshot_every=snapshot_every,
            owner=owner,
            digest=self._compiled.hasher.start(state),
            link=link,
            keyring=self.secrets,
        )

    def check(self, record: SessionRecord) -> None:
        """Raise `ConfigurationError` unless the machine reads ``record``'s session.

        It reads it when its fingerprint is the session's, or differs only in
        compatible ways, or the machine's upgrades from the session's version
        cover the rest; the error names each field, type and state that differs
        and how to declare the upgrade. A session stored before fingerprints
        (schema version 3) is checked by name only; one of an unnamed machine
        then still has the old default name.
        """
        check_form(
            record.session_id,
            record.machine,
            self.machine,
            self._compiled.fingerprint,
            record.fingerprint,
        )
