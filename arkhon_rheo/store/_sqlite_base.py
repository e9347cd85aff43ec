"""What `SQLiteStore` is built on: its file, its writer, and handing requests to it."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Self

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, StoreError
from ..protocols import Durability, StoreStatistics
from ._base import StoreBase, StoreState
from ._driver import DriverName, ThreadDriver
from ._open import open_driver
from ._plan import Flush, Request
from ._schema import inspect_file, prepare
from ._thread_writer import ThreadWriter
from ._writer import Ticket, Writer, log_unacknowledged

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus

    from ._driver import Driver, Script
    from ._thread_writer import Batch

__all__ = ["SQLiteBase"]

_SYNCHRONOUS = {Durability.SYNC: "FULL", Durability.BATCHED: "NORMAL", Durability.ASYNC: "NORMAL"}


class SQLiteBase(StoreBase):
    """The file, its writer and the queue to it: the half of `SQLiteStore` below its API.

    See `SQLiteStore` for the arguments and the durability modes.
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

    async def __aenter__(self) -> Self:
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

    async def _reading(self) -> Writer | ThreadWriter:
        self._check_open()
        assert self._writer is not None
        if self._durability is Durability.ASYNC and isinstance(self._writer, Writer):
            # (The thread writer runs reads behind the writes queued before them.)
            await self._flush()
        return self._writer

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
