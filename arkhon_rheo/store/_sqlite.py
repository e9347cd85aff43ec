"""`SQLiteStore`: the embedded default store, one SQLite file with group commit."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, StoreError
from ..protocols import Durability, LeaseRecord, LoadedSession, SessionRecord, StoreStatistics
from ..protocols._seams import current_injector
from . import _sql as sql
from ._base import StoreBase, StoreState, inject_store_fault
from ._codec import decode_event, decode_record, decode_snapshot
from ._driver import DriverName, ThreadDriver
from ._open import open_driver
from ._plan import Acquire, Flush, Release, Request, SetStatus, plan
from ._schema import inspect_file, prepare
from ._thread_writer import ThreadWriter
from ._writer import Ticket, Writer, log_unacknowledged

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus

    from ..protocols import StoredEvent
    from ._driver import Driver, Script
    from ._thread_writer import Batch

__all__ = ["SQLiteStore"]

_SYNCHRONOUS = {Durability.SYNC: "FULL", Durability.BATCHED: "NORMAL", Durability.ASYNC: "NORMAL"}


class SQLiteStore(StoreBase):
    """Sessions in one SQLite file: an event log, snapshots, records and leases.

    One writer task per store commits the writes of many sessions together
    (group commit): each transaction takes every write queued while the previous
    one committed. The file is in WAL mode, and ``durability`` says when a write
    is acknowledged and what survives a crash:

    * `Durability.SYNC`: ``append`` returns once the transaction holding it is
      committed with ``synchronous=FULL`` (the WAL is fsynced at each commit).
      Survives ``kill -9`` of the process and a power loss or OS crash.
    * `Durability.BATCHED` (default): ``append`` returns once the transaction
      holding it is committed with ``synchronous=NORMAL``: the commit is in the
      WAL, in the OS's page cache, fsynced at the next checkpoint. Survives
      ``kill -9`` of the process; a power loss or OS crash may roll the file back
      to an earlier commit, never corrupt it.
    * `Durability.ASYNC`: ``append`` returns once the write is queued (its number
      checked against the session's last one first). What is still queued when
      the process dies is lost (at most the queue, ``max_pending`` requests);
      leaving the store, or cancelling it, commits everything queued. A queued
      write refused later is logged and raised by the session's next ``append``
      or ``set_status``. Reads commit queued writes first (read your writes).

    The SQL runs on stdlib `sqlite3` on one connection owned by one dedicated
    thread (`._thread_writer`), on asyncio and trio alike: it batches the queued
    writes by itself, commits each batch in one transaction while the event loop
    builds the next, and wakes the batch's callers with one call back into the
    loop. ``driver="aiosqlite"`` runs it on aiosqlite instead, with a writer task
    (`._writer`; asyncio only; one await per statement, so it is slower).

    Opening a file that is not SQLite, another application's SQLite database, a
    store of another schema version or a damaged one raises `StoreCorrupt` and
    leaves the file as it was. A missing or empty file gets the schema.

    Args:
        path: The database file.
        durability: When writes are acknowledged (see above).
        batch_max: The most requests one transaction carries.
        max_pending: How many requests may wait for the writer; more wait for room.
        busy_timeout: How long to wait for another process's write lock, in seconds.
        driver: ``"auto"`` (the same as ``"thread"``), ``"thread"`` or ``"aiosqlite"``
            (asyncio only).
        clock: Returns the wall-clock time in seconds; records are stamped and
            leases expire by it. Processes sharing a file must share a clock.

    Raises:
        ConfigurationError: An argument is out of range.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = Durability.BATCHED,
        batch_max: int = 1024,
        max_pending: int = 8192,
        busy_timeout: float = 5.0,
        driver: DriverName = "auto",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(os.fspath(path), clock)
        if not isinstance(durability, Durability):
            raise ConfigurationError(f"durability must be a Durability, not {durability!r}")
        if batch_max < 1 or max_pending < 1:
            raise ConfigurationError(
                f"batch_max ({batch_max}) and max_pending ({max_pending}) must be at least 1"
            )
        if not busy_timeout >= 0:
            raise ConfigurationError(f"busy_timeout must be >= 0 seconds, not {busy_timeout!r}")
        if driver not in ("auto", "aiosqlite", "thread"):
            raise ConfigurationError(
                f"driver must be 'auto', 'aiosqlite' or 'thread', not {driver!r}"
            )
        self._durability = durability
        self._batch_max = batch_max
        self._max_pending = max_pending
        self._busy_timeout = busy_timeout
        self._driver_name: DriverName = driver
        self._writer: Writer | ThreadWriter | None = None
        self._task_group: TaskGroup | None = None
        #: Async mode: the last event number queued per session.
        self._tails: dict[str, int] = {}
        #: Async mode: refused writes not yet reported to the session's owner.
        self._deferred: dict[str, Exception] = {}

    @property
    def durability(self) -> Durability:
        """When writes are acknowledged."""
        return self._durability

    async def __aenter__(self) -> SQLiteStore:
        """Open (or create) the file and start the writer.

        Raises:
            StoreCorrupt: The file is not a store of this schema version, or is
                damaged; it is left untouched.
            StoreError: It cannot be opened, or the store was open already.
        """
        self._begin_enter()
        path = self._location
        with anyio.CancelScope(shield=True):
            try:
                new = await anyio.to_thread.run_sync(inspect_file, path)
                db = await open_driver(
                    path, name=self._driver_name, busy_timeout=self._busy_timeout
                )
            except BaseException:
                self._state = StoreState.CLOSED
                raise
            script = prepare(path, new=new, synchronous=_SYNCHRONOUS[self._durability])
            if isinstance(db, ThreadDriver):
                await self._open_thread_writer(db, script)
            else:
                await self._open_task_writer(db, script)
        if isinstance(self._writer, Writer):
            self._task_group = anyio.create_task_group()
            await self._task_group.__aenter__()
            await self._task_group.start(self._run_writer, self._writer)
        self._state = StoreState.OPEN
        return self

    async def _open_thread_writer(self, db: ThreadDriver, script: Script[None]) -> None:
        writer = ThreadWriter(
            db,
            location=self._location,
            clock=self._clock,
            batch_max=self._batch_max,
            max_pending=self._max_pending,
            on_unacknowledged_error=self._defer,
        )
        try:
            await writer.run_script(script)
        except BaseException:
            self._state = StoreState.CLOSED
            await writer.aclose()
            raise
        self._writer = writer

    async def _open_task_writer(self, db: Driver, script: Script[None]) -> None:
        # aiosqlite: the group-commit writer task of `._writer` (one await per statement).
        try:
            await db.run(script)
        except BaseException:
            self._state = StoreState.CLOSED
            await db.close()
            raise
        self._writer = Writer(
            db,
            location=self._location,
            clock=self._clock,
            batch_max=self._batch_max,
            max_pending=self._max_pending,
            on_unacknowledged_error=self._defer,
        )

    @staticmethod
    async def _run_writer(
        writer: Writer, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # Shielded: when the host is cancelled, the sessions stopping in it still store
        # their status and give up their leases; the writer ends when the store closes.
        with anyio.CancelScope(shield=True):
            await writer.run(task_status=task_status)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit everything queued, stop the writer and close the file."""
        if self._state is not StoreState.OPEN:
            return
        writer = self._writer
        assert writer is not None
        self._state = StoreState.CLOSED
        if isinstance(writer, ThreadWriter):
            # The thread commits what is queued, then closes the connection.
            await writer.aclose()
            return
        assert self._task_group is not None
        writer.close()
        try:
            # The body's own exception is not the writer's business: it propagates
            # as it is, never wrapped in an ExceptionGroup.
            await self._task_group.__aexit__(None, None, None)
        finally:
            # A read may still run on the connection: close once it is done.
            with anyio.CancelScope(shield=True):
                async with writer.lock:
                    await writer.db.close()

    # -- writing ---------------------------------------------------------------

    def _defer(self, ticket: Ticket) -> None:
        assert ticket.error is not None
        sid = ticket.request.session_id
        self._deferred.setdefault(sid, ticket.error)
        self._tails.pop(sid, None)
        log_unacknowledged(ticket, self._location)

    def _raise_deferred(self, session_id: str) -> None:
        if (error := self._deferred.pop(session_id, None)) is not None:
            raise error

    def _enqueue(self, ticket: Ticket) -> Batch | None:
        """The thread writer's fast path: queue ``ticket`` now and return its batch.

        ``None``: the writer takes it through its ``submit`` (no room now, or the
        task writer). Waiting on the batch here rather than in ``submit`` saves a
        coroutine per commit in flight.
        """
        writer = self._writer
        assert writer is not None
        if type(writer) is not ThreadWriter:
            return None
        try:
            return writer.enqueue(ticket)
        except anyio.ClosedResourceError as exc:
            raise self._closing() from exc

    def _closing(self) -> StoreError:
        self._check_open()
        return StoreError(f"the store at {self._location} is closing")

    async def _submit(self, request: Request, *, wait: bool) -> None:
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
        return await self.record(session_id)

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Any] | None = None,
        status: str | None = None,
    ) -> None:
        """Append events whose numbers follow the session's last one.

        Returns when the write is acknowledged per the store's durability. If the
        call is cancelled while waiting, the write may or may not be committed:
        load the session to know.

        Raises:
            DuplicateEvent: A number is taken or is not the next one; nothing is appended.
            SessionNotFound: No such session.
            UnserializablePatch: A patch holds a value that is not JSON data.
            StoreError: Another value is not JSON data, the write failed, or the
                store is not open.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "append")
        request = self._append_request(session_id, events, snapshot, status)
        del events, snapshot  # encoded: nothing here keeps them alive while waiting
        if self._durability is not Durability.ASYNC:
            # `_submit`, inlined: one coroutine less for every commit in flight.
            ticket = Ticket(request, True)
            batch = self._enqueue(ticket)
            if batch is None:
                await self._submit_slowly(ticket)
            else:
                try:
                    await batch.done.wait()
                except BaseException:
                    ticket.abandoned = True  # committed all the same; a refusal is logged
                    raise
            if ticket.error is not None:
                raise ticket.error
            return
        self._raise_deferred(session_id)
        last = self._tails.get(session_id)
        if last is None:
            last = (await self.record(session_id)).last_seq
        known = {session_id: (last, "")}
        if error := plan([request], known, now=0.0, location=self._location).errors[0]:
            raise error
        if request.rows:
            self._tails[session_id] = request.rows[-1][1]
        try:
            await self._submit(request, wait=False)
        except BaseException:
            self._tails.pop(session_id, None)
            raise

    async def set_status(self, session_id: str, status: str) -> None:
        """Change a session's status, durably.

        Raises:
            SessionNotFound: No such session.
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        self._raise_deferred(session_id)
        await self._submit(SetStatus(session_id, status), wait=True)

    # -- reading ---------------------------------------------------------------

    async def _reading(self) -> Writer | ThreadWriter:
        self._check_open()
        assert self._writer is not None
        if self._durability is Durability.ASYNC and isinstance(self._writer, Writer):
            # (The thread writer runs reads behind the writes queued before them.)
            await self._flush()
        return self._writer

    async def record(self, session_id: str) -> SessionRecord:
        """The session's record.

        Raises:
            SessionNotFound: No such session.
        """
        writer = await self._reading()
        return decode_record(await writer.run_script(sql.record(session_id)))

    async def load(self, session_id: str) -> LoadedSession:
        """The latest snapshot and the events after it.

        Raises:
            SessionNotFound: No such session.
            StoreCorrupt: The file is damaged.
        """
        writer = await self._reading()
        script = sql.transaction(sql.load(session_id), write=False)
        row, seq, state, events = await writer.run_script(script)
        return LoadedSession(
            decode_record(row), seq, decode_snapshot(state), tuple(map(decode_event, events))
        )

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """Every event of the session, in order.

        Raises:
            SessionNotFound: No such session.
            StoreCorrupt: The file is damaged.
        """
        writer = await self._reading()
        rows = await writer.run_script(sql.transaction(sql.history(session_id), write=False))
        return tuple(map(decode_event, rows))

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """The latest snapshot taken at or before event ``seq``.

        Raises:
            SessionNotFound: No such session.
        """
        writer = await self._reading()
        script = sql.transaction(sql.snapshot_at(session_id, seq), write=False)
        found, state = await writer.run_script(script)
        return found, decode_snapshot(state)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""
        writer = await self._reading()
        return tuple(map(decode_record, await writer.run_script(sql.sessions())))

    # -- leases ----------------------------------------------------------------

    async def acquire(
        self, session_id: str, owner: str, *, ttl: float, replacing: str | None = None
    ) -> None:
        """Take (or renew) the session's lease for ``owner`` for ``ttl`` seconds.

        A lease held by ``replacing`` (an owner known to be dead) is taken over.
        The check and the write happen in one ``BEGIN IMMEDIATE`` transaction (the
        group commit's: leases ride in the same batches as events), so two
        processes on the same file cannot both take it, nor both take it over.

        Raises:
            SessionLocked: Another owner holds a lease that has not expired.
            ConfigurationError: ``ttl`` is not a positive number of seconds.
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        await self._submit(Acquire(session_id, owner, now + ttl, now, replacing), wait=True)

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired, by the store's clock."""
        writer = await self._reading()
        rows = await writer.run_script(sql.leases(self._clock()))
        return tuple(LeaseRecord(*row) for row in rows)

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it (in the next group commit).

        Raises:
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        await self._submit(Release(session_id, owner), wait=True)

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
