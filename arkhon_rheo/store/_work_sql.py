"""The SQL of the work queue: claiming the sessions that have something to do.

A script, as in `._sql`, run in a write transaction (``BEGIN IMMEDIATE``: the
file's write lock), so the sessions it finds unleased are leased before any
other process can look: two workers never claim one session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._sql import UPSERT_LEASE, many, sql

if TYPE_CHECKING:
    from ._driver import Rows, Script

__all__ = ["claim"]

_COLUMNS = (
    "id, machine, status, last_seq, created_at, updated_at, parent, fingerprint, waiting, wake_at"
)


def claim(
    owner: str,
    machines: tuple[str, ...],
    limit: int,
    *,
    expires_at: float,
    leased_at: float,
    now: float,
) -> Script[Rows]:
    """Lease up to ``limit`` sessions with something to do to ``owner``; their rows.

    Something to do: status ``"running"``, or ``"waiting"`` with a ``wake_at`` at
    or before ``now``, with no lease unexpired at ``leased_at`` (the store's clock),
    oldest first. Uses the ``sessions_live`` index (schema version 7).
    """
    if not machines or limit <= 0:
        return []
    marks = ",".join("?" * len(machines))
    rows: Rows = yield sql(
        f"SELECT {_COLUMNS} FROM sessions WHERE status IN ('running', 'waiting') "
        f"AND machine IN ({marks}) AND (status = 'running' OR wake_at <= ?) "
        "AND NOT EXISTS (SELECT 1 FROM leases WHERE leases.session_id = sessions.id "
        "AND leases.expires_at > ?) ORDER BY n LIMIT ?",
        (*machines, now, leased_at, limit),
    )
    if rows:
        yield many(UPSERT_LEASE, [(row[0], owner, expires_at) for row in rows])
    return rows
