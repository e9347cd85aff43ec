"""Write requests, and the pure check that turns a batch of them into rows.

Both stores decide what a batch of writes does with the same function, `plan`:
given the requests in arrival order and what is known of the sessions they
touch, it checks each request in turn (an event number must be the next one, a
session must exist, or must not when created) and returns the rows to write
plus, per request, the error that excluded it. A refused request never takes
the other requests of its batch down with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import DuplicateEvent, SessionError, SessionLocked, SessionNotFound, StoreError

if TYPE_CHECKING:
    from ._codec import EventRow, SessionRow, Snapshot

__all__ = [
    "Acquire",
    "Append",
    "Create",
    "Flush",
    "Plan",
    "Release",
    "Request",
    "SetStatus",
    "plan",
]


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
    """Append encoded events, with an optional snapshot and status change."""

    session_id: str
    rows: list[EventRow]
    snapshot: tuple[int, Snapshot] | None
    status: str | None


@dataclass(slots=True)
class SetStatus:
    """Change a session's status."""

    session_id: str
    status: str


@dataclass(slots=True)
class Acquire:
    """Take (or renew) a session's lease unless another owner's is unexpired at ``now``.

    A lease held by ``replacing`` (an owner known to be dead) is taken over.
    """

    session_id: str
    owner: str
    expires_at: float
    now: float
    replacing: str | None = None


@dataclass(slots=True)
class Release:
    """Drop a session's lease if ``owner`` holds it."""

    session_id: str
    owner: str


@dataclass(slots=True)
class Flush:
    """A barrier: done once everything queued before it is committed."""

    session_id: str = ""


Request = Create | Append | SetStatus | Acquire | Release | Flush
#: ``(owner, expires_at)`` of a lease.
Lease = tuple[str, float]


@dataclass(slots=True)
class Plan:
    """The rows a batch writes, and the error (or ``None``) of each request.

    Attributes:
        created: New session rows.
        events: Event rows, in order.
        snapshots: ``(session_id, seq, state)`` rows.
        updated: The final ``(last_seq, status)`` of every session the batch touched.
        leases: The final lease of every session whose lease the batch changed
            (``None``: released).
        errors: One entry per request: why it was refused, or ``None``.
        appended: How many events the batch writes.
    """

    created: list[SessionRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    snapshots: list[tuple[str, int, Snapshot]] = field(default_factory=list)
    updated: dict[str, tuple[int, str]] = field(default_factory=dict)
    leases: dict[str, Lease | None] = field(default_factory=dict)
    errors: list[Exception | None] = field(default_factory=list)
    appended: int = 0


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
) -> SessionLocked | None:
    """Take the lease ``request`` asks for, or refuse if another owner's is unexpired."""
    sid = request.session_id
    lease = held.get(sid)
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
        )
    )
    out.snapshots.append((sid, 0, request.snapshot))
    state[sid] = out.updated[sid] = (0, request.status)
    return None


def plan(
    requests: list[Request],
    known: dict[str, tuple[int, str]],
    *,
    now: float,
    location: str = "",
    leases: dict[str, Lease] | None = None,
) -> Plan:
    """Check a batch of requests in order and gather the rows to write.

    Args:
        requests: The batch, in arrival order.
        known: ``(last_seq, status)`` of every existing session the batch touches
            (absent: the session does not exist). Not modified.
        leases: The lease of every session whose lease the batch takes or releases
            (absent: none). Not modified.
        now: The time to record as the sessions' ``updated_at``.
        location: The store's location, for errors.

    Returns:
        The plan.
    """
    out = Plan()
    state = dict(known)
    held = dict(leases or {})
    for request in requests:
        sid = request.session_id
        current = state.get(sid)
        error: Exception | None = None
        if isinstance(request, Flush):
            pass
        elif isinstance(request, Acquire):
            error = _acquire(request, held, out, location)
        elif isinstance(request, Release):
            _release(request, held, out)
        elif isinstance(request, Create):
            error = _create(request, current, state, out, now)
        elif current is None:
            error = SessionNotFound(session_id=sid)
        elif isinstance(request, SetStatus):
            state[sid] = out.updated[sid] = (current[0], request.status)
        else:
            try:
                new_last = _check_append(request, current[0], location)
            except StoreError as exc:
                error = exc
            else:
                out.events.extend(request.rows)
                out.appended += len(request.rows)
                if request.snapshot is not None:
                    out.snapshots.append((sid, *request.snapshot))
                state[sid] = out.updated[sid] = (new_last, request.status or current[1])
        out.errors.append(error)
    return out
