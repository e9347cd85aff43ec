"""The group-commit writer task (aiosqlite driver): many sessions' writes per transaction.

The thread driver uses `._thread_writer` instead; both share `Ticket`.

Callers queue `Ticket`s with `Writer.submit`. The writer takes everything queued
(up to ``batch_max``), checks the lot against the sessions' rows inside one
``BEGIN IMMEDIATE`` transaction (`plan`), writes the rows with one
``executemany`` per table, commits, and only then marks each ticket done, with
its own error if its request was refused, and wakes their callers through one
event per batch. While it commits, new tickets pile up and form the next batch:
the more sessions write at once, the larger the batches, with no timer involved.
Every write runs in the writer task, never in a caller's: a caller cancelled
by its own event loop (a native ``asyncio`` cancellation, which anyio's shield
does not stop) can only stop waiting, never abandon a running transaction.

A transaction, once begun, is finished (committed or rolled back) even if the
writer is cancelled; and when cancelled, the writer commits what is still
queued before it stops, so nothing acknowledged in ``async`` mode is dropped.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._errors import StoreCorrupt, StoreError, StoreUnavailable
from .._log import get_logger
from ._plan import Append, Plan, Request, plan
from ._sql import transaction, write_batch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from anyio.abc import TaskStatus

    from ._driver import Driver, Script

__all__ = [
    "Ticket",
    "Writer",
    "batch_error",
    "copy_error",
    "log_unacknowledged",
    "refuse_all",
    "settle",
    "split_failed",
]

T = TypeVar("T")
logger = get_logger("arkhon_rheo.store")


class Ticket:
    """A queued request and, once it is committed or refused, its outcome.

    Attributes:
        request: What to write.
        waits: Whether a caller waits for it (else a refusal goes to the error hook).
        events: How many events the request appends (counted once, when queued
            and when resolved).
        done: Set once the batch holding it is committed; one event per batch,
            shared by its tickets (``None`` until queued, and for tickets nobody
            waits for).
        finished: Whether it has been committed or refused.
        error: Why it was refused, or ``None``.
        result: What its request returns once committed (see `Plan.results`).
        committed: Whether its transaction committed it (thread writer).
        abandoned: Whether its caller stopped waiting (cancelled) before it was
            done: a refusal is then logged (thread writer).
    """

    __slots__ = (
        "abandoned",
        "committed",
        "done",
        "error",
        "events",
        "finished",
        "request",
        "result",
        "waits",
    )

    def __init__(self, request: Request, waits: bool) -> None:
        self.request = request
        self.waits = waits
        self.events = len(request.rows) if type(request) is Append else 0
        self.done: anyio.Event | None = None
        self.finished = False
        self.error: Exception | None = None
        self.result: Any = None
        self.committed = False
        self.abandoned = False

    def __repr__(self) -> str:
        return (
            f"Ticket({type(self.request).__name__} of {self.request.session_id!r}, "
            f"waits={self.waits}, finished={self.finished}, error={self.error!r})"
        )


def copy_error(exc: StoreError) -> StoreError:
    """A copy of ``exc`` (its cause), so each caller of a failed batch gets its own."""
    # One failed transaction fails each caller with its own exception object.
    cls: type[StoreError] = StoreError
    if isinstance(exc, StoreCorrupt | StoreUnavailable):  # kinds a caller acts on
        cls = type(exc)
    error = cls(str(exc), location=exc.location)
    error.__cause__ = exc
    return error


def batch_error(exc: Exception, location: str) -> StoreError:
    """The error a failed batch's callers get: ``exc`` if a `StoreError`, else one wrapping it."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(f"writing to {location} failed: {exc!r}", location=location)
    error.__cause__ = exc
    return error


def split_failed(tickets: Sequence[Ticket], exc: Exception) -> bool:
    """Whether a failed batch is retried one ticket at a time (both writers' rule).

    An unforeseen failure of several tickets is retried alone for each, so it only
    fails its own caller; a damaged file (`StoreCorrupt`) fails them all at once.
    """
    return len(tickets) > 1 and not isinstance(exc, StoreCorrupt)


def refuse_all(tickets: Iterable[Ticket], exc: Exception, location: str) -> None:
    """Fail every ticket of a batch whose transaction failed, each with its own copy."""
    error = batch_error(exc, location)
    for ticket in tickets:
        ticket.error = copy_error(error)


def settle(tickets: Sequence[Ticket], result: Plan) -> None:
    """Record a committed transaction's answer on its tickets: refused or committed."""
    for ticket, refused, answer in zip(tickets, result.errors, result.results, strict=True):
        ticket.error = refused
        ticket.result = answer
        ticket.committed = refused is None


class Writer:
    """Owns the connection: the batch loop, plus a lock for reads.

    Args:
        db: The connection.
        location: The file, for errors.
        clock: Stamps ``updated_at``.
        batch_max: The most tickets one transaction takes.
        max_pending: How many tickets may be queued; more wait for room.
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
        max_pending: int,
        on_unacknowledged_error: Callable[[Ticket], None],
    ) -> None:
        self.db = db
        # No checkpoint when free: a commit must not yield between taking its
        # batch and starting its transaction.
        self.lock = anyio.Lock(fast_acquire=True)
        self._location = location
        self._clock = clock
        self._batch_max = batch_max
        self._max_pending = max_pending
        self._on_error = on_unacknowledged_error
        self._queue: list[Ticket] = []
        #: The queue cut into its future batches, in order: each one's event (set
        #: once it is committed) and how many tickets it holds; all but the last
        #: are full (``batch_max``), since batches are taken from the front.
        self._batches: deque[list[Any]] = deque()
        #: Set to wake the writer; not ``None`` only while it is parked on an empty queue.
        self._wakeup: anyio.Event | None = None
        #: Set when the queue has room again, if anyone waits for it.
        self._room: anyio.Event | None = None
        self._closed = False
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

    async def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket`` (waiting for room), and wait until it is done if it waits.

        Raises:
            anyio.ClosedResourceError: The writer is closed.
        """
        while len(self._queue) >= self._max_pending and not self._closed:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        if self._closed:
            raise anyio.ClosedResourceError
        self.queued += 1
        self.pending += ticket.events
        self._queue.append(ticket)
        batches = self._batches
        if not batches or batches[-1][1] == self._batch_max:
            batches.append([anyio.Event(), 0])
        batch = batches[-1]
        batch[1] += 1
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None
        if ticket.waits:
            ticket.done = done = batch[0]
            await done.wait()

    def close(self) -> None:
        """Refuse new tickets; the writer commits what is queued, then stops."""
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None
        if self._room is not None:
            self._room.set()
            self._room = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit batches until closed and the queue is empty."""
        task_status.started()
        try:
            while True:
                if self._queue:
                    await self._commit_queued()
                elif self._closed:
                    return
                else:
                    self._wakeup = wakeup = anyio.Event()
                    await wakeup.wait()
        finally:
            # Cancelled: what was queued was maybe acknowledged (async mode).
            self._wakeup = None
            self._closed = True
            while self._queue:
                await self._commit_queued()

    async def _commit_queued(self) -> None:
        batch = self._queue[: self._batch_max]
        del self._queue[: self._batch_max]
        done, count = self._batches.popleft()
        assert count == len(batch)
        if self._room is not None:
            self._room.set()
            self._room = None
        try:
            await self._commit(batch)
        finally:
            done.set()

    async def _commit(self, batch: list[Ticket]) -> None:
        with anyio.CancelScope(shield=True):
            try:
                result = await self._write([ticket.request for ticket in batch])
            except Exception as exc:
                if split_failed(batch, exc):
                    for ticket in batch:
                        await self._commit([ticket])
                    return
                refuse_all(batch, exc, self._location)
            else:
                settle(batch, result)
                self.appended += result.appended
                self.largest_batch = max(self.largest_batch, result.appended)
            finally:
                for ticket in batch:
                    if ticket.finished:  # done by the one-by-one retry above
                        continue
                    ticket.finished = True
                    self.pending -= ticket.events
                    self.queued -= 1
                    if not ticket.waits and ticket.error is not None:
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
