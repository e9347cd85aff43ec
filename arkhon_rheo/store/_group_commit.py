"""What `SQLiteStore` and `PostgresStore` share: the group-commit write path.

Both turn each write into a request (`._plan`), hand it to one writer that
commits the requests queued meanwhile in one transaction (group commit), and
acknowledge it per the store's `Durability`. How they open, close, read and
lease differs: `GroupCommitStore` leaves those abstract.
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ConfigurationError, StoreError
from .._hooks import current_injector
from ..protocols import Durability, StoreStatistics
from ._base import StoreBase, inject_store_fault
from ._codec import decode_message
from ._effects import EffectLedger
from ._plan import Acquire, Flush, Release, Request, SetStatus, plan
from ._writer import Ticket, log_unacknowledged

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence
    from types import TracebackType
    from typing import Self

    from ..protocols import (
        LeaseRecord,
        LoadedSession,
        NewMessage,
        SessionRecord,
        StoredEvent,
        StoredMessage,
    )
    from ._driver import Rows
    from ._effects import BeginEffect, FinishEffect
    from ._plan import Append
    from ._thread_writer import Batch, ThreadWriter
    from ._writer import Writer

__all__ = ["GroupCommitStore"]


class GroupCommitStore(StoreBase, EffectLedger, abc.ABC):
    """A store whose writes one group-commit writer commits, per its durability mode.

    The write half of the `Store` protocol (`create_session`, `append`,
    `set_status`, `release`, `post`, `park`, the effect ledger's writes), on
    top of a writer (a `ThreadWriter`, or the aiosqlite task `Writer`) that a
    subclass opens in ``__aenter__`` and closes in ``__aexit__``. A subclass
    also provides the reads, the leases and the work queue's `claim`.
    """

    def __init__(self, location: str, clock: Callable[[], float], durability: Durability) -> None:
        super().__init__(location, clock)
        if not isinstance(durability, Durability):
            raise ConfigurationError(f"durability must be a Durability, not {durability!r}")
        self._durability = durability
        self._writer: Writer | ThreadWriter | None = None
        #: Async mode: the last event number queued per session.
        self._tails: dict[str, int] = {}
        #: Async mode: refused writes not yet reported to the session's owner.
        self._deferred: dict[str, Exception] = {}

    @property
    def durability(self) -> Durability:
        """When writes are acknowledged."""
        return self._durability

    # -- what each store does its own way ----------------------------------------------

    @abc.abstractmethod
    async def __aenter__(self) -> Self:
        """Open the store and its writer."""

    @abc.abstractmethod
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit everything queued, stop the writer and close the store."""

    @abc.abstractmethod
    def _enqueue(self, ticket: Ticket) -> Batch | None:
        """The writer's fast path: queue ``ticket`` now and return its batch.

        ``None``: the writer takes it through its ``submit`` (no room now, or a
        writer with no fast path). Waiting on the batch here rather than in
        ``submit`` saves a coroutine per commit in flight.
        """

    @abc.abstractmethod
    async def record(self, session_id: str) -> SessionRecord:
        """The session's record."""

    @abc.abstractmethod
    async def load(self, session_id: str) -> LoadedSession:
        """The latest snapshot and the events after it."""

    @abc.abstractmethod
    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """Every event of the session, in order."""

    @abc.abstractmethod
    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """The latest snapshot taken at or before event ``seq``."""

    @abc.abstractmethod
    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""

    @abc.abstractmethod
    async def acquire(
        self,
        session_id: str,
        owner: str,
        *,
        ttl: float,
        replacing: str | None = None,
        renew: bool = False,
    ) -> None:
        """Take (or renew) the session's lease for ``owner`` for ``ttl`` seconds."""

    @abc.abstractmethod
    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired."""

    @abc.abstractmethod
    async def claim(
        self, owner: str, *, machines: Collection[str], limit: int, ttl: float, now: float
    ) -> tuple[SessionRecord, ...]:
        """Lease up to ``limit`` sessions with something to do to ``owner``."""

    @abc.abstractmethod
    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """The session's messages not applied yet, by ``(due_at, position)``."""

    @abc.abstractmethod
    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """Every message of the session's inbox, applied ones too, by position."""

    @abc.abstractmethod
    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now`` (earliest first), and the next wake."""

    @abc.abstractmethod
    async def _effect_rows(self, session_id: str) -> Rows:
        """The session's effect rows, in the order its effects were first begun."""

    # -- the queue to the writer -------------------------------------------------------

    def _defer(self, ticket: Ticket) -> None:
        assert ticket.error is not None
        sid = ticket.request.session_id
        self._deferred.setdefault(sid, ticket.error)
        self._tails.pop(sid, None)
        log_unacknowledged(ticket, self._location)

    def _raise_deferred(self, session_id: str) -> None:
        if (error := self._deferred.pop(session_id, None)) is not None:
            raise error

    def _closing(self) -> StoreError:
        self._check_open()
        return StoreError(f"the store at {self._location} is closing")

    async def _submit(self, request: Request, *, wait: bool) -> Ticket:
        """Queue ``request``; if ``wait``, wait until it is committed and raise its refusal."""
        ticket = Ticket(request, wait)
        batch = self._enqueue(ticket)
        if batch is None:
            await self._submit_slowly(ticket)
        elif wait:
            try:
                await batch.done.wait()
            except BaseException:
                # Cancelled: the ticket is committed all the same; a refusal is logged.
                ticket.abandoned = True
                raise
        if ticket.error is not None and wait:
            raise ticket.error
        return ticket

    async def _submit_slowly(self, ticket: Ticket) -> None:
        """Hand ``ticket`` to the writer's ``submit`` (which waits for room, and for it)."""
        assert self._writer is not None
        try:
            await self._writer.submit(ticket)
        except anyio.ClosedResourceError as exc:
            raise self._closing() from exc

    async def _flush(self) -> None:
        """Commit everything queued so far (async mode: before reading)."""
        assert self._writer is not None
        if self._writer.queued:
            await self._submit(Flush(), wait=True)

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's counters.

        ``transactions`` counts every write transaction (each batch is one, lease
        writes included);
        ``pending`` the events queued or being committed.
        """
        writer = self._writer
        if writer is None:
            return StoreStatistics(appended=0, transactions=0, largest_batch=0, pending=0)
        return StoreStatistics(
            appended=writer.appended,
            transactions=writer.transactions,
            largest_batch=writer.largest_batch,
            pending=writer.pending,
        )

    # -- writing ---------------------------------------------------------------

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
        """Record a new session with its initial snapshot (event number 0), durably.

        Raises:
            SessionError: The id exists already.
            StoreError: The snapshot is not JSON data, the write failed, or the store
                is not open.
        """
        await self._submit(
            self._create_request(session_id, machine, snapshot, parent, status, fingerprint),
            wait=True,
        )
        if self._durability is Durability.ASYNC:
            self._tails[session_id] = 0
        self._work.set()
        return await self.record(session_id)

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

        Returns when the write is acknowledged per the store's durability. If the
        call is cancelled while waiting, the write may or may not be committed:
        load the session to know. With ``applied`` and ``posts``, the same
        transaction marks that inbox message applied by the last event and posts
        the messages, and with ``waiting`` it parks the session (see
        `Store.append`); such an append is acknowledged once committed, in every
        mode.

        Raises:
            DuplicateEvent: A number is taken or is not the next one; nothing is appended.
            SessionNotFound: No such session.
            UnserializablePatch: A patch holds a value that is not JSON data.
            StoreError: Message ``applied`` is not pending, another value is not
                JSON data, the write failed, or the store is not open; nothing is
                appended.
            LeaseLost: ``owner`` is given and no longer holds the session's lease
                (another owner took it); nothing is appended.
            ConfigurationError: ``applied`` is not a position, or comes with no events;
                ``waiting`` comes without a ``status``, or ``accepts`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "append")
        request = self._append_request(
            session_id, events, snapshot, status, applied, posts, owner, waiting, accepts
        )
        del events, snapshot, posts  # encoded: nothing here keeps them alive while waiting
        if self._durability is not Durability.ASYNC:
            ticket, wait = self._queued(request)
            try:
                await wait
            except BaseException:
                ticket.abandoned = True  # committed all the same; a refusal is logged
                raise
            if ticket.error is not None:
                raise ticket.error
            return
        self._raise_deferred(session_id)
        if request.applied is not None or request.posts or request.waiting is not None:
            # Applied exactly once, or parked (its lease given up): known only once
            # committed (and so is the tail).
            self._tails.pop(session_id, None)
            await self._submit(request, wait=True)
            if request.rows:
                self._tails[session_id] = request.rows[-1][1]
            return
        last = self._tails.get(session_id)
        if last is None:
            last = (await self.record(session_id)).last_seq
        known = {session_id: (last, "")}
        # (Fencing is checked by the writer's transaction; a refusal there is deferred.)
        held = None if owner is None else {session_id: (owner, math.inf)}
        if error := plan([request], known, now=0.0, location=self._location, leases=held).errors[0]:
            raise error
        if request.rows:
            self._tails[session_id] = request.rows[-1][1]
        try:
            await self._submit(request, wait=False)
        except BaseException:
            self._tails.pop(session_id, None)
            raise

    def queue_append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        snapshot: tuple[int, Any] | None,
        status: str | None,
        applied: int | None,
        posts: Sequence[NewMessage],
        owner: str | None,
        /,
    ) -> tuple[Ticket, Awaitable[object]] | None:
        """`append`, queued now with no coroutine of its own: its ticket and what to await.

        The supervisor's step awaits the write's batch directly this way (see
        ``StoreSupport.queue`` in ``protocols``): await what is returned, then raise the
        ticket's ``error`` if it has one; a caller that stops waiting sets its
        ``abandoned`` (the write is committed all the same; a refusal is logged).

        Returns:
            ``None`` where `append` must do the work: in ``ASYNC`` mode, with a
                fault injector installed, or where a subclass overrides `append`.

        Raises:
            StoreError: As `append` raises for a write that cannot be queued (a
                value that is not JSON data, the store not open); nothing is queued.
            ConfigurationError: As `append` raises for ``applied`` or ``owner``.
        """
        if (
            self._durability is Durability.ASYNC
            or current_injector() is not None
            or type(self).append is not GroupCommitStore.append  # a subclass's own append runs
        ):
            return None
        return self._queued(
            self._append_request(session_id, events, snapshot, status, applied, posts, owner)
        )

    def _queued(self, request: Append) -> tuple[Ticket, Awaitable[object]]:
        """Queue ``request`` for a caller that waits: its ticket, and what to await."""
        ticket = Ticket(request, True)
        # `_submit`, inlined: no coroutine of its own for every commit in flight.
        batch = self._enqueue(ticket)
        if batch is None:
            return ticket, self._submit_slowly(ticket)
        return ticket, batch.done.wait()

    async def set_status(self, session_id: str, status: str, *, owner: str | None = None) -> None:
        """Change a session's status, durably; with ``owner``, fenced (`Store.set_status`).

        With ``owner`` it is an append of no events for that owner, acknowledged
        once committed in every mode: refused by the writer's transaction as a
        stale holder's append is.

        Raises:
            SessionNotFound: No such session.
            LeaseLost: ``owner`` is given and no longer holds the session's lease
                (another owner took it); nothing is written.
            StoreError: The write failed, or the store is not open.
            ConfigurationError: ``owner`` is not a non-empty str.
        """
        self._check_open()
        self._raise_deferred(session_id)
        if owner is None:
            await self._submit(SetStatus(session_id, status), wait=True)
        else:
            await self._submit(
                self._append_request(session_id, (), None, status, owner=owner), wait=True
            )
        self._work.set()

    # -- leases ----------------------------------------------------------------

    async def _acquire(
        self, session_id: str, owner: str, ttl: float, replacing: str | None, renew: bool
    ) -> Ticket:
        """`acquire`'s write, committed: its ticket (its ``result``, the lease's token)."""
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        return await self._submit(
            Acquire(session_id, owner, now + ttl, now, replacing, renew), wait=True
        )

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it (in the next group commit).

        Raises:
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        await self._submit(Release(session_id, owner), wait=True)
        self._work.set()

    # -- inboxes ---------------------------------------------------------------

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        """Store a message in the session's inbox (see `Store.post`).

        Returns once its transaction is committed, durably as an ``append`` in
        ``SYNC`` or ``BATCHED`` mode (and in ``ASYNC`` mode too).

        Returns:
            The stored message, and whether it is new (``False``: its id was there).

        Raises:
            SessionNotFound: No such session.
            InboxFull: The inbox holds ``capacity`` pending messages; nothing is stored.
            StoreError: The payload is not JSON data, the write failed, or the store
                is not open.
            ConfigurationError: The message or ``capacity`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "post")
        ticket = await self._submit(self._post_request(session_id, message, capacity), wait=True)
        row, new = ticket.result
        if new:
            self._work.set()
        return decode_message(row), new

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

        The check and the writes are one transaction (the group commit's, holding
        the file's write lock in SQLite, the session's row lock in PostgreSQL), so
        a message another process posts is either seen by it or posted after the
        session is parked.

        Returns:
            Whether it parked.

        Raises:
            SessionNotFound: No such session.
            StoreError: ``waiting`` is not JSON data, the write failed, or the store
                is not open.
            ConfigurationError: ``accepts`` or ``now`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "park")
        request = self._park_request(session_id, owner, status, waiting, accepts, now)
        self._raise_deferred(session_id)
        parked: bool = (await self._submit(request, wait=True)).result
        if parked:
            self._work.set()
        return parked

    # -- effects ---------------------------------------------------------------

    async def _write_effect(self, request: BeginEffect | FinishEffect) -> Any:
        self._raise_deferred(request.session_id)
        return (await self._submit(request, wait=True)).result
