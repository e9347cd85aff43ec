"""Opening a driver by name: the thread driver, or aiosqlite's (an optional extra) on asyncio."""

from __future__ import annotations

import importlib.util

from .._errors import ConfigurationError
from ._done import running_library
from ._driver import Driver, DriverName, ThreadDriver

__all__ = ["check_driver", "open_driver"]

#: What to install for ``driver="aiosqlite"``: aiosqlite is not a core dependency.
AIOSQLITE_EXTRA = "pip install 'arkhon-rheo[aiosqlite]'"


def check_driver(name: str) -> None:
    """Refuse a driver name that is unknown, or whose package is not installed.

    Raises:
        ConfigurationError: ``name`` is not ``"auto"``, ``"thread"`` or
            ``"aiosqlite"``, or it is ``"aiosqlite"`` and the aiosqlite package is
            not installed (it is an optional extra: the message says what to install).
    """
    if name not in ("auto", "aiosqlite", "thread"):
        raise ConfigurationError(f"driver must be 'auto', 'aiosqlite' or 'thread', not {name!r}")
    if name == "aiosqlite" and importlib.util.find_spec("aiosqlite") is None:
        raise ConfigurationError(
            "driver='aiosqlite' needs the aiosqlite package, an optional extra: "
            f"{AIOSQLITE_EXTRA} (or use the default driver, 'auto')"
        )


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
        ConfigurationError: ``"aiosqlite"`` was asked for outside asyncio, or
            without the aiosqlite package installed.
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
    check_driver(name)
    from ._aiosqlite import AiosqliteDriver  # asyncio-only, an optional extra: loaded on demand

    return await AiosqliteDriver.open(path, busy_timeout=busy_timeout)
