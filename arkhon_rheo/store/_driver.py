"""How `SQLiteStore` runs its SQL: scripts, and the two drivers that run them.

The SQL layer (`._sql`) is written once, as *scripts*: generators that yield
statements and receive their rows, with no I/O of their own. A driver runs a
script on its connection:

* ``"thread"`` (what ``"auto"`` picks, on asyncio and trio): stdlib `sqlite3` on
  one dedicated connection; `SQLiteStore` hands it to its thread writer
  (`._thread_writer`), whose own thread runs each script whole
  (`ThreadDriver.run_now`). `ThreadDriver.run` (one `anyio.to_thread.run_sync`
  call per script) remains for callers without that thread.
* ``"aiosqlite"`` (asyncio only, on request, an optional extra:
  ``pip install 'arkhon-rheo[aiosqlite]'``): each statement is awaited on
  aiosqlite's connection. aiosqlite is asyncio-only (each call awaits an
  ``asyncio`` future; under trio it fails with "trio.run received unrecognized
  yield message"), so it lives in its own adapter module, `._aiosqlite`, loaded
  only when asked for.

`._open.open_driver` picks one of them by name.

Why the thread driver is the one writer (``"auto"``, on asyncio too): it is the
only one that runs on trio, and a transaction costs one thread hop there,
against one per statement (five to seven) on aiosqlite, whose public API has no
way to run a transaction's statements in one hop (``bench/store.py`` compares
them; the docs' Performance page, "One SQLite writer", quotes the figures).

Every `sqlite3` error is translated here into a `StoreError` (`StoreCorrupt`
when SQLite says the file is damaged or is not a database) and thrown into the
script, which rolls its transaction back.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import anyio
import anyio.to_thread

from .._errors import StoreCorrupt, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "ROWCOUNT",
    "ROWCOUNT_MANY",
    "Driver",
    "DriverName",
    "Rows",
    "Script",
    "Statement",
    "ThreadDriver",
    "is_busy",
    "step",
    "translate",
]

T = TypeVar("T")

#: Which driver a `SQLiteStore` uses; ``"auto"`` is ``"thread"``.
DriverName = Literal["auto", "aiosqlite", "thread"]
#: ``(sql, parameters, mode)``. Modes: ``False``: run once, the rows come back;
#: ``True``: run once per row of ``parameters``, no rows come back; `ROWCOUNT` and
#: `ROWCOUNT_MANY`: the same, and ``[(rows changed,)]`` comes back.
Statement = tuple[str, "Sequence[Any] | Iterable[Sequence[Any]]", int]
ROWCOUNT = 2
ROWCOUNT_MANY = 3
Rows = list[tuple[Any, ...]]
#: A generator that yields statements, receives their rows, and returns a result.
Script = Generator[Statement, Rows, T]


class Driver(Protocol):
    """One SQLite connection, in autocommit mode (transactions are explicit SQL)."""

    async def run(self, script: Script[T]) -> T:
        """Run ``script`` to its end and return its result.

        Raises:
            StoreError: A statement failed and the script did not handle it.
        """
        ...

    async def close(self) -> None:
        """Close the connection (a no-op if closed)."""
        ...


_DAMAGED = ("malformed", "not a database", "file is encrypted", "disk image")


def translate(exc: sqlite3.Error, location: str) -> StoreError:
    """The `StoreError` to raise for a `sqlite3` error.

    Args:
        exc: What `sqlite3` raised.
        location: The database file.

    Returns:
        `StoreCorrupt` if SQLite says the file is damaged or not a database, else
        `StoreError`; either names the file.
    """
    text = str(exc)
    if any(marker in text for marker in _DAMAGED):
        error: StoreError = StoreCorrupt(
            f"{location} is damaged or not an SQLite database ({text}); it was left "
            "untouched: restore it from a backup or move it aside",
            location=location,
        )
    else:
        error = StoreError(f"SQLite failed on {location}: {text}", location=location)
    error.__cause__ = exc
    return error


#: SQLite's primary result codes for a lock another connection holds.
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_busy(error: StoreError) -> bool:
    """Whether ``error`` (from `translate`) is SQLite's: another connection holds a lock."""
    cause = error.__cause__
    code = getattr(cause, "sqlite_errorcode", None)
    return isinstance(cause, sqlite3.Error) and code is not None and code & 0xFF in _BUSY_CODES


def refused_value(exc: Exception, location: str) -> StoreError:
    """The `StoreError` for a statement SQLite could not even take (a bad value)."""
    error = StoreError(
        f"SQLite on {location} refused a value: {exc!r}; store JSON-friendly values "
        "(integers within 64 bits)",
        location=location,
    )
    error.__cause__ = exc
    return error


def step(script: Script[T], statement: Statement, execute: Callable[[Statement], Rows]) -> T:
    """Run ``script`` synchronously from ``statement`` on, with ``execute``.

    Args:
        script: The script, already advanced to ``statement``.
        statement: Its first statement.
        execute: Runs one statement and returns its rows.

    Returns:
        The script's result.
    """
    while True:
        try:
            rows = execute(statement)
        except StoreError as exc:
            statement = script.throw(exc)
        else:
            try:
                statement = script.send(rows)
            except StopIteration as stop:
                result: T = stop.value
                return result


def connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """Open a connection in autocommit mode, usable from any one thread at a time."""
    return sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )


class ThreadDriver:
    """stdlib `sqlite3` through `anyio.to_thread.run_sync`: one thread hop per script."""

    def __init__(self, connection: sqlite3.Connection, location: str) -> None:
        self._connection: sqlite3.Connection | None = connection
        self._location = location
        self._limiter = anyio.CapacityLimiter(1)
        # Held by the worker thread for a whole script: even a caller whose await
        # was abandoned (a native asyncio cancellation) leaves its script the
        # connection until it ends, and closing waits for it.
        self._lock = threading.Lock()

    @classmethod
    async def open(cls, path: str, *, busy_timeout: float) -> ThreadDriver:
        """Connect to ``path``; ``busy_timeout``: how long to wait for another writer's lock.

        Raises:
            StoreError: SQLite cannot open the file.
        """
        try:
            connection = await anyio.to_thread.run_sync(connect, path, busy_timeout)
        except sqlite3.Error as exc:
            raise translate(exc, path) from exc
        return cls(connection, path)

    def _execute(self, connection: sqlite3.Connection, statement: Statement) -> Rows:
        sql, params, mode = statement
        try:
            if mode & 1:
                cursor = connection.executemany(sql, params)
            else:
                cursor = connection.execute(sql, params)  # type: ignore[arg-type]
            if mode & 2:
                return [(cursor.rowcount,)]
            return [] if mode else cursor.fetchall()
        except sqlite3.Error as exc:
            raise translate(exc, self._location) from exc
        except Exception as exc:  # a value SQLite cannot take (an int past 64 bits, ...)
            raise refused_value(exc, self._location) from exc

    def run_now(self, script: Script[T]) -> T:
        """Run the whole script on the calling thread (the thread writer's own).

        Raises:
            StoreError: A statement failed and the script did not handle it, or the
                connection is closed.
        """
        with self._lock:
            connection = self._connection
            if connection is None:
                raise StoreError(
                    f"the connection to {self._location} is closed", location=self._location
                )
            try:
                first = next(script)
            except StopIteration as stop:
                result: T = stop.value
                return result
            return step(script, first, functools.partial(self._execute, connection))

    def close_now(self) -> None:
        """Close the connection on the calling thread, once no script runs on it."""
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    async def run(self, script: Script[T]) -> T:
        """Run the whole script in the connection's worker thread.

        Raises:
            StoreError: A statement failed and the script did not handle it, or the
                connection is closed.
        """
        if self._connection is None:
            raise StoreError(
                f"the connection to {self._location} is closed", location=self._location
            )
        return await anyio.to_thread.run_sync(self.run_now, script, limiter=self._limiter)

    async def close(self) -> None:
        """Close the connection once no script runs on it, even when cancelled."""
        if self._connection is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.close_now, limiter=self._limiter)
