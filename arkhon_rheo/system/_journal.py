"""`Journal`: one session's record in the store, as the code above the supervisor sees it.

Every read and out-of-band write of a stored session by the agent system goes
through here: creating it, loading it checked against its machine, its state
after any event, its history, the events made outside any stage (a rollback, a
human decision) and the status it ends with. While the session runs, its
`Persistence` (made here) records each commit. Leases are the agent system's
(see its claims): a journal writes only under one.

A session kept in memory only (no store) is its own record: `MemoryJournal`
answers for it what a `Journal` answers for a stored one about the gate it is
paused at, and commits an event made outside any stage through the session
itself. Both are a `Ledger`, so a human decision takes one path either way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .._errors import ConfigurationError, SessionError
from ..core import fold
from ..core._seams import compiled, differences, session_codec
from ..protocols import EventKind, Patch, TransitionEvent
from ..supervision import ExitReason
from ..supervision._seams import Persistence

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..core import Keyring
    from ..core._seams import EventCodec
    from ..protocols import (
        AgentState,
        FailureRecord,
        LoadedSession,
        Machine,
        SessionRecord,
        Store,
    )
    from ..supervision._seams import Session

__all__ = ["Journal", "Ledger", "MemoryJournal", "PausedAt", "out_of_band_event"]


class PausedAt(NamedTuple):
    """A session paused at a gate, as its record has it: what a decision starts from."""

    #: The state it is paused in.
    state: AgentState
    #: The name of the gate it is paused at (``None`` for a pause no gate named).
    gate: str | None
    #: The number the decision's event takes.
    next_seq: int
    #: What a run launched after the decision counts its events from.
    base_seq: int
    #: The events that run keeps in memory before its own (none with a store).
    history: Sequence[TransitionEvent]
    #: What its stored record says it waits for (``None`` in memory, or before records said).
    waiting: Any = None


class Ledger(Protocol):
    """A session's record, for an event made outside any stage: its `Journal` or itself."""

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        ...

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
    ) -> None:
        """Commit ``event``, which leads to ``state``; ``status`` is the session's from now on.

        ``applied`` is the inbox position of the decision message it applies (stored only).
        """
        ...


class Journal:
    """The stored record of session ``session_id`` of ``machine`` in ``store``.

    Args:
        store: The store, already entered.
        machine: The machine the session must have been stored by; every read
            checks it (`ConfigurationError` otherwise).
        session_id: The session.
        secrets: The keyring its `Sensitive` values are sealed with, if the
            machine has any (without one, storing or loading them raises
            `KeyringError`).

    Attributes:
        codec: What the session's states and events are stored through: the
            machine's codec, sealing the session's sensitive values if it has any.
    """

    __slots__ = ("_compiled", "codec", "machine", "secrets", "session_id", "store")

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
        """The session's latest snapshot and the events after it, checked against the machine."""
        loaded = await self.store.load(self.session_id)
        self.check(loaded.record)
        return loaded

    def current(self, loaded: LoadedSession) -> AgentState:
        """The state ``loaded`` ends in: its snapshot with the events after it folded in."""
        codec = self.codec
        return fold(
            self.machine,
            codec.decode_state(loaded.snapshot),
            [codec.decode_event(event) for event in loaded.events],
        )

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
        codec = self.codec
        snapshot_seq, snapshot = await self.store.snapshot_at(self.session_id, seq)
        events = [
            codec.decode_event(event)
            for event in await self.store.history(self.session_id)
            if snapshot_seq < event.seq <= seq
        ]
        return fold(self.machine, codec.decode_state(snapshot), events), loaded.record

    async def history(self, *, after: int = 0) -> list[TransitionEvent]:
        """The session's events after event ``after``, decoded, in order."""
        codec = self.codec
        stored = await self.store.history(self.session_id)
        return [codec.decode_event(event) for event in stored if event.seq > after]

    async def last_seq(self, *, excluding: EventKind) -> int:
        """The number of the session's last event of another kind than ``excluding`` (0: none)."""
        stored = await self.store.history(self.session_id)
        return max((e.seq for e in stored if e.kind != excluding.value), default=0)

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

        It follows the session's last event (``record.last_seq``), carries
        ``updates`` as its patch, and is stored with a snapshot of ``after`` and
        the session's new ``status`` in one write.
        """
        event = out_of_band_event(
            self.session_id, record.last_seq + 1, kind, before, after, updates, info, error
        )
        await self.commit(event, after, status=status)
        return event

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
    ) -> None:
        """Store ``event``, made outside any stage, with a snapshot of ``state`` and ``status``.

        The event must follow the session's last one; all three go in one write,
        with inbox message ``applied`` (a decision) marked applied by it, if given.
        """
        codec = self.codec
        events = [codec.encode_event(event, self._compiled.hasher.of(state))]
        snapshot = (event.seq, codec.encode_state(state))
        if applied is None:
            await self.store.append(self.session_id, events, snapshot=snapshot, status=status)
        else:
            await self.store.append(
                self.session_id, events, snapshot=snapshot, status=status, applied=applied
            )

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
        after = record.last_seq + 1
        return PausedAt(state, _gate(pause), after, after, (), record.waiting)

    async def set_status(self, status: str) -> None:
        """Store the session's status (a record a crash left behind, repaired)."""
        await self.store.set_status(self.session_id, status)

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
            self.codec,
            self.session_id,
            snapshot_every=snapshot_every,
            owner=owner,
            digest=self._compiled.hasher.start(state),
            link=link,
        )

    def check(self, record: SessionRecord) -> None:
        """Raise `ConfigurationError` unless ``record`` is a session of the machine.

        A session stored before fingerprints (schema version 3) is checked by
        name only; one of an unnamed machine then still has the old default name.
        """
        machine, mine = self.machine, self._compiled.fingerprint
        stored = record.fingerprint
        if stored is None:
            legacy = record.machine == "machine" and machine.name == mine["state"]
            found = [] if record.machine == machine.name or legacy else ["the name differs"]
        else:
            found = differences(stored, mine)
        if found:
            raise ConfigurationError(
                f"session {record.session_id!r} runs machine {record.machine!r}, not "
                f"{machine.name!r}: {'; '.join(found)}. Pass the machine it was started with"
            )


class MemoryJournal:
    """A session kept in memory only (no store), as its own record: a `Journal`'s twin.

    Args:
        session: The session, held by the agent system.
        machine: The machine it must run (`ConfigurationError` otherwise).
    """

    __slots__ = ("session",)

    def __init__(self, session: Session, machine: Machine[Any]) -> None:
        if session.machine.name != machine.name:
            raise ConfigurationError(
                f"session {session.session_id!r} runs machine {session.machine.name!r}, "
                f"not {machine.name!r}"
            )
        self.session = session

    async def paused(self) -> PausedAt:
        """The gate the session is paused at, and its state there.

        Raises:
            SessionError: If it is not paused.
        """
        session = self.session
        reason = session.exit_reason
        if reason is not ExitReason.PAUSED:
            status = "running" if reason is None else reason.value
            raise not_paused(session.session_id, status)
        log = session.log
        return PausedAt(
            session.state,
            _gate(log[-1] if log else None),
            session.next_seq(),
            session.base_seq,
            log,
        )

    async def commit(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str,
        applied: int | None = None,
    ) -> None:
        """Commit ``event`` through the session (`Session.commit_out_of_band`).

        ``status`` is the stored record's; in memory the event says it (an event
        that moves the session to its failed state ends it failed).
        """
        self.session.commit_out_of_band(state, event)


def not_paused(session_id: str, status: str) -> SessionError:
    """The error for a decision on a session that is not paused (it is ``status``)."""
    return SessionError(
        f"session {session_id!r} is not paused (it is {status}); "
        "only a session waiting at a gate takes a decision",
        session_id=session_id,
    )


def _gate(pause: TransitionEvent | None) -> str | None:
    """The name of the gate ``pause`` (a session's last event) paused it at."""
    return ((pause.info if pause else None) or {}).get("gate")


def out_of_band_event(
    session_id: str,
    seq: int,
    kind: EventKind,
    before: AgentState,
    after: AgentState,
    updates: Mapping[str, Any],
    info: dict[str, Any],
    error: FailureRecord | None = None,
) -> TransitionEvent:
    """An event made outside any stage (a rollback, a resume, a human decision)."""
    now = time.time()
    return TransitionEvent(
        session_id=session_id,
        seq=seq,
        kind=kind,
        stage=None,
        from_state=before.lifecycle,
        to_state=after.lifecycle,
        reads=frozenset(),
        writes=frozenset(updates),
        patch=Patch.of(dict(updates)),
        attempt=0,
        started_at=now,
        finished_at=now,
        error=error,
        info=info,
    )
