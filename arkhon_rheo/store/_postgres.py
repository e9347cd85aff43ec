"""`PostgresStore`: sessions in PostgreSQL, shared by processes on many machines."""

from __future__ import annotations

import functools
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, StoreError, StoreUnavailable
from .._log import get_logger
from ..protocols import Durability, LeaseRecord, LoadedSession, SessionRecord
from . import _postgres_sql as pg
from ._base import StoreBase, StoreState
from ._codec import decode_event, decode_record, decode_snapshot
from ._plan import Acquire
from ._postgres_conn import connect, import_psycopg, is_postgres_url, redacted_url, run_now
from ._postgres_queue import WorkQueueMixin, channel_of
from ._postgres_reads import ReadsMixin
from ._postgres_schema import check_schema_name, prepare
from ._postgres_watch import Watchdog, close_writer, connection_options
from ._postgres_writer import PostgresWriter
from ._sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from ._driver import Script
    from ._thread_writer import Batch
    from ._writer import Ticket

__all__ = ["PostgresStore"]

logger = get_logger("arkhon_rheo.store")


class PostgresStore(WorkQueueMixin, ReadsMixin, SQLiteStore):
    """Sessions in a PostgreSQL database: logs, snapshots, records, leases, inboxes, effects.

    The same event-sourced rows as `SQLiteStore` (compact events, snapshots by
    cost), in one PostgreSQL schema, so many processes on many machines share
    the sessions. Its writes go the same way as `SQLiteStore`'s (it shares its
    write path): one writer thread per store, with its own connection, commits
    the writes of many sessions together (group commit), each batch in one
    transaction that locks the rows of the sessions it touches
    (``SELECT ... FOR UPDATE``), checks them with the same rules as the other
    stores and writes what passes. Reads run on a `psycopg_pool` pool in worker
    threads. Everything runs on synchronous psycopg connections in threads, so
    it works on asyncio and trio alike.

    ``durability`` says when a write is acknowledged and what survives:

    * `Durability.SYNC`: each request is its own transaction (no grouping),
      committed with ``synchronous_commit = on``: acknowledged once PostgreSQL
      has flushed its WAL. Survives a crash of this process, of PostgreSQL and
      of its host (and, with synchronous standbys configured, of the primary).
    * `Durability.BATCHED` (default): group commit, acknowledged once the
      batch's ``COMMIT`` returns with ``synchronous_commit = on``: the same
      guarantees as ``SYNC``, one WAL flush per batch.
    * `Durability.ASYNC`: appends are acknowledged once queued, and batches
      commit with ``synchronous_commit = off``. What is still queued when this
      process dies is lost; a crash of PostgreSQL or its host may lose the
      last commits not yet flushed (up to three times ``wal_writer_delay``,
      600 ms by default), never corrupting the database. Posts, parks, leases
      and effect intents are still acknowledged only once committed.

    Leases are rows stamped by PostgreSQL's clock (``clock_timestamp()``), so
    the machines need not agree on the time. Each carries a **fencing token**
    that grows by one whenever a new owner takes the lease; an append made for
    an owner (``append(..., owner=...)``) is checked against the lease row in
    its own transaction, under the token this store was given when that owner
    took it, and refused with `LeaseLost` if another owner took it since: a
    worker paused past its lease never writes over its successor. A process
    paused (or hung) in the middle of one of its transactions would hold that
    transaction's row locks, keeping its sessions from every other worker:
    PostgreSQL ends a transaction of this store left idle for
    ``transaction_idle_timeout`` seconds (``idle_in_transaction_session_timeout``),
    and the paused process finds its connection gone when it wakes.

    Every wait on the server is bounded and cancellable. A connection is given
    up after ``connect_timeout`` (`StoreUnavailable`); each statement runs with
    PostgreSQL's ``statement_timeout``, and one the server does not answer
    within one and a half times it (a frozen server, a partition) has its
    connection cut by the client and fails with `StoreUnavailable`; TCP
    keepalives and ``tcp_user_timeout`` find a silent peer in about as long
    (the URL's query parameters, ``?connect_timeout=3`` say, override these
    connection options). A cancelled wait is delivered at once (its thread is
    abandoned); leaving the store waits for what is queued to commit while it
    lands, until none has for ``close_timeout`` seconds (a frozen server), at
    most ``connect_timeout`` plus the statement limit, then gives up on it.
    Once the server has not answered (a statement cut, a connection timed
    out), the writes of the next second are refused at once, not each waited.

    A connection PostgreSQL dropped (a restart, ``pg_terminate_backend``) fails
    only the writes under way on it, with `StoreUnavailable` (a run then stops,
    resumable); an idle one is checked before it is used again, and replaced.
    An append whose commit landed but whose acknowledgement was lost is
    recognised when its batch is retried (its events are stored, the same),
    and counted as committed.

    The store is also a work queue (`WorkQueue`): `claim` leases sessions that
    have something to do with ``FOR UPDATE SKIP LOCKED``, and `wait_for_work`
    wakes on ``LISTEN/NOTIFY``.

    The URL's password is a secret: it is registered with the scrubbing
    registry, masked in ``location``, ``repr`` and errors, and no psycopg error
    is chained to the errors raised.

    Args:
        url: ``postgresql://user:password@host:port/database`` (or ``postgres://``).
        durability: When writes are acknowledged (see above).
        schema: The PostgreSQL schema holding the store's tables (created if missing).
        batch_max: The most requests one transaction carries.
        max_pending: How many requests may wait for the writer; more wait for room.
        pool_size: The most connections reads use at once.
        clock: Stamps records (``created_at``, ``updated_at``); leases use
            PostgreSQL's clock.
        transaction_idle_timeout: How long PostgreSQL lets a transaction of this
            store wait on it (its process paused or hung) before ending it, in
            seconds; keep it under the workers' lease.
        connect_timeout: How long to wait for a new connection, in seconds
            (libpq counts whole seconds, two at least).
        statement_timeout: How long PostgreSQL lets one statement run, in
            seconds; the client gives up on one after one and a half times it.
        close_timeout: How long leaving the store waits with no queued write
            landing before it gives up on the rest, in seconds.

    Raises:
        ConfigurationError: An argument is out of range, or psycopg is not
            installed (``pip install "arkhon-rheo[postgres]"``).
    """

    def __init__(
        self,
        url: str,
        *,
        durability: Durability = Durability.BATCHED,
        schema: str = "arkhon_rheo",
        batch_max: int = 1024,
        max_pending: int = 8192,
        pool_size: int = 4,
        clock: Callable[[], float] = time.time,
        transaction_idle_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        close_timeout: float = 2.0,
    ) -> None:
        if not is_postgres_url(url):
            raise ConfigurationError(
                "url must be a postgresql:// (or postgres://) URL, not "
                f"{redacted_url(url) if isinstance(url, str) else url!r}"
            )
        location = redacted_url(url)
        import_psycopg()
        StoreBase.__init__(self, location, clock)
        if not isinstance(durability, Durability):
            raise ConfigurationError(f"durability must be a Durability, not {durability!r}")
        if batch_max < 1 or max_pending < 1 or pool_size < 1:
            raise ConfigurationError(
                f"batch_max ({batch_max}), max_pending ({max_pending}) and pool_size "
                f"({pool_size}) must be at least 1"
            )
        if not 0.001 <= transaction_idle_timeout < math.inf:
            raise ConfigurationError(
                "transaction_idle_timeout must be a number of seconds from 0.001, not "
                f"{transaction_idle_timeout!r}"
            )
        for name, value in (
            ("connect_timeout", connect_timeout),
            ("statement_timeout", statement_timeout),
            ("close_timeout", close_timeout),
        ):
            if not 0.001 <= value < math.inf:
                raise ConfigurationError(
                    f"{name} must be a number of seconds from 0.001, not {value!r}"
                )
        self._idle_ms = round(transaction_idle_timeout * 1000)
        self._statement_ms = max(1, round(statement_timeout * 1000))
        self._connect_timeout, self._close_timeout = connect_timeout, close_timeout
        self._watchdog = Watchdog(statement_timeout * 1.5)
        #: psycopg's options for every connection (a connect timeout, keepalives).
        self._options = connection_options(
            url, connect_timeout=connect_timeout, statement_limit=self._watchdog.limit
        )
        self._url = url
        self._schema = check_schema_name(schema)
        self._durability = durability
        self._batch_max = 1 if durability is Durability.SYNC else batch_max
        self._max_pending = max_pending
        self._pool_size = pool_size
        self._writer: Any = None
        self._task_group = None
        self._tails: dict[str, int] = {}
        self._deferred: dict[str, Exception] = {}
        self._pool: Any = None
        #: The fencing token this store was given for each session it took: ``(owner, token)``.
        self._tokens: dict[str, tuple[str, int]] = {}
        self._listener: Any = None
        #: The connection that listens for the sessions' changes (see `changed_sessions`).
        self._changes: Any = None

    def __repr__(self) -> str:
        return f"PostgresStore({self._location!r}, schema={self._schema!r})"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
        return self._schema

    def _configure(self, connection: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'SET search_path TO "{self._schema}"')
            cursor.execute(f"SET idle_in_transaction_session_timeout = {self._idle_ms}")
            cursor.execute(f"SET statement_timeout = {self._statement_ms}")

    def _connect(self, *, writer: bool) -> Any:
        connection = connect(self._url, self._location, options=self._options)
        try:
            self._configure(connection)
            if writer and self._durability is Durability.ASYNC:
                with connection.cursor() as cursor:
                    cursor.execute("SET synchronous_commit TO off")
        except BaseException:
            connection.close()
            raise
        return connection

    def _open_sync(self, opening: _Opening) -> tuple[Any, Any]:
        """Blocking: prepare the schema, open the writer's connection and the pool.

        Should the caller have stopped waiting (``opening`` abandoned), what it
        opened is closed again.
        """
        psycopg = import_psycopg()
        import psycopg_pool

        first = connect(self._url, self._location, options=self._options)
        try:
            run_now(first, prepare(self._schema, self._location), self._location)
        finally:
            first.close()
        connection = self._connect(writer=True)
        pool = psycopg_pool.ConnectionPool(
            self._url,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"autocommit": True, **self._options},
            configure=self._configure,
            # A pooled connection PostgreSQL dropped while idle is replaced before use.
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=self._connect_timeout + self._watchdog.limit,
            open=False,
            name="arkhon-rheo",
        )
        try:
            pool.open(wait=True, timeout=self._connect_timeout * 2)
        except (psycopg.Error, psycopg_pool.PoolTimeout):
            pool.close()
            connection.close()
            raise StoreUnavailable(
                f"cannot open a connection pool to {self._location}", location=self._location
            ) from None
        if not opening.opened(connection, pool):
            raise StoreUnavailable(f"opening {self._location} was abandoned")
        return connection, pool

    async def __aenter__(self) -> Self:
        """Connect, create (or check, or upgrade) the schema and start the writer.

        Raises:
            StoreCorrupt: The schema holds another application's tables, or a
                store of another version; it is left untouched.
            StoreUnavailable: PostgreSQL cannot be reached, or did not answer
                within ``connect_timeout`` (an open that is cancelled stops at once).
            StoreError: PostgreSQL refused the connection, or the store was open already.
        """
        self._begin_enter()
        self._watchdog = Watchdog(self._watchdog.limit)  # a store may be opened again
        opening = _Opening()
        try:
            # Cancellable: a cancelled open abandons its thread, which closes what it opened.
            connection, self._pool = await anyio.to_thread.run_sync(
                self._open_sync, opening, abandon_on_cancel=True
            )
        except BaseException:
            opening.abandon()
            self._state = StoreState.CLOSED
            raise
        self._writer = PostgresWriter(
            connection,
            location=self._location,
            clock=self._clock,
            batch_max=self._batch_max,
            max_pending=self._max_pending,
            on_unacknowledged_error=self._defer,
            channel=channel_of(self._schema),
            reconnect=functools.partial(self._connect, writer=True),
            watchdog=self._watchdog,
        )
        self._state = StoreState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit everything queued, stop the writer and close the connections.

        Even when cancelled; while what is queued lands, at most ``connect_timeout``
        plus the statement limit: once nothing has landed for ``close_timeout``
        (a frozen server), what is still queued is given up on (logged), the
        connections cut.
        """
        if self._state is not StoreState.OPEN:
            return
        self._state = StoreState.CLOSED
        bound = self._connect_timeout + self._watchdog.limit
        with anyio.move_on_after(bound, shield=True) as scope:
            if not await close_writer(self._writer, self._close_timeout):
                logger.warning("store.close_abandoned", location=self._location, seconds=bound)
                self._watchdog.cut_all()
            await self._close_listener()
            await self._close_changes()
            pool, self._pool = self._pool, None
            await anyio.to_thread.run_sync(pool.close, 1.0, abandon_on_cancel=True)
        if scope.cancelled_caught:
            self._watchdog.cut_all()
        self._watchdog.stop()

    def _enqueue(self, ticket: Ticket) -> Batch | None:
        """The writer's fast path (see `SQLiteBase._enqueue`)."""
        try:
            return self._writer.enqueue(ticket)  # type: ignore[no-any-return]
        except anyio.ClosedResourceError as exc:
            raise self._closing() from exc

    # -- reading, on the pool ------------------------------------------------------------

    async def _read(self, make: Callable[[], Script[Any]], *, transaction: bool = True) -> Any:
        """Run the script ``make`` makes on a pooled connection (``ASYNC``: after the queue)."""
        self._check_open()
        if self._durability is Durability.ASYNC:
            await self._flush()
        return await anyio.to_thread.run_sync(
            self._run_pooled, make, transaction, abandon_on_cancel=True
        )

    def _run_pooled(self, make: Callable[[], Script[Any]], transaction: bool) -> Any:
        """Run a read on a pooled connection; on one PostgreSQL dropped, again on another.

        PostgreSQL may have dropped every pooled connection (a restart, or each one
        ended by an administrator): one more try than the pool holds reaches a new one.
        """
        psycopg = import_psycopg()
        last = self._pool_size + 1
        for attempt in range(1, last + 1):
            script = pg.transaction(make()) if transaction else make()
            try:
                with self._pool.connection() as connection:
                    try:
                        return run_now(connection, script, self._location, self._watchdog)
                    except StoreError:
                        if attempt == last or not connection.broken:
                            raise
                # Dropped (PostgreSQL restarted, say): the pool replaces it; start over.
            except psycopg.Error:
                error = StoreUnavailable(
                    f"lost the connection to {self._location}", location=self._location
                )
                raise error from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def record(self, session_id: str) -> SessionRecord:
        """The session's record.

        Raises:
            SessionNotFound: No such session.
        """
        return decode_record(
            await self._read(functools.partial(self._record, session_id), transaction=False)
        )

    async def load(self, session_id: str) -> LoadedSession:
        """The latest snapshot and the events after it.

        Raises:
            SessionNotFound: No such session.
        """
        row, seq, state, events = await self._read(
            functools.partial(self._load, session_id), transaction=False
        )
        return LoadedSession(
            decode_record(row),
            seq,
            decode_snapshot(state, session_id),
            tuple(map(decode_event, events)),
        )

    # -- leases ------------------------------------------------------------------------

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

        By PostgreSQL's clock. A lease held by ``replacing`` (an owner known to be
        dead) is taken over. A new owner gets the next fencing token, which this
        store keeps for ``owner``'s appends. ``renew``: only renew the lease
        ``owner`` holds now (see `Store.acquire`).

        Raises:
            SessionLocked: Another owner holds a lease that has not expired.
            LeaseLost: ``renew``, and ``owner`` does not hold the lease now.
            ConfigurationError: ``ttl`` is not a positive number of seconds.
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        ticket = await self._submit(
            Acquire(session_id, owner, now + ttl, now, replacing, renew), wait=True
        )
        self._tokens[session_id] = (owner, ticket.result)

    async def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it (its row stays, keeping its fencing token).

        Raises:
            StoreError: The write failed, or the store is not open.
        """
        await super().release(session_id, owner)
        held = self._tokens.get(session_id)
        if held is not None and held[0] == owner:
            del self._tokens[session_id]

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """Every lease that has not expired, by PostgreSQL's clock."""
        rows = await self._read(self._leases, transaction=False)
        return tuple(LeaseRecord(*row) for row in rows)

    def _append_request(self, session_id: str, events: Any, *args: Any, **options: Any) -> Any:
        return self._fenced(super()._append_request(session_id, events, *args, **options))

    def _park_request(self, session_id: str, *args: Any) -> Any:
        return self._fenced(super()._park_request(session_id, *args))

    def _fenced(self, request: Any) -> Any:
        """``request`` (an append or a park) with its owner's fencing token, if known."""
        if request.owner is not None:
            held = self._tokens.get(request.session_id)
            if held is not None and held[0] == request.owner:
                request.token = held[1]
        return request


class _Opening:
    """An open under way: what it opened is closed by whichever side finishes last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._opened: tuple[Any, Any] | None = None

    def opened(self, connection: Any, pool: Any) -> bool:
        """The opening thread's: whether its caller still waits (else both are closed)."""
        with self._lock:
            if not self._abandoned:
                self._opened = (connection, pool)
                return True
        _close(connection, pool)
        return False

    def abandon(self) -> None:
        """The caller's, when it stops waiting: close what was opened, on a thread of its own."""
        with self._lock:
            self._abandoned = True
            opened, self._opened = self._opened, None
        if opened is not None:
            threading.Thread(target=_close, args=opened, daemon=True).start()


def _close(connection: Any, pool: Any) -> None:
    connection.close()
    pool.close(timeout=1.0)
