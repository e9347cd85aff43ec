"""The partial-output hub: a session's subscribers, and the scope each stage attempt emits in.

The supervisor makes one `PartialHub` per session and opens a `StageScope`
of it around each attempt of each stage; `emit` (``arkhon_rheo.protocols``)
publishes into the scope it finds in the running task, and each
`Subscription` (what ``handle.partials()`` and ``handle.stream()`` return:
a `SessionStream`) buffers what reaches it. The contract they keep (drop the
newest piece for a full subscriber only, never wait, never raise) is drawn
in ``arkhon_rheo.protocols``, beside `emit` and `Partial`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
from anyio.lowlevel import checkpoint_if_cancelled

from .._errors import ConfigurationError
from .._hooks import STAGE_SCOPE
from ..protocols import Partial, SessionStreamStatistics

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from contextvars import Token
    from types import TracebackType
    from typing import TypeAlias

    from .._hooks import OutputScope
    from ..protocols import TransitionEvent

    #: Returns the events a session committed so far (read from its store).
    CatchUp: TypeAlias = Callable[[], Awaitable[Sequence[TransitionEvent]]]

__all__ = ["DEFAULT_CAPACITY", "PartialHub", "StageScope", "Subscription"]

T = TypeVar("T")

#: The buffer bound of a subscription unless the caller picks one.
DEFAULT_CAPACITY = 256


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

    @property
    def session_id(self) -> str:
        """The session the stage runs in (a tool's `ToolContext` reads it)."""
        return self.hub.session_id

    def open(self) -> Token[OutputScope | None]:
        """Make this the scope the current context publishes to; `close` undoes it."""
        return STAGE_SCOPE.set(self)

    def close(self, token: Token[OutputScope | None]) -> None:
        """Restore the scope ``token`` replaced; nothing is published here after this."""
        try:
            STAGE_SCOPE.reset(token)
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
        self.subscribers: tuple[Subscription[Any], ...] = ()
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
    ) -> Subscription[Any]:
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
        stream: Subscription[Any] = Subscription(
            self, capacity, log, catch_up=catch_up, partials=partials
        )
        if self.closed:
            stream._open = False
        else:
            self.subscribers = (*self.subscribers, stream)
        return stream

    def unsubscribe(self, stream: Subscription[Any]) -> None:
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


class Subscription(Generic[T]):
    """A live subscription to a session's output (a `SessionStream`): it ends with the session.

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

    def __aiter__(self) -> Subscription[T]:
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

    def __enter__(self) -> Subscription[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Subscription[T]:
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
