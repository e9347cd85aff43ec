"""The thread writer: one dedicated thread owns the connection and batches by itself.

Callers of `ThreadWriter.submit` put their `Ticket` in the open batch (a plain
list, queued for the thread as soon as it is opened) and wait on the batch's
`Done` signal (`._done`: on asyncio, a future per caller and no coroutine).
The thread takes batches off its queue one by one: it seals the batch (later
tickets open the next one), writes it in one transaction, and resolves it with
one thread-safe call back into the event loop, which sets the batch's signal
and updates the counters. While the thread commits batch k, the loop fills
batch k+1, and the more sessions write at once, the larger the batches, with
no timer involved. There is no per-commit ``to_thread``, lock, limiter, cancel
scope or writer task on the loop's side. (SQLite runs without the interpreter
lock, but the thread takes the lock back between statements and rows, and a
busy loop hands it over only every switch interval: see ``bench/store.py``
(4). The writer's work mostly fills the loop's idle time rather than
overlapping its Python.)

The call back into the loop goes through anyio's seam for it (the
`anyio.lowlevel.current_token` of the loop that opened the store, and its
backend's ``run_sync_soon``), so it works on asyncio and trio alike.

Reads (`ThreadWriter.run_script`) queue behind the writes submitted before them
(read your writes) and run alone on the connection.

Guarantees, as with the task writer (`._writer`):

* a caller that stops waiting (cancelled, by anyio or natively by asyncio) only
  stops waiting: its ticket stays in its batch and is committed; if that batch
  is refused, the refusal is logged, since nobody is left to raise it to;
* `ThreadWriter.aclose` refuses new tickets, waits until everything queued is
  committed, then closes the connection, even when cancelled;
* an unforeseen failure of a batch retries its tickets one by one, so it fails
  only the callers whose writes fail.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from .._errors import StoreError
from .._log import get_logger
from ._done import done_maker, running_library
from ._plan import Plan, Request, plan
from ._sql import StaleCache, transaction, write_batch
from ._writer import copy_error, log_unacknowledged, refuse_all, settle, split_failed

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._done import Done
    from ._driver import Script, ThreadDriver
    from ._writer import Ticket

__all__ = ["Batch", "ThreadWriter"]

T = TypeVar("T")
#: The most sessions whose ``(last_seq, status)`` the writer remembers; past it, it forgets all.
_CACHE_MAX = 100_000
logger = get_logger("arkhon_rheo.store")


class Batch:
    """Tickets committed in one transaction, and the event set once it is resolved."""

    __slots__ = ("done", "now", "tickets")

    def __init__(self, done: Done) -> None:
        self.tickets: list[Ticket] = []
        self.done = done
        #: When the last ticket joined it: the sessions' ``updated_at``.
        self.now = 0.0


class _Job:
    """A script run alone on the connection (a read, the schema), and its outcome."""

    __slots__ = ("done", "error", "result", "script", "write")

    def __init__(self, script: Script[Any], write: bool) -> None:
        self.script = script
        self.write = write
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()


#: Put on the thread's queue by `ThreadWriter.close`: commit what is before it, then stop.
_STOP = object()


class ThreadWriter:
    """Owns the connection on one dedicated thread; batches and commits by itself.

    Create it inside the event loop that will submit to it (it keeps that loop's
    token to call back into it).

    Args:
        driver: The connection; from now on used by the writer's thread only.
        location: The file, for errors.
        clock: Stamps ``updated_at``; called on the event loop's thread only.
        batch_max: The most tickets one transaction takes.
        max_pending: How many tickets may be queued or in flight; more wait for room.
        on_unacknowledged_error: Called (on the loop) with each ticket that failed
            and that nobody waits for (``async`` appends).
    """

    def __init__(
        self,
        driver: ThreadDriver,
        *,
        location: str,
        clock: Callable[[], float],
        batch_max: int,
        max_pending: int,
        on_unacknowledged_error: Callable[[Ticket], None],
    ) -> None:
        self._driver = driver
        self._location = location
        self._clock = clock
        self._batch_max = batch_max
        self._max_pending = max_pending
        self._on_error = on_unacknowledged_error
        token = anyio.lowlevel.current_token()
        self._call_soon = token.backend_class.run_sync_soon
        self._native_token = token.native_token
        self._new_done = done_maker(running_library())
        self._inbox: queue.SimpleQueue[Batch | _Job | object] = queue.SimpleQueue()
        #: Guards `_open` between the loop (which appends to it) and the thread
        #: (which seals it by taking it away).
        self._seal = threading.Lock()
        #: The batch tickets join: queued for the thread, not yet taken by it.
        self._open: Batch | None = None
        #: Set when the queue has room again, if anyone waits for it.
        self._room: anyio.Event | None = None
        self._closed = False
        self._stopped = anyio.Event()
        #: The thread's: ``(last_seq, status)`` of the sessions it committed, so
        #: their rows need not be read back (see `write_batch`).
        self._cache: dict[str, tuple[int, str]] = {}
        #: The event shapes committed to the file (see `write_batch`); cleared on an error.
        self._shapes: set[str] = set()
        self.appended = 0
        self.transactions = 0
        self.largest_batch = 0
        #: Events queued or being committed.
        self.pending = 0
        #: Tickets queued or being committed.
        self.queued = 0
        self._thread = threading.Thread(
            target=self._main, name=f"arkhon-store-writer:{location}", daemon=True
        )
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------

    def enqueue(self, ticket: Ticket) -> Batch | None:
        """Queue ``ticket`` now and return its batch, or ``None`` if there is no room.

        The fast path of `submit`, without a coroutine of its own: the caller
        waits on the batch's ``done`` (marking the ticket ``abandoned`` if it
        stops waiting), or calls `submit` when there is no room.

        Raises:
            anyio.ClosedResourceError: The writer is closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self.queued >= self._max_pending:
            return None
        return self._queue(ticket)

    async def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket`` (waiting for room), and wait until it is done if it waits.

        Raises:
            anyio.ClosedResourceError: The writer is closed.
        """
        while self.queued >= self._max_pending and not self._closed:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        if self._closed:
            raise anyio.ClosedResourceError
        batch = self._queue(ticket)
        if ticket.waits:
            try:
                await batch.done.wait()
            except BaseException:
                # Cancelled: the ticket is committed all the same; a refusal is logged.
                ticket.abandoned = True
                raise

    def _queue(self, ticket: Ticket) -> Batch:
        self.queued += 1
        self.pending += ticket.events
        now = self._clock()
        with self._seal:
            batch = self._open
            if batch is None or len(batch.tickets) >= self._batch_max:
                batch = self._open = Batch(self._new_done())
                self._inbox.put(batch)
            batch.tickets.append(ticket)
            batch.now = now
        return batch

    async def run_script(self, script: Script[T], *, write: bool = False) -> T:
        """Run a script alone on the connection, after everything queued before it.

        A transaction, once begun, is always committed or rolled back, even if the
        caller stops waiting.

        Args:
            script: The script (wrapped in `transaction` if it needs one).
            write: Whether it is a write transaction, counted in the statistics.

        Returns:
            The script's result.

        Raises:
            StoreError: The script failed, or the writer is closed.
        """
        if self._closed:
            raise StoreError(
                f"the connection to {self._location} is closed", location=self._location
            )
        job = _Job(script, write)
        with self._seal:
            self._open = None  # later writes queue behind this job
            self._inbox.put(job)
        await job.done.wait()
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def close(self) -> None:
        """Refuse new tickets; the thread commits what is queued, then stops."""
        if self._closed:
            return
        self._closed = True
        with self._seal:
            self._open = None
            self._inbox.put(_STOP)
        if self._room is not None:
            self._room.set()
            self._room = None

    async def aclose(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Close, and wait (even when cancelled) until the thread has closed the connection.

        Args:
            timeout: The longest wait, in seconds (``None``: no limit); past it the
                thread is left to finish on its own.

        Returns:
            Whether the thread stopped in time.
        """
        self.close()
        with anyio.move_on_after(math.inf if timeout is None else timeout, shield=True):
            await self._stopped.wait()
        return self._stopped.is_set()

    def _resolve(self, batch: Batch) -> None:
        """On the loop: the batch is committed or refused; wake its callers."""
        for ticket in batch.tickets:
            ticket.finished = True
            self.pending -= ticket.events
            self.queued -= 1
            if ticket.error is not None:
                if not ticket.waits:
                    self._on_error(ticket)
                elif ticket.abandoned:
                    log_unacknowledged(ticket, self._location)
        batch.done.set()
        if self._room is not None and self.queued < self._max_pending:
            self._room.set()
            self._room = None

    # -- the thread's side --------------------------------------------------------------

    def _to_loop(self, func: Callable[..., object], *args: Any) -> None:
        try:
            self._call_soon(func, args, self._native_token)
        except Exception:  # the loop is gone (the store was never closed): nobody waits
            logger.warning("store.writer_orphaned", location=self._location)

    def _main(self) -> None:
        inbox = self._inbox
        try:
            while (item := inbox.get()) is not _STOP:
                if isinstance(item, _Job):
                    self._run_job(item)
                    continue
                assert isinstance(item, Batch)
                with self._seal:
                    if self._open is item:
                        self._open = None
                try:
                    self._commit(item.tickets, item.now)
                except BaseException as exc:  # a bug: fail the batch, never hang its callers
                    error = StoreError(
                        f"writing to {self._location} failed: {exc!r}", location=self._location
                    )
                    for ticket in item.tickets:
                        if not ticket.committed and ticket.error is None:
                            ticket.error = copy_error(error)
                self._to_loop(self._resolve, item)
        finally:
            try:
                self._driver.close_now()
            finally:
                self._to_loop(self._stopped.set)

    def _run_job(self, job: _Job) -> None:
        try:
            job.result = self._driver.run_now(job.script)
            self.transactions += job.write
        except BaseException as exc:
            job.error = exc
        self._to_loop(job.done.set)

    def _commit(self, tickets: list[Ticket], now: float) -> None:
        try:
            result = self._write([ticket.request for ticket in tickets], now)
        except Exception as exc:
            if split_failed(tickets, exc):
                for ticket in tickets:
                    if not self._landed(ticket, exc):
                        self._commit([ticket], now)
                return
            refuse_all(tickets, exc, self._location)
        else:
            settle(tickets, result)
            self.appended += result.appended
            self.largest_batch = max(self.largest_batch, result.appended)

    def _landed(self, ticket: Ticket, exc: Exception) -> bool:
        """Whether ``ticket`` of a batch that failed with ``exc`` was committed all the same.

        Never, here (a failed transaction wrote nothing); a store whose commit's
        acknowledgement may be lost says otherwise (`PostgresWriter`).
        """
        return False

    def _write(self, requests: list[Request], now: float) -> Plan:
        if not any(r.session_id for r in requests):  # nothing but flushes
            return plan(requests, {}, now=now, location=self._location)
        cache = self._cache
        try:
            try:
                result = self._run_batch(requests, now, cache)
            except StaleCache:
                # Another process wrote one of these sessions, or the file lost a shape
                # (restored in place): read them all back, write every shape.
                cache.clear()
                self._shapes.clear()
                result = self._run_batch(requests, now, None)
        except BaseException:
            for request in requests:  # not known for sure any more
                cache.pop(request.session_id, None)
            self._shapes.clear()  # (a file restored under us: its shapes are written again)
            raise
        if len(cache) + len(result.updated) > _CACHE_MAX:
            cache.clear()
        if result.events:
            if len(self._shapes) > _CACHE_MAX:
                self._shapes.clear()
            self._shapes.update(row[2] for row in result.events)
        cache.update(result.updated)
        for sid, lease in result.leases.items():
            if lease is None:  # released: this process is done with it for now
                cache.pop(sid, None)
        return result

    def _run_batch(
        self, requests: list[Request], now: float, cache: dict[str, tuple[int, str]] | None
    ) -> Plan:
        script = write_batch(
            requests, now=now, location=self._location, cache=cache, shapes=self._shapes
        )
        result = self._driver.run_now(transaction(script, write=True))
        self.transactions += 1
        return result
