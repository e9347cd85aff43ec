"""`PostgresStore` as a work queue: claiming sessions that have something to do, and waking.

A worker claims sessions with `WorkQueueMixin.claim`: one transaction picks
them (``FOR UPDATE SKIP LOCKED``, so two workers never pick the same one, and
neither waits for the other) and takes their leases, each under its next
fencing token. `WorkQueueMixin.wait_for_work` returns as soon as another
process commits something a worker may have to do (a new session or message,
a released lease, a park with a wake time: their batches ``NOTIFY`` the
store's channel), or after its timeout: a worker then claims again, so
polling is the fallback should a notification be missed.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, StoreError
from .._log import get_logger
from ._base import StoreState
from ._codec import decode_record
from ._postgres_conn import connect, import_psycopg, sessions_channel
from ._postgres_sql import NOW, SESSION_COLUMNS, sql

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from ..protocols import SessionRecord
    from ._driver import Rows, Script

__all__ = ["WorkQueueMixin", "channel_of"]

logger = get_logger("arkhon_rheo.store")
#: The longest one thread waits for a notification (see `WorkQueueMixin.wait_for_work`).
_SLICE = 1.0

_COLUMNS = ", ".join(f"s.{column.strip()}" for column in SESSION_COLUMNS.split(","))
#: One statement (one round trip): pick, lease, and return the records (as locked: the
#: rows' latest versions) with their tokens.
_CLAIM = f"""WITH picked AS (
    SELECT {_COLUMNS}, s.n FROM sessions s
    WHERE s.machine = ANY(%(machines)s)
    AND (s.status = 'running' OR (s.status = 'waiting' AND s.wake_at <= %(now)s))
    AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = s.id
        AND l.owner IS NOT NULL AND l.expires_at > {NOW})
    ORDER BY s.n LIMIT %(limit)s FOR UPDATE OF s SKIP LOCKED),
taken AS (INSERT INTO leases (session_id, owner, expires_at, token)
SELECT id, %(owner)s, {NOW} + %(ttl)s, 1 FROM picked ORDER BY n
ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner,
    expires_at = excluded.expires_at,
    token = CASE WHEN leases.owner IS DISTINCT FROM excluded.owner
        THEN leases.token + 1 ELSE leases.token END
WHERE leases.owner IS NULL OR leases.owner = excluded.owner OR leases.expires_at <= {NOW}
RETURNING session_id, token)
SELECT taken.token, {_COLUMNS} FROM taken JOIN picked s ON s.id = taken.session_id
ORDER BY s.n"""


def channel_of(schema: str) -> str:
    """The ``LISTEN/NOTIFY`` channel of the store in ``schema`` (63 characters at most)."""
    return f"arkhon_rheo_work_{schema}"[:63]


class WorkQueueMixin:
    """`WorkQueue` for `PostgresStore`: ``claim`` and ``wait_for_work``."""

    _url: str
    _options: dict[str, Any]
    _location: str
    _schema: str
    _tokens: dict[str, tuple[str, int]]
    _listener: Any
    _changes: _Changes | None
    _state: StoreState

    if TYPE_CHECKING:  # PostgresStore's (and StoreBase's)

        async def _read(self, make: Callable[[], Script[Any]], *, transaction: bool = True) -> Any:
            raise NotImplementedError  # pragma: no cover (PostgresStore's)

        def _check_open(self) -> None:
            raise NotImplementedError  # pragma: no cover (StoreBase's)

    async def claim(
        self, owner: str, *, machines: Collection[str], limit: int, ttl: float, now: float
    ) -> tuple[SessionRecord, ...]:
        """Lease up to ``limit`` sessions of these machines that have something to do.

        Something to do: status ``"running"`` with no unexpired lease (a new start,
        or an owner whose lease ran out), or ``"waiting"`` with ``wake_at <= now``.
        The sessions are picked with ``FOR UPDATE SKIP LOCKED`` and leased to
        ``owner`` for ``ttl`` seconds (by PostgreSQL's clock) in one transaction,
        so two workers never claim the same session.

        Returns:
            The records of the sessions claimed, oldest first.

        Raises:
            ConfigurationError: An argument is malformed.
            StoreError: PostgreSQL failed, or the store is not open.
        """
        self._check_open()
        names = sorted(machines) if not isinstance(machines, str) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise ConfigurationError(f"machines must be a collection of names, not {machines!r}")
        if type(limit) is not int or limit < 1 or not 0 < ttl < math.inf or not owner:
            raise ConfigurationError(
                f"claim needs an owner, a limit from 1 and a positive ttl; got {owner!r}, "
                f"{limit!r} and {ttl!r}"
            )
        await self._ensure_listener()
        params: Any = {"machines": names, "now": now, "limit": limit, "owner": owner, "ttl": ttl}

        def script() -> Script[Rows]:
            rows: Rows = yield sql(_CLAIM, params)
            return rows

        rows = await self._read(script, transaction=False)
        for row in rows:
            self._tokens[row[1]] = (owner, row[0])
        return tuple(decode_record(row[1:]) for row in rows)

    # -- LISTEN/NOTIFY -----------------------------------------------------------------

    def _listen_now(self) -> Any:
        connection = connect(self._url, self._location, options=self._options)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f'LISTEN "{channel_of(self._schema)}"')
        except BaseException:
            connection.close()
            raise
        return connection

    async def _ensure_listener(self) -> None:
        if self._listener is None:
            connection = await anyio.to_thread.run_sync(self._listen_now, abandon_on_cancel=True)
            if self._listener is None and self._state is StoreState.OPEN:
                self._listener = _Listener(connection)
            else:  # another call listened first (concurrent claims), or the store closed
                await anyio.to_thread.run_sync(connection.close)

    async def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await anyio.to_thread.run_sync(listener.close)

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 - the protocol's
        """Return when there may be new work, or after ``timeout`` seconds.

        Woken by ``LISTEN/NOTIFY`` (a session created, a message posted, a lease
        released, a session parked with a wake time, by any process); should the
        listening connection fail, this waits out ``timeout`` (polling).

        Raises:
            ConfigurationError: ``timeout`` is negative.
            StoreError: The store is not open.
        """
        self._check_open()
        if not timeout >= 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, not {timeout!r}")
        try:
            await self._ensure_listener()
        except StoreError as exc:
            logger.warning("store.listen_failed", location=self._location, error=str(exc))
            await anyio.sleep(timeout)
            return
        # In slices: a cancelled wait (its thread abandoned) holds the connection, and
        # closing the store waits for it, at most one slice.
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            listener = self._listener
            woke = await anyio.to_thread.run_sync(
                listener.wait, min(left, _SLICE), abandon_on_cancel=True
            )
            if woke is None:  # broken: the next call listens anew; poll meanwhile
                await self._close_listener()
                await anyio.sleep(max(0.0, deadline - time.monotonic()))
                return
            if woke:
                listener.pending = False  # taken by this call
                return

    # -- the sessions' changes, for asks ---------------------------------------------------

    async def changed_sessions(self, timeout: float) -> list[str] | None:  # noqa: ASYNC109
        """The ids of sessions whose log or status changed, once some did; ``[]`` after ``timeout``.

        Every batch that appends to a session, sets its status or parks it
        notifies its id (``LISTEN/NOTIFY``, delivered at the batch's commit),
        from any process; the first call starts listening. An ask waiting on a
        session another process drives is woken by them. ``None``: the
        listening connection failed (the next call listens anew; poll meanwhile).

        Raises:
            StoreError: The store is not open.
        """
        self._check_open()
        if self._changes is None:
            try:
                connection = await anyio.to_thread.run_sync(
                    self._listen_changes, abandon_on_cancel=True
                )
            except StoreError as exc:
                logger.warning("store.listen_failed", location=self._location, error=str(exc))
                return None
            if self._changes is None and self._state is StoreState.OPEN:
                self._changes = _Changes(connection)
            else:
                await anyio.to_thread.run_sync(connection.close)
        changes = self._changes
        if changes is None:  # closed meanwhile
            return None
        got: list[str] | None = await anyio.to_thread.run_sync(
            changes.wait, timeout, abandon_on_cancel=True
        )
        if got is None:
            await self._close_changes()
        return got

    def _listen_changes(self) -> Any:
        connection = connect(self._url, self._location, options=self._options)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f'LISTEN "{sessions_channel(channel_of(self._schema))}"')
        except BaseException:
            connection.close()
            raise
        return connection

    async def _close_changes(self) -> None:
        changes, self._changes = self._changes, None
        if changes is not None:
            await anyio.to_thread.run_sync(changes.close)


class _Changes:
    """A connection that listens for the sessions' changes; it collects their ids."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._lock = threading.Lock()

    def wait(self, timeout: float) -> list[str] | None:
        """The ids notified, once some are (all that arrived by then), or ``[]`` at ``timeout``.

        ``None``: the connection failed.
        """
        psycopg = import_psycopg()
        with self._lock:
            try:
                payloads = [
                    n.payload for n in self._connection.notifies(timeout=timeout, stop_after=1)
                ]
                if payloads:
                    payloads += [n.payload for n in self._connection.notifies(timeout=0.0)]
            except psycopg.Error:
                return None
        return [each for payload in payloads for each in payload.split("\n") if each]

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class _Listener:
    """A connection that listens on the store's channel; one waiter at a time.

    A notification a waiter received is kept (``pending``) until the call that
    waited takes it: a waiter whose call was cancelled (its thread abandoned)
    leaves it to the next call, which returns at once, so no news is lost.
    """

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self.pending = False

    def wait(self, timeout: float) -> bool | None:
        """Block until a notification arrives (``True``) or ``timeout`` (``False``).

        ``None``: the connection failed.
        """
        psycopg = import_psycopg()
        with self._lock:
            if self.pending:
                return True
            try:
                got = sum(1 for _ in self._connection.notifies(timeout=timeout, stop_after=1))
            except psycopg.Error:
                return None
            if got:
                self.pending = True
            return self.pending

    def close(self) -> None:
        with self._lock:
            self._connection.close()
