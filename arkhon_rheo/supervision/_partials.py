"""Partial output: what a stage emits while it runs, as `Partial` items for subscribers.

A stage that produces its result piece by piece (a model reply streamed token
by token) calls ``emit(delta)`` for each piece. Whoever subscribed to the
session (``handle.partials()``, or ``handle.stream()`` for the transition
events and the partial items in one order) receives each piece as a
`Partial` as soon as it is emitted. The stage host (the session supervisor)
sets, for each attempt of each stage, the scope that ``emit`` publishes in.

The contract:

* ``emit`` never waits and never raises. Each subscriber has its own bounded
  buffer; when it is full the new piece is dropped *for that subscriber only*
  (drop-newest: the pieces already buffered stay, in order). The next piece the
  subscriber does get carries ``dropped``, the number it lost just before it,
  and ``statistics().dropped`` counts every loss (those after its last item too).
* A session never waits for its subscribers: not for a slow one, not for one
  that never reads.
* Partial output is advisory: it is not recorded, stored or replayed. The
  stage's patch carries its full result and the committed state is the truth.
* Every piece names its stage attempt. A stage retried after a transient
  failure emits again under the next ``attempt``; the pieces of the failed
  attempt keep theirs, so a consumer discards them when it sees a higher
  ``attempt`` for the same ``seq`` (the event ``seq`` finally commits names the
  attempt that counted).
* Outside a stage run (no session, or after the stage returned) ``emit`` does
  nothing. With no subscriber it costs a context-variable read and two checks.
"""

from __future__ import annotations

from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import anyio
from anyio.lowlevel import checkpoint_if_cancelled

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from contextvars import Token
    from types import TracebackType
    from typing import TypeAlias

    from ._events import TransitionEvent

    #: Returns the events a session committed so far (read from its store).
    CatchUp: TypeAlias = Callable[[], Awaitable[Sequence[TransitionEvent]]]

__all__ = [
    "Partial",
    "PartialHub",
    "SessionStream",
    "SessionStreamStatistics",
    "StageScope",
    "emit",
]

T = TypeVar("T")

#: The buffer bound of a subscription unless the caller picks one.
DEFAULT_CAPACITY = 256

_SCOPE: ContextVar[StageScope | None] = ContextVar("arkhon_rheo_stage_scope", default=None)


class Partial(NamedTuple):
    """One piece of a stage's partial output, as a subscriber receives it.

    A named tuple, like `TransitionEvent`: immutable, and several times cheaper
    to build than a frozen dataclass, which matters at one per delta.

    Attributes:
        session_id: The session.
        stage: The stage that emitted it.
        seq: The number of the event that will record this step's outcome (its
            commit, or the failure recorded instead): partials of step ``seq``
            come before event ``seq`` in ``handle.stream()``.
        attempt: The attempt of the stage that emitted it (1-based). Pieces of an
            attempt that failed and was retried are not part of the result:
            discard them when a higher attempt of the same ``seq`` shows up.
        position: Its place among the pieces its attempt emitted, from 0 (counting
            the ones nobody received), so a gap shows.
        data: What the stage emitted (for a model reply, typically a `ReplyDelta`).
        dropped: Pieces this subscriber lost just before this one (its buffer was full).
    """

    session_id: str
    stage: str
    seq: int
    attempt: int
    position: int
    data: Any
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class SessionStreamStatistics:
    """A snapshot of one subscription's counters.

    Attributes:
        received: Partial items handed to the consumer.
        dropped: Partial items lost because the buffer was full (drop-newest).
        buffered: Partial items waiting to be read.
        capacity: The most partial items the buffer holds.
        open: Whether more items may come (the session runs and the stream is open).
    """

    received: int
    dropped: int
    buffered: int
    capacity: int
    open: bool


def emit(data: Any) -> None:
    """Publish ``data`` as partial output of the stage running in this task.

    Never waits and never raises: each subscriber that has no room loses it
    (and is told so on its next item). Does nothing outside a running stage.

    Args:
        data: The piece, as subscribers will receive it in `Partial.data` (for
            a streamed model reply, a `ReplyDelta`).
    """
    scope = _SCOPE.get()
    if scope is not None:
        scope.publish(data)


class StageScope:
    """Where ``emit`` publishes during one attempt of one stage (set by the stage host).

    Used as a context manager around the stage; once it is left, ``emit``
    publishes nothing more (a task the stage left running emits into the void).
    """

    __slots__ = ("_token", "attempt", "closed", "hub", "index", "seq", "stage")

    def __init__(self, hub: PartialHub, stage: str, seq: int, attempt: int) -> None:
        self.hub = hub
        self.stage = stage
        self.seq = seq
        self.attempt = attempt
        self.index = 0
        self.closed = False

    def open(self) -> Token[StageScope | None]:
        """Make this the scope the current context publishes to; `close` undoes it."""
        return _SCOPE.set(self)

    def close(self, token: Token[StageScope | None]) -> None:
        """Restore the scope ``token`` replaced; nothing is published here after this."""
        try:
            _SCOPE.reset(token)
        finally:
            self.closed = True

    def __enter__(self) -> StageScope:
        self._token = self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self._token)

    def publish(self, data: Any) -> None:
        """Hand ``data`` to every subscriber that has room; never waits."""
        if self.closed:
            return
        index = self.index
        self.index = index + 1
        subscribers = self.hub.subscribers
        if not subscribers:
            return
        item = None  # built once, for the first subscriber with room
        for subscriber in subscribers:
            if not subscriber._partials:
                continue  # it follows the events only
            buffer = subscriber._buffer
            if len(buffer) >= subscriber._capacity:  # full: drop the newest, for it only
                subscriber._pending += 1
                subscriber._dropped += 1
                continue
            if item is None:
                item = Partial(self.hub.session_id, self.stage, self.seq, self.attempt, index, data)
            if subscriber._pending:
                buffer.append(item._replace(dropped=subscriber._pending))
                subscriber._pending = 0
            else:
                buffer.append(item)
            subscriber._wake()


class PartialHub:
    """One session's subscribers: the stage host publishes into it, handles subscribe.

    The subscriber tuple is replaced, never mutated, so a publish iterates a
    stable snapshot.
    """

    __slots__ = ("closed", "session_id", "subscribers")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.subscribers: tuple[SessionStream[Any], ...] = ()
        self.closed = False

    def scope(self, stage: str, seq: int, attempt: int) -> StageScope:
        """The scope one attempt of ``stage`` (recorded as event ``seq``) emits in."""
        return StageScope(self, stage, seq, attempt)

    def subscribe(
        self,
        capacity: int = DEFAULT_CAPACITY,
        *,
        log: Sequence[TransitionEvent] | None = None,
        catch_up: CatchUp | None = None,
        partials: bool = True,
    ) -> SessionStream[Any]:
        """A new subscription; with ``log`` or ``catch_up``, the session's events come in it too.

        ``log`` is the session's event log, kept in memory and read in place.
        ``catch_up`` is for a session whose log is in its store: it returns the
        events committed so far (awaited on the first receive), and the events
        committed from now on are handed to the subscription as they commit
        (`publish_event`). Without ``partials`` it follows the events only.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(
                f"capacity must be a positive integer (partial items buffered), got {capacity!r}"
            )
        stream: SessionStream[Any] = SessionStream(
            self, capacity, log, catch_up=catch_up, partials=partials
        )
        if self.closed:
            stream._open = False
        else:
            self.subscribers = (*self.subscribers, stream)
        return stream

    def unsubscribe(self, stream: SessionStream[Any]) -> None:
        """Stop delivering to ``stream`` (nothing if it is not subscribed)."""
        self.subscribers = tuple(s for s in self.subscribers if s is not stream)

    def publish_event(self, event: TransitionEvent) -> None:
        """Hand a just-committed event to the subscriptions fed live (see ``catch_up``)."""
        for subscriber in self.subscribers:
            live = subscriber._live
            if live is not None:
                live.append(event)
                subscriber._wake()

    def wake(self) -> None:
        """Tell the subscriptions that follow the events that one was committed."""
        for subscriber in self.subscribers:
            if subscriber._log is not None:
                subscriber._wake()

    def close(self) -> None:
        """The session ended: every subscription ends once drained."""
        self.closed = True
        subscribers, self.subscribers = self.subscribers, ()
        for subscriber in subscribers:
            subscriber._open = False
            subscriber._wake()


class SessionStream(Generic[T]):
    """A live subscription to a session's output: an async iterator that ends with the session.

    ``handle.partials()`` yields `Partial` items; ``handle.stream()`` yields the
    session's transition events (all of them, from the first) and its `Partial`
    items in one order: the partials of step ``seq`` before event ``seq``. Only
    partial items can be lost (see `Partial.dropped`); events never are.

    Close it (``close()``, or use it as a context manager) to unsubscribe before
    the session ends; an abandoned subscription only costs its bounded buffer
    until then.
    """

    __slots__ = (
        "_buffer",
        "_capacity",
        "_catch_up",
        "_dropped",
        "_hub",
        "_live",
        "_log",
        "_open",
        "_partials",
        "_pending",
        "_position",
        "_received",
        "_waiter",
    )

    def __init__(
        self,
        hub: PartialHub,
        capacity: int,
        log: Sequence[TransitionEvent] | None,
        *,
        catch_up: CatchUp | None = None,
        partials: bool = True,
    ) -> None:
        self._hub = hub
        self._capacity = capacity
        self._log = log
        self._partials = partials
        #: Fed live: the events committed since it subscribed, not read yet; the
        #: events before come from ``catch_up`` on the first receive.
        self._live: deque[TransitionEvent] | None = None if catch_up is None else deque()
        self._catch_up = catch_up
        #: Read in place: the index in ``log``; fed live: the last event number read.
        self._position = 0
        self._buffer: deque[Partial] = deque()
        self._open = True
        self._pending = 0
        self._dropped = 0
        self._received = 0
        self._waiter: anyio.Event | None = None

    # -- the publishing side (`StageScope.publish` fills the buffer; never waits) --

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    # -- the consuming side -----------------------------------------------------

    def receive_nowait(self) -> T:
        """Return the next item if one is ready.

        Raises:
            anyio.WouldBlock: If nothing is ready yet.
            anyio.EndOfStream: If the session ended (or the stream was closed)
                and everything has been read.
        """
        log = self._log
        buffer = self._buffer
        if log is not None and self._position < len(log):
            event = log[self._position]
            if not buffer or buffer[0].seq > event.seq:
                self._position += 1
                return event  # type: ignore[return-value]
        live = self._live
        if live is not None:
            if self._catch_up is not None:
                raise anyio.WouldBlock  # the earlier events are still to be read
            while live and live[0].seq <= self._position:
                live.popleft()  # read in the catch-up already
            if live:
                event = live[0]
                if not buffer or buffer[0].seq > event.seq:
                    live.popleft()
                    self._position = event.seq
                    return event  # type: ignore[return-value]
        if buffer:
            self._received += 1
            return buffer.popleft()  # type: ignore[return-value]
        if not self._open:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """Wait for the next item and return it.

        Raises:
            anyio.EndOfStream: Once the session ended and everything has been read.
        """
        await checkpoint_if_cancelled()
        if self._catch_up is not None:
            await self._read_earlier(self._catch_up)
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                if self._waiter is None:
                    self._waiter = anyio.Event()
                await self._waiter.wait()

    async def _read_earlier(self, catch_up: CatchUp) -> None:
        """Put the events committed before it subscribed ahead of those fed since."""
        earlier = await catch_up()
        live = self._live
        if live is None or self._catch_up is not catch_up:
            return  # closed (or caught up by another receiver) meanwhile
        self._catch_up = None
        first = live[0].seq if live else None
        live.extendleft(reversed([e for e in earlier if first is None or e.seq < first]))

    def __aiter__(self) -> SessionStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Unsubscribe and drop what is buffered; iteration then ends."""
        self._hub.unsubscribe(self)
        self._open = False
        self._buffer.clear()
        self._log = None
        self._live = None
        self._catch_up = None
        self._wake()

    async def aclose(self) -> None:
        """Close it (see `close`)."""
        self.close()

    def __enter__(self) -> SessionStream[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> SessionStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def statistics(self) -> SessionStreamStatistics:
        """Return a snapshot of this subscription's counters."""
        return SessionStreamStatistics(
            received=self._received,
            dropped=self._dropped,
            buffered=len(self._buffer),
            capacity=self._capacity,
            open=self._open,
        )

    def __repr__(self) -> str:
        state = "open" if self._open else "ended"
        return f"<SessionStream {self._hub.session_id!r} {state}>"
