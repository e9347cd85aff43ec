"""The `Store` protocol: where sessions' events and snapshots live.

A store is event-sourced: each session has an initial snapshot, an
append-only log of committed events (numbered from 1, a duplicate number is
refused), and snapshots along the way. Loading a session is its latest
snapshot plus the events after it. Each session also has an inbox (messages
posted to it, applied once) and an effect ledger (each side effect's intent,
committed before its tool runs, and its answer). Everything a store holds is
plain JSON data (``dict``/``list``/``str``/numbers/``bool``/``None``); turning states
and patches into that data, and back, is the supervisor's job.

A store whose class sets ``takes_encoded = True`` (the package's own) is
handed what the supervisor encoded already, to keep as it is: an event's
patch as an ``EncodedPatch`` (each value's JSON bytes) and a snapshot's state
as JSON ``bytes``; it reads them back as plain JSON data like any other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from types import TracebackType

__all__ = [
    "Durability",
    "EffectStatus",
    "LeaseRecord",
    "LoadedSession",
    "NewMessage",
    "SessionRecord",
    "Store",
    "StoreStatistics",
    "StoredEffect",
    "StoredEvent",
    "StoredMessage",
]

#: A JSON-compatible value.
Json = Any


class Durability(enum.Enum):
    """When a commit is acknowledged to the supervisor that made it."""

    #: After the transaction holding it is durable on disk (``synchronous=FULL``).
    SYNC = "sync"
    #: After the batch holding it is durable; batches group many sessions' commits
    #: into one transaction (``synchronous=NORMAL`` with WAL).
    BATCHED = "batched"
    #: At once; the documented loss window on a crash is the batch not yet flushed.
    ASYNC = "async"


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One committed event as the store keeps it.

    Attributes:
        session_id: The session.
        seq: Its number in the session's log, from 1; unique per session.
        kind: ``"step"``, ``"failure"``, ``"rollback"``, ``"edit"``...
        stage: The stage that ran, if any.
        from_state: The lifecycle state before (the enum member's name).
        to_state: The lifecycle state after.
        reads: The stage's read set.
        writes: The fields written.
        patch: ``{"set": {field: json}, "append": {field: [json, ...]}}`` (given to a
            store that takes encoded patches as an ``EncodedPatch``).
        attempt: Which attempt succeeded.
        started_at: Wall-clock start, seconds since the epoch.
        finished_at: Wall-clock commit time.
        error: The failure record as JSON, if any.
        io: Extra facts about the event as JSON (a gate, a rollback's event
            numbers, the model and tool I/O recorded for replay), if any.
        digest: The 64-bit digest of the state the event left (see `replay`).
    """

    session_id: str
    seq: int
    kind: str
    stage: str | None
    from_state: str
    to_state: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    patch: Json
    attempt: int
    started_at: float
    finished_at: float
    error: Json = None
    io: Json = None
    digest: int | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What the store knows about a session without loading it.

    Attributes:
        session_id: The session.
        machine: The name of its machine.
        status: ``"running"``, ``"paused"``, ``"finished"``, ``"failed"``, ``"cancelled"``...
        last_seq: The number of its last event (0 if none).
        created_at: Wall-clock creation time.
        updated_at: Wall-clock time of its last change.
        parent: The session it was forked from, if any.
        fingerprint: The fingerprint of the machine that started it, as JSON data
            (``None`` for sessions stored before schema version 3).
        waiting: What a waiting or paused session waits for, as JSON data (set by
            `Store.park`; ``None`` once its status changes otherwise).
        wake_at: When a waiting session is due to wake, seconds since the epoch: the
            earliest due time of its pending messages of a kind it accepts; ``None``:
            only a new message wakes it. A message of an accepted kind posted since it
            parked brings it forward; so may one of another kind in a store that does
            not keep the accepted kinds (the session wakes, and parks again).
    """

    session_id: str
    machine: str
    status: str
    last_seq: int
    created_at: float
    updated_at: float
    parent: str | None = None
    fingerprint: Json = None
    waiting: Json = None
    wake_at: float | None = None


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to post to a session's inbox.

    Attributes:
        message_id: Unique within the session: posting an id the inbox has already
            (pending or applied) changes nothing.
        kind: The message kind's name.
        payload: The message as JSON data.
        due_at: When it may be delivered, seconds since the epoch (a plain message:
            when it was sent; a timer: when it fires).
    """

    message_id: str
    kind: str
    payload: Json
    due_at: float


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as a session's inbox keeps it.

    Attributes:
        session_id: The session.
        message_id: Its id, unique within the session.
        position: Its place in the session's inbox, from 1, in posting order.
        kind: The message kind's name.
        payload: The message as JSON data.
        posted_at: When it was stored, by the store's clock.
        due_at: When it may be delivered, seconds since the epoch.
        applied_seq: The number of the event that applied it (``None``: pending).
    """

    session_id: str
    message_id: str
    position: int
    kind: str
    payload: Json
    posted_at: float
    due_at: float
    applied_seq: int | None = None


class EffectStatus(enum.Enum):
    """Where a side effect in a session's effect ledger stands (`StoredEffect.status`)."""

    #: Its intent is committed and no outcome is: it is running, or it was when its
    #: process died (then it is *ambiguous*: it may or may not have happened).
    STARTED = "started"
    #: It returned; its result is stored, and is the answer to the call from now on.
    DONE = "done"
    #: It raised an error of its own, classified (a failure the supervisor retries,
    #: restarts or fails on); beginning it again runs it again.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class StoredEffect:
    """One side effect in a session's effect ledger: its intent, and its outcome once known.

    Attributes:
        session_id: The session whose step made the call.
        key: The call's idempotency key, unique within the session.
        tool: The name of the tool called.
        arguments: The arguments it was (last) begun with, as JSON data.
        status: Where it stands.
        attempts: How many times it was begun.
        started_at: When it was last begun, by the store's clock.
        finished_at: When its outcome was stored (``None`` while started).
        result: What it returned, as JSON data (``None`` unless done).
        error: What it raised (``None`` unless failed).
    """

    session_id: str
    key: str
    tool: str
    arguments: Json
    status: EffectStatus
    attempts: int
    started_at: float
    finished_at: float | None = None
    result: Json = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A session's lease: who drives it, and until when unless renewed.

    Attributes:
        session_id: The session.
        owner: Who holds it (an `AgentSystem` names its host, process id and
            process start time, so a dead owner on the same host is recognised).
        expires_at: When it runs out, seconds since the epoch.
    """

    session_id: str
    owner: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """A session as loaded: its latest snapshot and the events after it.

    Attributes:
        record: The session's record.
        snapshot_seq: The event number the snapshot was taken after (0: initial).
        snapshot: The state at that point, as JSON data.
        events: The events after the snapshot, in order.
    """

    record: SessionRecord
    snapshot_seq: int
    snapshot: Json
    events: tuple[StoredEvent, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a store's counters.

    Attributes:
        appended: Events appended since it was opened.
        transactions: Write transactions committed.
        largest_batch: The most events one transaction has carried.
        pending: Events accepted but not yet durable.
    """

    appended: int
    transactions: int
    largest_batch: int
    pending: int


@runtime_checkable
class Store(Protocol):
    """Durable (or in-memory) storage of sessions: snapshots plus an event log.

    A store is an async context manager; every method below may be called only
    between entering and leaving it. Errors are `StoreError` subclasses.
    """

    async def __aenter__(self) -> Store: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    async def create_session(
        self,
        session_id: str,
        *,
        machine: str,
        snapshot: Json,
        parent: str | None = None,
        status: str = "running",
        fingerprint: Json = None,
    ) -> SessionRecord:
        """Record a new session with its initial snapshot (event number 0).

        ``fingerprint`` describes the machine that runs it (JSON data), kept in
        its record. Raises ``SessionError`` if the id exists already.
        """
        ...

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Json] | None = None,
        status: str | None = None,
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Json = None,
        accepts: Collection[str] = (),
    ) -> None:
        """Append events (with numbers following the last one), durably per the store's mode.

        ``snapshot`` is ``(seq, state)`` to store alongside; ``status`` the session's
        new status (any status given clears its ``waiting`` and ``wake_at``). In the
        same transaction, ``applied`` (the position of a pending inbox message) marks
        that message applied by the last event appended, and each of ``posts`` is
        posted to the session's inbox (timers; no capacity check; an id the inbox
        has already is skipped). Raises ``StoreError`` (``DuplicateEvent``) if a
        number is taken or not the next one, or if message ``applied`` is not
        pending (applied already): then nothing is written.

        Fencing: with ``owner`` (who holds the session's lease), the append is
        refused with ``LeaseLost`` unless ``owner`` still holds the lease (in a store
        that keeps fencing tokens, under the token it was given when it took the
        lease), checked in the same transaction as the insert: then nothing is
        written. A lease that ran out but that no other owner took still lets its
        owner commit.

        Parking with it: with ``waiting`` (JSON data; ``status`` must be given too,
        ``"paused"`` or ``"waiting"``), the same transaction records what the session
        waits for (``accepts``: the message kinds that wake it; no wake time) and,
        with ``owner``, gives that owner's lease up, as `park` does; unlike `park`, it
        never refuses for a message already pending. A session paused at a gate is
        recorded so, its question with its pause event, in one write.
        """
        ...

    async def record(self, session_id: str) -> SessionRecord:
        """The session's record. Raises ``SessionNotFound``."""
        ...

    async def load(self, session_id: str) -> LoadedSession:
        """The latest snapshot and the events after it. Raises ``SessionNotFound``."""
        ...

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """Every event of the session, in order. Raises ``SessionNotFound``."""
        ...

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Json]:
        """The latest snapshot taken at or before event ``seq``."""
        ...

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""
        ...

    async def set_status(self, session_id: str, status: str, *, owner: str | None = None) -> None:
        """Change a session's status (clearing its ``waiting`` and ``wake_at``).

        Fencing: with ``owner`` (who holds the session's lease), the write is fenced
        as an append naming ``owner`` is (it is one: an append of no events with
        this ``status``): refused with ``LeaseLost`` unless ``owner`` still holds the
        lease, checked in the same transaction, and then nothing is written. So a
        driver paused past its lease cannot store its run's end over the status
        of the owner that took the session on. Without ``owner`` the write is not
        fenced (a caller that holds no lease). Raises ``SessionNotFound``.
        """
        ...

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        """Store a message in the session's inbox, durably per the store's mode.

        Returns the stored message and whether it is new: a ``message_id`` the
        inbox has already (pending or applied) changes nothing and returns the one
        stored. Raises ``SessionNotFound``, or ``InboxFull`` if the inbox holds
        ``capacity`` pending messages already (nothing is stored).
        """
        ...

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """The session's messages not applied yet, by ``(due_at, position)``.

        Raises ``SessionNotFound``.
        """
        ...

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """Every message of the session's inbox, applied ones too, by position.

        Raises ``SessionNotFound``.
        """
        ...

    async def park(
        self,
        session_id: str,
        owner: str | None,
        *,
        status: str,
        waiting: Json,
        accepts: Collection[str],
        now: float,
    ) -> bool:
        """Park the session unless a message it accepts is due, in one transaction.

        If a pending message whose kind is in ``accepts`` is due at ``now``, change
        nothing and return ``False``. Otherwise set the session's status to
        ``status``, its ``waiting`` to ``waiting`` and its ``wake_at`` to the
        earliest due time of its pending messages of an accepted kind (``None`` if
        none), release ``owner``'s lease and return ``True``. Raises
        ``SessionNotFound``, and ``LeaseLost`` if ``owner`` is given and does
        not hold the session's lease (fencing, as for `append`: a driver that
        lost the lease parks nothing).
        """
        ...

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now``, and when the next one is.

        The sessions with status ``"waiting"`` whose ``wake_at`` is at or before
        ``now``, the earliest first, and the earliest ``wake_at`` after ``now``
        among waiting sessions (``None``: none).
        """
        ...

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

        Raises ``SessionLocked`` if another owner holds an unexpired lease, unless
        that owner is ``replacing`` (one known to be dead): its lease is taken over.
        ``renew``: only renew it; raises ``LeaseLost`` unless ``owner`` holds the
        lease now (expired or not): one given up, or taken by another owner since
        (even if given up again), is not taken back by a driver paused past it.
        """
        ...

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired, by the store's clock."""
        ...

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it."""
        ...

    async def begin_effect(
        self,
        session_id: str,
        key: str,
        *,
        tool: str,
        arguments: Json,
        retry: bool = False,
    ) -> tuple[StoredEffect, bool]:
        """Commit the intent of a side effect before it runs, unless the ledger has its key.

        Returns the stored effect and whether this call began it (the caller may run
        the effect only then). With no entry for ``key``, the intent is stored
        (status ``STARTED``) durably per the store's mode (and in ``ASYNC`` mode too:
        the call returns once it is committed). An entry that is ``DONE`` is returned
        as it is, and so is one ``STARTED`` (ambiguous: it may have happened) unless
        ``retry``: then, as for a ``FAILED`` one, it is begun again with
        ``arguments``. Raises ``SessionNotFound``.
        """
        ...

    async def finish_effect(
        self, session_id: str, key: str, *, result: Json = None, error: str | None = None
    ) -> StoredEffect:
        """Store the outcome of a started effect, durably as its intent was.

        ``result`` (JSON data) makes it ``DONE``; ``error`` (what it raised) makes it
        ``FAILED``. Returns the stored effect. Raises ``SessionNotFound``, or
        ``StoreError`` if the effect is not ``STARTED`` (never begun, or finished
        already): then nothing is written.
        """
        ...

    async def effects(self, session_id: str) -> tuple[StoredEffect, ...]:
        """The session's effect ledger, in the order its effects were first begun.

        Raises ``SessionNotFound``.
        """
        ...

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's counters."""
        ...
