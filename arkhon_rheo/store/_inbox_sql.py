"""The SQL of the sessions' inboxes: what a batch reads of them, writes, and the reads.

Scripts, as in `._sql`: a batch that posts, parks or applies a message reads
what `._inbox` needs to know of each inbox it touches (`known`) inside its write
transaction, and writes the planned rows there too (`write`), so a post, a park
or a step's commit is one transaction with the rest of its batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import SessionNotFound
from ._plan import Inbox, posted_ids, reads_pending, touches_inbox

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ._driver import Rows, Script, Statement
    from ._plan import Plan, Request

__all__ = ["known", "messages", "pending", "write"]

_CHUNK = 500  # message ids per ``IN (...)`` query, well below SQLite's variable limit
_SESSION_NUMBER = "(SELECT n FROM sessions WHERE id = ?)"
#: A `MessageRow`: the session's id is given as the first parameter.
_COLUMNS = "?, message_id, position, kind, payload, posted_at, due_at, applied_seq FROM inbox"
_PENDING = f"SELECT {_COLUMNS} WHERE session = ? AND applied_seq IS NULL"
#: How many messages of a session are pending (from the ``inbox_pending`` index alone).
_COUNT_PENDING = "SELECT count(*) FROM inbox WHERE session = ? AND applied_seq IS NULL"
INSERT_MESSAGE = (
    "INSERT INTO inbox (session, message_id, position, kind, payload, posted_at, due_at, "
    f"applied_seq) VALUES ({_SESSION_NUMBER}, ?, ?, ?, ?, ?, ?, ?)"
)
MARK_APPLIED = (
    f"UPDATE inbox SET applied_seq = ? WHERE session = {_SESSION_NUMBER} AND position = ? "
    "AND applied_seq IS NULL"
)
SET_WAITING = "UPDATE sessions SET waiting = ?, wake_at = ?, accepts = ? WHERE id = ?"
#: A message posted to a waiting session that parked accepting its kind brings the
#: session's wake time forward to its own (one parked before schema version 7 has
#: no kinds stored: any message does).
NUDGE = (
    "UPDATE sessions SET wake_at = min(coalesce(wake_at, ?), ?) WHERE id = ? "
    "AND status = 'waiting' AND (accepts IS NULL OR EXISTS "
    "(SELECT 1 FROM json_each(sessions.accepts) WHERE json_each.value = ?))"
)


def _statement(text: str, params: Sequence[Any]) -> Statement:
    return (text, params, False)


def _many(text: str, rows: list[Any]) -> Statement:
    # One row: a plain statement (no ``executemany`` set-up).
    return (text, rows[0], False) if len(rows) == 1 else (text, rows, True)


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def known(requests: list[Request]) -> Script[dict[str, Inbox]]:
    """What the batch needs to know of each inbox it reads or writes (see `Inbox`).

    A session that does not exist (yet) is left out: its inbox is empty.
    """
    asked: dict[str, list[str]] = {}
    full: set[str] = set()  # the sessions whose pending rows the batch needs, not a count
    for request in requests:
        if touches_inbox(request):
            asked.setdefault(request.session_id, []).extend(posted_ids(request))
            if reads_pending(request):
                full.add(request.session_id)
    found: dict[str, Inbox] = {}
    for sid in sorted(asked):
        rows = yield _statement("SELECT n FROM sessions WHERE id = ?", (sid,))
        if not rows:
            continue
        number = rows[0][0]
        if sid in full:
            pending: Rows = yield _statement(_PENDING, (sid, number))
            box = Inbox(0, {row[2]: row for row in pending}, {})
        else:  # posts only: the capacity check counts, reading no payload
            count = yield _statement(_COUNT_PENDING, (number,))
            box = Inbox(0, {}, {}, count[0][0])
        wanted = sorted(set(asked[sid]))
        if wanted:
            top = yield _statement(
                "SELECT coalesce(max(position), 0) FROM inbox WHERE session = ?", (number,)
            )
            box.last_position = top[0][0]
            for chunk in _chunks(wanted):
                marks = ",".join("?" * len(chunk))
                rows = yield _statement(
                    f"SELECT {_COLUMNS} WHERE session = ? AND message_id IN ({marks})",
                    (sid, number, *chunk),
                )
                box.ids.update((row[1], row) for row in rows)
        found[sid] = box
    return found


def write(result: Plan) -> Script[None]:
    """Write a batch's planned inbox rows and what its sessions wait for.

    Run after the sessions' rows are written (``waits`` follow their statuses).
    """
    if result.waits:
        yield _many(SET_WAITING, [(*wait, sid) for sid, wait in result.waits.items()])
    if result.nudges:
        nudges = [
            (due, due, sid, kind)
            for sid, kinds in result.nudges.items()
            for kind, due in kinds.items()
        ]
        yield _many(NUDGE, nudges)
    if result.inbox:
        yield _many(INSERT_MESSAGE, result.inbox)
    if result.applied:
        yield _many(MARK_APPLIED, result.applied)


def _number(session_id: str) -> Script[int]:
    rows = yield _statement("SELECT n FROM sessions WHERE id = ?", (session_id,))
    if not rows:
        raise SessionNotFound(session_id=session_id)
    number: int = rows[0][0]
    return number


def pending(session_id: str) -> Script[Rows]:
    """The session's pending message rows, by ``(due_at, position)``; raises `SessionNotFound`."""
    number = yield from _number(session_id)
    rows = yield _statement(f"{_PENDING} ORDER BY due_at, position", (session_id, number))
    return rows


def messages(session_id: str) -> Script[Rows]:
    """Every message row of the session, by position; raises `SessionNotFound`."""
    number = yield from _number(session_id)
    rows = yield _statement(
        f"SELECT {_COLUMNS} WHERE session = ? ORDER BY position", (session_id, number)
    )
    return rows
