"""The group-commit writer: one task per store, many sessions' writes per transaction.

Callers put `Ticket`s on a memory object stream. The writer takes the first
one, then everything else already waiting (up to ``batch_max``), checks the lot
against the sessions' rows inside one ``BEGIN IMMEDIATE`` transaction (`plan`),
writes the rows with one ``executemany`` per table, commits, and only then marks
each ticket done, with its own error if its request was refused. While it
commits, new tickets pile up and form the next batch: the more sessions write
at once, the larger the batches, with no timer involved.

A transaction, once begun, is finished (committed or rolled back) even if the
writer is cancelled; and when cancelled, the writer commits what is still
queued before it stops, so nothing acknowledged in ``async`` mode is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
import structlog

from .._errors import StoreCorrupt, StoreError
from ._plan import Append, Plan, Request, plan
from ._sql import transaction, write_batch

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskStatus
    from anyio.streams.memory import MemoryObjectReceiveStream

    from ._driver import Driver, Script

__all__ = ["Ticket", "Writer"]

T = TypeVar("T")
logger = structlog.get_logger("arkhon_rheo.store")


@dataclass(slots=True)
class Ticket:
    """A queued request; ``done`` is set (if given) once it is committed or refused."""

    request: Request
    done: anyio.Event | None
    error: Exception | None = None

    @property
    def events(self) -> int:
        """How many events the request appends."""
        return len(self.request.rows) if isinstance(self.request, Append) else 0


def _copy(exc: StoreError) -> StoreError:
    # One failed transaction fails each caller with its own exception object.
    cls = StoreCorrupt if isinstance(exc, StoreCorrupt) else StoreError
    error = cls(str(exc), location=exc.location)
    error.__cause__ = exc
    return error


class Writer:
    """Owns the connection: the batch loop, plus a lock for reads and lease transactions.

    Args:
        db: The connection.
        location: The file, for errors.
        clock: Stamps ``updated_at``.
        batch_max: The most tickets one transaction takes.
        on_unacknowledged_error: Called with each ticket that failed and that nobody
            waits for (``async`` appends).
    """

    def __init__(
        self,
        db: Driver,
        *,
        location: str,
        clock: Callable[[], float],
        batch_max: int,
        on_unacknowledged_error: Callable[[Ticket], None],
    ) -> None:
        self.db = db
        self.lock = anyio.Lock()
        self._location = location
        self._clock = clock
        self._batch_max = batch_max
        self._on_error = on_unacknowledged_error
        self.appended = 0
        self.transactions = 0
        self.largest_batch = 0
        #: Events queued or being committed.
        self.pending = 0
        #: Tickets queued or being committed.
        self.queued = 0

    async def run_script(self, script: Script[T], *, write: bool = False) -> T:
        """Run a script alone on the connection, shielded from cancellation.

        A transaction, once begun, is always committed or rolled back.

        Args:
            script: The script (wrapped in `transaction` if it needs one).
            write: Whether it is a write transaction, counted in the statistics.

        Returns:
            The script's result.
        """
        async with self.lock:
            with anyio.CancelScope(shield=True):
                result = await self.db.run(script)
        self.transactions += write
        return result

    async def run(
        self,
        receive: MemoryObjectReceiveStream[Ticket],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Commit batches until the send side is closed and the queue is empty."""
        task_status.started()
        with receive:
            try:
                async for first in receive:
                    batch = [first]
                    while len(batch) < self._batch_max:
                        try:
                            batch.append(receive.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await self._commit(batch)
            finally:
                # Cancelled: what was queued was maybe acknowledged (async mode).
                leftover: list[Ticket] = []
                while True:
                    try:
                        leftover.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                for start in range(0, len(leftover), self._batch_max):
                    await self._commit(leftover[start : start + self._batch_max])

    async def _commit(self, batch: list[Ticket]) -> None:
        with anyio.CancelScope(shield=True):
            try:
                result = await self._write([ticket.request for ticket in batch])
            except Exception as exc:
                if len(batch) > 1 and not isinstance(exc, StoreCorrupt):
                    # Unforeseen failure: retry alone so it only fails its own caller.
                    for ticket in batch:
                        await self._commit([ticket])
                    return
                error = (
                    exc
                    if isinstance(exc, StoreError)
                    else StoreError(
                        f"writing to {self._location} failed: {exc!r}", location=self._location
                    )
                )
                if not isinstance(exc, StoreError):
                    error.__cause__ = exc
                for ticket in batch:
                    ticket.error = _copy(error)
            else:
                for ticket, refused in zip(batch, result.errors, strict=True):
                    ticket.error = refused
                self.appended += result.appended
                self.largest_batch = max(self.largest_batch, result.appended)
            for ticket in batch:
                self.pending -= ticket.events
                self.queued -= 1
                if ticket.done is not None:
                    ticket.done.set()
                elif ticket.error is not None:
                    self._on_error(ticket)

    async def _write(self, requests: list[Request]) -> Plan:
        now = self._clock()
        if not any(r.session_id for r in requests):  # nothing but flushes
            return plan(requests, {}, now=now, location=self._location)
        script = write_batch(requests, now=now, location=self._location)
        return await self.run_script(transaction(script, write=True), write=True)


def log_unacknowledged(ticket: Ticket, location: str) -> None:
    """Log a failed write that nobody was waiting for."""
    logger.warning(
        "store.write_refused",
        session_id=ticket.request.session_id,
        location=location,
        error=str(ticket.error),
    )
