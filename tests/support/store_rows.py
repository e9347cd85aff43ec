"""Reading and writing a store file's rows behind the store's back, for tests that damage them.

Also `WriterBegins`, which tells a test when the writer thread has taken its batch.

Since schema version 4 an event row names its session by number and its
repeated parts (kind, stage, lifecycle states, read and write sets, the names
its patch writes) by the number of a *shape* (see ``arkhon_rheo.store._codec``).
These helpers change one logical column of an event the way a damaged or
hand-edited file would, and rewrite a file the way schema version 3 laid it out.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import zlib
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.store import SQLiteStore

#: An event's parts kept in its shape, by their place in it.
SHAPE_PARTS = ("kind", "stage", "from_state", "to_state", "reads", "writes")
SESSION_NUMBER = "(SELECT n FROM sessions WHERE id = ?)"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def shape_id(db: sqlite3.Connection, shape: list[Any]) -> int:
    """The number of ``shape`` in the file's ``shapes`` table, added if new."""
    text = _compact(shape)
    db.execute("INSERT OR IGNORE INTO shapes (shape) VALUES (?)", (text,))
    (number,) = db.execute("SELECT id FROM shapes WHERE shape = ?", (text,)).fetchone()
    return int(number)


def set_event(db: sqlite3.Connection, session_id: str | None, seq: int, **parts: Any) -> None:
    """Change event ``seq`` (of ``session_id``, or of any session if ``None``).

    ``parts`` are `SHAPE_PARTS` (a new shape is made) or ``patch`` (JSON data,
    stored whole as a damaged or hand-written patch would be).
    """
    where = "seq = ?" + ("" if session_id is None else f" AND session = {SESSION_NUMBER}")
    params: tuple[Any, ...] = (seq,) if session_id is None else (seq, session_id)
    if "patch" in parts:
        patch = _compact(parts.pop("patch"))
        db.execute(f"UPDATE events SET patch = ? WHERE {where}", (patch, *params))
    if parts:
        (text,) = db.execute(
            f"SELECT h.shape FROM events e JOIN shapes h ON h.id = e.shape WHERE e.{where}",
            params,
        ).fetchone()
        shape = json.loads(text)
        for name, value in parts.items():
            shape[SHAPE_PARTS.index(name)] = value
        number = shape_id(db, shape)
        db.execute(f"UPDATE events SET shape = ? WHERE {where}", (number, *params))


def event_patch(db: sqlite3.Connection, session_id: str | None, seq: int) -> Any:
    """Event ``seq``'s patch as JSON data (``{"set": ..., "append": ...}``)."""
    where = "e.seq = ?" + ("" if session_id is None else f" AND e.session = {SESSION_NUMBER}")
    params: tuple[Any, ...] = (seq,) if session_id is None else (seq, session_id)
    text, patch = db.execute(
        f"SELECT h.shape, e.patch FROM events e JOIN shapes h ON h.id = e.shape WHERE {where}",
        params,
    ).fetchone()
    return _whole(json.loads(text), json.loads(patch))


def _whole(shape: list[Any], data: Any) -> Any:
    assigned, appended = shape[6], shape[7]
    if assigned is None or not isinstance(data, list):
        return data
    patch: dict[str, Any] = {}
    if assigned:
        patch["set"] = dict(zip(assigned, data, strict=False))
    if appended:
        patch["append"] = dict(zip(appended, data[len(assigned) :], strict=True))
    return patch


def insert_event(db: sqlite3.Connection, session_id: str, seq: int) -> None:
    """Write an empty step event behind the store's back (not moving the session's last_seq)."""
    number = shape_id(db, ["step", None, "A", "B", [], [], None, None])
    db.execute(
        f"INSERT INTO events VALUES ({SESSION_NUMBER}, ?, ?, '{{}}', 1, 0.0, 0.0, NULL, NULL, "
        "NULL)",
        (session_id, seq, number),
    )


def snapshot_state(value: str | bytes) -> Any:
    """A snapshot row's state as JSON data (compressed when stored as bytes)."""
    return json.loads(zlib.decompress(value) if isinstance(value, bytes) else value)


#: The tables of schema version 3, as that version created them.
SCHEMA_3 = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY, machine TEXT NOT NULL, status TEXT NOT NULL,
        last_seq INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
        parent TEXT, fingerprint TEXT)""",
    """CREATE TABLE events (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, stage TEXT,
        from_state TEXT NOT NULL, to_state TEXT NOT NULL, reads TEXT NOT NULL,
        writes TEXT NOT NULL, patch TEXT NOT NULL, attempt INTEGER NOT NULL,
        started_at REAL NOT NULL, finished_at REAL NOT NULL, error TEXT, io TEXT,
        digest INTEGER,
        PRIMARY KEY (session_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE snapshots (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
)


def write_schema_3(path: Path | str) -> None:
    """Rewrite the store file at ``path`` (closed) as schema version 3 laid out the same data."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")
        names = dict(db.execute("SELECT n, id FROM sessions"))
        sessions = db.execute(
            "SELECT id, machine, status, last_seq, created_at, updated_at, parent, fingerprint "
            "FROM sessions ORDER BY n"
        ).fetchall()
        events = db.execute(
            "SELECT e.session, e.seq, h.shape, e.patch, e.attempt, e.started_at, e.finished_at, "
            "e.error, e.io, e.digest FROM events e JOIN shapes h ON h.id = e.shape "
            "ORDER BY e.session, e.seq"
        ).fetchall()
        snapshots = db.execute("SELECT session, seq, state FROM snapshots").fetchall()
        for table in ("sessions", "shapes", "events", "snapshots"):
            db.execute(f"DROP TABLE {table}")
        db.execute("DROP TABLE IF EXISTS inbox")  # version 5's, empty here
        db.execute("DROP TABLE IF EXISTS effects")  # version 6's, empty here
        for statement in SCHEMA_3:
            db.execute(statement)
        db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", sessions)
        for number, seq, text, patch, *rest in events:
            shape = json.loads(text)
            db.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    names[number],
                    seq,
                    *shape[:4],
                    _compact(shape[4]),
                    _compact(shape[5]),
                    _compact(_whole(shape, json.loads(patch))),
                    *rest,
                ),
            )
        db.executemany(
            "INSERT INTO snapshots VALUES (?, ?, ?)",
            [
                (names[number], seq, _compact(snapshot_state(state)))
                for number, seq, state in snapshots
            ],
        )
        db.execute("PRAGMA user_version = 3")
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        db.execute("COMMIT")


class WriterBegins:
    """Counts the write transactions a `SQLiteStore`'s writer thread has begun.

    Its connection traces each statement as it starts running, so once
    ``BEGIN IMMEDIATE`` is traced the writer has taken its batch, even while it
    still waits there for another connection's lock: tests wait for that
    instead of sleeping and assuming the thread got there meanwhile.
    """

    def __init__(self, store: SQLiteStore) -> None:
        self._seen = threading.Condition()
        self.count = 0
        connection = store._writer._driver._connection  # type: ignore[union-attr]
        assert connection is not None
        connection.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            with self._seen:
                self.count += 1
                self._seen.notify_all()

    async def wait(self, count: int = 1) -> None:
        """Return once the writer has begun ``count`` write transactions."""
        await anyio.to_thread.run_sync(self._wait, count)

    def _wait(self, count: int) -> None:
        with self._seen:
            # A bound only so that a broken store fails the test instead of hanging it.
            assert self._seen.wait_for(lambda: self.count >= count, timeout=60), self.count
