"""The `Actor` base class, its context, and the records of how an actor ended."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, TypeVar

if TYPE_CHECKING:
    from ._cell import Cell
    from ._ref import ActorRef
    from ._system import ActorSystem

__all__ = ["Actor", "ActorContext", "Directive", "FailurePolicy", "Termination", "TerminationKind"]

M = TypeVar("M")
R = TypeVar("R")


class TerminationKind(enum.Enum):
    """Why an actor ended."""

    #: It was asked to stop and finished the messages queued before that.
    NORMAL = "normal"
    #: Its handler or one of its hooks raised; ``Termination.error`` holds the exception.
    CRASHED = "crashed"
    #: It was cancelled (``ActorRef.cancel()`` or a forced system shutdown).
    CANCELLED = "cancelled"


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


class Directive(enum.Enum):
    """What to do with an actor whose handler raised an ``Exception``.

    Cancellation is never offered to a failure policy: it always propagates.
    """

    #: End the actor, with the exception as its termination reason.
    STOP = "stop"
    #: Replace the instance by a fresh one from its factory and go on with the
    #: queued messages. The new instance's `Actor.on_restart` runs first.
    RESTART = "restart"


#: Decides, from the exception a handler raised, what becomes of the actor.
FailurePolicy = Callable[[Exception], Directive]


class ActorContext(Generic[M, R]):
    """What an actor may know and do about itself and its system.

    Attributes:
        ref: This actor's own reference.
        system: The actor system it runs in.
    """

    __slots__ = ("_cell", "ref", "system")

    def __init__(self, cell: Cell[M, R], system: ActorSystem) -> None:
        self._cell = cell
        self.ref: ActorRef[M, R] = cell.ref
        self.system = system

    @property
    def name(self) -> str:
        """This actor's name."""
        return self._cell.name

    def watch(self, other: ActorRef[Any, Any]) -> None:
        """Receive `Actor.on_terminated` when ``other`` ends.

        If ``other`` has already ended, the notice arrives at once.
        """
        other._cell.add_watcher(self._cell)

    def unwatch(self, other: ActorRef[Any, Any]) -> None:
        """Stop watching ``other``; a notice already queued is still delivered."""
        other._cell.remove_watcher(self._cell)

    @property
    def pending(self) -> int:
        """Messages waiting in this actor's mailbox, system notices included."""
        return self._cell.pending()

    @property
    def cancel_called(self) -> bool:
        """Whether this actor, or its whole system, was cancelled: a check without a checkpoint.

        An actor that runs several steps of its own between awaits reads it to
        stop at once; the cancellation is delivered at its next checkpoint.
        It reports `ActorRef.cancel` and the cancellation of the system's task
        group (the system's block left, an escalated error); a scope around the
        system's block is seen at the actor's next checkpoint only.
        """
        scope = self._cell._scope
        if scope is not None and scope.cancel_called:
            return True
        group = self.system._task_group
        return group is not None and group.cancel_scope.cancel_called

    def stop(self) -> None:
        """Stop this actor once the messages already queued are handled."""
        self._cell.request_stop()

    def escalate(self, error: BaseException) -> NoReturn:
        """End this actor by raising ``error`` out of its system's ``async with`` block.

        Unlike an error left to its failure policy, or a stray ``BaseException``
        (both end just this actor), an escalated error is not contained: the actor
        ends as `TerminationKind.CRASHED` (its ``on_stop`` runs first, and an
        ``ask`` it was answering fails with `ActorStopped`), then the error
        cancels the system's block and every other actor, and leaves the block
        in a ``BaseExceptionGroup``, as a task group's child error does. Call it
        from the actor's own task, for an error that must stop the program (an
        interrupt, an exit request).

        Raises:
            BaseException: ``error``, always.
        """
        self._cell.escalated = error
        raise error


class Actor(Generic[M, R]):
    """Base class of actors: subclass it and implement `receive`.

    An actor handles one message at a time, in the order its mailbox received
    them. ``M`` is the type of messages it accepts and ``R`` the type of its
    replies to ``ask``. Its `context` is set before `on_start` runs.
    """

    context: ActorContext[M, R]
    #: Whether `on_stop` bounds every wait of its own (the library's supervisors
    #: do). If not, the cell runs it within the system's shutdown timeout, which
    #: costs a timer per ended actor (on asyncio a cancelled one stays in the
    #: loop's heap until it is due).
    _on_stop_bounded: ClassVar[bool] = False

    async def on_start(self) -> None:
        """Run once before the first message; the spawner waits for it.

        If it raises, the actor never starts and ``spawn`` re-raises the error.
        """

    async def receive(self, message: M) -> R:
        """Handle one message and return the reply an ``ask`` gets.

        An ``Exception`` raised here crashes the actor (or restarts it, per its
        failure policy); for an ``ask`` it is also re-raised at the caller.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement receive()")

    async def on_terminated(self, notice: Termination) -> None:
        """Handle the end of an actor this one watches (see `ActorContext.watch`)."""

    async def on_restart(self, error: Exception) -> None:
        """Run on the fresh instance that replaces a crashed one, before it continues.

        The default calls `on_start`.
        """
        await self.on_start()

    async def on_stop(self, termination: Termination) -> None:
        """Run once when the actor ends, whatever the reason.

        Under a forced shutdown it runs shielded from cancellation, but only up
        to the system's shutdown timeout.
        """
