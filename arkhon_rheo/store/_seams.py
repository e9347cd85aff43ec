"""What the layers above `store` use of its insides: the package's own seams, not API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._postgres_conn import is_postgres_url as is_postgres_url
from ._postgres_conn import redacted_url as redacted_url
from ._schema import inspect_file as inspect_file
from ._schema import not_a_file as not_a_file
from ._schema import older_version as older_version

if TYPE_CHECKING:
    import os

    from ..protocols import Durability
    from ._postgres import PostgresStore
    from ._sqlite import SQLiteStore


def store_at(
    location: str | os.PathLike[str], *, durability: Durability | None = None
) -> SQLiteStore | PostgresStore:
    """The store at ``location``: a `PostgresStore` for a ``postgresql://`` URL, else a file's.

    Raises:
        ConfigurationError: psycopg is missing for a URL (``pip install
            "arkhon-rheo[postgres]"``), or an argument is malformed.
    """
    from ..protocols import Durability
    from ._postgres import PostgresStore
    from ._sqlite import SQLiteStore

    mode = Durability.BATCHED if durability is None else durability
    if is_postgres_url(location):
        return PostgresStore(str(location), durability=mode)
    return SQLiteStore(location, durability=mode)
