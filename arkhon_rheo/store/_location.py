"""A store's location, as a reader sees it before opening it: a file's path, or a PostgreSQL URL.

`StoreLocation` opens the store there (`StoreLocation.open`: a `PostgresStore`
for a ``postgresql://`` URL, else a `SQLiteStore`), and answers first, without
opening anything or writing a byte, what a command that only reads asks: how
to show the location (a URL's password masked, and registered as a secret),
what is at a path that is not a regular file, whether the file is new (missing
or empty) and the schema version of one this code would upgrade on opening.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._postgres_conn import is_postgres_url, redacted_url
from ._schema import inspect_file, not_a_file, older_version

if TYPE_CHECKING:
    from ..protocols import Durability
    from ._postgres import PostgresStore
    from ._sqlite import SQLiteStore

__all__ = ["StoreLocation"]


class StoreLocation:
    """Where a store is: ``location``, a file's path or a ``postgresql://`` URL.

    Attributes:
        location: As given (a path as a str).
        url: Whether it is a ``postgresql://`` (or ``postgres://``) URL.
        shown: As it may be shown: a URL's password masked (and registered as
            a secret, so that no error or log shows it), a path as it is.
    """

    __slots__ = ("location", "shown", "url")

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        self.url = is_postgres_url(self.location)
        self.shown = redacted_url(self.location) if self.url else self.location

    def open(self, *, durability: Durability | None = None) -> SQLiteStore | PostgresStore:
        """The store there, not entered yet: a `PostgresStore` for a URL, else a file's.

        Raises:
            ConfigurationError: psycopg is missing for a URL (``pip install
                "arkhon-rheo[postgres]"``), or an argument is malformed.
        """
        from ..protocols import Durability
        from ._postgres import PostgresStore
        from ._sqlite import SQLiteStore

        mode = Durability.BATCHED if durability is None else durability
        if self.url:
            return PostgresStore(self.location, durability=mode)
        return SQLiteStore(self.location, durability=mode)

    def not_a_file(self) -> str | None:
        """What is at the path if it is not a regular file (``"a FIFO"``...); else ``None``.

        ``None`` too for a URL, and for a path with nothing there yet.

        Raises:
            OSError: If the path cannot be looked at (its folder unreadable...).
        """
        if self.url:
            return None
        try:
            mode = os.stat(self.location).st_mode
        except FileNotFoundError:
            return None
        return not_a_file(mode)

    def is_new(self) -> bool:
        """Whether the file is missing or empty (opening it would write a new store); blocking.

        Only its header is read. ``False`` for a URL.

        Raises:
            StoreCorrupt: If it is not a regular file, not an SQLite file,
                another application's, or of a schema version this code cannot read.
            StoreError: If it cannot be read.
        """
        return not self.url and inspect_file(self.location)

    def older_version(self) -> int | None:
        """The file's schema version if opening it would upgrade it, else ``None``; blocking.

        Only its header is read; call it on a file `is_new` found readable.
        ``None`` for a URL (the server's schema is upgraded by whoever opens it).
        """
        return None if self.url else older_version(self.location)
