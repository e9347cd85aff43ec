"""The SQLite schema, and opening a file without ever damaging one that is not ours.

A store file is an SQLite database whose header carries our ``application_id``
and our schema version as ``user_version``; the ``meta`` table repeats both.
Opening reads the 100-byte header first, with plain file I/O: a path that is
not a regular file (a directory, a FIFO, a socket, a device) is refused before
it is opened, since reading one could block forever; a file that is not SQLite,
belongs to another application or has a schema version this code cannot read
is refused (`StoreCorrupt`) before SQLite ever opens it, so it is never touched.
A file of an older version this code knows how to upgrade is upgraded in place,
in one transaction, when it is opened; a process that opens it while another
upgrades it finds the write lock taken (`StoreUpgrading`, which `SQLiteStore`
waits out, up to its ``upgrade_timeout``) and then reads the upgraded file.
A new (missing or empty) file gets the schema in one transaction, written in
rollback-journal mode so the header is on disk before the file switches to WAL.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from .._errors import StoreCorrupt, StoreError, StoreUpgrading
from ._codec import upgrade_row
from ._driver import is_busy
from ._effects_sql import TABLE as _EFFECTS
from ._sql import INSERT_EVENT, INSERT_SHAPE

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._driver import Script, Statement

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "inspect_file", "older_version", "prepare"]

#: ``PRAGMA application_id`` of every store file: "ArkR".
APPLICATION_ID = 0x41726B52
#: ``PRAGMA user_version``: the schema version this code reads and writes.
SCHEMA_VERSION = 8
_MAGIC = b"SQLite format 3\x00"
_TABLES = frozenset(
    {"meta", "sessions", "shapes", "events", "snapshots", "leases", "inbox", "effects"}
)

#: Version 4: events and snapshots name their session by its number (``n``), and an
#: event's repeated parts by the number of its shape (see `._codec`).
_SESSIONS_4 = """CREATE TABLE sessions (
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, machine TEXT NOT NULL,
    status TEXT NOT NULL, last_seq INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, parent TEXT, fingerprint TEXT)"""
#: Version 5: what a parked session waits for, and when it wakes; version 7: the
#: message kinds it parked accepting (a JSON list).
_SESSIONS = """CREATE TABLE sessions (
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, machine TEXT NOT NULL,
    status TEXT NOT NULL, last_seq INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, parent TEXT, fingerprint TEXT, waiting TEXT, wake_at REAL,
    accepts TEXT)"""
#: Version 7: the sessions a worker may have something to do for, by machine.
_LIVE = "CREATE INDEX sessions_live ON sessions (machine, n) WHERE status IN ('running', 'waiting')"
#: Version 5: each session's inbox (see `._inbox`); its session by number.
_INBOX = (
    """CREATE TABLE inbox (
        session INTEGER NOT NULL, position INTEGER NOT NULL, message_id TEXT NOT NULL,
        kind TEXT NOT NULL, payload TEXT NOT NULL, posted_at REAL NOT NULL,
        due_at REAL NOT NULL, applied_seq INTEGER,
        PRIMARY KEY (session, position), UNIQUE (session, message_id)) WITHOUT ROWID""",
    # A session's pending messages, in the order they are delivered.
    """CREATE INDEX inbox_pending ON inbox (session, due_at, position)
        WHERE applied_seq IS NULL""",
    # The parked sessions by wake time (only theirs is ever set).
    "CREATE INDEX sessions_waking ON sessions (status, wake_at) WHERE wake_at IS NOT NULL",
)
#: Version 8: the inbox is a rowid table, its payload last. In the version 5
#: table (``WITHOUT ROWID``, keyed by ``(session, position)``) each row held its
#: payload in the key's b-tree, so every seek compared whole rows, overflow pages
#: and all, and counting a session's pending messages read each one's payload to
#: reach ``applied_seq``: a post cost more the more its session held. Here the keys
#: are small indexes, and ``inbox_pending`` holds ``applied_seq``, so a post's
#: count and lookups read index pages only, whatever the payloads.
_INBOX_8 = (
    """CREATE TABLE inbox (
        session INTEGER NOT NULL, position INTEGER NOT NULL, message_id TEXT NOT NULL,
        kind TEXT NOT NULL, posted_at REAL NOT NULL, due_at REAL NOT NULL,
        applied_seq INTEGER, payload TEXT NOT NULL,
        PRIMARY KEY (session, position), UNIQUE (session, message_id))""",
    # A session's pending messages, in the order they are delivered (covering a count).
    """CREATE INDEX inbox_pending ON inbox (session, due_at, position, applied_seq)
        WHERE applied_seq IS NULL""",
)
_INBOX_COLUMNS = "session, position, message_id, kind, posted_at, due_at, applied_seq, payload"
_SHAPES = "CREATE TABLE shapes (id INTEGER PRIMARY KEY, shape TEXT NOT NULL UNIQUE)"
_EVENTS = """CREATE TABLE events (
    session INTEGER NOT NULL, seq INTEGER NOT NULL, shape INTEGER NOT NULL, patch NOT NULL,
    attempt INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL,
    error TEXT, io TEXT, digest INTEGER,
    PRIMARY KEY (session, seq)) WITHOUT ROWID"""
_SNAPSHOTS = """CREATE TABLE snapshots (
    session INTEGER NOT NULL, seq INTEGER NOT NULL, state NOT NULL,
    PRIMARY KEY (session, seq))"""
_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    _SESSIONS,
    _SHAPES,
    _EVENTS,
    _SNAPSHOTS,
    """CREATE TABLE leases (
        session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL)
        WITHOUT ROWID""",
    *_INBOX_8,
    _INBOX[2],  # sessions_waking
    _EFFECTS,
    _LIVE,
)
_META = (("application", "arkhon-rheo"), ("schema_version", str(SCHEMA_VERSION)))
#: Old event rows converted per statement while upgrading from version 3.
_UPGRADE_CHUNK = 2000


def _statements(*texts: str) -> Callable[[], Script[None]]:
    def run() -> Script[None]:
        for text in texts:
            yield _sql(text)

    return run


def _compact_rows() -> Script[None]:
    """Version 3 to 4: the sessions numbered, events and snapshots rewritten compact."""
    for table in ("sessions", "events", "snapshots"):
        yield _sql(f"ALTER TABLE {table} RENAME TO old_{table}")
    for statement in (_SESSIONS_4, _SHAPES, _EVENTS, _SNAPSHOTS):
        yield _sql(statement)
    # The old rowid orders the sessions (oldest first) and becomes their number.
    yield _sql(
        "INSERT INTO sessions (n, id, machine, status, last_seq, created_at, updated_at, "
        "parent, fingerprint) SELECT rowid, id, machine, status, last_seq, created_at, "
        "updated_at, parent, fingerprint FROM old_sessions ORDER BY rowid"
    )
    yield _sql(
        "INSERT INTO snapshots SELECT s.n, o.seq, o.state FROM old_snapshots o "
        "JOIN sessions s ON s.id = o.session_id"
    )
    after: tuple[Any, ...] = ("", -1)
    while True:
        rows = yield _sql(
            "SELECT session_id, seq, kind, stage, from_state, to_state, reads, writes, patch, "
            "attempt, started_at, finished_at, error, io, digest FROM old_events "
            "WHERE (session_id, seq) > (?, ?) ORDER BY session_id, seq LIMIT ?",
            (*after, _UPGRADE_CHUNK),
        )
        if not rows:
            break
        converted = [upgrade_row(row) for row in rows]
        yield (INSERT_SHAPE, [(shape,) for shape in {row[2] for row in converted}], True)
        yield (INSERT_EVENT, converted, True)
        after = (rows[-1][0], rows[-1][1])
    for table in ("events", "snapshots", "sessions"):
        yield _sql(f"DROP TABLE old_{table}")


#: ``PRAGMA secure_delete``'s values, by the number it reads back as.
_SECURE_DELETE = {0: "OFF", 1: "ON", 2: "FAST"}


def _rebuild_inbox() -> Script[None]:
    """Version 7 to 8: the inbox copied into a rowid table, payload last, in one statement."""
    for statement in ("DROP INDEX inbox_pending", "ALTER TABLE inbox RENAME TO old_inbox"):
        yield _sql(statement)
    for statement in _INBOX_8:
        yield _sql(statement)
    yield _sql(
        f"INSERT INTO inbox ({_INBOX_COLUMNS}) SELECT {_INBOX_COLUMNS} FROM old_inbox "
        "ORDER BY session, position"
    )
    # Every row of the old table is in the new one now, so zeroing its pages as they
    # are freed (what an SQLite built with SECURE_DELETE does, Debian's for one) would
    # hide nothing, and wrote the whole old inbox once more (to the log, then the file):
    # 200,000 messages of 1.5 KB took 10.1 s, 3.4 s without. ``FAST`` still clears what
    # is deleted from the pages that stay in use.
    ((secure,),) = yield _sql("PRAGMA secure_delete")
    yield _sql("PRAGMA secure_delete = FAST")
    yield _sql("DROP TABLE old_inbox")
    yield _sql(f"PRAGMA secure_delete = {_SECURE_DELETE.get(secure, 'ON')}")


#: What brings a file of each older version to the next one. Version 2 added
#: each event's state digest (events stored before it have none); version 3 each
#: session's machine fingerprint (sessions stored before it have none); version 4
#: made the rows compact (their data, digests included, is unchanged); version 5
#: gave each session an inbox (empty for the sessions stored before it); version 6
#: an effect ledger (empty for the sessions stored before it); version 7 the kinds
#: a parked session accepts (none for the sessions parked before it: any message
#: posted to one wakes it, as before) and the index workers claim sessions by;
#: version 8 rebuilt the inbox as a rowid table (its rows unchanged).
_UPGRADES: dict[int, Callable[[], Script[None]]] = {
    1: _statements("ALTER TABLE events ADD COLUMN digest INTEGER"),
    2: _statements("ALTER TABLE sessions ADD COLUMN fingerprint TEXT"),
    3: _compact_rows,
    4: _statements(
        "ALTER TABLE sessions ADD COLUMN waiting TEXT",
        "ALTER TABLE sessions ADD COLUMN wake_at REAL",
        *_INBOX,
    ),
    5: _statements(_EFFECTS),
    6: _statements("ALTER TABLE sessions ADD COLUMN accepts TEXT", _LIVE),
    7: _rebuild_inbox,
}


def _foreign(path: str, why: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"{path} is not an arkhon-rheo store: {why}. It was left untouched; choose another "
        "path for the store",
        location=path,
    )


#: What a path that is not a regular file is, by its mode.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(mode: int) -> str | None:
    """What a path of ``mode`` is when it is not a regular file ("a FIFO"...), else ``None``."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _regular(path: str, mode: int) -> None:
    """Refuse a path whose ``mode`` is not a regular file's."""
    kind = not_a_file(mode)
    if kind is not None:
        raise _foreign(path, f"it is {kind}, not a regular file")


def inspect_file(path: str) -> bool:
    """Read the file's header and say whether it is new; blocking file I/O.

    Args:
        path: The database file.

    Returns:
        ``True`` if the file is missing or empty (it will get the schema),
        ``False`` if it is one of our stores with the current schema.

    Raises:
        StoreCorrupt: It is not a regular file (checked before it is opened, and
            again on what was opened, without blocking), not an SQLite file,
            belongs to another application, or has another schema version.
        StoreError: It cannot be read.
    """
    try:
        _regular(path, os.stat(path).st_mode)
        # Non-blocking: were a FIFO swapped in since, opening it must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as file:
            _regular(path, os.fstat(fd).st_mode)
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


def _upgrade(path: str, found: int) -> Script[None]:
    """Bring an older schema up to this one, one version at a time, in one transaction.

    The write lock is tried once, without SQLite's busy handler: held by another
    connection, the script raises `StoreUpgrading` (``waited`` 0), and the store
    tries again, for as long as its ``upgrade_timeout`` says (see `SQLiteStore`).
    Whoever holds the lock of a file of an older version is most likely upgrading
    it, which may take longer than any ``busy_timeout``.
    """
    ((waits,),) = yield _sql("PRAGMA busy_timeout")
    yield _sql("PRAGMA busy_timeout = 0")
    try:
        yield _sql("BEGIN IMMEDIATE")
    except StoreError as exc:
        yield _sql(f"PRAGMA busy_timeout = {int(waits)}")
        if is_busy(exc):
            raise StoreUpgrading(location=path, version=found, waited=0.0) from exc.__cause__
        raise
    yield _sql(f"PRAGMA busy_timeout = {int(waits)}")
    try:
        version = (yield _sql("PRAGMA user_version"))[0][0]  # another process may have done it
        while version in _UPGRADES:
            yield from _UPGRADES[version]()
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
        yield from _upgrade(path, version)
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


def older_version(path: str) -> int | None:
    """The schema version of the store file ``path`` if it is older than `SCHEMA_VERSION`.

    Opening such a file upgrades it in place; a reader that must leave it as it
    is opens a copy instead. Only the header is read (blocking file I/O).

    Args:
        path: A store file that `inspect_file` found readable (not new).

    Returns:
        The file's version if this code would upgrade it, else ``None``.
    """
    with open(path, "rb") as file:
        header = file.read(100)
    version = int.from_bytes(header[60:64], "big", signed=True) if len(header) == 100 else None
    return version if version in _UPGRADES else None
