"""`SQLiteStore`: the embedded default store, one SQLite file with group commit."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, StoreUpgrading
from .._log import get_logger
from ..protocols import Durability, LeaseRecord, LoadedSession, SessionRecord
from . import _effects_sql as effects_sql
from . import _inbox_sql as inbox_sql
from . import _sql as sql
from . import _work_sql as work_sql
from ._base import StoreState, check_claim
from ._codec import (
    decode_event,
    decode_message,
    decode_record,
    decode_records,
    decode_snapshot,
)
from ._driver import DriverName, ThreadDriver
from ._group_commit import GroupCommitStore
from ._open import check_driver, open_driver
from ._schema import inspect_file, prepare
from ._thread_writer import ThreadWriter
from ._writer import Writer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus

    from ..protocols import StoredEvent, StoredMessage
    from ._driver import Rows, Script
    from ._thread_writer import Batch
    from ._writer import Ticket

__all__ = ["SQLiteStore"]

#: Seconds between tries at the write lock of a file another process is upgrading.
_UPGRADE_POLL = 0.1
logger = get_logger("arkhon_rheo.store")
_SYNCHRONOUS = {Durability.SYNC: "FULL", Durability.BATCHED: "NORMAL", Durability.ASYNC: "NORMAL"}


class SQLiteStore(GroupCommitStore):
    """Sessions in one SQLite file: event logs, snapshots, records, leases, inboxes, effects.

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

    Inbox writes ride in the same batches, in the same mode: ``post`` returns
    once its transaction is committed as an ``append`` in that mode would be
    (in ``ASYNC`` mode too, as do ``park`` and an ``append`` that applies a
    message or posts timers: their answer, or their refusal, is known only then).
    So do the effect ledger's writes (``begin_effect``, ``finish_effect``): an
    intent is as durable as a commit in the store's mode before its tool runs.

    The SQL runs on stdlib `sqlite3` on one connection owned by one dedicated
    thread, on asyncio and trio alike: it batches the queued writes by itself,
    commits each batch in one transaction while the event loop builds the next,
    and wakes the batch's callers with one call back into the loop.
    ``driver="aiosqlite"`` runs it on aiosqlite instead, with a writer task
    (asyncio only; one await per statement, so it is slower; an optional extra:
    ``pip install 'arkhon-rheo[aiosqlite]'``).

    Opening a file that is not SQLite, another application's SQLite database, a
    store of another schema version or a damaged one raises `StoreCorrupt` and
    leaves the file as it was. A missing or empty file gets the schema. A file
    of an older schema version is upgraded in place, in one transaction; several
    processes opening it at once (workers restarted after a package upgrade)
    each wait for the one that upgrades it, up to ``upgrade_timeout``.

    Args:
        path: The database file.
        durability: When writes are acknowledged (see above).
        batch_max: The most requests one transaction carries.
        max_pending: How many requests may wait for the writer; more wait for room.
        busy_timeout: How long to wait for another process's write lock, in seconds.
        upgrade_timeout: How long opening a file of an older schema version waits
            for another process that is upgrading it, in seconds (a large file
            takes a while: its whole inbox is rewritten); past it, opening raises
            `StoreUpgrading`. The wait can be cancelled.
        driver: ``"auto"`` (the same as ``"thread"``), ``"thread"`` or ``"aiosqlite"``
            (asyncio only, and only with the ``aiosqlite`` extra installed).
        clock: Returns the wall-clock time in seconds; records are stamped and
            leases expire by it. Processes sharing a file must share a clock.

    Raises:
        ConfigurationError: An argument is out of range, or ``driver="aiosqlite"``
            without the aiosqlite package (the message says what to install).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = Durability.BATCHED,
        batch_max: int = 1024,
        max_pending: int = 8192,
        busy_timeout: float = 5.0,
        upgrade_timeout: float = 300.0,
        driver: DriverName = "auto",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(os.fspath(path), clock, durability)
        if batch_max < 1 or max_pending < 1:
            raise ConfigurationError(
                f"batch_max ({batch_max}) and max_pending ({max_pending}) must be at least 1"
            )
        if not busy_timeout >= 0:
            raise ConfigurationError(f"busy_timeout must be >= 0 seconds, not {busy_timeout!r}")
        if not upgrade_timeout >= 0:
            raise ConfigurationError(
                f"upgrade_timeout must be >= 0 seconds, not {upgrade_timeout!r}"
            )
        check_driver(driver)
        self._batch_max = batch_max
        self._max_pending = max_pending
        self._busy_timeout = busy_timeout
        self._upgrade_timeout = upgrade_timeout
        self._driver_name: DriverName = driver
        self._task_group: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        """Open (or create) the file and start the writer.

        A file of an older schema version is upgraded first; if another process
        is upgrading it, wait for that (up to ``upgrade_timeout``) and open the
        upgraded file.

        Raises:
            StoreCorrupt: The file is not a store of this schema version, or is
                damaged; it is left untouched.
            StoreUpgrading: Another process was still upgrading the file's schema
                after ``upgrade_timeout`` seconds.
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
        run: Callable[[Script[None]], Awaitable[object]]
        close: Callable[[], Awaitable[object]]
        writer: Writer | ThreadWriter
        if isinstance(db, ThreadDriver):
            thread_writer = writer = ThreadWriter(
                db,
                location=path,
                clock=self._clock,
                batch_max=self._batch_max,
                max_pending=self._max_pending,
                on_unacknowledged_error=self._defer,
            )
            run, close = thread_writer.run_script, thread_writer.aclose
        else:  # aiosqlite: the group-commit writer task of `._writer` (one await per statement)
            writer = Writer(
                db,
                location=path,
                clock=self._clock,
                batch_max=self._batch_max,
                max_pending=self._max_pending,
                on_unacknowledged_error=self._defer,
            )
            run, close = db.run, db.close
        try:
            await self._prepare(run, new=new)
        except BaseException:
            self._state = StoreState.CLOSED
            with anyio.CancelScope(shield=True):
                await close()
            raise
        self._writer = writer
        if isinstance(writer, Writer):
            self._task_group = anyio.create_task_group()
            await self._task_group.__aenter__()
            await self._task_group.start(self._run_writer, writer)
        self._state = StoreState.OPEN
        return self

    async def _prepare(
        self, run: Callable[[Script[None]], Awaitable[object]], *, new: bool
    ) -> None:
        """Give the file the schema, or check (and upgrade) its own.

        Each try runs shielded; between tries, waiting out another process's
        upgrade (`StoreUpgrading` with nothing waited), this can be cancelled.
        """
        deadline = anyio.current_time() + self._upgrade_timeout
        waiting = False
        while True:
            script = prepare(self._location, new=new, synchronous=_SYNCHRONOUS[self._durability])
            try:
                with anyio.CancelScope(shield=True):
                    await run(script)
            except StoreUpgrading as exc:
                left = deadline - anyio.current_time()
                if left <= 0:
                    raise StoreUpgrading(
                        location=self._location, version=exc.version, waited=self._upgrade_timeout
                    ) from exc.__cause__
                if not waiting:
                    waiting = True
                    logger.info(
                        "store.upgrade_wait",
                        location=self._location,
                        version=exc.version,
                        upgrade_timeout=self._upgrade_timeout,
                    )
                await anyio.sleep(min(_UPGRADE_POLL, left))
            else:
                return

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

    async def _reading(self) -> Writer | ThreadWriter:
        self._check_open()
        assert self._writer is not None
        if self._durability is Durability.ASYNC and isinstance(self._writer, Writer):
            # (The thread writer runs reads behind the writes queued before them.)
            await self._flush()
        return self._writer

    # -- reading ---------------------------------------------------------------

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
            decode_record(row),
            seq,
            decode_snapshot(state, session_id),
            tuple(map(decode_event, events)),
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
        return found, decode_snapshot(state, session_id)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""
        writer = await self._reading()
        return decode_records(await writer.run_script(sql.sessions()), self.location)

    # -- leases ----------------------------------------------------------------

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
        The check and the write happen in one ``BEGIN IMMEDIATE`` transaction (the
        group commit's: leases ride in the same batches as events), so two
        processes on the same file cannot both take it, nor both take it over.
        ``renew``: only renew the lease ``owner`` holds now (see `Store.acquire`).

        Raises:
            SessionLocked: Another owner holds a lease that has not expired.
            LeaseLost: ``renew``, and ``owner`` does not hold the lease now.
            ConfigurationError: ``ttl`` is not a positive number of seconds.
            StoreError: The write failed, or the store is not open.
        """
        await self._acquire(session_id, owner, ttl, replacing, renew)

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired, by the store's clock."""
        writer = await self._reading()
        rows = await writer.run_script(sql.leases(self._clock()))
        return tuple(LeaseRecord(*row) for row in rows)

    async def claim(
        self, owner: str, *, machines: Collection[str], limit: int, ttl: float, now: float
    ) -> tuple[SessionRecord, ...]:
        """Lease up to ``limit`` sessions with something to do to ``owner`` (see `WorkQueue`).

        One ``BEGIN IMMEDIATE`` transaction finds them and takes their leases,
        so two workers (in this process or others on the file) never claim one
        session. Leases expire by the store's clock; ``now`` (the system's clock)
        says which waiting sessions are due.

        Raises:
            ConfigurationError: An argument is malformed.
            StoreError: The write failed, or the store is not open.
        """
        names = check_claim(owner, machines, limit, ttl, now)
        writer = await self._reading()
        leased_at = self._clock()
        script = work_sql.claim(
            owner, names, limit, expires_at=leased_at + ttl, leased_at=leased_at, now=now
        )
        rows = await writer.run_script(sql.transaction(script, write=True), write=True)
        return tuple(map(decode_record, rows))

    # -- inboxes ---------------------------------------------------------------

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """The session's messages not applied yet, by ``(due_at, position)``.

        Raises:
            SessionNotFound: No such session.
        """
        writer = await self._reading()
        script = sql.transaction(inbox_sql.pending(session_id), write=False)
        return tuple(map(decode_message, await writer.run_script(script)))

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """Every message of the session's inbox, applied ones too, by position.

        Raises:
            SessionNotFound: No such session.
        """
        writer = await self._reading()
        script = sql.transaction(inbox_sql.messages(session_id), write=False)
        return tuple(map(decode_message, await writer.run_script(script)))

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now`` (earliest first), and the next wake."""
        writer = await self._reading()
        rows, later = await writer.run_script(sql.transaction(sql.waking(now), write=False))
        return tuple(map(decode_record, rows)), later

    # -- effects ---------------------------------------------------------------

    async def _effect_rows(self, session_id: str) -> Rows:
        writer = await self._reading()
        rows: Rows = await writer.run_script(
            sql.transaction(effects_sql.effects(session_id), write=False)
        )
        return rows
