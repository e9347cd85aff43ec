"""Every byte a SQLite store file keeps, to check a secret is in none of them."""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


def _cells(path: Path) -> Iterator[bytes]:
    """Every cell of every table of the SQLite file, as bytes (zlib data inflated too)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    if isinstance(cell, bytes):
                        yield cell
                        with contextlib.suppress(zlib.error):
                            yield zlib.decompress(cell)
                    elif cell is not None:
                        yield str(cell).encode()


def stored_bytes(path: Path) -> bytes:
    """The file's bytes, its WAL's and shared memory's, and its cells' (read with sqlite3)."""
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    return b"\n".join([*(p.read_bytes() for p in files), *_cells(path)])
