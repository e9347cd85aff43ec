"""The SQL of the sessions' effect ledgers: what a batch reads of them, writes, and the read.

Scripts, as in `._sql`: a batch that begins or finishes effects reads the
ledger entries it touches (`known`) inside its write transaction, and writes
the planned rows there too (`write`), so an intent is committed in one
transaction with the rest of its batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import SessionNotFound
from ._effects import effect_keys

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._driver import Rows, Script, Statement
    from ._effects import EffectRow
    from ._plan import Plan, Request

__all__ = ["TABLE", "effects", "known", "write"]

#: Version 6: each session's effect ledger, its session by number (in the order
#: its entries were first begun: the table's rowid).
TABLE = """CREATE TABLE effects (
    session INTEGER NOT NULL, key TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    status TEXT NOT NULL, attempts INTEGER NOT NULL, started_at REAL NOT NULL,
    finished_at REAL, result TEXT, error TEXT,
    UNIQUE (session, key))"""
_CHUNK = 500  # keys per ``IN (...)`` query, well below SQLite's variable limit
_SESSION_NUMBER = "(SELECT n FROM sessions WHERE id = ?)"
#: An `EffectRow`: the session's id is given as the first parameter.
_COLUMNS = (
    "?, key, tool, arguments, status, attempts, started_at, finished_at, result, error FROM effects"
)
#: An entry's row, inserted or (keeping its place) updated.
UPSERT_EFFECT = (
    "INSERT INTO effects (session, key, tool, arguments, status, attempts, started_at, "
    f"finished_at, result, error) VALUES ({_SESSION_NUMBER}, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session, key) DO UPDATE SET tool = excluded.tool, "
    "arguments = excluded.arguments, status = excluded.status, attempts = excluded.attempts, "
    "started_at = excluded.started_at, finished_at = excluded.finished_at, "
    "result = excluded.result, error = excluded.error"
)


def _statement(text: str, params: Sequence[Any]) -> Statement:
    return (text, params, False)


def known(requests: list[Request]) -> Script[dict[tuple[str, str], EffectRow]]:
    """The ledger rows of the entries the batch's effect requests touch, by ``(session, key)``.

    A session that does not exist is left out (its requests are refused).
    """
    found: dict[tuple[str, str], EffectRow] = {}
    for sid, keys in sorted(effect_keys(requests).items()):
        rows = yield _statement("SELECT n FROM sessions WHERE id = ?", (sid,))
        if not rows:
            continue
        number = rows[0][0]
        wanted = sorted(set(keys))
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = yield _statement(
                f"SELECT {_COLUMNS} WHERE session = ? AND key IN ({marks})",
                (sid, number, *chunk),
            )
            found.update(((sid, row[1]), tuple(row)) for row in rows)
    return found


def write(result: Plan) -> Script[None]:
    """Write a batch's planned ledger rows."""
    rows = list(result.effects.values())
    if len(rows) == 1:
        yield (UPSERT_EFFECT, rows[0], False)
    elif rows:
        yield (UPSERT_EFFECT, rows, True)


def effects(session_id: str) -> Script[Rows]:
    """Every ledger row of the session, in the order first begun; raises `SessionNotFound`."""
    rows = yield _statement("SELECT n FROM sessions WHERE id = ?", (session_id,))
    if not rows:
        raise SessionNotFound(session_id=session_id)
    found = yield _statement(
        f"SELECT {_COLUMNS} WHERE session = ? ORDER BY rowid", (session_id, rows[0][0])
    )
    return found
