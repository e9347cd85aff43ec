"""The SQL of `PostgresStore`: a batch's transaction, and the reads.

Scripts, as in `._sql` (``%s`` placeholders). A batch (`write_batch`) locks
the rows of every session it touches (``SELECT ... FOR UPDATE``, in id order,
so two processes' batches never deadlock on each other), reads what `plan`
needs, plans with the same function as the other stores, and writes the rows:
the check and the insert are one transaction, so a stale lease holder's
append (fencing) or a duplicate event number is refused against the rows as
they stand. Leases are stamped by PostgreSQL's clock, and each lease row keeps
a fencing token that grows by one whenever a new owner takes it.

Round trips are what a batch costs (the writer thread waits on each one, and
the whole batch waits on the writer): a batch of plain appends takes two. The
first sends ``BEGIN`` and one statement that locks the sessions and their
leases and reads the clock; the second sends every write (one multi-row
statement per table, its columns as arrays) and the ``NOTIFY`` with the
``COMMIT``, in psycopg's pipeline mode (`transaction`, `later`). Batches that
post messages or touch effects read those rows in between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import SessionNotFound, StoreError
from ._effects import effect_keys
from ._plan import (
    Acquire,
    Append,
    Create,
    Inbox,
    Park,
    Plan,
    Release,
    Request,
    SetStatus,
    plan,
    posted_ids,
    reads_pending,
    touches_inbox,
)
from ._postgres_conn import notify_payloads, pipeline, sessions_channel

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._driver import Rows, Script, Statement
    from ._plan import Lease

__all__ = ["NOW", "SESSION_COLUMNS", "consistent", "later", "transaction", "write_batch"]

#: PostgreSQL's clock, in seconds since the epoch.
NOW = "extract(epoch from clock_timestamp())::double precision"
SESSION_COLUMNS = (
    "id, machine, status, last_seq, created_at, updated_at, parent, fingerprint, waiting, wake_at"
)
_N = "(SELECT n FROM sessions WHERE id = %s)"
#: The multi-row writes: one statement (one execution) for all of a batch's rows, each
#: column an array (see `_columns`).
_INSERT_SESSION = (
    f"INSERT INTO sessions ({SESSION_COLUMNS}) SELECT * FROM unnest(%b::text[], %b::text[], "
    "%b::text[], %b::bigint[], %b::double precision[], %b::double precision[], %b::text[], "
    "%b::text[], %b::text[], %b::double precision[])"
)
_UPDATE_SESSION = (
    "UPDATE sessions s SET last_seq = u.last, status = u.status, updated_at = %s "
    "FROM unnest(%b::text[], %b::bigint[], %b::text[]) AS u(id, last, status) WHERE s.id = u.id"
)
_INSERT_SHAPE = (
    "INSERT INTO shapes (shape) SELECT unnest(%b::text[]) ON CONFLICT (shape) DO NOTHING"
)
#: Every session and shape an event names exists (planned, or written before it).
_INSERT_EVENT = (
    "INSERT INTO events SELECT s.n, u.seq, h.id, u.patch, u.attempt, u.started_at, "
    "u.finished_at, u.error, u.io, u.digest FROM unnest(%b::text[], %b::bigint[], %b::text[], "
    "%b::bytea[], %b::integer[], %b::double precision[], %b::double precision[], %b::text[], "
    "%b::text[], %b::bigint[]) AS u(session_id, seq, shape, patch, attempt, started_at, "
    "finished_at, error, io, digest) "
    "JOIN sessions s ON s.id = u.session_id JOIN shapes h ON h.shape = u.shape"
)
_UPSERT_LEASE = (
    "INSERT INTO leases SELECT * FROM unnest(%b::text[], %b::text[], %b::double precision[], "
    "%b::bigint[]) ON CONFLICT (session_id) DO UPDATE "
    "SET owner = excluded.owner, expires_at = excluded.expires_at, token = excluded.token"
)
_INSERT_SNAPSHOT = (
    f"INSERT INTO snapshots VALUES ({_N}, %s, %s, %s) ON CONFLICT (session, seq) "
    "DO UPDATE SET state = excluded.state, zipped = excluded.zipped"
)
_SET_WAITING = "UPDATE sessions SET waiting = %s, wake_at = %s, accepts = %s WHERE id = %s"
#: A message posted to a waiting session that takes its kind brings its wake time forward.
_NUDGE = (
    "UPDATE sessions SET wake_at = least(coalesce(wake_at, %s), %s) WHERE id = %s "
    "AND status = 'waiting' AND (accepts IS NULL OR %s = ANY(accepts))"
)
_INSERT_MESSAGE = (
    "INSERT INTO inbox (session, message_id, position, kind, payload, posted_at, due_at, "
    f"applied_seq) VALUES ({_N}, %s, %s, %s, %s, %s, %s, %s)"
)
_MARK_APPLIED = (
    f"UPDATE inbox SET applied_seq = %s WHERE session = {_N} AND position = %s "
    "AND applied_seq IS NULL"
)
_UPSERT_EFFECT = (
    "INSERT INTO effects (session, key, tool, arguments, status, attempts, started_at, "
    f"finished_at, result, error) VALUES ({_N}, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (session, key) DO UPDATE SET tool = excluded.tool, "
    "arguments = excluded.arguments, status = excluded.status, attempts = excluded.attempts, "
    "started_at = excluded.started_at, finished_at = excluded.finished_at, "
    "result = excluded.result, error = excluded.error"
)
_MESSAGE_COLUMNS = "message_id, position, kind, payload, posted_at, due_at, applied_seq"


def sql(text: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Statement:
    """One statement, run once."""
    return (text, params, False)


#: A `Statement` mode flag: a write sent later (see `later`).
LATER = 16
_BEGIN = sql("BEGIN")
_COMMIT = sql("COMMIT")


def _rows(text: str, rows: list[Any]) -> Statement:
    """A write of ``rows``, sent later (see `later`): run once per row."""
    return (text, rows[0], LATER) if len(rows) == 1 else (text, rows, LATER | True)


def _columns(text: str, rows: Sequence[Sequence[Any]], *first: Any) -> Statement:
    """A write of ``rows`` in one execution, sent later: ``first``, then one array per column.

    The arrays go in PostgreSQL's binary format (``%b`` in ``text``: several times
    cheaper to make than text arrays); a column of numbers where some are floats is
    all floats (an array is of one type).
    """
    return (text, [*first, *map(_column, zip(*rows, strict=True))], LATER)


def _column(values: tuple[Any, ...]) -> list[Any]:
    if any(type(value) is float for value in values):
        return [None if value is None else float(value) for value in values]
    return list(values)


def later(text: str, params: Any = ()) -> Statement:
    """A write whose result nobody reads: in a `transaction`, sent with the next statement.

    Its error (if any) is raised where the statement it rides with is, or at
    the ``COMMIT``; either way the transaction is rolled back whole.
    """
    return (text, params, LATER)


def transaction(body: Script[Any]) -> Script[Any]:
    """Run ``body`` in a transaction: committed if it returns, rolled back if anything raises.

    In as few round trips as PostgreSQL allows: ``BEGIN`` rides with the
    body's first statement, and the writes it defers (`later`) with its next
    statement or the ``COMMIT`` (psycopg's pipeline mode).
    """
    try:
        statement = next(body)
    except StopIteration as stop:  # no statement at all
        return stop.value
    waiting: list[Statement] = [_BEGIN]
    try:
        while True:
            if statement[2] & LATER:
                waiting.append((statement[0], statement[1], statement[2] & ~LATER))
                rows: Rows = []
            else:
                try:
                    rows = yield _with(waiting, statement)
                except StoreError as exc:
                    waiting = []
                    statement = body.throw(exc)
                    continue
                waiting = []
            statement = body.send(rows)
    except StopIteration as stop:
        result = stop.value
    except GeneratorExit:
        raise
    except BaseException as failure:
        # No COMMIT was sent: nothing of this transaction is stored. A connection that
        # dropped is told by the failure (``before_commit``), so the writer may run the
        # whole transaction again on a new one, as it does a serialization conflict.
        if isinstance(failure, StoreError):
            failure.before_commit = True  # type: ignore[attr-defined]
        try:
            yield sql("ROLLBACK")
        except StoreError:
            if not isinstance(failure, StoreError):
                raise
            # The connection is gone, and the server rolls the transaction back itself:
            # the failure that stopped it says more than the ROLLBACK's.
        raise
    try:
        yield _with(waiting, _COMMIT)
    except GeneratorExit:
        raise
    except BaseException:
        yield sql("ROLLBACK")
        raise
    return result


_READ = sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")


def consistent(*statements: Statement) -> Script[list[Rows]]:
    """Run read-only ``statements`` in one round trip, all on one snapshot of the database.

    Run it outside `transaction` (it is its own). Returns each statement's rows.
    """
    try:
        found: Any = yield pipeline([_READ, *statements, _COMMIT], every=True)
    except StoreError:
        yield sql("ROLLBACK")  # the statements after the one that failed were skipped
        raise
    every: list[Rows] = found[1:-1]  # (a `PIPELINE_EVERY` statement's rows: a list of rows)
    return every


def _with(waiting: list[Statement], statement: Statement) -> Statement:
    return pipeline([*waiting, statement]) if waiting else statement


def _leased(requests: list[Request]) -> list[str]:
    return sorted(
        {
            r.session_id
            for r in requests
            if isinstance(r, Acquire | Release)
            or (isinstance(r, Park | Append) and r.owner is not None)
        }
    )


#: The batch's sessions and leases, locked (in that order, each by id), and the time
#: after: one statement, one round trip. Rows ``(0, id, last_seq, status, n, None)``,
#: ``(1, session_id, token, owner, None, expires_at)`` and ``(2, ..., now)``.
_CURRENT = f"""SELECT 0, id, last_seq, status, n, NULL::double precision FROM (
    SELECT id, last_seq, status, n FROM sessions WHERE id = ANY(%s) ORDER BY id FOR UPDATE) s
UNION ALL SELECT 1, session_id, token, owner, NULL, expires_at FROM (
    SELECT session_id, owner, expires_at, token FROM leases
    WHERE session_id = ANY(%s) ORDER BY session_id FOR UPDATE) l
UNION ALL SELECT 2, NULL, NULL, NULL, NULL, {NOW}"""


def _current(
    requests: list[Request],
) -> Script[
    tuple[dict[str, tuple[int, str]], dict[str, int], dict[str, Lease], dict[str, Any], float]
]:
    """Lock and read the batch's sessions and leases: ``(known, numbers, leases, tokens, now)``.

    ``now`` is PostgreSQL's clock once the locks are held.
    """
    ids = sorted({r.session_id for r in requests if r.session_id})
    rows = yield sql(_CURRENT, (ids, _leased(requests)))
    known: dict[str, tuple[int, str]] = {}
    numbers: dict[str, int] = {}
    leases: dict[str, Lease] = {}
    tokens: dict[str, Any] = {}
    db_now = 0.0
    for kind, sid, value, text, n, at in rows:
        if kind == 0:
            known[sid] = (value, text)
            numbers[sid] = n
        elif kind == 1:
            tokens[sid] = (text, value)
            if text is not None:
                leases[sid] = (text, at)
        else:
            db_now = at
    return known, numbers, leases, tokens, db_now


def _inboxes(requests: list[Request], numbers: dict[str, int]) -> Script[dict[str, Inbox]]:
    asked: dict[str, list[str]] = {}
    full: set[str] = set()  # the sessions whose pending rows the batch needs, not a count
    for request in requests:
        if touches_inbox(request):
            asked.setdefault(request.session_id, []).extend(posted_ids(request))
            if reads_pending(request):
                full.add(request.session_id)
    found: dict[str, Inbox] = {}
    for sid in sorted(asked):
        if (number := numbers.get(sid)) is None:
            continue
        if sid in full:
            pending: Rows = yield sql(
                f"SELECT %s, {_MESSAGE_COLUMNS} FROM inbox "
                "WHERE session = %s AND applied_seq IS NULL",
                (sid, number),
            )
            box = Inbox(0, {row[2]: tuple(row) for row in pending}, {})
        else:  # posts only: the capacity check counts, reading no payload
            count = yield sql(
                "SELECT count(*) FROM inbox WHERE session = %s AND applied_seq IS NULL", (number,)
            )
            box = Inbox(0, {}, {}, count[0][0])
        if wanted := sorted(set(asked[sid])):
            top = yield sql(
                "SELECT coalesce(max(position), 0) FROM inbox WHERE session = %s", (number,)
            )
            box.last_position = top[0][0]
            rows = yield sql(
                f"SELECT %s, {_MESSAGE_COLUMNS} FROM inbox WHERE session = %s "
                "AND message_id = ANY(%s)",
                (sid, number, wanted),
            )
            box.ids.update((row[1], tuple(row)) for row in rows)
        found[sid] = box
    return found


def _ledger(requests: list[Request], numbers: dict[str, int]) -> Script[dict[Any, Any]]:
    found: dict[Any, Any] = {}
    for sid, keys in sorted(effect_keys(requests).items()):
        if (number := numbers.get(sid)) is None:
            continue
        rows = yield sql(
            "SELECT %s, key, tool, arguments, status, attempts, started_at, finished_at, "
            "result, error FROM effects WHERE session = %s AND key = ANY(%s)",
            (sid, number, sorted(set(keys))),
        )
        found.update(((sid, row[1]), tuple(row)) for row in rows)
    return found


def _tokens(
    requests: list[Request], result: Plan, tokens: dict[str, Any]
) -> dict[str, tuple[str | None, int]]:
    """Each lease's owner and fencing token in turn; set each `Acquire`'s result to its token.

    The token grows by one whenever an owner other than the current one takes the lease.
    """
    current: dict[str, tuple[str | None, int]] = {
        sid: (owner, token) for sid, (owner, token) in tokens.items()
    }
    for index, (request, error) in enumerate(zip(requests, result.errors, strict=True)):
        if error is not None:
            continue
        sid = request.session_id
        owner, token = current.get(sid, (None, 0))
        if isinstance(request, Acquire):
            if owner != request.owner:
                current[sid] = (owner, token) = (request.owner, token + 1)
            result.results[index] = token
        elif (
            isinstance(request, Release | Park)
            and owner == request.owner
            and (isinstance(request, Release) or result.results[index])
        ) or (type(request) is Append and request.waiting is not None and owner == request.owner):
            current[sid] = (None, token)
    return current


def _accepts(requests: list[Request], result: Plan) -> dict[str, list[str] | None]:
    """The message kinds each session whose status the batch set takes (parked: its own)."""
    accepts: dict[str, list[str] | None] = {}
    for index, (request, error) in enumerate(zip(requests, result.errors, strict=True)):
        if error is not None:
            continue
        if isinstance(request, Park) and result.results[index]:
            accepts[request.session_id] = sorted(request.accepts)
        elif type(request) is Append and request.status and request.waiting is not None:
            accepts[request.session_id] = sorted(request.accepts)  # parked as it appends
        elif isinstance(request, SetStatus | Create) or (
            type(request) is Append and request.status
        ):
            accepts[request.session_id] = None
    return accepts


def write_batch(
    requests: list[Request], *, now: float, location: str, channel: str
) -> Script[Plan]:
    """Check a batch against the rows as they stand (locked) and write what passes.

    Run it in a transaction. Returns the plan; each `Acquire`'s result is the
    lease's fencing token. Appends naming an owner carry, as their ``token``,
    the token their store got when that owner took the lease. A batch that may
    give a worker work notifies ``channel`` (delivered at its commit).
    """
    known, numbers, leases, tokens, db_now = yield from _current(requests)
    inboxes: dict[str, Inbox] = {}
    ledger: dict[Any, Any] = {}
    if any(type(r) is not Append or r.applied is not None or r.posts for r in requests):
        inboxes = yield from _inboxes(requests, numbers)
        ledger = yield from _ledger(requests, numbers)
    if any(isinstance(r, Acquire) for r in requests):
        # Leases expire by PostgreSQL's clock: the batch takes them at its time.
        for r in requests:
            if isinstance(r, Acquire):
                r.expires_at, r.now = db_now + (r.expires_at - r.now), db_now
    fencing = {sid: token for sid, (owner, token) in tokens.items() if owner is not None}
    result = plan(
        requests,
        known,
        now=now,
        location=location,
        leases=leases,
        inboxes=inboxes,
        effects=ledger,
        tokens=fencing,
    )
    yield from _write(requests, result, now, tokens)
    if _news(requests, result):
        yield later("SELECT pg_notify(%s, '')", (channel,))
    changed = sorted({r.session_id for r in requests if type(r) in _CHANGES})
    for payload in notify_payloads(changed):  # for the asks waiting on these sessions' replies
        yield later("SELECT pg_notify(%s, %s)", (sessions_channel(channel), payload))
    return result


#: The requests that change what an ask reads (a session's log, status or park).
_CHANGES = (Append, SetStatus, Park)


def _news(requests: list[Request], result: Plan) -> bool:
    """Whether the batch may give a worker work: a new session, message, free lease or wake."""
    if result.created or result.inbox:
        return True
    if any(lease is None for lease in result.leases.values()):
        return True
    return any(wait[1] is not None for wait in result.waits.values())


def _write(
    requests: list[Request], result: Plan, now: float, tokens: dict[str, Any]
) -> Script[None]:
    if result.created:
        yield _columns(_INSERT_SESSION, result.created)
    if result.updated:
        updates = [(sid, last, status) for sid, (last, status) in result.updated.items()]
        yield _columns(_UPDATE_SESSION, updates, now)
    if result.events:
        shapes = sorted({row[2] for row in result.events})
        yield later(_INSERT_SHAPE, (shapes,))
        yield _columns(
            _INSERT_EVENT, [(*row[:3], _bytes(row[3]), *row[4:]) for row in result.events]
        )
    if result.snapshots:
        rows = [
            (sid, seq, _bytes(state), type(state) is bytes) for sid, seq, state in result.snapshots
        ]
        yield _rows(_INSERT_SNAPSHOT, rows)
    if result.waits:
        accepts = _accepts(requests, result)
        yield _rows(
            _SET_WAITING,
            [(wait[0], wait[1], accepts.get(sid), sid) for sid, wait in result.waits.items()],
        )
    if result.nudges:
        nudges = [(r[6], r[6], r[0], r[3]) for r in result.inbox if r[0] in result.nudges]
        if nudges:
            yield _rows(_NUDGE, nudges)
    if result.inbox:
        yield _rows(_INSERT_MESSAGE, result.inbox)
    if result.applied:
        yield _rows(_MARK_APPLIED, result.applied)
    if result.effects:
        yield _rows(_UPSERT_EFFECT, list(result.effects.values()))
    if result.leases or any(isinstance(r, Acquire) for r in requests):
        final = _tokens(requests, result, tokens)
        leases: list[tuple[str, str | None, float, int]] = []
        for sid in sorted(result.leases):
            lease = result.leases[sid]
            owner, token = final.get(sid, (None, 0))
            leases.append((sid, owner, 0.0 if lease is None else lease[1], token))
        if leases:
            yield _columns(_UPSERT_LEASE, leases)


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def number(session_id: str) -> Script[int]:
    """The session's number; raises `SessionNotFound`."""
    rows = yield sql("SELECT n FROM sessions WHERE id = %s", (session_id,))
    if not rows:
        raise SessionNotFound(session_id=session_id)
    found: int = rows[0][0]
    return found
