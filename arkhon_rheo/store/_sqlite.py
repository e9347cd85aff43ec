"""`SQLiteStore`: the embedded default store, one SQLite file with group commit."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ..protocols import Durability, LeaseRecord, LoadedSession, SessionRecord
from ..protocols._seams import current_injector
from . import _effects_sql as effects_sql
from . import _inbox_sql as inbox_sql
from . import _sql as sql
from . import _work_sql as work_sql
from ._base import inject_store_fault
from ._codec import (
    decode_event,
    decode_message,
    decode_record,
    decode_records,
    decode_snapshot,
)
from ._effects import EffectLedger
from ._plan import Acquire, Release, SetStatus, plan
from ._sqlite_base import SQLiteBase
from ._work import check_claim
from ._writer import Ticket

if TYPE_CHECKING:
    from collections.abc import Awaitable, Collection, Sequence

    from ..protocols import NewMessage, StoredEvent, StoredMessage
    from ._driver import Rows
    from ._effects import BeginEffect, FinishEffect
    from ._plan import Append

__all__ = ["SQLiteStore"]


class SQLiteStore(SQLiteBase, EffectLedger):
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
    (asyncio only; one await per statement, so it is slower).

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
        self._work.set()
        return await self.record(session_id)

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Any] | None = None,
        status: str | None = None,
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
    ) -> None:
        """Append events whose numbers follow the session's last one.

        Returns when the write is acknowledged per the store's durability. If the
        call is cancelled while waiting, the write may or may not be committed:
        load the session to know. With ``applied`` and ``posts``, the same
        transaction marks that inbox message applied by the last event and posts
        the messages, and with ``waiting`` it parks the session (see
        `Store.append`); such an append is acknowledged once committed, in every
        mode.

        Raises:
            DuplicateEvent: A number is taken or is not the next one; nothing is appended.
            SessionNotFound: No such session.
            UnserializablePatch: A patch holds a value that is not JSON data.
            StoreError: Message ``applied`` is not pending, another value is not
                JSON data, the write failed, or the store is not open; nothing is
                appended.
            LeaseLost: ``owner`` is given and no longer holds the session's lease
                (another owner took it); nothing is appended.
            ConfigurationError: ``applied`` is not a position, or comes with no events;
                ``waiting`` comes without a ``status``, or ``accepts`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "append")
        request = self._append_request(
            session_id, events, snapshot, status, applied, posts, owner, waiting, accepts
        )
        del events, snapshot, posts  # encoded: nothing here keeps them alive while waiting
        if self._durability is not Durability.ASYNC:
            ticket, wait = self._queued(request)
            try:
                await wait
            except BaseException:
                ticket.abandoned = True  # committed all the same; a refusal is logged
                raise
            if ticket.error is not None:
                raise ticket.error
            return
        self._raise_deferred(session_id)
        if request.applied is not None or request.posts or request.waiting is not None:
            # Applied exactly once, or parked (its lease given up): known only once
            # committed (and so is the tail).
            self._tails.pop(session_id, None)
            await self._submit(request, wait=True)
            if request.rows:
                self._tails[session_id] = request.rows[-1][1]
            return
        last = self._tails.get(session_id)
        if last is None:
            last = (await self.record(session_id)).last_seq
        known = {session_id: (last, "")}
        # (Fencing is checked by the writer's transaction; a refusal there is deferred.)
        held = None if owner is None else {session_id: (owner, math.inf)}
        if error := plan([request], known, now=0.0, location=self._location, leases=held).errors[0]:
            raise error
        if request.rows:
            self._tails[session_id] = request.rows[-1][1]
        try:
            await self._submit(request, wait=False)
        except BaseException:
            self._tails.pop(session_id, None)
            raise

    def queue_append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        snapshot: tuple[int, Any] | None,
        status: str | None,
        applied: int | None,
        posts: Sequence[NewMessage],
        owner: str | None,
        /,
    ) -> tuple[Ticket, Awaitable[object]] | None:
        """`append`, queued now with no coroutine of its own: its ticket and what to await.

        The supervisor's step awaits the write's batch directly this way (see
        `queue_append` in ``protocols``): await what is returned, then raise the
        ticket's ``error`` if it has one; a caller that stops waiting sets its
        ``abandoned`` (the write is committed all the same; a refusal is logged).

        Returns:
            ``None`` where `append` must do the work: in ``ASYNC`` mode, with a
                fault injector installed, or where a subclass overrides `append`.

        Raises:
            StoreError: As `append` raises for a write that cannot be queued (a
                value that is not JSON data, the store not open); nothing is queued.
            ConfigurationError: As `append` raises for ``applied`` or ``owner``.
        """
        if (
            self._durability is Durability.ASYNC
            or current_injector() is not None
            or type(self).append is not SQLiteStore.append  # a subclass's own append runs
        ):
            return None
        return self._queued(
            self._append_request(session_id, events, snapshot, status, applied, posts, owner)
        )

    def _queued(self, request: Append) -> tuple[Ticket, Awaitable[object]]:
        """Queue ``request`` for a caller that waits: its ticket, and what to await."""
        ticket = Ticket(request, True)
        # `_submit`, inlined: no coroutine of its own for every commit in flight.
        batch = self._enqueue(ticket)
        if batch is None:
            return ticket, self._submit_slowly(ticket)
        return ticket, batch.done.wait()

    async def set_status(self, session_id: str, status: str) -> None:
        """Change a session's status, durably.

        Raises:
            SessionNotFound: No such session.
            StoreError: The write failed, or the store is not open.
        """
        self._check_open()
        self._raise_deferred(session_id)
        await self._submit(SetStatus(session_id, status), wait=True)
        self._work.set()

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
        self._check_open()
        if not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        now = self._clock()
        await self._submit(Acquire(session_id, owner, now + ttl, now, replacing, renew), wait=True)

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
        self._work.set()

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

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        """Store a message in the session's inbox (see `Store.post`).

        Returns once its transaction is committed, durably as an ``append`` in
        ``SYNC`` or ``BATCHED`` mode (and in ``ASYNC`` mode too).

        Returns:
            The stored message, and whether it is new (``False``: its id was there).

        Raises:
            SessionNotFound: No such session.
            InboxFull: The inbox holds ``capacity`` pending messages; nothing is stored.
            StoreError: The payload is not JSON data, the write failed, or the store
                is not open.
            ConfigurationError: The message or ``capacity`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "post")
        ticket = await self._submit(self._post_request(session_id, message, capacity), wait=True)
        row, new = ticket.result
        if new:
            self._work.set()
        return decode_message(row), new

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

    async def park(
        self,
        session_id: str,
        owner: str | None,
        *,
        status: str,
        waiting: Any,
        accepts: Collection[str],
        now: float,
    ) -> bool:
        """Park the session unless a message it accepts is due (see `Store.park`).

        The check and the writes are one transaction (the group commit's, begun
        with the file's write lock), so a message another process posts is either
        seen by it or posted after the session is parked.

        Returns:
            Whether it parked.

        Raises:
            SessionNotFound: No such session.
            StoreError: ``waiting`` is not JSON data, the write failed, or the store
                is not open.
            ConfigurationError: ``accepts`` or ``now`` is malformed.
        """
        if current_injector() is not None:
            await inject_store_fault(session_id, "park")
        request = self._park_request(session_id, owner, status, waiting, accepts, now)
        self._raise_deferred(session_id)
        parked: bool = (await self._submit(request, wait=True)).result
        if parked:
            self._work.set()
        return parked

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now`` (earliest first), and the next wake."""
        writer = await self._reading()
        rows, later = await writer.run_script(sql.transaction(sql.waking(now), write=False))
        return tuple(map(decode_record, rows)), later

    # -- effects ---------------------------------------------------------------

    async def _write_effect(self, request: BeginEffect | FinishEffect) -> Any:
        self._raise_deferred(request.session_id)
        return (await self._submit(request, wait=True)).result

    async def _effect_rows(self, session_id: str) -> Rows:
        writer = await self._reading()
        rows: Rows = await writer.run_script(
            sql.transaction(effects_sql.effects(session_id), write=False)
        )
        return rows
