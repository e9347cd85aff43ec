"""What a caller holds of a session: its `SessionHandle`, and the `SessionResult` it ends with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._construct import internal_only, make
from ..protocols import AgentState, FailureRecord, TransitionEvent
from ..protocols._seams import DEFAULT_CAPACITY
from ._record import ExitReason

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..actors import ActorRef
    from ..protocols import Partial, SessionStream
    from ._record import Session

__all__ = ["SessionHandle", "SessionResult", "new_handle", "session_of"]

S = TypeVar("S", bound=AgentState)


@dataclass(frozen=True, slots=True)
class SessionResult(Generic[S]):
    """How a session ended.

    Attributes:
        session_id: The session.
        state: Its last committed state.
        exit_reason: Why it ended.
        failure: The failure that ended it, if one did.
        steps: Commits made (stage steps and recorded failures).
        retries: Transient retries made.
        restarts: Stage restarts made.
    """

    session_id: str
    state: S
    exit_reason: ExitReason
    failure: FailureRecord | None
    steps: int
    retries: int
    restarts: int

    @property
    def ok(self) -> bool:
        """Whether the run went well: it finished (not failed), or parked waiting for a message."""
        return self.exit_reason is ExitReason.FINISHED or self.exit_reason is ExitReason.WAITING


class SessionHandle(Generic[S]):
    """A caller's handle on a running (or ended) session.

    Handles come from `AgentSystem.start`, `AgentSystem.resume` and the
    stored-session operations that launch a run; they have no public constructor.
    """

    __slots__ = ("__weakref__", "_ref", "_session")

    _session: Session
    _ref: ActorRef[Any, Any]

    __init__ = internal_only(
        "AgentSystem.start() and resume() return one, and AgentSystem.session(id) finds it again"
    )

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self._session.session_id

    @property
    def state(self) -> S:
        """The state as last committed."""
        return self._session.state  # type: ignore[return-value]

    async def history(self) -> tuple[TransitionEvent, ...]:
        """Every event of the session committed so far, from its first, in order.

        The whole history, from any handle: a resumed (or approved) session's
        handle returns the events of its earlier runs too, its resume event
        among them, as ``system.stored(machine, id).history()`` does. With a
        store the store is the log: they are read from it (the session keeps
        none in memory), so read them while the system's store is open. Without
        a store they are kept in memory.

        Raises:
            StoreError: If the store cannot be read (it was closed, say).
        """
        session = self._session
        if session.keep_log:
            return tuple(session.log)
        return tuple(await stored_events(session))

    @property
    def done(self) -> bool:
        """Whether the session has ended."""
        return self._session.done.is_set()

    async def result(self) -> SessionResult[S]:
        """Wait for the session to end and return how it ended.

        A session whose stage raised a ``BaseException`` other than cancellation
        ends `ExitReason.CRASHED`, its ``failure`` naming the exception; the
        exception itself leaves the `AgentSystem` block (so a waiter inside the
        block may be cancelled instead of returning).
        """
        session = self._session
        await session.done.wait()
        assert session.exit_reason is not None
        return SessionResult(
            session_id=session.session_id,
            state=session.state,  # type: ignore[arg-type]
            exit_reason=session.exit_reason,
            failure=session.failure,
            steps=session.steps,
            retries=session.retries,
            restarts=session.restarts,
        )

    async def events(self) -> AsyncIterator[TransitionEvent]:
        """Yield every event of the session from the first, live, until it ends.

        From the session's first event, whichever run this handle is of: on a
        resumed handle the earlier runs' events (and the resume event) come
        first, as in `history`. Consuming slowly never slows the session: each
        iterator reads at its own pace. Without a store it reads the session's
        log in place; with one, the events before it started come from the
        store and the later ones are handed to it as they commit (kept for it
        until read).
        """
        session = self._session
        if not session.keep_log:
            with session.partials.subscribe(
                catch_up=lambda: stored_events(session), partials=False
            ) as stream:
                async for event in stream:
                    yield event
            return
        position = 0
        while True:
            log = session.log
            while position < len(log):
                yield log[position]
                position += 1
            if session.done.is_set():
                return
            await session.wait_changed()

    def partials(self, *, capacity: int = DEFAULT_CAPACITY) -> SessionStream[Partial]:
        """Subscribe to the partial output its stages `emit`, from now until it ends.

        Each call is a subscription of its own, with its own buffer of
        ``capacity`` items; the session never waits for it. When the buffer is
        full, new items are dropped for this subscriber (the next item it gets
        says how many in `Partial.dropped`; ``statistics().dropped`` counts
        all). Items emitted before the call are not delivered; on an ended
        session the iterator ends at once.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        return self._session.partials.subscribe(capacity)

    def stream(
        self, *, capacity: int = DEFAULT_CAPACITY
    ) -> SessionStream[TransitionEvent | Partial]:
        """Subscribe to its events (from its first, as `events`) and partial output, in order.

        The partial items of step ``seq`` come before event ``seq``, whose
        ``attempt`` says which attempt's partials the commit kept. Events are
        never dropped; partial items are, as in `partials`.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        session = self._session
        if session.keep_log:
            return session.partials.subscribe(capacity, log=session.log)
        return session.partials.subscribe(capacity, catch_up=lambda: stored_events(session))

    def cancel(self) -> None:
        """Cancel the session now; its state stays as last committed."""
        self._ref.cancel()

    def __repr__(self) -> str:
        status = self._session.exit_reason.value if self._session.exit_reason else "running"
        return f"<SessionHandle {self.session_id!r} {status}>"


def new_handle(session: Session, ref: ActorRef[Any, Any]) -> SessionHandle[Any]:
    """The handle of ``session``, run by the supervisor behind ``ref`` (the system's only way)."""
    handle: SessionHandle[Any] = make(SessionHandle, _session=session, _ref=ref)
    return handle


def session_of(handle: SessionHandle[Any]) -> Session:
    """The record of the session behind ``handle`` (for the system's own modules)."""
    return handle._session


async def stored_events(session: Session) -> list[TransitionEvent]:
    """Every event of ``session`` (its earlier runs' too), read from its store."""
    persistence = session.persistence
    assert persistence is not None
    decode = persistence.codec.decode_event
    return [decode(event) for event in await persistence.store.history(session.session_id)]
