"""What both stores share: their lifecycle, and turning calls into write requests."""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, StoreError
from .._hooks import current_injector
from ._codec import dumps, encode_events, encode_snapshot
from ._plan import Append, Create, Park, Post
from ._work import WorkSignal, check_timeout

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from ..protocols import NewMessage, StoredEvent
    from ._codec import Snapshot
    from ._inbox import NewRow

__all__ = ["StoreBase", "StoreState", "inject_store_fault"]


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
