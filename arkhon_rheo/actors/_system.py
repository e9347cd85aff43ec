"""`ActorSystem`: the async context manager that owns every actor's task."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

import anyio

from .._errors import ConfigurationError, SystemNotRunning
from ._cell import Cell

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from anyio.abc import TaskGroup

    from ._actor import Actor, FailurePolicy
    from ._ref import ActorRef

__all__ = ["ActorSystem", "SystemState", "SystemStatistics"]

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


class ActorSystem:
    """Owns a task group in which every actor of the system runs.

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
        self.shutdown_timeout = _check_seconds("shutdown_timeout", shutdown_timeout)
        self._state = SystemState.NEW
        self._task_group: TaskGroup | None = None
        self._cells: dict[Cell[Any, Any], None] = {}
        self._ids = itertools.count(1)
        self._spawned = 0
        self._dead_letters = 0

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
        self._task_group = task_group
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
            while self._cells:
                cells = list(self._cells)
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
        if name is None:
            label = getattr(factory, "__name__", "actor")
            name = f"{label}-{next(self._ids)}"
        cell: Cell[M, R] = Cell(
            self,
            factory,
            tuple(args),
            name=name,
            capacity=capacity,
            ask_timeout=timeout,
            on_failure=on_failure,
        )
        self._cells[cell] = None
        self._spawned += 1
        try:
            ref: ActorRef[M, R] = await self._task_group.start(cell.run, name=f"actor:{name}")
        except BaseException:
            self._cells.pop(cell, None)
            raise
        return ref

    def statistics(self) -> SystemStatistics:
        """Return a snapshot of the system's counters."""
        return SystemStatistics(
            state=self._state,
            alive=len(self._cells),
            spawned=self._spawned,
            dead_letters=self._dead_letters,
        )

    def _forget(self, cell: Cell[Any, Any]) -> None:
        self._cells.pop(cell, None)

    def _count_dead_letter(self) -> None:
        self._dead_letters += 1

    def __repr__(self) -> str:
        return f"<ActorSystem {self.name!r} {self._state.value} alive={len(self._cells)}>"
