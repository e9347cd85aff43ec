"""Opening a driver by name: the thread driver, or aiosqlite's on asyncio (loaded only there)."""

from __future__ import annotations

from .._errors import ConfigurationError
from ._done import running_library
from ._driver import Driver, DriverName, ThreadDriver

__all__ = ["open_driver"]


async def open_driver(path: str, *, name: DriverName, busy_timeout: float) -> Driver:
    """Open the driver ``name`` (``"auto"`` is ``"thread"``).

    Args:
        path: The database file.
        name: Which driver.
        busy_timeout: How long a statement waits for another connection's lock, in
            seconds.

    Returns:
        The open driver.

    Raises:
        ConfigurationError: ``"aiosqlite"`` was asked for outside asyncio.
        StoreError: SQLite cannot open the file.
    """
    library = running_library()
    if name == "aiosqlite" and library != "asyncio":
        raise ConfigurationError(
            f"the aiosqlite driver runs on asyncio only, not {library}; use driver='thread' "
            "or 'auto'"
        )
    if name != "aiosqlite":
        return await ThreadDriver.open(path, busy_timeout=busy_timeout)
    from ._aiosqlite import AiosqliteDriver  # asyncio-only: loaded on asyncio only

    return await AiosqliteDriver.open(path, busy_timeout=busy_timeout)
