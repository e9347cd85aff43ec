"""`PostgresStore`'s writer: the SQLite store's thread writer, on a psycopg connection.

The same dedicated thread, batching and callbacks into the event loop as
`._thread_writer`; only the batch's transaction differs (`._postgres_sql`). A
batch that PostgreSQL aborts for a conflict with another process's
transaction (a deadlock or a serialization failure) is run again, whole.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._errors import StoreError
from ._plan import Plan, Request, plan
from ._postgres_conn import run_now
from ._postgres_sql import transaction, write_batch
from ._thread_writer import ThreadWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._driver import Script
    from ._writer import Ticket

__all__ = ["PostgresWriter"]

#: PostgreSQL's codes for a transaction aborted by another one: run it again.
_CONFLICTS = frozenset({"40001", "40P01"})
_ATTEMPTS = 5


class _Connection:
    """A psycopg connection with the thread driver's interface (`run_now`, `close_now`).

    A connection PostgreSQL dropped (a restart, a terminated backend) is replaced
    by a new one (``reconnect``) before the next script: the batch that found it
    broken is refused, the next ones commit.
    """

    def __init__(self, connection: Any, location: str, reconnect: Callable[[], Any]) -> None:
        self._connection: Any = connection
        self._location = location
        self._reconnect = reconnect
        self._lock = threading.Lock()

    def run_now(self, script: Script[Any]) -> Any:
        with self._lock:
            if self._connection is None:
                raise StoreError(
                    f"the connection to {self._location} is closed", location=self._location
                )
            if self._connection.broken:
                self._connection.close()
                self._connection = self._reconnect()
            return run_now(self._connection, script, self._location)

    def close_now(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()


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
    ) -> None:
        super().__init__(
            _Connection(connection, location, reconnect),  # type: ignore[arg-type]
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
                raise
            self.transactions += 1
            return result
        raise AssertionError("unreachable")  # pragma: no cover
