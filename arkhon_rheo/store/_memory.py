"""`MemoryStore`: the `Store` protocol in memory, for tests and throwaway sessions."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

from .._errors import ConfigurationError, SessionLocked, SessionNotFound
from ..protocols import LeaseRecord, LoadedSession, SessionRecord, StoreStatistics
from ..protocols._seams import current_injector
from ._base import StoreBase, StoreState, inject_store_fault
from ._codec import EventRow, SessionRow, decode_event, decode_record, decode_snapshot
from ._plan import Request, SetStatus, plan

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from ..protocols import StoredEvent
    from ._codec import Snapshot

__all__ = ["MemoryStore"]


class MemoryStore(StoreBase):
    """A store that keeps everything in memory, with the semantics of `SQLiteStore`.

    It keeps the same rows as the SQLite store (compact JSON), so what it returns is
    exactly what the SQLite store would: tuples come back as lists, and a value
    that is not JSON data is refused on the way in. Every write is its own
    transaction and is "durable" at once; nothing survives the process.

    Args:
        clock: Returns the current time in seconds since the epoch; leases expire by
            it and records are stamped with it. Defaults to `time.time`.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(":memory:", clock)
        self._sessions: dict[str, SessionRow] = {}
        self._events: dict[str, list[EventRow]] = {}
        self._snapshots: dict[str, dict[int, Snapshot]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._appended = 0
        self._transactions = 0
        self._largest_batch = 0

    async def __aenter__(self) -> MemoryStore:
        """Open the store.

        Raises:
            StoreError: It is open already, or was closed.
        """
        self._begin_enter()
        self._state = StoreState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store; its contents are dropped."""
        self._state = StoreState.CLOSED

    def _write(self, request: Request) -> None:
        sid = request.session_id
        known = {}
        if (row := self._sessions.get(sid)) is not None:
            known[sid] = (row[3], row[2])
        now = self._clock()
        result = plan([request], known, now=now, location=self._location)
        if (error := result.errors[0]) is not None:
            raise error
        for created in result.created:
            self._sessions[created[0]] = created
            self._events[created[0]] = []
            self._snapshots[created[0]] = {}
        for event in result.events:
            self._events[event[0]].append(event)
        for session_id, seq, state in result.snapshots:
            self._snapshots[session_id][seq] = state
        for session_id, (last_seq, status) in result.updated.items():
            old = self._sessions[session_id]
            self._sessions[session_id] = (*old[:2], status, last_seq, old[4], now, *old[6:])
        self._appended += result.appended
        self._transactions += 1
        self._largest_batch = max(self._largest_batch, result.appended)

    def _row(self, session_id: str) -> SessionRow:
        self._check_open()
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id=session_id) from None

    def _snapshot(self, session_id: str, seq: int) -> tuple[int, Snapshot]:
        snapshots = self._snapshots[session_id]
        best = max(s for s in snapshots if s <= seq) if seq >= 0 else 0
        return best, snapshots[best]

    async def create_session(
        self,
        session_id: str,
        *,
        machine: str,
        snapshot: Any,
        parent: str | None = None,
        status: str = "running",
        fingerprint: Any = None,
    ) -> SessionRecord:
        """Record a new session with its initial snapshot (event number 0).

        Raises:
            SessionError: The id exists already.
            StoreError: The snapshot is not JSON data, or the store is not open.
        """
        await anyio.lowlevel.checkpoint()
        self._write(
            self._create_request(session_id, machine, snapshot, parent, status, fingerprint)
        )
        return decode_record(self._sessions[session_id])

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Any] | None = None,
        status: str | None = None,
    ) -> None:
        """Append events whose numbers follow the session's last one.

        Raises:
            DuplicateEvent: A number is taken or is not the next one; nothing is appended.
            SessionNotFound: No such session.
            UnserializablePatch: A patch holds a value that is not JSON data.
            StoreError: Another value is not JSON data, or the store is not open.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "append")
        await anyio.lowlevel.checkpoint()
        self._write(self._append_request(session_id, events, snapshot, status))

    async def record(self, session_id: str) -> SessionRecord:
        """The session's record.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        return decode_record(self._row(session_id))

    async def load(self, session_id: str) -> LoadedSession:
        """The latest snapshot and the events after it.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        row = self._row(session_id)
        seq, state = self._snapshot(session_id, row[3])
        events = tuple(decode_event(e) for e in self._events[session_id][seq:])
        return LoadedSession(decode_record(row), seq, decode_snapshot(state), events)

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """Every event of the session, in order.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        self._row(session_id)
        return tuple(decode_event(e) for e in self._events[session_id])

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """The latest snapshot taken at or before event ``seq``.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        self._row(session_id)
        found, state = self._snapshot(session_id, seq)
        return found, decode_snapshot(state)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        return tuple(decode_record(row) for row in self._sessions.values())

    async def set_status(self, session_id: str, status: str) -> None:
        """Change a session's status.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        self._check_open()
        self._write(SetStatus(session_id, status))

    async def acquire(
        self, session_id: str, owner: str, *, ttl: float, replacing: str | None = None
    ) -> None:
        """Take (or renew) the session's lease for ``owner`` for ``ttl`` seconds.

        A lease held by ``replacing`` (an owner known to be dead) is taken over.

        Raises:
            SessionLocked: Another owner holds a lease that has not expired.
            ConfigurationError: ``ttl`` is not a positive number of seconds.
        """
        await anyio.lowlevel.checkpoint()
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        held = self._leases.get(session_id)
        if held is not None and held[0] not in (owner, replacing) and held[1] > now:
            raise SessionLocked(
                session_id=session_id,
                owner=held[0],
                expires_at=held[1],
                location=self._location,
                now=now,
            )
        self._leases[session_id] = (owner, now + ttl)

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired, by the store's clock."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        now = self._clock()
        return tuple(
            LeaseRecord(session_id, owner, expires_at)
            for session_id, (owner, expires_at) in self._leases.items()
            if expires_at > now
        )

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        held = self._leases.get(session_id)
        if held is not None and held[0] == owner:
            del self._leases[session_id]

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's counters (``pending`` is always 0)."""
        return StoreStatistics(
            appended=self._appended,
            transactions=self._transactions,
            largest_batch=self._largest_batch,
            pending=0,
        )
