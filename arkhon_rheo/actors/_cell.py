"""The cell: the task that runs one actor, its mailbox and its lifecycle.

A cell knows its actor through `Behaviour` (the hooks it calls) and its system
through `CellHost` (where it is listed while alive and counts its dead
letters); the system's own cell class says how an actor is made
(`Cell.new_actor`). So this module imports nothing above it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import anyio

from .._errors import ActorStopped, ConfigurationError, MailboxClosed
from .._log import get_logger
from ._event import LazyEvent
from ._mailbox import MailboxReceiveStream, MailboxSendStream, open_mailbox
from ._records import ActorState, Directive, FailurePolicy, TerminationKind
from ._ref import ActorRef, Ask, Termination

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio import TaskHandle


__all__ = ["Behaviour", "Cell", "CellHost", "Starting"]

M = TypeVar("M")
R = TypeVar("R")
M_contra = TypeVar("M_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)

_logger = get_logger("arkhon_rheo.actors")


class Behaviour(Protocol[M_contra, R_co]):
    """What a cell needs of the actor it runs (`Actor` is one)."""

    #: Whether `on_stop` bounds its own waits (see `Actor`).
    _on_stop_bounded: ClassVar[bool]

    async def on_start(self) -> None:
        """Run once before the first message."""

    async def receive(self, message: M_contra) -> R_co:
        """Handle one message."""

    async def on_terminated(self, notice: Termination) -> None:
        """Handle the end of a watched actor."""

    async def on_restart(self, error: Exception) -> None:
        """Run on a fresh instance replacing a crashed one."""

    async def on_stop(self, termination: Termination) -> None:
        """Run once when the actor ends."""


class CellHost:
    """What a cell needs of the system it runs in; the system keeps one for all its cells.

    Attributes:
        cells: The cells whose actor has not ended yet, in spawn order.
        dead_letters: Messages that reached no actor, over all the cells.
        shutdown_timeout: Bounds an ``on_stop`` hook that does not bound its
            own waits, in seconds.
    """

    __slots__ = ("cells", "dead_letters", "shutdown_timeout")

    def __init__(self, shutdown_timeout: float) -> None:
        self.cells: dict[Cell[Any, Any], None] = {}
        self.dead_letters = 0
        self.shutdown_timeout = shutdown_timeout


class _Notice:
    """A system message carrying a watched actor's termination."""

    __slots__ = ("termination",)

    def __init__(self, termination: Termination) -> None:
        self.termination = termination


class Starting:
    """A spawner's wait for its actor to start: set once it runs, or ended without running.

    Attributes:
        event: Set when the actor runs (its ``on_start`` has returned) or has ended.
        started: Whether it runs.
        error: What its ``on_start`` raised, for the spawner to raise.
    """

    __slots__ = ("error", "event", "started")

    def __init__(self, event: anyio.Event) -> None:
        self.event = event
        self.started = False
        self.error: Exception | None = None


class Cell(Generic[M, R]):
    """Runs one actor: creates its mailbox, loops over messages, reports its end.

    A subclass says how the actor is made (`new_actor`).

    An ended cell keeps how it ended (`ended`), not a `Termination`, and lets go
    of its reference (`ref`): a termination names the reference, and the
    reference its cell, so either kept would make a reference cycle, and an
    ended actor (with all it holds: a whole session) would wait for the cyclic
    GC instead of being freed as soon as it is dropped. A reference builds its
    termination when asked.

    Attributes:
        ref: The actor's reference, until the actor has ended.
        ended: How the actor ended (its termination's kind and error), or
            ``None`` while it has not.
        task: The handle of the actor's task while it runs (its cancel scope is
            the actor's: `cancel` cancels it).
        cancelled: Whether `cancel` has cancelled the actor's task.
    """

    __slots__ = (
        "_done",
        "_host",
        "_on_failure",
        "_starting",
        "_watchers",
        "_watching",
        "ask_timeout",
        "cancelled",
        "ended",
        "escalated",
        "name",
        "new_event",
        "ref",
        "restarts",
        "rx",
        "state",
        "task",
        "tx",
    )

    # The mailbox carries the actor's messages, its asks and system notices.
    tx: MailboxSendStream[Any]
    rx: MailboxReceiveStream[Any]

    def __init__(
        self,
        host: CellHost,
        *,
        name: str,
        capacity: int,
        ask_timeout: float,
        on_failure: FailurePolicy | None,
    ) -> None:
        self._host = host
        self._on_failure = on_failure
        # The task's own handle: anyio gives each task a cancel scope of its own,
        # so the actor needs none besides (~0.6 KB on asyncio, kept for its life).
        self.task: TaskHandle[None] | None = None
        self.cancelled = False
        self._watchers: dict[Cell[Any, Any], None] = {}
        self._watching: dict[Cell[Any, Any], None] = {}
        self.name = name
        self.ask_timeout = ask_timeout
        self.state = ActorState.STARTING
        # The mailbox exists from the start, so a stop requested while the actor is
        # still starting (or before its task runs) has something to close.
        self.tx, self.rx = open_mailbox(capacity, name=name)
        self.new_event: Callable[[], anyio.Event] = self.tx._state.new_event
        self._done = LazyEvent()  # set once the actor has ended
        self._starting: Starting | None = None  # the spawner's wait, until the actor runs
        self.ended: tuple[TerminationKind, BaseException | None] | None = None
        self.restarts = 0
        self.escalated: BaseException | None = None  # see ActorContext.escalate
        self.ref: ActorRef[M, R] | None = ActorRef._of(self)

    # -- called from other tasks -------------------------------------------------

    def request_stop(self) -> None:
        if self.state in (ActorState.STARTING, ActorState.RUNNING):
            self.state = ActorState.STOPPING
            self.tx.close()

    def cancel(self) -> None:
        task = self.task
        if task is not None:
            self.cancelled = True
            task.cancel()

    def add_watcher(self, watcher: Cell[Any, Any], ref: ActorRef[Any, Any]) -> None:
        ended = self.ended
        if ended is not None:
            watcher.notify(Termination(ref, *ended))
        else:
            self._watchers[watcher] = None
            watcher._watching[self] = None

    def remove_watcher(self, watcher: Cell[Any, Any]) -> None:
        self._watchers.pop(watcher, None)
        watcher._watching.pop(self, None)

    def notify(self, termination: Termination) -> None:
        with contextlib.suppress(MailboxClosed):  # the watcher ended: nobody left to tell
            self.tx._send_urgent(_Notice(termination))

    def pending(self) -> int:
        state = self.rx._state
        return len(state.buffer) + len(state.urgent or ())

    async def wait_done(self) -> None:
        """Wait until the actor has ended."""
        done = self._done
        if not done.is_set():
            await done.wait(self.new_event)

    def dead_letter(self, message: object) -> None:
        self.rx._count_dead_letter()
        self._host.dead_letters += 1
        _logger.warning(
            "dead_letter",
            actor=self.name,
            state=self.state.value,
            message_type=type(message).__name__,
        )

    # -- the actor's own task ----------------------------------------------------

    def starting(self) -> Starting:
        """What the spawner waits on while `run` starts the actor (call it before `run`)."""
        starting = self._starting = Starting(self.new_event())
        return starting

    def attach(self, task: TaskHandle[None]) -> None:
        """Keep the handle of the task `run` runs in (call it as the task starts)."""
        if self.ended is None:  # an eager task may have ended already
            self.task = task

    async def run(self) -> None:
        """The actor's task: start it, then handle its messages until it ends.

        The spawner waits on `starting` (a task group's ``start`` would keep two
        more objects per actor alive on asyncio, and a frame and a task status on
        trio, for the actor's whole life). What ``on_start`` raises goes to the
        spawner, not to the task group. The message loop is written out here
        rather than awaited as a coroutine of its own: an actor parked in its
        mailbox (or in a handler) keeps one frame less alive. The actor is
        cancelled through its task's own cancel scope (`cancel`): that
        cancellation propagates out of here, after the actor's end is settled,
        and ends at the task's scope.
        """
        kind = TerminationKind.CANCELLED
        error: BaseException | None = None
        actor: Behaviour[M, R] | None = None
        started = False
        try:
            actor = self.new_actor()
            await self._start(actor)
            started = True
            rx = self.rx
            while True:
                try:
                    item = await rx.receive()
                except anyio.EndOfStream:
                    kind = TerminationKind.NORMAL
                    break
                request: Ask[M, R] | None = None
                try:
                    if type(item) is Ask:
                        request = item
                        if request.abandoned:
                            continue
                        request.set_value(await actor.receive(request.message))
                    elif type(item) is _Notice:
                        await actor.on_terminated(item.termination)
                    else:
                        await actor.receive(item)
                except Exception as exc:
                    ended = self._failed(exc, request)
                    if ended is not None:
                        kind, error = ended
                        break
                    actor = self.new_actor()
                    await actor.on_restart(exc)
                except BaseException:
                    self._abandon(request)
                    raise
        except Exception as exc:
            kind, error = TerminationKind.CRASHED, exc
            if not started:
                await self._failed_start(actor, exc)
            elif exc is self.escalated:
                raise
        except BaseException as exc:
            # A stray BaseException (not cancellation, not an interrupt) from the
            # actor's own code ends this actor only, as a crash: one actor's bug
            # must not cancel every other actor of the system.
            if started and (exc is self.escalated or _containable(exc)):
                kind, error = TerminationKind.CRASHED, exc
                if exc is self.escalated:
                    raise
            else:
                raise
        finally:
            await self._settle(actor, kind, error)
            self._started()  # ended without starting: the spawner must not wait on

    async def _start(self, actor: Behaviour[M, R]) -> None:
        """Run the actor's ``on_start``, then wake the spawner: it runs."""
        await actor.on_start()
        if self.state is ActorState.STARTING:
            self.state = ActorState.RUNNING
        self._started()

    def _started(self) -> None:
        """Wake the spawner, if it still waits: the actor runs, or has ended."""
        starting = self._starting
        if starting is not None:
            self._starting = None
            starting.started = self.ended is None
            starting.event.set()

    async def _failed_start(self, actor: Behaviour[M, R] | None, error: Exception) -> None:
        """End an actor whose ``on_start`` raised ``error``, for its spawner to raise."""
        await self._finish(actor, TerminationKind.CRASHED, error)
        error.add_note(f"raised while starting actor {self.name!r}")
        if self._starting is not None:
            self._starting.error = error

    async def _settle(
        self, actor: Behaviour[M, R] | None, kind: TerminationKind, error: BaseException | None
    ) -> None:
        """`_finish`, shielded, unless the actor's end is recorded already."""
        if self.ended is None:
            with anyio.CancelScope(shield=True):
                await self._finish(actor, kind, error)

    def new_actor(self) -> Behaviour[M, R]:
        """Make a fresh instance of the actor, ready for its ``on_start`` or ``on_restart``."""
        raise NotImplementedError

    def _failed(
        self, exc: Exception, request: Ask[M, R] | None
    ) -> tuple[TerminationKind, Exception] | None:
        """What a handler's error does: how the actor ends, or ``None`` to restart it.

        Raises:
            Exception: ``exc`` itself, if the actor escalated it.
        """
        if exc is self.escalated:
            self._abandon(request)
            raise exc
        exc.add_note(f"raised by actor {self.name!r}")
        if request is not None:
            request.set_error(exc)
        directive = self._on_failure(exc) if self._on_failure else Directive.STOP
        if not isinstance(directive, Directive):
            bad = ConfigurationError(
                f"the failure policy of actor {self.name!r} returned {directive!r}; "
                "it must return a Directive (STOP or RESTART)"
            )
            return TerminationKind.CRASHED, bad
        if directive is not Directive.RESTART:
            return TerminationKind.CRASHED, exc
        self.restarts += 1
        _logger.warning("actor_restarted", actor=self.name, error=repr(exc))
        return None

    def _abandon(self, request: Ask[M, R] | None) -> None:
        """Fail the ask being answered when the actor ends mid-handler: never leave it waiting."""
        if request is not None:
            request.set_error(ActorStopped(actor=self.name, detail="ended before replying"))

    async def _finish(
        self, actor: Behaviour[M, R] | None, kind: TerminationKind, error: BaseException | None
    ) -> None:
        """Record the end, fail pending asks, run ``on_stop``, tell the watchers."""
        self.state = ActorState.STOPPED
        assert self.ref is not None  # still ours: it is let go of once the actor has ended
        self.ended = (kind, error)
        termination = Termination(self.ref, kind, error)
        self.tx.close()
        for item in self.rx.close():
            if type(item) is _Notice:
                continue
            if type(item) is Ask:
                item.set_error(
                    ActorStopped(actor=self.name, detail=f"{kind.value} before replying")
                )
            self._host.dead_letters += 1
            _logger.warning(
                "dead_letter",
                actor=self.name,
                state="stopped",
                message_type=type(item).__name__,
            )
        if kind is TerminationKind.CRASHED:
            _logger.error("actor_crashed", actor=self.name, error=repr(error))
        try:
            if actor is not None and actor._on_stop_bounded:
                await actor.on_stop(termination)  # no timer: the hook bounds its own waits
            elif actor is not None:
                with anyio.move_on_after(self._host.shutdown_timeout):
                    await actor.on_stop(termination)
        except Exception as exc:
            _logger.error("actor_on_stop_failed", actor=self.name, error=repr(exc))
        finally:
            self._host.cells.pop(self, None)
            self.task = None  # an ended actor has nothing to cancel: not kept for its ref
            self.ref = None  # see the class: no cycle through the reference once ended
            self._done.set()
            watchers, self._watchers = self._watchers, {}
            for watcher in watchers:
                watcher._watching.pop(self, None)
                watcher.notify(termination)
            watching, self._watching = self._watching, {}
            for target in watching:  # ended watchers must not stay referenced
                target._watchers.pop(self, None)


def _containable(exc: BaseException) -> bool:
    """Whether a non-``Exception`` may end just one actor instead of propagating.

    Cancellation, interrupts, exit requests and exception groups (which may
    hold a cancellation) always propagate.
    """
    return not isinstance(
        exc,
        anyio.get_cancelled_exc_class()
        | KeyboardInterrupt
        | SystemExit
        | GeneratorExit
        | BaseExceptionGroup,
    )
