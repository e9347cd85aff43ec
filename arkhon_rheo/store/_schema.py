"""The SQLite schema, and opening a file without ever damaging one that is not ours.

A store file is an SQLite database whose header carries our ``application_id``
and our schema version as ``user_version``; the ``meta`` table repeats both.
Opening reads the 100-byte header first, with plain file I/O: a file that is
not SQLite, belongs to another application or has a schema version this code
cannot read is refused (`StoreCorrupt`) before SQLite ever opens it, so it is
never touched. A file of an older version this code knows how to upgrade is
upgraded in place, in one transaction, when it is opened.
A new (missing or empty) file gets the schema in one transaction, written in
rollback-journal mode so the header is on disk before the file switches to WAL.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import StoreCorrupt, StoreError

if TYPE_CHECKING:
    from ._driver import Script, Statement

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "inspect_file", "prepare"]

#: ``PRAGMA application_id`` of every store file: "ArkR".
APPLICATION_ID = 0x41726B52
#: ``PRAGMA user_version``: the schema version this code reads and writes.
SCHEMA_VERSION = 3
_MAGIC = b"SQLite format 3\x00"
_TABLES = frozenset({"meta", "sessions", "events", "snapshots", "leases"})

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
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
    """CREATE TABLE leases (
        session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL)
        WITHOUT ROWID""",
)
_META = (("application", "arkhon-rheo"), ("schema_version", str(SCHEMA_VERSION)))
#: What brings a file of each older version to the next one. Version 2 added
#: each event's state digest (events stored before it have none); version 3 each
#: session's machine fingerprint (sessions stored before it have none).
_UPGRADES: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE events ADD COLUMN digest INTEGER",),
    2: ("ALTER TABLE sessions ADD COLUMN fingerprint TEXT",),
}


def _foreign(path: str, why: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"{path} is not an arkhon-rheo store: {why}. It was left untouched; choose another "
        "path for the store",
        location=path,
    )


def inspect_file(path: str) -> bool:
    """Read the file's header and say whether it is new; blocking file I/O.

    Args:
        path: The database file.

    Returns:
        ``True`` if the file is missing or empty (it will get the schema),
        ``False`` if it is one of our stores with the current schema.

    Raises:
        StoreCorrupt: It is not an SQLite file, belongs to another application, or
            has another schema version.
        StoreError: It cannot be read.
    """
    try:
        with Path(path).open("rb") as file:
            header = file.read(100)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc}", location=path) from exc
    if not header:
        if os.path.exists(path + "-wal"):
            raise _foreign(path, "the file is empty but has a write-ahead log beside it")
        return True
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise _foreign(path, "it is not an SQLite database")
    application = int.from_bytes(header[68:72], "big", signed=True)
    if application != APPLICATION_ID:
        raise _foreign(
            path, f"its SQLite application_id is {application:#x}, ours is {APPLICATION_ID:#x}"
        )
    version = int.from_bytes(header[60:64], "big", signed=True)
    if version != SCHEMA_VERSION and version not in _UPGRADES:
        raise StoreCorrupt(
            f"{path} is an arkhon-rheo store of schema version {version}; this version of "
            f"arkhon-rheo reads version {SCHEMA_VERSION} only. It was left untouched: open it "
            "with the matching arkhon-rheo version",
            location=path,
        )
    return False


def _sql(text: str, params: tuple[Any, ...] = ()) -> Statement:
    return (text, params, False)


def _create(path: str) -> Script[None]:
    yield _sql("BEGIN IMMEDIATE")
    try:
        if (yield _sql("PRAGMA application_id"))[0][0] == 0:
            if (yield _sql("SELECT name FROM sqlite_master")):
                raise _foreign(path, "it holds tables of another application")
            yield _sql(f"PRAGMA application_id = {APPLICATION_ID}")
            yield _sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
            for statement in _SCHEMA:
                yield _sql(statement)
            yield ("INSERT INTO meta VALUES (?, ?)", _META, True)
        # else: another process created it meanwhile; _verify checks what it wrote
        yield _sql("COMMIT")
    except GeneratorExit:
        raise
    except BaseException:
        yield _sql("ROLLBACK")
        raise


def _upgrade(path: str) -> Script[None]:
    """Bring an older schema up to this one, one version at a time, in one transaction."""
    yield _sql("BEGIN IMMEDIATE")
    try:
        version = (yield _sql("PRAGMA user_version"))[0][0]  # another process may have done it
        while version in _UPGRADES:
            for statement in _UPGRADES[version]:
                yield _sql(statement)
            version += 1
            yield _sql(f"PRAGMA user_version = {version}")
            yield _sql("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        yield _sql("COMMIT")
    except GeneratorExit:
        raise
    except BaseException:
        yield _sql("ROLLBACK")
        raise


def _verify(path: str) -> Script[None]:
    application = (yield _sql("PRAGMA application_id"))[0][0]
    if application != APPLICATION_ID:
        raise _foreign(path, f"its SQLite application_id is {application:#x}")
    version = (yield _sql("PRAGMA user_version"))[0][0]
    if version in _UPGRADES:
        yield from _upgrade(path)
        version = (yield _sql("PRAGMA user_version"))[0][0]
    if version != SCHEMA_VERSION:
        raise StoreCorrupt(
            f"{path} is an arkhon-rheo store of schema version {version}; this version reads "
            f"version {SCHEMA_VERSION} only. It was left untouched",
            location=path,
        )
    rows = yield _sql("SELECT name FROM sqlite_master WHERE type = 'table'")
    if missing := _TABLES - {row[0] for row in rows}:
        raise StoreCorrupt(
            f"{path} lacks the tables {', '.join(sorted(missing))}; it is damaged and was "
            "left untouched",
            location=path,
        )
    meta: dict[Any, Any] = dict((yield _sql("SELECT key, value FROM meta")))
    if meta != dict(_META):
        raise StoreCorrupt(
            f"{path} has unexpected store metadata {meta!r}; it was left untouched",
            location=path,
        )


def prepare(path: str, *, new: bool, synchronous: str) -> Script[None]:
    """Give a new file the schema, check an existing one, then set the journal.

    Args:
        path: The file, for messages.
        new: Whether `inspect_file` found it missing or empty.
        synchronous: The ``PRAGMA synchronous`` level (``"FULL"`` or ``"NORMAL"``).

    Raises:
        StoreCorrupt: The file is not a store of this schema version, or is damaged.
        StoreError: SQLite failed otherwise.
    """
    if new:
        yield from _create(path)
    yield from _verify(path)
    yield _sql("PRAGMA journal_mode = WAL")
    yield _sql(f"PRAGMA synchronous = {synchronous}")
