"""`ActorSystem`, the async context manager whose task group runs every actor, and `Actor`.

`Actor`, its `ActorContext` and the system live together: a context hands an
actor its system, and the system spawns actors.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, TypeVar, TypeVarTuple

import anyio

from .._errors import ActorStopped, ConfigurationError, SystemNotRunning
from ._cell import Cell, CellHost
from ._end import finish
from ._event import event_factory

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from anyio.abc import TaskGroup

    from ._behaviour import Behaviour
    from ._records import FailurePolicy, TerminationKind
    from ._ref import ActorRef, Termination

__all__ = ["Actor", "ActorContext", "ActorSystem", "SystemState", "SystemStatistics"]

M = TypeVar("M")
R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class SystemState(enum.Enum):
    """Where an `ActorSystem` is in its life."""

    #: Constructed; ``async with`` has not entered it yet.
    NEW = "new"
    #: Inside its ``async with`` block: actors may be spawned.
    RUNNING = "running"
    #: Leaving the block: actors drain their mailboxes, then are cancelled.
    STOPPING = "stopping"
    #: Left the block: every actor has ended. It cannot be entered again.
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class SystemStatistics:
    """A snapshot of an actor system's counters.

    Attributes:
        state: The system's lifecycle state.
        alive: Actors that have not ended yet.
        spawned: Actors spawned since the system started.
        dead_letters: Messages that reached no actor, over all actors.
    """

    state: SystemState
    alive: int
    spawned: int
    dead_letters: int


def _check_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(
            f"{name} must be a non-negative number of seconds (math.inf for no limit), "
            f"got {value!r}"
        )
    return float(value)


class ActorContext(Generic[M, R]):
    """What an actor may know and do about itself and its system.

    Attributes:
        ref: This actor's own reference.
        system: The actor system it runs in.
    """

    __slots__ = ("_cell", "ref", "system")

    def __init__(self, cell: Cell[M, R], system: ActorSystem) -> None:
        ref = cell.ref
        assert ref is not None  # a context is made for a live actor, which has its ref
        self._cell = cell
        self.ref: ActorRef[M, R] = ref
        self.system = system

    @property
    def name(self) -> str:
        """This actor's name."""
        return self._cell.name

    def watch(self, other: ActorRef[Any, Any]) -> None:
        """Receive `Actor.on_terminated` when ``other`` ends.

        If ``other`` has already ended, the notice arrives at once.
        """
        other._cell.add_watcher(self._cell, other)

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
        if self._cell.cancelled:
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

    # None of its own: a subclass without ``__slots__`` has a ``__dict__`` as usual,
    # one with them (an actor there are many of) need not.
    __slots__ = ()

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


class ActorSystem:
    """Owns a task group in which every actor of the system runs.

    An actor holds no task while its mailbox is empty: the mail that finds it
    idle starts a task in this group that handles its messages, one at a time
    and in order, and ends once none is left (an idle actor costs its cell,
    reference and instance, and its mailbox once mail has come: no task).

    Use it as an async context manager inside your own event loop, on asyncio
    or trio. Leaving the block stops every actor: each finishes the messages
    already queued, for up to ``shutdown_timeout`` seconds, and whatever is
    still running then is cancelled. No task outlives the block. If the block
    raises, actors are cancelled at once. An actor's escalated error
    (`ActorContext.escalate`) cancels the block and every actor, and leaves the
    block in a ``BaseExceptionGroup``.

    Args:
        name: A label for logs.
        mailbox_capacity: The default bound of each actor's mailbox.
        ask_timeout: The default timeout of ``ActorRef.ask``, in seconds.
        shutdown_timeout: How long a graceful stop may take before actors are
            cancelled, in seconds; also bounds each ``on_stop`` hook under a
            forced shutdown.

    Raises:
        ConfigurationError: If a capacity or timeout is out of range.
    """

    def __init__(
        self,
        *,
        name: str = "arkhon",
        mailbox_capacity: int = 1024,
        ask_timeout: float = 30.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        if (
            isinstance(mailbox_capacity, bool)
            or not isinstance(mailbox_capacity, int)
            or mailbox_capacity < 1
        ):
            raise ConfigurationError(
                f"mailbox_capacity must be a positive integer, got {mailbox_capacity!r}"
            )
        self.name = name
        self.mailbox_capacity = mailbox_capacity
        self.ask_timeout = _check_seconds("ask_timeout", ask_timeout)
        self._host = CellHost(_check_seconds("shutdown_timeout", shutdown_timeout))
        self._state = SystemState.NEW
        self._task_group: TaskGroup | None = None
        self._ids = itertools.count(1)
        self._spawned = 0

    @property
    def shutdown_timeout(self) -> float:
        """How long a graceful stop may take before actors are cancelled, in seconds."""
        return self._host.shutdown_timeout

    @shutdown_timeout.setter
    def shutdown_timeout(self, value: float) -> None:
        self._host.shutdown_timeout = _check_seconds("shutdown_timeout", value)

    @property
    def state(self) -> SystemState:
        """The system's lifecycle state."""
        return self._state

    async def __aenter__(self) -> ActorSystem:
        if self._state is not SystemState.NEW:
            raise SystemNotRunning(
                f"cannot enter actor system {self.name!r} again: it is {self._state.value}; "
                "create a new ActorSystem instead"
            )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = self._host.group = task_group
        self._host.new_event = event_factory()  # one for all the mailboxes of its actors
        self._state = SystemState.RUNNING
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None
        self._state = SystemState.STOPPING
        drain_error: BaseException | None = None
        if exc is None:
            try:
                await self._drain()
            except BaseException as error:  # e.g. the host cancelled us while draining
                drain_error = error
                exc_type, exc, tb = type(error), error, error.__traceback__
        task_group.cancel_scope.cancel()
        self._host.closing = True  # an actor that would go idle now ends instead
        for cell in list(self._host.cells):
            if not cell.active:  # idle, so no task to cancel: an activation ends it
                cell.cancel()
        try:
            suppressed = await task_group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # Actor tasks never raise (their errors end the actor), so a group holds
            # only the block's own error: let that propagate as it was raised.
            if exc is not None and all(error is exc for error in group.exceptions):
                if drain_error is not None:
                    raise drain_error from None
                return False
            raise
        finally:
            self._state = SystemState.CLOSED
        if drain_error is not None and not suppressed:
            raise drain_error
        return suppressed

    async def _drain(self) -> None:
        """Ask every actor to stop, and wait for them up to the shutdown timeout."""
        with anyio.move_on_after(self.shutdown_timeout):
            # Stopping one actor may make another spawn or stop more: loop until none is left.
            while self._host.cells:
                cells = list(self._host.cells)
                for cell in cells:
                    cell.request_stop()
                for cell in cells:
                    await cell.wait_done()

    async def spawn(
        self,
        factory: Callable[[*Ts], Actor[M, R]],
        *args: *Ts,
        name: str | None = None,
        mailbox_capacity: int | None = None,
        ask_timeout: float | None = None,
        on_failure: FailurePolicy | None = None,
    ) -> ActorRef[M, R]:
        """Start an actor and return its reference once it is ready.

        ``factory(*args)`` builds the actor (a subclass of `Actor`, or any
        callable returning one); its ``on_start`` has run when this returns, and
        its mailbox already accepts messages.

        Args:
            factory: Builds the actor instance; called again on a restart.
            *args: Positional arguments for ``factory``.
            name: The actor's name in logs and errors; defaults to the class name
                and a number.
            mailbox_capacity: The bound of its mailbox; defaults to the system's.
            ask_timeout: The default timeout of asks to it; defaults to the system's.
            on_failure: Decides what happens when its handler raises; by default
                the actor stops (`Directive.STOP`).

        Returns:
            The actor's reference.

        Raises:
            SystemNotRunning: If the system is not inside its ``async with`` block.
            ConfigurationError: If a capacity or timeout is out of range.
            Exception: Whatever the actor's ``on_start`` raised.
        """
        if name is None:
            name = f"{getattr(factory, '__name__', 'actor')}-{next(self._ids)}"
        cell = self._new_cell(factory, name, mailbox_capacity, ask_timeout, on_failure, args)
        ref = cell.ref  # the cell lets go of it once the actor ends, which may be before we return
        assert ref is not None
        cells = self._host.cells
        starting = cell.starting()
        try:
            cell.activate()  # the first activation starts the actor
            await starting.event.wait()
        except BaseException:
            # Cancelled while the actor starts: as with a task group's ``start``,
            # the actor is cancelled too, and has ended when this raises.
            cells.pop(cell, None)
            cell.cancel()
            with anyio.CancelScope(shield=True):
                await cell.wait_done()
            raise
        if not starting.started:
            cells.pop(cell, None)
            if starting.error is not None:
                raise starting.error
            raise ActorStopped(actor=name, detail="ended before it started")
        return ref

    def _new_cell(
        self,
        factory: Callable[..., Actor[M, R]] | Actor[M, R],
        name: str,
        mailbox_capacity: int | None,
        ask_timeout: float | None = None,
        on_failure: FailurePolicy | None = None,
        args: tuple[Any, ...] = (),
        prefix: str | None = None,
    ) -> Cell[M, R]:
        """A new cell for ``factory``'s actor, listed as alive, not yet started (see `spawn`)."""
        if self._state is not SystemState.RUNNING or self._task_group is None:
            raise SystemNotRunning(
                f"cannot spawn in actor system {self.name!r}: it is {self._state.value}; "
                "spawn inside its `async with` block"
            )
        capacity = self.mailbox_capacity if mailbox_capacity is None else mailbox_capacity
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(
                f"mailbox_capacity must be a positive integer, got {capacity!r}"
            )
        timeout = (
            self.ask_timeout if ask_timeout is None else _check_seconds("ask_timeout", ask_timeout)
        )
        cell: Cell[M, R] = _SystemCell(
            self,
            factory,
            tuple(args),
            name=name,
            capacity=capacity,
            ask_timeout=timeout,
            on_failure=on_failure,
            prefix=prefix,
        )
        self._host.cells[cell] = None
        self._spawned += 1
        return cell

    def statistics(self) -> SystemStatistics:
        """Return a snapshot of the system's counters."""
        return SystemStatistics(
            state=self._state,
            alive=len(self._host.cells),
            spawned=self._spawned,
            dead_letters=self._host.dead_letters,
        )

    def __repr__(self) -> str:
        return f"<ActorSystem {self.name!r} {self._state.value} alive={len(self._host.cells)}>"


class _SystemCell(Cell[M, R]):
    """A cell of an `ActorSystem`: makes its actor from the spawner's factory, with a context."""

    __slots__ = ("_args", "_factory", "_system")

    # What its actor is made from: a factory and its arguments, or (`spawn_here`) the
    # actor itself, made by its spawner. Let go of once the actor has ended: the actor
    # may refer to its reference, which refers to this cell, and no cycle may be kept.
    _factory: Callable[..., Actor[M, R]] | Actor[M, R] | None

    def __init__(
        self,
        system: ActorSystem,
        factory: Callable[..., Actor[M, R]] | Actor[M, R],
        args: tuple[Any, ...],
        *,
        name: str,
        capacity: int,
        ask_timeout: float,
        on_failure: FailurePolicy | None,
        prefix: str | None = None,
    ) -> None:
        self._system = system
        self._factory = factory
        self._args = args
        super().__init__(
            system._host,
            name=name,
            capacity=capacity,
            ask_timeout=ask_timeout,
            on_failure=on_failure,
            prefix=prefix,
        )

    def new_actor(self) -> Actor[M, R]:
        """Make a fresh instance from the factory (or take the one given); give it its context."""
        factory = self._factory
        assert factory is not None  # an ended actor makes no new instance
        actor = factory if isinstance(factory, Actor) else factory(*self._args)
        actor.context = ActorContext(self, self._system)  # type: ignore[misc]
        return actor

    async def _finish(
        self, actor: Behaviour[M, R] | None, kind: TerminationKind, error: BaseException | None
    ) -> None:
        """`Cell._finish`, letting go of what the actor was made from first."""
        self._factory, self._args = None, ()
        await finish(self, actor, kind, error)
