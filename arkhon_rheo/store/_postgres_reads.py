"""`PostgresStore`'s reads: records, logs, snapshots, inboxes, leases and effects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import SessionNotFound
from ._codec import decode_event, decode_message, decode_record
from ._postgres_sql import NOW, SESSION_COLUMNS, number, sql

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import SessionRecord, StoredEvent, StoredMessage
    from ._driver import Rows, Script

__all__ = ["ReadsMixin"]

_EVENTS = (
    "SELECT %s, e.seq, h.shape, e.patch, e.attempt, e.started_at, e.finished_at, e.error, "
    "e.io, e.digest FROM events e JOIN shapes h ON h.id = e.shape"
)
_MESSAGES = (
    "SELECT %s, message_id, position, kind, payload, posted_at, due_at, applied_seq FROM inbox"
)


def _state(row: Any) -> Any:
    """A snapshot row's state as the codec reads it: zlib bytes, or JSON text."""
    state, zipped = bytes(row[0]), row[1]
    return state if zipped else state.decode()


def _event(row: Any) -> Any:
    return (*row[:3], bytes(row[3]), *row[4:])


class ReadsMixin:
    """The reads of the `Store` protocol, run on `PostgresStore`'s pool."""

    if TYPE_CHECKING:  # PostgresStore's (and StoreBase's)

        async def _read(self, make: Callable[[], Script[Any]], *, transaction: bool = True) -> Any:
            raise NotImplementedError  # pragma: no cover (PostgresStore's)

    # -- scripts -----------------------------------------------------------------------

    @staticmethod
    def _record(session_id: str) -> Script[tuple[Any, ...]]:
        rows = yield sql(f"SELECT {SESSION_COLUMNS}, n FROM sessions WHERE id = %s", (session_id,))
        if not rows:
            raise SessionNotFound(session_id=session_id)
        return tuple(rows[0])

    @staticmethod
    def _snapshot(n: int, seq: int) -> Script[tuple[int, Any]]:
        rows = yield sql(
            "SELECT seq, state, zipped FROM snapshots WHERE session = %s AND seq <= %s "
            "ORDER BY seq DESC LIMIT 1",
            (n, seq),
        )
        if not rows:  # only for seq < 0: the initial snapshot is number 0
            rows = yield sql(
                "SELECT seq, state, zipped FROM snapshots WHERE session = %s ORDER BY seq LIMIT 1",
                (n,),
            )
        return rows[0][0], _state(rows[0][1:])

    def _load(self, session_id: str) -> Script[tuple[Any, int, Any, Rows]]:
        row = yield from self._record(session_id)
        seq, state = yield from self._snapshot(row[-1], row[3])
        events = yield sql(
            f"{_EVENTS} WHERE e.session = %s AND e.seq > %s ORDER BY e.seq",
            (session_id, row[-1], seq),
        )
        return row, seq, state, [_event(event) for event in events]

    @staticmethod
    def _leases() -> Script[Rows]:
        rows: Rows = yield sql(
            "SELECT session_id, owner, expires_at FROM leases WHERE owner IS NOT NULL "
            f"AND expires_at > {NOW} ORDER BY session_id"
        )
        return rows

    # -- the protocol's reads ----------------------------------------------------------

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """Every event of the session, in order.

        Raises:
            SessionNotFound: No such session.
        """

        def script() -> Script[Rows]:
            row = yield from self._record(session_id)
            rows: Rows = yield sql(
                f"{_EVENTS} WHERE e.session = %s ORDER BY e.seq", (session_id, row[-1])
            )
            return rows

        return tuple(decode_event(_event(row)) for row in await self._read(script))

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """The latest snapshot taken at or before event ``seq``.

        Raises:
            SessionNotFound: No such session.
        """
        from ._codec import decode_snapshot

        def script() -> Script[tuple[int, Any]]:
            row = yield from self._record(session_id)
            return (yield from self._snapshot(row[-1], seq))

        found, state = await self._read(script)
        return found, decode_snapshot(state)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""

        def script() -> Script[Rows]:
            rows: Rows = yield sql(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY n")
            return rows

        return tuple(map(decode_record, await self._read(script, transaction=False)))

    async def _messages(self, session_id: str, where: str, order: str) -> Any:
        def script() -> Script[Rows]:
            n = yield from number(session_id)
            rows: Rows = yield sql(
                f"{_MESSAGES} WHERE session = %s {where} ORDER BY {order}", (session_id, n)
            )
            return rows

        return tuple(map(decode_message, await self._read(script)))

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """The session's messages not applied yet, by ``(due_at, position)``.

        Raises:
            SessionNotFound: No such session.
        """
        found: tuple[StoredMessage, ...] = await self._messages(
            session_id, "AND applied_seq IS NULL", "due_at, position"
        )
        return found

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """Every message of the session's inbox, applied ones too, by position.

        Raises:
            SessionNotFound: No such session.
        """
        found: tuple[StoredMessage, ...] = await self._messages(session_id, "", "position")
        return found

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """The waiting sessions due to wake at ``now`` (earliest first), and the next wake."""

        def script() -> Script[tuple[Rows, float | None]]:
            rows: Rows = yield sql(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE status = 'waiting' "
                "AND wake_at <= %s ORDER BY wake_at, n",
                (now,),
            )
            later = yield sql(
                "SELECT min(wake_at) FROM sessions WHERE status = 'waiting' AND wake_at > %s",
                (now,),
            )
            return rows, later[0][0]

        rows, later = await self._read(script)
        return tuple(map(decode_record, rows)), later

    async def _effect_rows(self, session_id: str) -> Rows:
        def script() -> Script[Rows]:
            n = yield from number(session_id)
            rows: Rows = yield sql(
                "SELECT %s, key, tool, arguments, status, attempts, started_at, finished_at, "
                "result, error FROM effects WHERE session = %s ORDER BY n",
                (session_id, n),
            )
            return rows

        found: Rows = await self._read(script)
        return found
