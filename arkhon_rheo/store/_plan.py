"""Write requests, and the pure check that turns a batch of them into rows (`Plan`).

Both stores decide what a batch of writes does with the same function, `plan`:
given the requests in arrival order and what is known of the sessions they
touch, it checks each request in turn (an event number must be the next one, a
session must exist, or must not when created; a new message needs room in its
inbox, a message applied must be pending, a park must find no message it takes
due) and returns the rows to write plus, per request, the error that excluded
it and what it returns. A refused request never takes the other requests of its
batch down with it.

**Fencing**: an append made for a lease's owner is refused once another owner took the lease.

An append may name the owner it is made for (and, where the store keeps them,
the fencing token that owner was given when it took the lease). It is checked
against the lease as the batch sees it, in the batch's own transaction: unless
that owner still holds the lease (under that token), the append is refused
with `LeaseLost` and nothing of it is written. A lease that ran out but that
no other owner took still lets its owner commit.

**A session's durable inbox**: the requests that write it, and what a batch knows of it.

Messages posted to a session are numbered per session from 1 (their *position*)
and kept, applied or not: a message id is unique per session, so posting one
again changes nothing. A message is *pending* until an append marks it applied
by one of its events. Both stores plan inbox writes with `plan`, given
what the batch knows of each inbox it touches (`Inbox`), so they behave the
same; the SQLite store reads that knowledge and writes the planned rows in the
batch's transaction (`._inbox_sql`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import (
    DuplicateEvent,
    InboxFull,
    LeaseLost,
    SessionError,
    SessionLocked,
    SessionNotFound,
    StoreError,
)
from ._effects import BeginEffect, FinishEffect, plan_effect

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._codec import EventRow, MessageRow, SessionRow, Snapshot
    from ._effects import EffectRow

__all__ = [
    "Acquire",
    "Append",
    "BeginEffect",
    "Create",
    "Fenced",
    "FinishEffect",
    "Flush",
    "Inbox",
    "Lease",
    "NewRow",
    "Park",
    "Plan",
    "Post",
    "Release",
    "Request",
    "SetStatus",
    "fence",
    "plan",
    "posted_ids",
    "reads_pending",
    "renewal_refused",
    "touches_inbox",
]


#: ``(owner, expires_at)`` of a lease.
Lease = tuple[str, float]


class Fenced(Protocol):
    """An append as fencing sees it (`._plan.Append`)."""

    session_id: str
    #: Who the append is made for.
    owner: str | None
    #: The fencing token the store got when ``owner`` took the lease, if known.
    token: int | None


def fence(
    request: Fenced, held: dict[str, Lease], tokens: dict[str, int] | None, location: str
) -> LeaseLost | None:
    """Refuse ``request`` unless its owner holds its session's lease (under its token).

    Args:
        request: An append naming its ``owner``.
        held: The leases as the batch sees them, by session.
        tokens: The fencing token of each lease, where the store keeps them.
        location: The store, for the error.
    """
    sid, owner, token = request.session_id, request.owner, request.token
    assert owner is not None
    lease = held.get(sid)
    if (
        lease is not None
        and lease[0] == owner
        and (token is None or tokens is None or tokens.get(sid, token) == token)
    ):
        return None
    holder = None if lease is None else lease[0]
    return LeaseLost(session_id=sid, owner=owner, holder=holder, location=location)


def renewal_refused(
    session_id: str, owner: str, lease: Lease | None, location: str
) -> LeaseLost | None:
    """Refuse a renewal of ``owner``'s lease unless ``owner`` holds ``lease`` (expired or not).

    A lease given up, or taken by another owner since (even if given up again),
    is not renewed: its old holder was paused past it, and others may have
    driven the session on meanwhile.
    """
    if lease is not None and lease[0] == owner:
        return None
    holder = None if lease is None else lease[0]
    return LeaseLost(session_id=session_id, owner=owner, holder=holder, location=location)


#: A message an append posts: ``(message_id, kind, payload, posted_at, due_at)``,
#: the payload as JSON text.
NewRow = tuple[str, str, str, float, float]


@dataclass(slots=True)
class Post:
    """Store a message in a session's inbox, unless the inbox has its id already.

    Refused (`InboxFull`) if the inbox holds ``capacity`` pending messages.
    """

    session_id: str
    message: NewRow
    capacity: int


@dataclass(slots=True)
class Park:
    """Park a session unless a pending message of a kind in ``accepts`` is due at ``now``.

    Parking sets the session's status, what it waits for (JSON text) and its
    wake time, and releases ``owner``'s lease if it holds it. A park naming an
    ``owner`` is fenced as an append is (see the module's doc): refused with
    `LeaseLost` unless ``owner`` holds the lease (under ``token``, where the
    store keeps tokens), so a driver paused past its lease cannot park a
    session its successor has moved on (or finished) meanwhile.
    """

    session_id: str
    owner: str | None
    status: str
    waiting: str | None
    accepts: frozenset[str]
    now: float
    #: The fencing token the store got when ``owner`` took the lease, if known.
    token: int | None = None


@dataclass(slots=True)
class Inbox:
    """What a batch knows of one session's inbox.

    Attributes:
        last_position: The highest position taken (0: none).
        pending: The rows of the messages not applied yet, by position.
        ids: The rows of the message ids the batch posts, for those the inbox
            has already (pending or applied), by message id.
        count: How many messages are pending, where only that is known (a batch
            that only posts to the inbox: its rows, payloads and all, are not
            read); ``None``: ``pending`` holds them all.
    """

    last_position: int
    pending: dict[int, MessageRow]
    ids: dict[str, MessageRow]
    count: int | None = None

    def copy(self) -> Inbox:
        """A copy the batch may change, leaving this one as it is."""
        return Inbox(self.last_position, dict(self.pending), dict(self.ids), self.count)

    def pending_count(self) -> int:
        """How many messages are pending (what a post's capacity check counts)."""
        return len(self.pending) if self.count is None else self.count


def reads_pending(request: object) -> bool:
    """Whether planning ``request`` needs its session's pending messages, not just their count.

    A park looks at their kinds and due times, an append at the one it applies;
    a post, or an append that only posts timers, needs their count only.
    """
    return isinstance(request, Park) or getattr(request, "applied", None) is not None


class Plan:
    """The rows a batch writes, and the error (or ``None``) of each request.

    (A plain class: made once per batch and per memory-store write, it builds its
    empty lists and dicts from literals, faster than a dataclass's factories.)

    Attributes:
        created: New session rows.
        events: Event rows, in order.
        snapshots: ``(session_id, seq, state)`` rows.
        updated: The final ``(last_seq, status)`` of every session the batch touched.
        leases: The final lease of every session whose lease the batch changed
            (``None``: released).
        inbox: New inbox rows, in order.
        applied: ``(applied_seq, session_id, position)`` of the inbox messages applied.
        waits: The final ``(waiting, wake_at, accepts)`` of every session whose
            status the batch set (``(None, None, None)`` unless it parked; ``accepts``:
            the message kinds it parked for, as a JSON list).
        nudges: By session, then by message kind: the due time the messages posted
            to it bring its ``wake_at`` down to (if earlier), if it is waiting once
            the batch is written and parked accepting that kind.
        effects: The final row of every effect-ledger entry the batch begins or
            finishes, by ``(session_id, key)``.
        errors: One entry per request: why it was refused, or ``None``.
        results: One entry per request: what it returns (a post's ``(row, new)``,
            whether a park parked), or ``None``.
        appended: How many events the batch writes.
    """

    __slots__ = (
        "appended",
        "applied",
        "created",
        "effects",
        "errors",
        "events",
        "inbox",
        "leases",
        "nudges",
        "results",
        "snapshots",
        "updated",
        "waits",
    )

    def __init__(self) -> None:
        self.created: list[SessionRow] = []
        self.events: list[EventRow] = []
        self.snapshots: list[tuple[str, int, Snapshot]] = []
        self.updated: dict[str, tuple[int, str]] = {}
        self.leases: dict[str, Lease | None] = {}
        self.inbox: list[MessageRow] = []
        self.applied: list[tuple[int, str, int]] = []
        self.waits: dict[str, tuple[str | None, float | None, str | None]] = {}
        self.nudges: dict[str, dict[str, float]] = {}
        self.effects: dict[tuple[str, str], EffectRow] = {}
        self.errors: list[Exception | None] = []
        self.results: list[Any] = []
        self.appended = 0


@dataclass(slots=True)
class Create:
    """Create a session with its initial snapshot (event number 0)."""

    session_id: str
    machine: str
    status: str
    parent: str | None
    snapshot: Snapshot
    created_at: float
    fingerprint: str | None = None


@dataclass(slots=True)
class Append:
    """Append encoded events, with an optional snapshot and status change.

    In the same transaction: mark inbox message ``applied`` (a position) applied
    by the last event, and post ``posts`` to the session's inbox. With
    ``waiting`` (JSON text; ``status`` is then set too), park the session as
    the append leaves it: its record says what it waits for (the message kinds
    ``accepts``; no wake time) and ``owner`` gives its lease up, so a pause is
    one transaction, never a status without what it waits for.
    """

    session_id: str
    rows: list[EventRow]
    snapshot: tuple[int, Snapshot] | None
    status: str | None
    applied: int | None = None
    posts: Sequence[NewRow] = ()
    #: Fencing (see the module's doc): refused unless ``owner`` holds the lease (under ``token``).
    owner: str | None = None
    token: int | None = None
    waiting: str | None = None
    accepts: frozenset[str] = frozenset()


@dataclass(slots=True)
class SetStatus:
    """Change a session's status."""

    session_id: str
    status: str


@dataclass(slots=True)
class Acquire:
    """Take (or renew) a session's lease unless another owner's is unexpired at ``now``.

    A lease held by ``replacing`` (an owner known to be dead) is taken over.
    ``renew``: only renew it (refused with `LeaseLost` unless ``owner`` holds it
    now, expired or not).
    """

    session_id: str
    owner: str
    expires_at: float
    now: float
    replacing: str | None = None
    renew: bool = False


@dataclass(slots=True)
class Release:
    """Drop a session's lease if ``owner`` holds it."""

    session_id: str
    owner: str


@dataclass(slots=True)
class Flush:
    """A barrier: done once everything queued before it is committed."""

    session_id: str = ""


Request = (
    Create
    | Append
    | SetStatus
    | Acquire
    | Release
    | Flush
    | Post
    | Park
    | BeginEffect
    | FinishEffect
)


def touches_inbox(request: Request) -> bool:
    """Whether ``request`` reads or writes its session's inbox."""
    if type(request) is Append:
        return request.applied is not None or bool(request.posts)
    return isinstance(request, Post | Park)


def posted_ids(request: Request) -> list[str]:
    """The message ids ``request`` posts to its session's inbox."""
    if isinstance(request, Post):
        return [request.message[0]]
    if isinstance(request, Append):
        return [message[0] for message in request.posts]
    return []


def _check_append(request: Append, last_seq: int, location: str) -> int:
    expected = last_seq + 1
    for row in request.rows:
        if row[1] != expected:
            raise DuplicateEvent(
                session_id=request.session_id, seq=row[1], expected=expected, location=location
            )
        expected += 1
    new_last = expected - 1
    if request.snapshot is not None and not 0 < request.snapshot[0] <= new_last:
        raise StoreError(
            f"session {request.session_id!r}: a snapshot after event #{request.snapshot[0]} "
            f"cannot be stored, the last event is #{new_last}",
            location=location,
        )
    return new_last


def _acquire(
    request: Acquire, held: dict[str, Lease], out: Plan, location: str
) -> SessionLocked | LeaseLost | None:
    """Take the lease ``request`` asks for, or refuse if another owner's is unexpired.

    A renewal (``request.renew``) is refused unless its owner holds the lease now:
    one given up, or taken by another owner since (even if given up again), is not
    taken again.
    """
    sid = request.session_id
    lease = held.get(sid)
    if request.renew and (refused := renewal_refused(sid, request.owner, lease, location)):
        return refused
    if (
        lease is not None
        and lease[0] not in (request.owner, request.replacing)
        and lease[1] > request.now
    ):
        return SessionLocked(
            session_id=sid,
            owner=lease[0],
            expires_at=lease[1],
            location=location,
            now=request.now,
        )
    held[sid] = out.leases[sid] = (request.owner, request.expires_at)
    return None


def _release(request: Release, held: dict[str, Lease], out: Plan) -> None:
    """Drop the session's lease if ``request``'s owner holds it (else nothing to do)."""
    sid = request.session_id
    lease = held.get(sid)
    if lease is not None and lease[0] == request.owner:
        del held[sid]
        out.leases[sid] = None


def _create(
    request: Create,
    current: tuple[int, str] | None,
    state: dict[str, tuple[int, str]],
    out: Plan,
    now: float,
) -> SessionError | None:
    """Add the session's row and initial snapshot, or refuse if it exists already."""
    sid = request.session_id
    if current is not None:
        return SessionError(
            f"session {sid!r} exists already; choose another id, or resume it",
            session_id=sid,
        )
    out.created.append(
        (
            sid,
            request.machine,
            request.status,
            0,
            request.created_at,
            now,
            request.parent,
            request.fingerprint,
            None,
            None,
        )
    )
    out.snapshots.append((sid, 0, request.snapshot))
    state[sid] = out.updated[sid] = (0, request.status)
    return None


# -- the inbox ------------------------------------------------------------------


def _add(box: Inbox, session_id: str, message: NewRow, out: Plan) -> MessageRow:
    position = box.last_position = box.last_position + 1
    message_id, kind, payload, posted_at, due_at = message
    row: MessageRow = (session_id, message_id, position, kind, payload, posted_at, due_at, None)
    box.pending[position] = box.ids[message_id] = row
    if box.count is not None:
        box.count += 1
    out.inbox.append(row)
    return row


def _post(
    request: Post, current: tuple[int, str], box: Inbox, out: Plan, location: str
) -> InboxFull | None:
    """Plan a `Post` of an existing session: its result is ``(row, new)``.

    Refused (`InboxFull`) if the inbox has no room for a new message.
    """
    sid = request.session_id
    found = box.ids.get(request.message[0])
    if found is not None:
        out.results[-1] = (found, False)
        return None
    if box.pending_count() >= request.capacity:
        return InboxFull(session_id=sid, capacity=request.capacity, location=location)
    row = _add(box, sid, request.message, out)
    # If the session is waiting when the batch is written (its status as the batch
    # knows it may be stale) and parked accepting this kind, it wakes at the
    # message's due time (the store applies the check with the session's row).
    kinds = out.nudges.setdefault(sid, {})
    kinds[row[3]] = min(kinds.get(row[3], math.inf), row[6])
    out.results[-1] = (row, True)
    return None


def _park(
    request: Park,
    current: tuple[int, str],
    box: Inbox,
    held: dict[str, Lease],
    state: dict[str, tuple[int, str]],
    out: Plan,
) -> None:
    """Plan a `Park`: its result is whether the session parked (no accepted message was due)."""
    sid = request.session_id
    accepted = [row[6] for row in box.pending.values() if row[3] in request.accepts]
    if any(due <= request.now for due in accepted):
        out.results[-1] = False
        return
    state[sid] = out.updated[sid] = (current[0], request.status)
    kinds = json.dumps(sorted(request.accepts), separators=(",", ":"))
    out.waits[sid] = (request.waiting, min(accepted, default=None), kinds)
    out.nudges.pop(sid, None)
    lease = held.get(sid)
    if request.owner is not None and lease is not None and lease[0] == request.owner:
        del held[sid]
        out.leases[sid] = None
    out.results[-1] = True


def _check_applied(request: Append, box: Inbox | None, location: str) -> StoreError | None:
    """Refuse an append whose message ``applied`` is not pending (applied already, or unknown)."""
    if request.applied is None or (box is not None and request.applied in box.pending):
        return None
    return StoreError(
        f"session {request.session_id!r} cannot apply inbox message #{request.applied}: it is "
        "applied already, or was never posted (a message is applied exactly once); nothing "
        "of this append was written",
        location=location,
    )


def _apply_inbox(request: Append, box: Inbox, last_seq: int, out: Plan) -> None:
    """Mark the append's message applied by its last event, and post its messages."""
    sid = request.session_id
    if request.applied is not None:
        row = box.pending.pop(request.applied)
        box.ids[row[1]] = (*row[:7], last_seq)
        out.applied.append((last_seq, sid, request.applied))
    for message in request.posts:
        if message[0] not in box.ids:
            _add(box, sid, message, out)


# -- the batch ------------------------------------------------------------------


def _set_status(
    sid: str, last_seq: int, status: str, state: dict[str, tuple[int, str]], out: Plan
) -> None:
    """Change a session's status: what it waited for goes with its old one."""
    state[sid] = out.updated[sid] = (last_seq, status)
    out.waits[sid] = (None, None, None)
    out.nudges.pop(sid, None)


def _box(boxes: dict[str, Inbox], known: dict[str, Inbox], sid: str) -> Inbox:
    """The batch's copy of the session's inbox, made from what is known on first use."""
    box = boxes.get(sid)
    if box is None:
        base = known.get(sid)
        box = boxes[sid] = Inbox(0, {}, {}) if base is None else base.copy()
    return box


def _append(
    request: Append,
    current: tuple[int, str],
    state: dict[str, tuple[int, str]],
    inboxes: tuple[dict[str, Inbox], dict[str, Inbox]],
    held: dict[str, Lease],
    out: Plan,
    location: str,
) -> StoreError | None:
    """Add the events (and the inbox changes) of an append, or refuse the lot."""
    sid = request.session_id
    try:
        new_last = _check_append(request, current[0], location)
    except StoreError as exc:
        return exc
    if request.applied is not None or request.posts:
        box = _box(*inboxes, sid)
        if (error := _check_applied(request, box, location)) is not None:
            return error
        _apply_inbox(request, box, new_last, out)
    out.events.extend(request.rows)
    out.appended += len(request.rows)
    if request.snapshot is not None:
        out.snapshots.append((sid, *request.snapshot))
    if request.status:
        _set_status(sid, new_last, request.status, state, out)
        if request.waiting is not None:
            _park_appended(request, held, out)
    else:
        state[sid] = out.updated[sid] = (new_last, current[1])
    return None


def _park_appended(request: Append, held: dict[str, Lease], out: Plan) -> None:
    """Park the session an append leaves: what it waits for, and its owner's lease given up."""
    sid = request.session_id
    kinds = json.dumps(sorted(request.accepts), separators=(",", ":"))
    out.waits[sid] = (request.waiting, None, kinds)
    lease = held.get(sid)
    if request.owner is not None and lease is not None and lease[0] == request.owner:
        del held[sid]
        out.leases[sid] = None


def plan(
    requests: list[Request],
    known: dict[str, tuple[int, str]],
    *,
    now: float,
    location: str = "",
    leases: dict[str, Lease] | None = None,
    inboxes: dict[str, Inbox] | None = None,
    effects: dict[tuple[str, str], EffectRow] | None = None,
    tokens: dict[str, int] | None = None,
) -> Plan:
    """Check a batch of requests in order and gather the rows to write.

    Args:
        requests: The batch, in arrival order.
        known: ``(last_seq, status)`` of every existing session the batch touches
            (absent: the session does not exist). Not modified.
        leases: The lease of every session whose lease the batch takes or releases
            (absent: none). Not modified.
        inboxes: What is known of the inbox of every session whose inbox the batch
            reads or writes (see `touches_inbox`; absent: empty). Not modified.
        effects: The effect-ledger rows of the entries the batch begins or finishes,
            by ``(session_id, key)`` (absent: none). Not modified.
        tokens: The fencing token of each lease in ``leases`` (see the module's doc).
        now: The time to record as the sessions' ``updated_at``.
        location: The store's location, for errors.

    Returns:
        The plan.
    """
    out = Plan()
    state = dict(known)
    held = dict(leases or {})
    boxes: tuple[dict[str, Inbox], dict[str, Inbox]] = ({}, inboxes or {})
    ledger = dict(effects or {})
    for request in requests:
        out.results.append(None)
        sid = request.session_id
        current = state.get(sid)
        error: Exception | None = None
        if type(request) is Append:
            if current is None:
                error = SessionNotFound(session_id=sid)
            elif request.owner and (fenced := fence(request, held, tokens, location)):
                error = fenced
            else:
                error = _append(request, current, state, boxes, held, out, location)
        elif isinstance(request, Flush):
            pass
        elif isinstance(request, Acquire):
            error = _acquire(request, held, out, location)
        elif isinstance(request, Release):
            _release(request, held, out)
        elif isinstance(request, Create):
            error = _create(request, current, state, out, now)
        elif isinstance(request, BeginEffect | FinishEffect):
            exists = current is not None
            error, out.results[-1] = plan_effect(
                request, exists, ledger, out.effects, now, location
            )
        elif current is None:
            error = SessionNotFound(session_id=sid)
        elif isinstance(request, SetStatus):
            _set_status(sid, current[0], request.status, state, out)
        elif isinstance(request, Post):
            error = _post(request, current, _box(*boxes, sid), out, location)
        elif request.owner and (fenced := fence(request, held, tokens, location)):
            error = fenced  # a Park of a stale holder: refused as its appends are
        else:
            assert isinstance(request, Park)
            _park(request, current, _box(*boxes, sid), held, state, out)
        out.errors.append(error)
    return out
