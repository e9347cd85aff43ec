"""`PostgresStore`'s reads: records, logs, snapshots, inboxes, leases and effects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import SessionNotFound
from ._codec import decode_event, decode_message, decode_record, decode_records
from ._postgres_sql import NOW, SESSION_COLUMNS, consistent, number, sql

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import SessionRecord, StoredEvent, StoredMessage
    from ._driver import Rows, Script

__all__ = ["ReadsMixin"]

_MESSAGES = (
    "SELECT %s, message_id, position, kind, payload, posted_at, due_at, applied_seq FROM inbox"
)


def _state(row: Any) -> Any:
    """A snapshot row's state as the codec reads it: zlib bytes, or JSON text."""
    state, zipped = bytes(row[0]), row[1]
    return state if zipped else state.decode()


def _event(row: Any) -> Any:
    return (*row[:3], bytes(row[3]), *row[4:])


#: The session's number and last event's number, by its id (``%(id)s``).
_NUMBER = "(SELECT n FROM sessions WHERE id = %(id)s)"
_LAST = "(SELECT last_seq FROM sessions WHERE id = %(id)s)"


def _snapshot_sql(bound: str) -> str:
    """The latest snapshot at or before event ``bound``; the first one if none is."""
    return (
        "SELECT seq, state, zipped FROM ("
        "(SELECT seq, state, zipped, 0 AS k FROM snapshots "
        f"WHERE session = {_NUMBER} AND seq <= {bound} ORDER BY seq DESC LIMIT 1) "
        "UNION ALL (SELECT seq, state, zipped, 1 FROM snapshots "
        f"WHERE session = {_NUMBER} ORDER BY seq LIMIT 1)) x ORDER BY k LIMIT 1"
    )


_RECORD = f"SELECT {SESSION_COLUMNS}, n FROM sessions WHERE id = %(id)s"
_LOAD_SNAPSHOT = _snapshot_sql(_LAST)
_SNAPSHOT_AT = _snapshot_sql("%(seq)s")
_EVENTS_OF = (
    "SELECT %(id)s, e.seq, h.shape, e.patch, e.attempt, e.started_at, e.finished_at, e.error, "
    f"e.io, e.digest FROM events e JOIN shapes h ON h.id = e.shape WHERE e.session = {_NUMBER}"
)
_LOAD_EVENTS = f"{_EVENTS_OF} AND e.seq > (SELECT seq FROM ({_LOAD_SNAPSHOT}) z) ORDER BY e.seq"
_HISTORY = f"{_EVENTS_OF} ORDER BY e.seq"


def _found(session_id: str, rows: Rows) -> None:
    if not rows:
        raise SessionNotFound(session_id=session_id)


class ReadsMixin:
    """The reads of the `Store` protocol, run on `PostgresStore`'s pool.

    A read of several statements (`load`, `history`, `snapshot_at`) sends them
    in one round trip, in one ``REPEATABLE READ`` transaction: they see one
    snapshot of the database, whatever other processes commit meanwhile.
    """

    if TYPE_CHECKING:  # PostgresStore's (and StoreBase's)

        async def _read(self, make: Callable[[], Script[Any]], *, transaction: bool = True) -> Any:
            raise NotImplementedError  # pragma: no cover (PostgresStore's)

        @property
        def location(self) -> str:
            raise NotImplementedError  # pragma: no cover (StoreBase's)

    # -- scripts -----------------------------------------------------------------------

    @staticmethod
    def _record(session_id: str) -> Script[tuple[Any, ...]]:
        rows = yield sql(_RECORD, {"id": session_id})
        _found(session_id, rows)
        return tuple(rows[0])

    def _load(self, session_id: str) -> Script[tuple[Any, int, Any, Rows]]:
        params = {"id": session_id}
        record, snapshot, events = yield from consistent(
            sql(_RECORD, params), sql(_LOAD_SNAPSHOT, params), sql(_LOAD_EVENTS, params)
        )
        _found(session_id, record)
        return tuple(record[0]), snapshot[0][0], _state(snapshot[0][1:]), list(map(_event, events))

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
            params = {"id": session_id}
            record, rows = yield from consistent(sql(_RECORD, params), sql(_HISTORY, params))
            _found(session_id, record)
            return rows

        rows = await self._read(script, transaction=False)
        return tuple(decode_event(_event(row)) for row in rows)

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """The latest snapshot taken at or before event ``seq``.

        Raises:
            SessionNotFound: No such session.
        """
        from ._codec import decode_snapshot

        def script() -> Script[tuple[int, Any]]:
            params = {"id": session_id, "seq": seq}
            record, rows = yield from consistent(sql(_RECORD, params), sql(_SNAPSHOT_AT, params))
            _found(session_id, record)
            return rows[0][0], _state(rows[0][1:])

        found, state = await self._read(script, transaction=False)
        return found, decode_snapshot(state, session_id)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """Every session's record, oldest first."""

        def script() -> Script[Rows]:
            rows: Rows = yield sql(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY n")
            return rows

        return decode_records(await self._read(script, transaction=False), self.location)

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
            rows, later = yield from consistent(
                sql(
                    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE status = 'waiting' "
                    "AND wake_at <= %s ORDER BY wake_at, n",
                    (now,),
                ),
                sql(
                    "SELECT min(wake_at) FROM sessions WHERE status = 'waiting' AND wake_at > %s",
                    (now,),
                ),
            )
            return rows, later[0][0]

        rows, later = await self._read(script, transaction=False)
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
