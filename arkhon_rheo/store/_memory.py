"""`MemoryStore`: the `Store` protocol in memory, for tests and throwaway sessions.

One session's inbox is kept here too, as `Messages`.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

from .._errors import ConfigurationError, SessionLocked, SessionNotFound
from .._hooks import current_injector
from ..protocols import LeaseRecord, LoadedSession, SessionRecord, StoreStatistics
from ._base import StoreBase, StoreState, check_claim, inject_store_fault, pick_claims
from ._codec import (
    EventRow,
    SessionRow,
    decode_event,
    decode_message,
    decode_record,
    decode_records,
    decode_snapshot,
    loads,
)
from ._effects import BeginEffect, EffectLedger, EffectRow, FinishEffect
from ._plan import (
    Append,
    Create,
    Inbox,
    Park,
    Plan,
    Post,
    Request,
    SetStatus,
    plan,
    posted_ids,
    reads_pending,
    renewal_refused,
    touches_inbox,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from types import TracebackType

    from ..protocols import NewMessage, StoredEvent, StoredMessage
    from ._codec import MessageRow, Snapshot

__all__ = ["MemoryStore", "Messages", "apply_inbox"]


class Messages:
    """One session's inbox in memory: every row by position, and which are pending."""

    __slots__ = ("ids", "pending", "rows")

    def __init__(self) -> None:
        self.rows: list[MessageRow] = []
        #: Position of each message id.
        self.ids: dict[str, int] = {}
        #: The positions of the pending messages (an ordered set).
        self.pending: dict[int, None] = {}

    def known(self, message_ids: list[str], *, rows_needed: bool = True) -> Inbox:
        """What a plan needs to know of it, for a request posting ``message_ids``.

        ``rows_needed``: the pending rows, not only their count (see `reads_pending`).
        """
        rows = self.rows
        ids = {mid: rows[self.ids[mid] - 1] for mid in message_ids if mid in self.ids}
        if not rows_needed:
            return Inbox(len(rows), {}, ids, len(self.pending))
        pending = {position: rows[position - 1] for position in self.pending}
        return Inbox(len(rows), pending, ids)


def apply_inbox(inboxes: dict[str, Messages], result: Plan) -> None:
    """Write a plan's new inbox rows and applied messages into ``inboxes``."""
    for row in result.inbox:
        box = inboxes.get(row[0])
        if box is None:
            box = inboxes[row[0]] = Messages()
        box.rows.append(row)
        box.ids[row[1]] = row[2]
        box.pending[row[2]] = None
    for seq, session_id, position in result.applied:
        box = inboxes[session_id]
        box.rows[position - 1] = (*box.rows[position - 1][:7], seq)
        del box.pending[position]


#: The writes that may be work for a worker (see `wait_for_work`).
_WORK = frozenset({Create, SetStatus, Post, Park})


class MemoryStore(StoreBase, EffectLedger):
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
        self._inboxes: dict[str, Messages] = {}
        #: Each session's effect ledger by key, in the order first begun.
        self._effects: dict[str, dict[str, EffectRow]] = {}
        #: The message kinds each waiting session parked accepting.
        self._accepts: dict[str, frozenset[str]] = {}
        #: The ``wake_at`` of every waiting session that has one.
        self._wakes: dict[str, float] = {}
        #: Each session's number, in order of creation (ties in `waking`).
        self._order: dict[str, int] = {}
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

    def _write(self, request: Request) -> Any:
        """Plan ``request`` alone and apply it; returns its result (see `Plan`)."""
        sid = request.session_id
        known = {}
        if (row := self._sessions.get(sid)) is not None:
            known[sid] = (row[3], row[2])
        leases = None
        if (type(request) is Park or (type(request) is Append and request.owner is not None)) and (
            held := self._leases.get(sid)
        ) is not None:
            leases = {sid: held}
        inboxes = None
        if touches_inbox(request) and (box := self._inboxes.get(sid)) is not None:
            inboxes = {sid: box.known(posted_ids(request), rows_needed=reads_pending(request))}
        effects = None
        if isinstance(request, BeginEffect | FinishEffect):
            entry = self._effects.get(sid, {}).get(request.key)
            effects = None if entry is None else {(sid, request.key): entry}
        now = self._clock()
        result = plan(
            [request],
            known,
            now=now,
            location=self._location,
            leases=leases,
            inboxes=inboxes,
            effects=effects,
        )
        if (error := result.errors[0]) is not None:
            raise error
        for created in result.created:
            self._sessions[created[0]] = created
            self._order[created[0]] = len(self._order)
            self._events[created[0]] = []
            self._snapshots[created[0]] = {}
        for event in result.events:
            self._events[event[0]].append(event)
        for session_id, seq, state in result.snapshots:
            self._snapshots[session_id][seq] = state
        if result.inbox or result.applied:
            apply_inbox(self._inboxes, result)
        for (session_id, key), entry in result.effects.items():
            self._effects.setdefault(session_id, {})[key] = entry
        self._apply_sessions(result, now)
        for session_id, lease in result.leases.items():
            if lease is None:
                self._leases.pop(session_id, None)
            else:
                self._leases[session_id] = lease
        self._appended += result.appended
        self._transactions += 1
        self._largest_batch = max(self._largest_batch, result.appended)
        if type(request) in _WORK:
            self._work.set()
        return result.results[0]

    def _apply_sessions(self, result: Plan, now: float) -> None:
        sessions = self._sessions
        waits = result.waits
        for session_id, (last_seq, status) in result.updated.items():
            old = sessions[session_id]
            if session_id in waits:
                waiting, wake_at, kinds = waits[session_id]
                if kinds is None:
                    self._accepts.pop(session_id, None)
                else:
                    self._accepts[session_id] = frozenset(loads(kinds))
                head = (*old[:2], status, last_seq, old[4], now, *old[6:8])
                sessions[session_id] = (*head, waiting, wake_at)
            else:
                sessions[session_id] = (*old[:2], status, last_seq, old[4], now, *old[6:])
        if not (waits or result.nudges):
            return
        for session_id, posted in result.nudges.items():
            old = sessions[session_id]
            accepts = self._accepts.get(session_id, ())
            dues = [due for kind, due in posted.items() if kind in accepts]
            if old[2] == "waiting" and dues and (old[9] is None or min(dues) < old[9]):
                sessions[session_id] = (*old[:9], min(dues))
        for session_id in (*result.waits, *result.nudges):
            row = sessions[session_id]
            if row[2] == "waiting" and row[9] is not None:
                self._wakes[session_id] = row[9]
            else:
                self._wakes.pop(session_id, None)

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
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
    ) -> None:
        """Append events whose numbers follow the session's last one.

        With ``applied`` and ``posts``, the same write marks that inbox message
        applied by the last event and posts the messages; with ``waiting``, it
        parks the session (see `Store.append`).

        Raises:
            DuplicateEvent: A number is taken or is not the next one; nothing is appended.
            SessionNotFound: No such session.
            UnserializablePatch: A patch holds a value that is not JSON data.
            StoreError: Message ``applied`` is not pending, another value is not JSON
                data, or the store is not open; nothing is appended.
            LeaseLost: ``owner`` is given and no longer holds the session's lease
                (another owner took it); nothing is appended.
            ConfigurationError: ``applied`` is not a position, or comes with no events;
                ``waiting`` comes without a ``status``, or ``accepts`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "append")
        await anyio.lowlevel.checkpoint()
        self._write(
            self._append_request(
                session_id, events, snapshot, status, applied, posts, owner, waiting, accepts
            )
        )

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
        return LoadedSession(decode_record(row), seq, decode_snapshot(state, session_id), events)

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
        return found, decode_snapshot(state, session_id)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        return decode_records(self._sessions.values(), self.location)

    async def set_status(self, session_id: str, status: str, *, owner: str | None = None) -> None:
        """Change a session's status; with ``owner``, fenced as an append is (`Store.set_status`).

        Raises:
            SessionNotFound: No such session.
            LeaseLost: ``owner`` is given and no longer holds the session's lease
                (another owner took it); nothing is written.
            ConfigurationError: ``owner`` is not a non-empty str.
        """
        await anyio.lowlevel.checkpoint()
        self._check_open()
        if owner is None:
            self._write(SetStatus(session_id, status))
        else:  # an event-less append for the owner: the append's own fence
            self._write(self._append_request(session_id, (), None, status, owner=owner))

    async def acquire(
        self,
        session_id: str,
        owner: str,
        *,
        ttl: float,
        replacing: str | None = None,
        renew: bool = False,
    ) -> None:
        """Take (or renew) the session's lease for ``owner`` for ``ttl`` seconds.

        A lease held by ``replacing`` (an owner known to be dead) is taken over.

        Raises:
            SessionLocked: Another owner holds a lease that has not expired.
            LeaseLost: ``renew`` (renew only), and ``owner`` does not hold it now.
            ConfigurationError: ``ttl`` is not a positive number of seconds.
        """
        await anyio.lowlevel.checkpoint()
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        held = self._leases.get(session_id)
        if renew and (refused := renewal_refused(session_id, owner, held, self._location)):
            raise refused
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
        leases = self._leases.items()
        return tuple(LeaseRecord(sid, *lease) for sid, lease in leases if lease[1] > now)

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        if (held := self._leases.get(session_id)) is not None and held[0] == owner:
            del self._leases[session_id]
            self._work.set()

    async def claim(
        self, owner: str, *, machines: Collection[str], limit: int, ttl: float, now: float
    ) -> tuple[SessionRecord, ...]:
        """Lease up to ``limit`` sessions with something to do to ``owner`` (see `WorkQueue`).

        Leases expire by the store's clock; ``now`` says which waiting sessions are due.

        Raises:
            ConfigurationError: An argument is malformed.
            StoreError: The store is not open.
        """
        names = frozenset(check_claim(owner, machines, limit, ttl, now))
        await anyio.lowlevel.checkpoint()
        self._check_open()
        leased_at = self._clock()
        found = pick_claims(self._sessions, self._leases, names, limit, now, leased_at)
        for session_id in found:
            self._leases[session_id] = (owner, leased_at + ttl)
        return tuple(decode_record(self._sessions[sid]) for sid in found)

    # -- inboxes -----------------------------------------------------------------

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        """Store a message in the session's inbox (see `Store.post`).

        Returns:
            The stored message, and whether it is new (``False``: its id was there).

        Raises:
            SessionNotFound: No such session.
            InboxFull: The inbox holds ``capacity`` pending messages; nothing is stored.
            StoreError: The payload is not JSON data, or the store is not open.
            ConfigurationError: The message or ``capacity`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "post")
        await anyio.lowlevel.checkpoint()
        row, new = self._write(self._post_request(session_id, message, capacity))
        return decode_message(row), new

    def _inbox_rows(self, session_id: str) -> list[MessageRow]:
        self._row(session_id)
        box = self._inboxes.get(session_id)
        return [] if box is None else box.rows

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """The session's messages not applied yet, by ``(due_at, position)``.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        rows = self._inbox_rows(session_id)
        box = self._inboxes.get(session_id)
        found = [] if box is None else [rows[position - 1] for position in box.pending]
        found.sort(key=lambda row: (row[6], row[2]))
        return tuple(map(decode_message, found))

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """Every message of the session's inbox, applied ones too, by position.

        Raises:
            SessionNotFound: No such session.
        """
        await anyio.lowlevel.checkpoint()
        return tuple(map(decode_message, self._inbox_rows(session_id)))

    async def park(
        self,
        session_id: str,
        owner: str | None,
        *,
        status: str,
        waiting: Any,
        accepts: Collection[str],
        now: float,
    ) -> bool:
        """Park the session unless a message it accepts is due (see `Store.park`).

        Returns:
            Whether it parked.

        Raises:
            SessionNotFound: No such session.
            StoreError: ``waiting`` is not JSON data, or the store is not open.
            ConfigurationError: ``accepts`` or ``now`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "park")
        await anyio.lowlevel.checkpoint()
        request = self._park_request(session_id, owner, status, waiting, accepts, now)
        parked: bool = self._write(request)
        return parked

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now`` (earliest first), and the next wake."""
        await anyio.lowlevel.checkpoint()
        self._check_open()
        order = self._order
        due = sorted(
            (wake_at, order[sid], sid) for sid, wake_at in self._wakes.items() if wake_at <= now
        )
        later = min((t for t in self._wakes.values() if t > now), default=None)
        return tuple(decode_record(self._sessions[sid]) for *_, sid in due), later

    async def _write_effect(self, request: BeginEffect | FinishEffect) -> Any:
        await anyio.lowlevel.checkpoint()
        return self._write(request)

    async def _effect_rows(self, session_id: str) -> list[EffectRow]:
        self._row(session_id)
        return list(self._effects.get(session_id, {}).values())

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's counters (``pending`` is always 0)."""
        return StoreStatistics(
            appended=self._appended,
            transactions=self._transactions,
            largest_batch=self._largest_batch,
            pending=0,
        )
