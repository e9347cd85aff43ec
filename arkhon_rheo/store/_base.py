"""What the stores share: their lifecycle, turning calls into write requests, the work queue.

The work queue's shared part is the claim's checks and the work signal.

Workers (`arkhon_rheo.system.Worker`) claim the sessions that have something
to do (see `arkhon_rheo.protocols.WorkQueue`) and, between claims, wait for
work: `WorkSignal` wakes them at once when this process wrote something that
may be work (a new session, a post, a park, a released lease); what other
processes write is found by the caller's next claim, at the latest when its
``timeout`` runs out (polling).
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .._errors import ConfigurationError, StoreError
from .._hooks import current_injector
from ._codec import dumps, encode_events, encode_snapshot
from ._plan import Append, Create, Park, Post

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from ..protocols import NewMessage, StoredEvent
    from ._codec import SessionRow, Snapshot
    from ._plan import NewRow

__all__ = [
    "StoreBase",
    "StoreState",
    "WorkSignal",
    "check_claim",
    "check_timeout",
    "inject_store_fault",
    "pick_claims",
]


def check_claim(
    owner: str, machines: Collection[str], limit: int, ttl: float, now: float
) -> tuple[str, ...]:
    """Check a claim's arguments; return the machine names, sorted.

    Raises:
        ConfigurationError: If one is malformed, saying which.
    """
    if not isinstance(owner, str) or not owner:
        raise ConfigurationError(f"a claim's owner is a non-empty string, not {owner!r}")
    if isinstance(machines, str) or not all(isinstance(name, str) for name in machines):
        raise ConfigurationError(
            f"machines must be a collection of machine names, not {machines!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be a whole number >= 0, not {limit!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
    if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
        raise ConfigurationError(f"now must be seconds since the epoch, not {now!r}")
    return tuple(sorted(set(machines)))


def check_timeout(timeout: float) -> float:
    """``timeout`` as seconds to wait; `ConfigurationError` unless it is a number >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


class WorkSignal:
    """Set by a store's writes that may be work; waited on by `wait_for_work`.

    A write that comes while nobody waits is remembered: the next wait returns
    at once (it may find nothing to do; it never misses something).
    """

    __slots__ = ("_event", "_ready")

    def __init__(self) -> None:
        self._ready = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """There may be work now (call it from the event loop's thread)."""
        self._ready = True
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109
        """Return once `set` was called since the last wait returned, or after ``timeout``."""
        if self._ready:
            self._ready = False
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        with anyio.move_on_after(timeout):
            await event.wait()
        self._ready = False


def pick_claims(
    sessions: Mapping[str, SessionRow],
    leases: Mapping[str, tuple[str, float]],
    names: Collection[str],
    limit: int,
    now: float,
    leased_at: float,
) -> list[str]:
    """The ids of up to ``limit`` sessions with something to do, oldest first (`MemoryStore`).

    A session of one of ``names`` that is ``"running"``, or ``"waiting"`` and due at
    ``now``, whose lease (if any) ran out by ``leased_at``.
    """
    found: list[str] = []
    for session_id, row in sessions.items():  # oldest first
        if len(found) >= limit:
            break
        if row[1] not in names or row[2] not in ("running", "waiting"):
            continue
        if row[2] == "waiting" and (row[9] is None or row[9] > now):
            continue
        held = leases.get(session_id)
        if held is not None and held[1] > leased_at:
            continue
        found.append(session_id)
    return found


class StoreState(enum.Enum):
    """Where a store is in its life."""

    #: Made, not entered yet: no call is accepted.
    NEW = "new"
    #: Entered: reads and writes are accepted.
    OPEN = "open"
    #: Left, or failed to open: no call is accepted and it cannot be reopened.
    CLOSED = "closed"


class StoreBase:
    """The lifecycle checks and request encoding common to every store.

    Both stores take the supervisor's encoded patches (`EncodedPatch`) and
    snapshots given as JSON bytes as they are (see `._codec`).
    """

    #: Patches may come as `EncodedPatch`, snapshots as JSON bytes.
    takes_encoded = True

    def __init__(self, location: str, clock: Callable[[], float]) -> None:
        if not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning seconds, not {clock!r}")
        self._location = location
        self._clock = clock
        self._state = StoreState.NEW
        #: Set by this process's writes that may be work for a worker.
        self._work = WorkSignal()

    @property
    def state(self) -> StoreState:
        """Where the store is in its life."""
        return self._state

    @property
    def location(self) -> str:
        """Where the store lives: a file path, or ``":memory:"``."""
        return self._location

    def _begin_enter(self) -> None:
        if self._state is StoreState.OPEN:
            raise StoreError(
                f"the store at {self._location} is open already; enter it once",
                location=self._location,
            )
        if self._state is StoreState.CLOSED:
            raise StoreError(
                f"cannot reopen a store once it has been closed; make a new store "
                f"on {self._location} instead",
                location=self._location,
            )

    def _check_open(self) -> None:
        if self._state is not StoreState.OPEN:
            hint = (
                "enter it first (`async with store:`)"
                if self._state is StoreState.NEW
                else "make a new store on the same location to use it again"
            )
            raise StoreError(
                f"the store at {self._location} is {self._state.value}; {hint}",
                location=self._location,
            )

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 (the protocol's)
        """Return when there may be new work, or after ``timeout`` seconds.

        New work: a session created, a message posted, a session parked or a
        lease released by this store object (at once), or by another process
        (found by the next `claim`: poll, with ``timeout`` as the interval).

        Raises:
            ConfigurationError: If ``timeout`` is not a number of seconds >= 0.
            StoreError: If the store is not open.
        """
        timeout = check_timeout(timeout)
        self._check_open()
        await self._work.wait(timeout)

    def _create_request(
        self,
        session_id: str,
        machine: str,
        snapshot: Any,
        parent: str | None,
        status: str,
        fingerprint: Any = None,
    ) -> Create:
        self._check_open()
        text = encode_snapshot(
            snapshot,
            what=f"the initial snapshot of session {session_id!r}",
            location=self._location,
        )
        stamp = None
        if fingerprint is not None:
            stamp = dumps(
                fingerprint,
                what=f"the machine fingerprint of session {session_id!r}",
                location=self._location,
            )
        return Create(session_id, machine, status, parent, text, self._clock(), stamp)

    def _append_request(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        snapshot: tuple[int, Any] | None,
        status: str | None,
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
        token: int | None = None,
    ) -> Append:
        self._check_open()
        rows = encode_events(session_id, events, self._location)
        encoded: tuple[int, Snapshot] | None = None
        if snapshot is not None:
            seq, state = snapshot
            what = f"the snapshot of session {session_id!r} after event #{seq}"
            encoded = (seq, encode_snapshot(state, what=what, location=self._location))
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ConfigurationError(
                f"owner must be the lease's owner (a non-empty str) or None, not {owner!r}"
            )
        parked = None
        if waiting is not None:
            parked = self._waiting_text(session_id, status, waiting, accepts)
        if applied is None and not posts:
            if parked is not None:
                return Append(
                    session_id,
                    rows,
                    encoded,
                    status,
                    owner=owner,
                    token=token,
                    waiting=parked,
                    accepts=frozenset(accepts),
                )
            return Append(session_id, rows, encoded, status, owner=owner, token=token)
        if applied is not None and (
            type(applied) is not int or applied < 1 or not rows  # bool is no position
        ):
            raise ConfigurationError(
                f"applied must be the position (from 1) of an inbox message of session "
                f"{session_id!r}, applied by events appended with it; got {applied!r} with "
                f"{len(rows)} events"
            )
        now = self._clock()
        new = [self._new_row(session_id, message, now) for message in posts]
        return Append(
            session_id,
            rows,
            encoded,
            status,
            applied,
            new,
            owner,
            token,
            parked,
            frozenset(accepts) if parked is not None else frozenset(),
        )

    def _waiting_text(
        self, session_id: str, status: str | None, waiting: Any, accepts: Collection[str]
    ) -> str:
        """What an append that parks the session records it waits for, as JSON text; checked."""
        if not status:
            raise ConfigurationError(
                f"an append that parks session {session_id!r} (waiting=...) sets its status "
                'too: pass status= ("paused", "waiting")'
            )
        if isinstance(accepts, str) or not all(isinstance(kind, str) for kind in accepts):
            raise ConfigurationError(
                f"accepts must be a collection of message kinds' names, not {accepts!r}"
            )
        what = f"what session {session_id!r} waits for"
        return dumps(waiting, what=what, location=self._location)

    def _new_row(self, session_id: str, message: NewMessage, now: float) -> NewRow:
        """A message to post, checked and encoded (its payload as JSON text)."""
        message_id, kind, due_at = message.message_id, message.kind, message.due_at
        if not isinstance(message_id, str) or not message_id or not isinstance(kind, str):
            raise ConfigurationError(
                f"a message to session {session_id!r} needs a message_id (a non-empty str) "
                f"and a kind (a str), got {message_id!r} and {kind!r}"
            )
        if isinstance(due_at, bool) or not isinstance(due_at, int | float) or math.isnan(due_at):
            raise ConfigurationError(
                f"message {message_id!r} to session {session_id!r}: due_at must be seconds "
                f"since the epoch, not {due_at!r}"
            )
        what = f"the payload of message {message_id!r} to session {session_id!r}"
        payload = dumps(message.payload, what=what, location=self._location)
        return (message_id, kind, payload, now, float(due_at))

    def _post_request(self, session_id: str, message: NewMessage, capacity: int) -> Post:
        self._check_open()
        if type(capacity) is not int or capacity < 1:
            raise ConfigurationError(
                f"capacity must be the most pending messages an inbox holds (an int from 1), "
                f"not {capacity!r}"
            )
        return Post(session_id, self._new_row(session_id, message, self._clock()), capacity)

    def _park_request(
        self,
        session_id: str,
        owner: str | None,
        status: str,
        waiting: Any,
        accepts: Collection[str],
        now: float,
    ) -> Park:
        self._check_open()
        if isinstance(accepts, str) or not all(isinstance(kind, str) for kind in accepts):
            raise ConfigurationError(
                f"accepts must be a collection of message kinds' names, not {accepts!r}"
            )
        if isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now):
            raise ConfigurationError(f"now must be seconds since the epoch, not {now!r}")
        text = None
        if waiting is not None:
            what = f"what session {session_id!r} waits for"
            text = dumps(waiting, what=what, location=self._location)
        return Park(session_id, owner, status, text, frozenset(accepts), float(now))


async def inject_store_fault(session_id: str, operation: str) -> None:
    """The store seam of fault injection: act out the installed plan's fault, if any.

    Called at the start of a write, before anything is encoded or queued, so an
    injected failure (``StoreError("disk full")``) leaves the store untouched,
    as a real refused write does.
    """
    injector = current_injector()
    if injector is not None:
        await injector.inject("store", session_id, {"operation": operation})
