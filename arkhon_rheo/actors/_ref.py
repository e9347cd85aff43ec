"""`ActorRef`, the handle through which everybody talks to an actor, and `Termination`.

A reference reaches its actor's cell through `CellView`, what it needs of a
cell, so this module sits below the cell that makes references. `Termination`
lives here because it names the reference of the actor that ended, and a
reference returns it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

import anyio

from .._construct import internal_only, make
from .._errors import ActorStopped, AskTimeout, ConfigurationError, MailboxClosed, MailboxFull

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._mailbox import MailboxSendStream, MailboxStatistics
    from ._records import ActorState, TerminationKind

__all__ = ["ActorRef", "Ask", "CellView", "Termination"]

M = TypeVar("M")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Termination:
    """The notice an actor's watchers receive when it ends.

    Attributes:
        actor: The reference of the actor that ended.
        kind: Why it ended.
        error: The exception that crashed it, for `TerminationKind.CRASHED`.
    """

    actor: ActorRef[Any, Any]
    kind: TerminationKind
    error: BaseException | None = None


class CellView(Protocol):
    """What a reference (and a context, through one) needs of its actor's cell."""

    @property
    def name(self) -> str:
        """The actor's name."""

    @property
    def state(self) -> ActorState:
        """The actor's lifecycle state."""

    @property
    def restarts(self) -> int:
        """How often the actor was restarted."""

    @property
    def ended(self) -> tuple[TerminationKind, BaseException | None] | None:
        """How the actor ended (its termination's kind and error), or ``None`` while it has not."""

    @property
    def ask_timeout(self) -> float:
        """The default timeout of an ask, in seconds."""

    @property
    def tx(self) -> MailboxSendStream[Any] | None:
        """The sending side of the actor's mailbox, once it is opened."""

    def mailbox(self) -> MailboxSendStream[Any]:
        """The sending side of the actor's mailbox, opened now if it is not yet."""

    @property
    def new_event(self) -> Callable[[], anyio.Event]:
        """Makes an event of the running backend, for an ask's reply."""

    def dead_letter(self, message: object) -> None:
        """Count and log ``message``, which reached no actor."""

    def request_stop(self) -> None:
        """Stop the actor once the messages already queued are handled."""

    def cancel(self) -> None:
        """Cancel the actor now."""

    async def wait_done(self) -> None:
        """Wait until the actor has ended."""

    def add_watcher(self, watcher: Self, ref: ActorRef[Any, Any]) -> None:
        """Tell ``watcher`` when this actor (whose reference is ``ref``) ends, at once if it has."""

    def remove_watcher(self, watcher: Self) -> None:
        """Stop telling ``watcher``."""


class Ask(Generic[M, R]):
    """A request in a mailbox together with the slot its reply goes into.

    Each ask owns its own slot, so a late reply can only ever reach the asker
    that made it; once the asker gives up the reply is dropped.
    """

    __slots__ = ("abandoned", "done", "error", "event", "message", "value")

    def __init__(self, message: M, event: anyio.Event) -> None:
        self.message = message
        self.event = event
        self.done = False
        self.abandoned = False
        self.value: R | None = None
        self.error: BaseException | None = None

    def set_value(self, value: R) -> None:
        if not self.done:
            self.done = True
            self.value = value
            self.event.set()

    def set_error(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.error = error
            self.event.set()


class ActorRef(Generic[M, R]):
    """A reference to an actor: send it messages, ask it, watch it, stop it.

    References are cheap, hashable and safe to share; they never keep an actor
    alive. Using one after its actor ended is not an error for ``tell`` (the
    message becomes a counted, logged dead letter) but is for ``ask``, which
    raises `ActorStopped` at once.
    """

    __slots__ = ("__weakref__", "_cell")

    _cell: CellView

    __init__ = internal_only("ActorSystem.spawn() returns one")

    @classmethod
    def _of(cls, cell: CellView) -> ActorRef[M, R]:
        """The reference to the actor in ``cell`` (the cell's only way to make it)."""
        return make(cls, _cell=cell)

    @property
    def name(self) -> str:
        """The actor's name."""
        return self._cell.name

    @property
    def state(self) -> ActorState:
        """The actor's lifecycle state."""
        return self._cell.state

    @property
    def restarts(self) -> int:
        """How often the actor was restarted by its failure policy."""
        return self._cell.restarts

    @property
    def termination(self) -> Termination | None:
        """How the actor ended, or ``None`` while it has not."""
        ended = self._cell.ended
        return None if ended is None else Termination(self, *ended)

    async def tell(self, message: M) -> None:
        """Send ``message``, waiting for room if the mailbox is full.

        If the actor has stopped, the message is counted and logged as a dead letter.
        """
        cell = self._cell
        try:
            await (cell.tx or cell.mailbox()).send(message)
        except MailboxClosed:
            cell.dead_letter(message)

    def tell_nowait(self, message: M) -> None:
        """Send ``message`` if the mailbox has room now.

        If the actor has stopped, the message is counted and logged as a dead letter.

        Raises:
            MailboxFull: If the mailbox is full; nothing was sent.
        """
        cell = self._cell
        try:
            (cell.tx or cell.mailbox()).send_nowait(message)
        except MailboxClosed:
            cell.dead_letter(message)

    async def ask(self, message: M, *, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """Send ``message`` and wait for the actor's reply.

        Args:
            message: The request.
            timeout: Seconds to wait, for room in the mailbox and for the reply
                together; ``None`` uses the system's default and ``math.inf`` waits
                for ever.

        Returns:
            What the actor's ``receive`` returned.

        Raises:
            AskTimeout: If no reply came in time; the request is withdrawn if the
                actor had not started on it.
            ActorStopped: If the actor has stopped, is stopping, or stops before replying.
            ConfigurationError: If ``timeout`` is negative or not a number.
            Exception: Whatever the actor's handler raised, with a note naming the actor.
        """
        cell = self._cell
        if timeout is None:
            timeout = cell.ask_timeout
        elif not (timeout >= 0):
            raise ConfigurationError(
                f"ask timeout must be a non-negative number of seconds, got {timeout!r}"
            )
        request: Ask[M, R] = Ask(message, cell.new_event())
        try:
            if timeout == math.inf:
                await self._ask(request)
            else:
                with anyio.move_on_after(timeout):
                    await self._ask(request)
        finally:
            if not request.done:
                request.abandoned = True
        if not request.done:
            raise AskTimeout(actor=cell.name, timeout=timeout)
        if request.error is not None:
            raise request.error
        return request.value  # type: ignore[return-value]

    async def _ask(self, request: Ask[M, R]) -> None:
        cell = self._cell
        tx = cell.tx or cell.mailbox()
        try:
            try:
                tx.send_nowait(request)
            except MailboxFull:
                await tx.send(request)
        except MailboxClosed:
            raise ActorStopped(actor=cell.name, detail=f"it is {cell.state.value}") from None
        await request.event.wait()

    def stop(self) -> None:
        """Ask the actor to stop once the messages already queued are handled.

        New messages are refused (dead letters, or `ActorStopped` for ``ask``).
        Use `wait_terminated` to wait for the end.
        """
        self._cell.request_stop()

    def cancel(self) -> None:
        """Cancel the actor now; queued messages become dead letters."""
        self._cell.cancel()

    async def wait_terminated(self) -> Termination:
        """Wait until the actor has ended and return how it ended."""
        cell = self._cell
        await cell.wait_done()
        assert cell.ended is not None
        return Termination(self, *cell.ended)

    def statistics(self) -> MailboxStatistics:
        """Return a snapshot of the actor's mailbox counters."""
        cell = self._cell
        return (cell.tx or cell.mailbox()).statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self._cell.name!r} {self._cell.state.value}>"
