"""The SQL layer: every query of the store, as scripts any driver can run.

A script is a generator: it yields ``(sql, parameters, many)`` and receives the
rows, so the same code runs in one thread hop (thread driver) or one await per
statement (aiosqlite). `transaction` wraps a script in ``BEGIN``/``COMMIT``,
rolling back on any error.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import SessionNotFound, StoreError
from . import _effects_sql as effects_sql
from . import _inbox_sql as inbox
from ._driver import ROWCOUNT, ROWCOUNT_MANY
from ._plan import (
    Acquire,
    Append,
    BeginEffect,
    Create,
    FinishEffect,
    Park,
    Plan,
    Post,
    Release,
    Request,
    SetStatus,
    plan,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ._codec import Snapshot
    from ._driver import Rows, Script, Statement
    from ._plan import Lease

__all__ = [
    "StaleCache",
    "history",
    "leases",
    "load",
    "record",
    "sessions",
    "snapshot_at",
    "sql",
    "transaction",
    "waking",
    "write_batch",
]

T = TypeVar("T")
_CHUNK = 500  # session ids per ``IN (...)`` query, well below SQLite's variable limit
_SESSION_COLUMNS = (
    "id, machine, status, last_seq, created_at, updated_at, parent, fingerprint, waiting, wake_at"
)
INSERT_SESSION = f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
#: Rows name their session and shape by text; the tables keep their numbers.
_SESSION_NUMBER = "(SELECT n FROM sessions WHERE id = ?)"
INSERT_SHAPE = "INSERT OR IGNORE INTO shapes (shape) VALUES (?)"
INSERT_EVENT = (
    f"INSERT INTO events VALUES ({_SESSION_NUMBER}, ?, "
    "(SELECT id FROM shapes WHERE shape = ?), ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_SNAPSHOT = f"INSERT OR REPLACE INTO snapshots VALUES ({_SESSION_NUMBER}, ?, ?)"
_EVENT_COLUMNS = (
    "?, e.seq, h.shape, e.patch, e.attempt, e.started_at, e.finished_at, e.error, e.io, "
    "e.digest FROM events e JOIN shapes h ON h.id = e.shape"
)
UPDATE_SESSION = "UPDATE sessions SET last_seq = ?, status = ?, updated_at = ? WHERE id = ?"
UPDATE_SESSION_GUARDED = (
    "UPDATE sessions SET last_seq = ?, status = ?, updated_at = ? "
    "WHERE id = ? AND last_seq = ? AND status = ?"
)
#: The same, for a session whose status does not change (most commits): a row whose
#: status is not set keeps its status indexes as they are (half the row's cost).
UPDATE_SEQ = "UPDATE sessions SET last_seq = ?, updated_at = ? WHERE id = ?"
UPDATE_SEQ_GUARDED = (
    "UPDATE sessions SET last_seq = ?, updated_at = ? WHERE id = ? AND last_seq = ? AND status = ?"
)
UPSERT_LEASE = (
    "INSERT INTO leases VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
    "SET owner = excluded.owner, expires_at = excluded.expires_at"
)
DELETE_LEASE = "DELETE FROM leases WHERE session_id = ?"


def sql(text: str, params: Sequence[Any] = ()) -> Statement:
    """One statement, run once."""
    return (text, params, False)


def many(text: str, rows: Iterable[Sequence[Any]]) -> Statement:
    """One statement, run once per row of parameters."""
    return (text, rows, True)


def transaction(body: Script[T], *, write: bool) -> Script[T]:
    """Run ``body`` in a transaction: ``BEGIN IMMEDIATE`` to write, ``BEGIN`` to read.

    It commits if ``body`` returns and rolls back if anything raises. A write
    transaction takes the file's write lock first, so what it reads cannot go
    stale before it commits, even with other processes on the file.
    """
    yield sql("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = yield from body
        yield sql("COMMIT")
    except GeneratorExit:
        raise
    except BaseException:
        with contextlib.suppress(StoreError):  # none is active if COMMIT failed
            yield sql("ROLLBACK")
        raise
    return result


class StaleCache(StoreError):
    """The writer's cached ``(last_seq, status)`` of a session is stale (another process wrote)."""


def write_batch(
    requests: list[Request],
    *,
    now: float,
    location: str,
    cache: dict[str, tuple[int, str]] | None = None,
    shapes: set[str] | None = None,
) -> Script[Plan]:
    """Check a batch against the sessions' and leases' rows and write what passes.

    Run it in a write transaction. With ``cache`` (the ``(last_seq, status)`` of
    sessions as this writer last committed them), cached sessions are not read
    back: each update is guarded by the values it expects (``WHERE id = ? AND
    last_seq = ? AND status = ?``) and, if any row does not match (another process
    wrote the session), or if the cache would refuse a write, the script raises
    `StaleCache` before writing events, and the caller drops the cache and runs
    the batch again without it. The cache is
    not updated here: the caller does that once the transaction commits.
    ``shapes``: event shapes this writer saw committed to the file (the table only
    grows), which need no ``INSERT OR IGNORE``: most commits write none. Should the
    file have lost one (a copy restored in place), the script raises `StaleCache`
    and the caller drops both caches and runs the batch again.
    """
    known, leases = yield from _current(requests, cache)
    inboxes = {}
    ledger = {}
    # (A batch of plain appends, the common case, skips even looking.)
    if any(type(r) is not Append or r.applied is not None or r.posts for r in requests):
        inboxes = yield from inbox.known(requests)
        if any(isinstance(r, BeginEffect | FinishEffect) for r in requests):
            ledger = yield from effects_sql.known(requests)
    result = plan(
        requests, known, now=now, location=location, leases=leases, inboxes=inboxes, effects=ledger
    )
    if cache is not None and any(
        error is not None and isinstance(r, Append | SetStatus) and r.session_id in cache
        for r, error in zip(requests, result.errors, strict=True)
    ):
        # Refused by what the cache says: make sure with the file's rows.
        raise StaleCache(f"a cached session in {location} refused a write", location=location)
    if result.created:
        yield _rows(INSERT_SESSION, result.created)
    if result.updated:
        yield from _update_sessions(result, known, now, location, guarded=cache is not None)
    if result.events:
        yield from _insert_events(result, shapes, location)
    if result.snapshots:
        yield _rows(INSERT_SNAPSHOT, result.snapshots)
    if result.waits or result.nudges or result.inbox or result.applied:
        yield from inbox.write(result)
    if result.effects:
        yield from effects_sql.write(result)
    if result.leases:
        taken = [(sid, *lease) for sid, lease in result.leases.items() if lease is not None]
        dropped = [(sid,) for sid, lease in result.leases.items() if lease is None]
        if taken:
            yield _rows(UPSERT_LEASE, taken)
        if dropped:
            yield _rows(DELETE_LEASE, dropped)
    return result


def _insert_events(result: Plan, shapes: set[str] | None, location: str) -> Script[None]:
    """Insert ``result``'s events, and the shapes among them ``shapes`` does not hold."""
    new = {row[2] for row in result.events}
    trusted = False  # whether some were taken as stored
    if shapes:
        trusted = not new.isdisjoint(shapes)
        new.difference_update(shapes)
    if new:
        yield _rows(INSERT_SHAPE, [(shape,) for shape in new])
    try:
        yield _rows(INSERT_EVENT, result.events)
    except StoreError as exc:
        if trusted and _shape_missing(exc):
            # The file lost a shape this writer saw committed (a copy restored in
            # place): nothing was written; the caller runs the batch again with
            # its caches dropped, which writes the shape.
            raise StaleCache(
                f"{location} lost an event shape this writer had stored", location=location
            ) from None
        raise


def _shape_missing(error: StoreError) -> bool:
    """Whether ``error`` is an event row whose shape the file does not hold (``shape`` NULL)."""
    cause = error.__cause__
    return isinstance(cause, sqlite3.IntegrityError) and "events.shape" in str(cause)


def _update_sessions(
    result: Plan, known: dict[str, tuple[int, str]], now: float, location: str, *, guarded: bool
) -> Script[None]:
    """Update the rows of the sessions ``result`` moved on; set a status only where it changes.

    ``guarded``: ``known`` comes from the writer's cache, so each update matches
    the values it expects, and raises `StaleCache` if any row does not.
    """
    # Created in this batch: inserted above with ``(0, status)``.
    created = {row[0]: (0, row[2]) for row in result.created}
    moved: list[tuple[Any, ...]] = []
    changed: list[tuple[Any, ...]] = []
    for sid, (last, status) in result.updated.items():
        before = known.get(sid) or created.get(sid)
        if before is not None and status == before[1]:
            moved.append((last, now, sid, *before) if guarded else (last, now, sid))
        elif guarded:
            assert before is not None  # the cache, or this batch, knows every session it moves
            changed.append((last, status, now, sid, *before))
        else:
            changed.append((last, status, now, sid))
    if not guarded:
        if moved:
            yield _rows(UPDATE_SEQ, moved)
        if changed:
            yield _rows(UPDATE_SESSION, changed)
        return
    matched = 0
    if moved:
        matched += (yield _rows(UPDATE_SEQ_GUARDED, moved, count=True))[0][0]
    if changed:
        matched += (yield _rows(UPDATE_SESSION_GUARDED, changed, count=True))[0][0]
    if matched != len(moved) + len(changed):
        raise StaleCache(
            f"a session in {location} was written by another process", location=location
        )


def _current(
    requests: list[Request], cache: dict[str, tuple[int, str]] | None
) -> Script[tuple[dict[str, tuple[int, str]], dict[str, Lease]]]:
    """What ``plan`` needs to know of the batch's sessions and leases as they stand.

    The ``(last_seq, status)`` of each session the batch touches (the cache's
    entry, or else its row) and the lease of each session it takes or releases.
    """
    ids = sorted(
        {
            r.session_id
            for r in requests
            if isinstance(r, Create | Append | SetStatus | Post | Park | BeginEffect | FinishEffect)
            and (cache is None or r.session_id not in cache)
        }
    )
    known: dict[str, tuple[int, str]] = {}
    if cache is not None:
        for r in requests:
            if (entry := cache.get(r.session_id)) is not None:
                known[r.session_id] = entry
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = yield sql(f"SELECT id, last_seq, status FROM sessions WHERE id IN ({marks})", chunk)
        known.update((row[0], (row[1], row[2])) for row in rows)
    leased = sorted(
        {
            r.session_id
            for r in requests
            if isinstance(r, Acquire | Release)
            or (isinstance(r, Park | Append) and r.owner is not None)
        }
    )
    leases: dict[str, Lease] = {}
    for start in range(0, len(leased), _CHUNK):
        chunk = leased[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = yield sql(
            f"SELECT session_id, owner, expires_at FROM leases WHERE session_id IN ({marks})",
            chunk,
        )
        leases.update((row[0], (row[1], row[2])) for row in rows)
    return known, leases


def _rows(text: str, rows: list[Any], *, count: bool = False) -> Statement:
    # One row: a plain statement (no ``executemany`` set-up). ``count``: the rows
    # are ``[(rowcount,)]`` (a guarded update's matches).
    if len(rows) == 1:
        return (text, rows[0], ROWCOUNT if count else False)
    return (text, rows, ROWCOUNT_MANY if count else True)


def record(session_id: str) -> Script[tuple[Any, ...]]:
    """The session's row, its number last; raises `SessionNotFound`."""
    rows = yield sql(f"SELECT {_SESSION_COLUMNS}, n FROM sessions WHERE id = ?", (session_id,))
    if not rows:
        raise SessionNotFound(session_id=session_id)
    return rows[0]


def leases(now: float) -> Script[Rows]:
    """Every lease that has not expired at ``now``."""
    rows = yield sql(
        "SELECT session_id, owner, expires_at FROM leases WHERE expires_at > ? ORDER BY session_id",
        (now,),
    )
    return rows


def sessions() -> Script[Rows]:
    """Every session's row, oldest first."""
    rows = yield sql(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY n")
    return rows


def waking(now: float) -> Script[tuple[Rows, float | None]]:
    """The rows of the waiting sessions due at ``now`` (earliest first), and the next wake."""
    rows = yield sql(
        f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE status = 'waiting' AND wake_at <= ? "
        "ORDER BY wake_at, n",
        (now,),
    )
    later = yield sql(
        "SELECT min(wake_at) FROM sessions WHERE status = 'waiting' AND wake_at > ?", (now,)
    )
    return rows, later[0][0]


def _snapshot(number: int, seq: int) -> Script[tuple[int, Snapshot]]:
    rows = yield sql(
        "SELECT seq, state FROM snapshots WHERE session = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
        (number, seq),
    )
    if not rows:  # only for seq < 0: the initial snapshot is number 0
        rows = yield sql(
            "SELECT seq, state FROM snapshots WHERE session = ? ORDER BY seq LIMIT 1", (number,)
        )
    return rows[0][0], rows[0][1]


def snapshot_at(session_id: str, seq: int) -> Script[tuple[int, Snapshot]]:
    """The latest snapshot at or before ``seq``; raises `SessionNotFound`."""
    row = yield from record(session_id)
    return (yield from _snapshot(row[-1], seq))


def load(session_id: str) -> Script[tuple[tuple[Any, ...], int, Snapshot, Rows]]:
    """The session's row, its latest snapshot and the event rows after it."""
    row = yield from record(session_id)
    seq, state = yield from _snapshot(row[-1], row[3])
    events = yield sql(
        f"SELECT {_EVENT_COLUMNS} WHERE e.session = ? AND e.seq > ? ORDER BY e.seq",
        (session_id, row[-1], seq),
    )
    return row, seq, state, events


def history(session_id: str) -> Script[Rows]:
    """Every event row of the session, in order; raises `SessionNotFound`."""
    row = yield from record(session_id)
    rows = yield sql(
        f"SELECT {_EVENT_COLUMNS} WHERE e.session = ? ORDER BY e.seq", (session_id, row[-1])
    )
    return rows
