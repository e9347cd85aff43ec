"""A bounded, single-consumer mailbox modelled on anyio's memory object streams.

``open_mailbox(capacity)`` returns a send side and a receive side. The send side
may be cloned (one clone per sender); the receive loop ends at end-of-stream once
every send clone is closed and the buffer is drained. Both sides warn with a
``ResourceWarning`` when garbage-collected unclosed.

The hot path avoids yielding to the event loop when it need not wait: a send with
room, or a receive with a message queued, completes at once. To stay fair and
cancellable it still checks for cancellation on every call and yields for real
every ``_FAST_PATH_BUDGET`` fast completions, so a busy actor can never starve the
other tasks of its event loop.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import anyio
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled

from .._errors import ConfigurationError, MailboxClosed, MailboxFull
from ._event import event_factory

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MailboxReceiveStream",
    "MailboxSendStream",
    "MailboxStatistics",
    "Waker",
    "open_mailbox",
]

T = TypeVar("T")

#: How many calls may complete without yielding before one yields for fairness.
_FAST_PATH_BUDGET = 16


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    """A snapshot of a mailbox's state.

    Attributes:
        name: The mailbox's name (its actor's name).
        queued: Messages waiting in the buffer now (urgent system messages included).
        capacity: The most messages the buffer holds before senders wait.
        received: Messages accepted into the mailbox since it was opened.
        delivered: Messages handed to the consumer since it was opened.
        dead_letters: Messages that could not be delivered: sent after the mailbox
            closed, or still queued when its consumer stopped.
        tasks_waiting_send: Senders waiting for room.
        open_send_streams: Send clones not yet closed.
        receive_open: Whether the consumer side is still open.
    """

    name: str
    queued: int
    capacity: int
    received: int
    delivered: int
    dead_letters: int
    tasks_waiting_send: int
    open_send_streams: int
    receive_open: bool


class Waker(Protocol):
    """Who waits for the receive side: woken once when an item (or the end) arrives.

    An `anyio.Event` is one (a consumer parked in `MailboxReceiveStream.receive`);
    so is an idle actor's cell, which the wake-up activates.
    """

    def set(self) -> None:
        """Wake up: the mailbox has something for the receiver (called once per wait)."""


class _Waiter(Generic[T]):
    """A sender parked until the consumer makes room for its item."""

    __slots__ = ("delivered", "event", "item")

    def __init__(self, item: T, event: anyio.Event) -> None:
        self.item = item
        self.event = event
        self.delivered = False


@dataclass(eq=False, slots=True)
class _State(Generic[T]):
    name: str
    capacity: int
    # A list, not a deque: an actor's mailbox mostly holds one message or none, and an
    # empty deque costs ~600 bytes against a list's ~60, for every actor alive (or ended
    # and still referenced). Taking from the front moves at most ``capacity`` pointers.
    buffer: list[T] = field(default_factory=list)
    # Rarely used, so made on first use: an empty deque costs ~600 bytes, and
    # idle actors by the ten thousand each have one of these states.
    urgent: deque[T] | None = None
    send_waiters: deque[_Waiter[T]] | None = None
    receive_waiter: Waker | None = None
    open_send_streams: int = 0
    receive_open: bool = True
    received: int = 0
    delivered: int = 0
    dead_letters: int = 0
    new_event: Callable[[], anyio.Event] = field(default_factory=event_factory)

    def wake_receiver(self) -> None:
        waiter = self.receive_waiter
        if waiter is not None:
            self.receive_waiter = None
            waiter.set()


class MailboxSendStream(Generic[T]):
    """The sending side of a mailbox. Clone it once per independent sender."""

    __slots__ = ("__weakref__", "_budget", "_closed", "_state")

    def __init__(self, state: _State[T]) -> None:
        self._state = state
        self._closed = False
        self._budget = _FAST_PATH_BUDGET  # fast completions left before one yields
        state.open_send_streams += 1

    @property
    def name(self) -> str:
        """The mailbox's name."""
        return self._state.name

    def clone(self) -> MailboxSendStream[T]:
        """Return another send side of the same mailbox.

        Raises:
            MailboxClosed: If this send side is already closed.
        """
        if self._closed:
            raise MailboxClosed(mailbox=self._state.name)
        return MailboxSendStream(self._state)

    def send_nowait(self, item: T) -> None:
        """Queue ``item`` if there is room now.

        Raises:
            MailboxFull: If the buffer is full (or other senders are already waiting,
                who go first).
            MailboxClosed: If this side or the receiving side is closed.
        """
        state = self._state
        if self._closed or not state.receive_open:
            raise MailboxClosed(mailbox=state.name)
        if len(state.buffer) >= state.capacity or state.send_waiters:
            raise MailboxFull(mailbox=state.name, capacity=state.capacity)
        state.buffer.append(item)
        state.received += 1
        state.wake_receiver()

    async def send(self, item: T) -> None:
        """Queue ``item``, waiting for room if the buffer is full.

        Waiting senders are served first come, first served. A call cancelled
        before it starts sends nothing. Cancelled while waiting for room, it
        raises the cancellation; the item was withdrawn unless the consumer had
        already taken it in (as with anyio's memory streams, a cancelled send
        that was waiting may still have delivered).

        Raises:
            MailboxClosed: If this side or the receiving side is closed, including
                while waiting.
        """
        await checkpoint_if_cancelled()
        try:
            self.send_nowait(item)
        except MailboxFull:
            pass
        else:
            self._budget -= 1
            if not self._budget:
                self._budget = _FAST_PATH_BUDGET
                await cancel_shielded_checkpoint()  # sent: a cancellation now must not undo it
            return

        state = self._state
        waiter = _Waiter(item, state.new_event())
        waiters = state.send_waiters
        if waiters is None:
            waiters = state.send_waiters = deque()
        waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if not waiter.delivered:
                with contextlib.suppress(ValueError):
                    waiters.remove(waiter)
            raise
        if not waiter.delivered:
            raise MailboxClosed(mailbox=state.name)

    def close(self) -> None:
        """Close this send side; the receiver sees end-of-stream after the last one."""
        if self._closed:
            return
        self._closed = True
        state = self._state
        state.open_send_streams -= 1
        if state.open_send_streams == 0:
            state.wake_receiver()

    async def aclose(self) -> None:
        """Close this send side (see `close`)."""
        self.close()
        await checkpoint()

    def statistics(self) -> MailboxStatistics:
        """Return a snapshot of the mailbox's counters."""
        return _statistics(self._state)

    def _send_urgent(self, item: T) -> None:
        """Queue ``item`` ahead of ordinary messages, ignoring capacity.

        Used by the actor runtime for its few system messages (termination
        notices), which must never be refused for want of room.

        Raises:
            MailboxClosed: If the receiving side is closed.
        """
        state = self._state
        if not state.receive_open:
            raise MailboxClosed(mailbox=state.name)
        if state.urgent is None:
            state.urgent = deque()
        state.urgent.append(item)
        state.received += 1
        state.wake_receiver()

    def __enter__(self) -> MailboxSendStream[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"unclosed send side of mailbox {self._state.name!r}",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )


class MailboxReceiveStream(Generic[T]):
    """The receiving side of a mailbox: one consumer, iterate with ``async for``."""

    __slots__ = ("__weakref__", "_budget", "_state")

    def __init__(self, state: _State[T]) -> None:
        self._state = state
        self._budget = _FAST_PATH_BUDGET  # fast completions left before one yields

    @property
    def name(self) -> str:
        """The mailbox's name."""
        return self._state.name

    def receive_nowait(self) -> T:
        """Take the next message if one is queued.

        Raises:
            anyio.WouldBlock: If nothing is queued and senders remain open.
            anyio.EndOfStream: If nothing is queued and every sender is closed.
            MailboxClosed: If this side is closed.
        """
        state = self._state
        if state.urgent:
            state.delivered += 1
            return state.urgent.popleft()
        if state.buffer:
            item = state.buffer.pop(0)
            state.delivered += 1
            if state.send_waiters:
                waiter = state.send_waiters.popleft()
                waiter.delivered = True
                state.buffer.append(waiter.item)
                state.received += 1
                waiter.event.set()
            return item
        if not state.receive_open:
            raise MailboxClosed(mailbox=state.name)
        if state.open_send_streams == 0:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """Take the next message, waiting for one if none is queued.

        Raises:
            anyio.EndOfStream: Once every sender is closed and the buffer is empty.
            MailboxClosed: If this side is closed.
        """
        state = self._state
        await checkpoint_if_cancelled()  # before taking anything: nothing is lost
        while True:
            if state.urgent or state.buffer:
                item = self.receive_nowait()
                self._budget -= 1
                if not self._budget:
                    self._budget = _FAST_PATH_BUDGET
                    await cancel_shielded_checkpoint()  # taken: a cancellation must not lose it
                return item
            if not state.receive_open:
                raise MailboxClosed(mailbox=state.name)
            if state.open_send_streams == 0:
                raise anyio.EndOfStream
            if state.receive_waiter is not None:
                raise anyio.BusyResourceError("receiving from")
            event = state.receive_waiter = state.new_event()
            try:
                await event.wait()
            finally:
                if state.receive_waiter is event:
                    state.receive_waiter = None

    def __aiter__(self) -> MailboxReceiveStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> list[T]:
        """Close the mailbox for good and return what was still queued.

        Senders waiting for room are woken with `MailboxClosed`; later sends raise
        it. The returned messages are counted as dead letters.
        """
        state = self._state
        if not state.receive_open:
            return []
        state.receive_open = False
        leftover = [*(state.urgent or ()), *state.buffer]
        state.urgent = None
        state.buffer.clear()
        # Parked senders are woken with MailboxClosed: they still hold their items
        # and know they were not delivered, so those are not counted here.
        while state.send_waiters:
            state.send_waiters.popleft().event.set()
        state.dead_letters += len(leftover)
        state.wake_receiver()
        return leftover

    async def aclose(self) -> None:
        """Close the mailbox for good, discarding what was queued (see `close`)."""
        self.close()
        await checkpoint()

    def statistics(self) -> MailboxStatistics:
        """Return a snapshot of the mailbox's counters."""
        return _statistics(self._state)

    def _count_dead_letter(self) -> None:
        self._state.dead_letters += 1

    def __del__(self) -> None:
        if self._state.receive_open:
            warnings.warn(
                f"unclosed receive side of mailbox {self._state.name!r}",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )


def _statistics(state: _State[T]) -> MailboxStatistics:
    return MailboxStatistics(
        name=state.name,
        queued=len(state.buffer) + len(state.urgent or ()),
        capacity=state.capacity,
        received=state.received,
        delivered=state.delivered,
        dead_letters=state.dead_letters,
        tasks_waiting_send=len(state.send_waiters or ()),
        open_send_streams=state.open_send_streams,
        receive_open=state.receive_open,
    )


class open_mailbox(tuple[MailboxSendStream[T], MailboxReceiveStream[T]]):
    """Open a bounded mailbox and return its send and receive sides.

    Subscript it to name the item type, as with anyio's memory object streams:
    ``tx, rx = open_mailbox[Request](64, name="worker")``. It takes the
    ``capacity`` (the most messages queued before senders wait) and an optional
    ``name``; see `__new__`.
    """

    def __new__(  # type: ignore[misc]
        cls,
        capacity: int,
        *,
        name: str = "mailbox",
        new_event: Callable[[], anyio.Event] | None = None,
    ) -> tuple[MailboxSendStream[T], MailboxReceiveStream[T]]:
        """Open the mailbox: ``open_mailbox(capacity, name=...)`` calls this.

        Args:
            capacity: The most messages queued before senders wait; at least 1.
            name: A name for error messages and statistics.
            new_event: Makes its events (an `event_factory`'s, which a caller
                opening many mailboxes keeps); by default one of its own.

        Returns:
            The send side and the receive side of one new mailbox.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(
                f"mailbox capacity must be a positive integer, got {capacity!r}; "
                "use a larger bound rather than an unbounded mailbox"
            )
        state: _State[T] = (
            _State(name=name, capacity=capacity)
            if new_event is None
            else _State(name=name, capacity=capacity, new_event=new_event)
        )
        return MailboxSendStream(state), MailboxReceiveStream(state)
