"""The embedded default store, ``./arkhon-rheo.db``, and the one log line that says so.

``AgentSystem()`` with neither ``store`` nor ``path`` keeps its sessions in a
SQLite file in the working directory: what makes a first program durable
with no set-up. So that the file does not appear unexplained, the first such
system of a process logs, once per file, at info, where the store is and how to
choose another.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._log import get_logger

if TYPE_CHECKING:
    from ..protocols import Store

__all__ = ["DEFAULT_PATH", "announce_default_store"]

#: The SQLite file an `AgentSystem` keeps its sessions in by default.
DEFAULT_PATH = "arkhon-rheo.db"

_logger = get_logger("arkhon_rheo.system")
#: The default files announced already in this process (by absolute path).
_announced: set[str] = set()


def announce_default_store(store: Store | str | None, path: str | os.PathLike[str] | None) -> None:
    """Log, once per file and process, that a system keeps its sessions in the default file.

    Nothing is logged when the system was given a store, or a path of its own.
    """
    if store is not None or path is None or os.fspath(path) != DEFAULT_PATH:
        return
    where = os.path.abspath(DEFAULT_PATH)
    if where in _announced:
        return
    _announced.add(where)
    _logger.info(
        "default_store",
        path=where,
        hint="sessions are kept in this SQLite file in the working directory; "
        "AgentSystem(path=...) names another file or a postgresql:// URL, store=... "
        "takes a store of your own, path=None keeps sessions in memory only",
    )
