"""The aiosqlite driver: the one module of the package that is asyncio-specific.

aiosqlite runs the connection in its own thread and hands results back through
``asyncio`` futures, so it only works on asyncio; `._open.open_driver` loads
this module only there, and only when asked for: aiosqlite is an optional extra
(``pip install 'arkhon-rheo[aiosqlite]'``), checked by `._open.check_driver`.
Each statement of a script is one awaited call.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, TypeVar, cast

import aiosqlite
import anyio

from .._errors import StoreError
from ._driver import refused_value, translate

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ._driver import Rows, Script, Statement

__all__ = ["AiosqliteDriver"]

T = TypeVar("T")


class AiosqliteDriver:
    """One aiosqlite connection, in autocommit mode."""

    def __init__(self, connection: aiosqlite.Connection, location: str) -> None:
        self._connection: aiosqlite.Connection | None = connection
        self._location = location

    @classmethod
    async def open(cls, path: str, *, busy_timeout: float) -> AiosqliteDriver:
        """Connect to ``path``; ``busy_timeout``: how long to wait for another writer's lock.

        Raises:
            StoreError: SQLite cannot open the file.
        """
        try:
            connection = await aiosqlite.connect(path, timeout=busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise translate(exc, path) from exc
        return cls(connection, path)

    async def _execute(self, connection: aiosqlite.Connection, statement: Statement) -> Rows:
        sql, params, many = statement
        try:
            if many:
                await connection.executemany(sql, cast("Iterable[Sequence[Any]]", params))
                return []
            rows = await connection.execute_fetchall(sql, cast("Sequence[Any]", params))
        except sqlite3.Error as exc:
            raise translate(exc, self._location) from exc
        except Exception as exc:  # a value SQLite cannot take (an int past 64 bits, ...)
            raise refused_value(exc, self._location) from exc
        return cast("Rows", list(rows))  # plain tuples: no row_factory

    async def run(self, script: Script[T]) -> T:
        """Run the script, awaiting each statement on aiosqlite's thread.

        Raises:
            StoreError: A statement failed and the script did not handle it, or the
                connection is closed.
        """
        connection = self._connection
        if connection is None:
            raise StoreError(
                f"the connection to {self._location} is closed", location=self._location
            )
        try:
            statement = next(script)
            while True:
                try:
                    rows = await self._execute(connection, statement)
                except StoreError as exc:
                    statement = script.throw(exc)
                else:
                    statement = script.send(rows)
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def close(self) -> None:
        """Close the connection and stop aiosqlite's thread, even when cancelled."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with anyio.CancelScope(shield=True):
                await connection.close()
