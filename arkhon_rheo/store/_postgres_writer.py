"""`PostgresStore`'s writer: the SQLite store's thread writer, on a psycopg connection.

The same dedicated thread, batching and callbacks into the event loop as
`._thread_writer`; only the batch's transaction differs (`._postgres_sql`). A
batch that PostgreSQL aborts for a conflict with another process's
transaction (a deadlock or a serialization failure) is run again, whole.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from .._errors import StoreError, StoreUnavailable
from ._plan import Append, Plan, Request, plan
from ._postgres_conn import run_now
from ._postgres_sql import sql, transaction, write_batch
from ._thread_writer import ThreadWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._driver import Script
    from ._postgres_watch import Watchdog
    from ._writer import Ticket

__all__ = ["PostgresWriter"]

#: PostgreSQL's codes for a transaction aborted by another one: run it again.
_CONFLICTS = frozenset({"40001", "40P01"})
_ATTEMPTS = 5
#: A connection idle this long (seconds) is checked before the next script runs on it.
_CHECK_AFTER = 1.0
#: Once the server failed to answer (a statement past the watchdog's limit, a new
#: connection past ``connect_timeout``), the scripts of the next this-many seconds
#: fail at once (`StoreUnavailable`) instead of each waiting as long again.
RETRY_AFTER = 1.0


class _Connection:
    """A psycopg connection with the thread driver's interface (`run_now`, `close_now`).

    A connection PostgreSQL dropped (a restart, a terminated backend) is replaced
    by a new one (``reconnect``) before the next script: the batch that found it
    broken is refused, the next ones commit. One left idle a while is checked
    first (an empty statement), so one dropped while idle fails no write. Each
    statement runs under ``watchdog``. A server that does not answer (the
    watchdog cut a statement, or a new connection timed out) is not asked again
    for `RETRY_AFTER` seconds (one that refuses a connection at once, restarting,
    is asked again by the next script): the scripts meanwhile are refused at once, so a
    frozen server costs the writer's queue one wait, not one per batch (and per
    append whose landing is checked).
    """

    def __init__(
        self,
        connection: Any,
        location: str,
        reconnect: Callable[[], Any],
        watchdog: Watchdog | None = None,
    ) -> None:
        self._connection: Any = connection
        self._location = location
        self._reconnect = reconnect
        self._watchdog = watchdog
        self._lock = threading.Lock()
        self._used = time.monotonic()
        #: Until when (``time.monotonic()``) scripts are refused: the server did not answer.
        self._quiet_until = 0.0

    def run_now(self, script: Script[Any]) -> Any:
        with self._lock:
            if self._connection is None:
                raise StoreError(
                    f"the connection to {self._location} is closed", location=self._location
                )
            if time.monotonic() < self._quiet_until:
                raise StoreUnavailable(
                    f"{self._location} did not answer; it is asked again in under "
                    f"{RETRY_AFTER:g} s",
                    location=self._location,
                )
            cut = self._cuts()
            try:
                if not self._connection.closed and time.monotonic() - self._used > _CHECK_AFTER:
                    self._check()
                if self._connection.closed:  # dropped (psycopg marks it closed, or broken)
                    self._connection.close()
                    started = time.monotonic()
                    try:
                        self._connection = self._reconnect()
                    except StoreError:
                        # Kept waiting (a connect timeout is 2 s at least): the server is
                        # silent. One refused at once (a restart) is asked again next time.
                        if time.monotonic() - started >= RETRY_AFTER:
                            self._quiet_until = time.monotonic() + RETRY_AFTER
                        raise
                return run_now(self._connection, script, self._location, self._watchdog)
            except StoreUnavailable:
                if self._cuts() != cut:  # a statement not answered in time: the server is silent
                    self._quiet_until = time.monotonic() + RETRY_AFTER
                raise
            finally:
                self._used = time.monotonic()

    def dropped_before_commit(self, error: StoreError) -> bool:
        """Whether ``error`` is a connection PostgreSQL dropped before the transaction's COMMIT.

        Nothing of such a transaction is stored, so running it again on a new
        connection is safe (a connection dropped while sending the COMMIT is
        not: that one may have landed, see `PostgresWriter._landed`). A server
        that did not answer in time is not asked again at once.
        """
        return (
            isinstance(error, StoreUnavailable)
            and getattr(error, "before_commit", False)
            and self._connection.closed
            and time.monotonic() >= self._quiet_until
        )

    def _cuts(self) -> int:
        """How many connections the watchdog has cut so far."""
        return 0 if self._watchdog is None else self._watchdog.cut

    def _check(self) -> None:
        """An empty statement: a connection PostgreSQL dropped is found closed after it."""
        cut = self._cuts()
        try:
            run_now(self._connection, _ping(), self._location, self._watchdog)
        except StoreError:
            if self._cuts() != cut:  # not answered, rather than dropped: no reconnecting now
                raise
            # dropped: replaced before the script runs

    def close_now(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()


def _ping() -> Script[None]:
    yield sql("")


#: The stored events of one session from one number to another, as `Append` rows hold them.
_STORED = (
    "SELECT e.seq, h.shape, e.patch, e.attempt, e.started_at, e.finished_at, e.error, e.io, "
    "e.digest FROM events e JOIN sessions s ON s.n = e.session JOIN shapes h ON h.id = e.shape "
    "WHERE s.id = %s AND e.seq BETWEEN %s AND %s ORDER BY e.seq"
)


def landed_rows(rows: list[Any]) -> Script[list[tuple[Any, ...]]]:
    """The stored events numbered as ``rows`` are (without their session id)."""
    found = yield sql(_STORED, (rows[0][0], rows[0][1], rows[-1][1]))
    return [(row[0], row[1], bytes(row[2]), *row[3:]) for row in found]


class PostgresWriter(ThreadWriter):
    """The group-commit writer thread of a `PostgresStore`.

    Args:
        connection: A psycopg connection in autocommit mode, used by the thread only.
        location: The store (its URL, password masked), for errors.
        clock: Stamps ``updated_at``.
        batch_max: The most tickets one transaction takes.
        max_pending: How many tickets may be queued or in flight.
        on_unacknowledged_error: Called with each failed ticket nobody waits for.
        channel: The ``LISTEN/NOTIFY`` channel of the store's work queue.
        reconnect: Opens a new connection, should PostgreSQL drop this one.
        watchdog: Bounds each statement's wait on the server.
    """

    def __init__(
        self,
        connection: Any,
        *,
        location: str,
        clock: Callable[[], float],
        batch_max: int,
        max_pending: int,
        on_unacknowledged_error: Callable[[Ticket], None],
        channel: str,
        reconnect: Callable[[], Any],
        watchdog: Watchdog | None = None,
    ) -> None:
        #: The connection the batches run on (the driver this writer runs them through).
        self._link = _Connection(connection, location, reconnect, watchdog)
        super().__init__(
            self._link,  # type: ignore[arg-type]
            location=location,
            clock=clock,
            batch_max=batch_max,
            max_pending=max_pending,
            on_unacknowledged_error=on_unacknowledged_error,
        )
        #: The channel a batch that may give a worker work notifies.
        self.channel = channel

    def _write(self, requests: list[Request], now: float) -> Plan:
        if not any(r.session_id for r in requests):  # nothing but flushes
            return plan(requests, {}, now=now, location=self._location)
        for attempt in range(1, _ATTEMPTS + 1):
            script = write_batch(requests, now=now, location=self._location, channel=self.channel)
            try:
                result: Plan = self._driver.run_now(transaction(script))
            except StoreError as exc:
                if getattr(exc, "sqlstate", None) in _CONFLICTS and attempt < _ATTEMPTS:
                    continue
                if attempt == 1 and self._link.dropped_before_commit(exc):
                    continue  # nothing of it stored: once more, on a new connection
                raise
            self.transactions += 1
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _landed(self, ticket: Ticket, exc: Exception) -> bool:
        """Whether ``ticket``, of a batch whose connection dropped, was committed all the same.

        A batch's ``COMMIT`` may land with its acknowledgement lost. An append
        whose events are all stored, with the same content, was committed (with
        everything its transaction wrote): it is not written again (which
        would refuse it as a `DuplicateEvent`).
        """
        request = ticket.request
        if not isinstance(exc, StoreUnavailable) or type(request) is not Append:
            return False
        if not request.rows:
            return False
        try:
            stored = self._driver.run_now(landed_rows(request.rows))
        except StoreError:
            return False  # still unreachable: the retry says so
        if stored != [tuple(row[1:]) for row in _encoded(request.rows)]:
            return False
        ticket.committed = True
        ticket.result = None
        return True


def _encoded(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Event rows as PostgreSQL stores them (their patch as bytes)."""
    return [(*row[:3], _as_bytes(row[3]), *row[4:]) for row in rows]


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
