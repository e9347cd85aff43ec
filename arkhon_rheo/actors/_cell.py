"""The cell: one actor's mailbox, behaviour and lifecycle, run by activations.

An actor holds no task of its own. While its mailbox is empty it is just its
cell: no task, no frame, no cancel scope. The mail that finds it idle (a
message, an ask, a notice, the end of its mailbox) starts an *activation*, a
task in its system's task group that handles messages while there are any and
ends once the mailbox is drained, as Orleans activates a grain and Erlang's
schedulers run a process that has mail. Each actor has at most one activation
at a time, so it still handles one message at a time, in mailbox order. What
the actor binds in its context variables (in ``on_start``, say) is kept from
one activation to the next: each runs in a copy of the context the last one
left.

A cell knows its actor through `Behaviour` (the hooks it calls) and its system
through `CellHost` (where it is listed while alive, where its activations run,
and where it counts its dead letters); the system's own cell class says how an
actor is made (`Cell.new_actor`). So this module imports nothing above it.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
from anyio.lowlevel import checkpoint

from .._errors import ActorStopped, ConfigurationError, MailboxClosed
from .._log import get_logger
from ._behaviour import Behaviour, Notice, Starting, containable, delivery
from ._end import finish
from ._event import event_factory
from ._mailbox import MailboxReceiveStream, MailboxSendStream, open_mailbox
from ._mailbox import _State as _MailboxState
from ._records import ActorState, Directive, FailurePolicy, TerminationKind
from ._ref import ActorRef, Ask, Termination

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio import TaskHandle
    from anyio.abc import TaskGroup


__all__ = ["Cell", "CellHost"]

M = TypeVar("M")
R = TypeVar("R")
_logger = get_logger("arkhon_rheo.actors")

#: What an activation reads of an actor with no mailbox yet: nothing queued, still open.
_EMPTY: _MailboxState[Any] = _MailboxState(name="", capacity=1, open_send_streams=1)

#: An actor whose waits for more mail after a reply stopped paying off waits once in this many.
_LINGER_RETRY = 32


class CellHost:
    """What a cell needs of the system it runs in; the system keeps one for all its cells.

    Attributes:
        cells: The cells whose actor has not ended yet, in spawn order.
        dead_letters: Messages that reached no actor, over all the cells.
        shutdown_timeout: Bounds an ``on_stop`` hook that does not bound its
            own waits, in seconds.
        group: The task group the cells' activations run in, while the system runs.
        closing: Whether the system cancels what is left of its actors: none may
            go idle any more (one going idle ends, cancelled).
        new_event: Makes the events of the cells' mailboxes, once the system runs.
    """

    __slots__ = ("cells", "closing", "dead_letters", "group", "new_event", "shutdown_timeout")

    def __init__(self, shutdown_timeout: float) -> None:
        self.cells: dict[Cell[Any, Any], None] = {}
        self.dead_letters = 0
        self.shutdown_timeout = shutdown_timeout
        self.group: TaskGroup | None = None
        self.closing = False
        self.new_event: Callable[[], anyio.Event] | None = None


class Cell(Generic[M, R]):
    """One actor: its mailbox, its behaviour, its links; activations run it while it has mail.

    A subclass says how the actor is made (`new_actor`).

    While the mailbox is empty the cell holds no task: the mailbox calls `set`
    when mail arrives (it is the receive side's waiter), and the cell starts an
    activation (`activate`), which runs `run` in the system's task group. The
    first activation starts the actor; each handles the queued messages and,
    the mailbox empty, ends, leaving the cell idle (one drained by a reply waits
    up to two turns first: its asker may ask again, without a new task).
    Cancelling an idle actor, or closing its mailbox, activates it to end.

    An ended cell keeps how it ended (`ended`), not a `Termination`, and lets go
    of its reference (`ref`) and its actor: a termination names the reference,
    and the reference its cell, so either kept would make a reference cycle,
    and an ended actor (with all it holds: a whole session) would wait for the
    cyclic GC instead of being freed as soon as it is dropped. A reference
    builds its termination when asked.

    Attributes:
        ref: The actor's reference, until the actor has ended.
        ended: How the actor ended (its termination's kind and error), or
            ``None`` while it has not.
        task: The handle of the activation's task while one runs (its cancel
            scope is the actor's: `cancel` cancels it); ``None`` while the actor
            is idle.
        active: Whether an activation runs (or is about to).
        cancelled: Whether `cancel` has cancelled the actor.
    """

    __slots__ = (
        "_actor",
        "_context",
        "_done",
        "_host",
        "_name",
        "_on_failure",
        "_prefix",
        "_starting",
        "_watchers",
        "_watching",
        "active",
        "ask_timeout",
        "cancelled",
        "capacity",
        "ended",
        "escalated",
        "linger_misses",
        "ref",
        "restarts",
        "rx",
        "state",
        "task",
        "tx",
    )

    # The mailbox carries the actor's messages, its asks and system notices. It is
    # opened by the first message queued (`mailbox`): an actor only ever asked
    # inline (a session's stage) never has one.
    tx: MailboxSendStream[Any] | None
    rx: MailboxReceiveStream[Any] | None

    def __init__(
        self,
        host: CellHost,
        *,
        name: str,
        capacity: int,
        ask_timeout: float,
        on_failure: FailurePolicy | None,
        prefix: str | None = None,
    ) -> None:
        self._host = host
        self._on_failure = on_failure
        self._actor: Behaviour[M, R] | None = None  # made by the first activation
        # The context the next activation runs in (a copy of it): the one the last
        # left. ``None`` before the first, which copies the spawner's, as a task does.
        self._context: contextvars.Context | None = None
        # The activation's own handle: anyio gives each task a cancel scope of its
        # own, so the actor needs none besides.
        self.task: TaskHandle[None] | None = None
        self.active = False
        self.cancelled = False
        # Who watches this actor, and whom it watches: made at the first watch (an
        # empty dict is 64 bytes, and most actors are never watched).
        self._watchers: dict[Cell[Any, Any], None] | None = None
        self._watching: dict[Cell[Any, Any], None] | None = None
        # The name's parts, joined when asked (`name`): a session's stage is named
        # after its session and its stage, strings that are kept alive anyway.
        self._name = name
        self._prefix = prefix
        self.ask_timeout = ask_timeout
        self.state = ActorState.STARTING
        self.capacity = capacity
        self.tx = self.rx = None  # opened by the first message queued (see `mailbox`)
        self._done: anyio.Event | None = None  # made by the first wait for the end
        self._starting: Starting | None = None  # the spawner's wait, until the actor runs
        self.ended: tuple[TerminationKind, BaseException | None] | None = None
        self.restarts = 0
        self.linger_misses = 0  # see _linger
        self.escalated: BaseException | None = None  # see ActorContext.escalate
        self.ref: ActorRef[M, R] | None = ActorRef._of(self)

    @property
    def name(self) -> str:
        """The actor's name."""
        prefix = self._prefix
        return self._name if prefix is None else f"{prefix}/{self._name}"

    @property
    def new_event(self) -> Callable[[], anyio.Event]:
        """Makes an event of the running backend (the system's factory, once it runs)."""
        return self._host.new_event or event_factory()

    def mailbox(self) -> MailboxSendStream[Any]:
        """The send side of the mailbox, opened now if not yet (one asked inline needs none).

        One opened for an ended actor is closed: what is sent to it is a dead letter.
        """
        tx = self.tx
        if tx is None:
            tx, rx = self.tx, self.rx = open_mailbox(
                self.capacity, name=self.name, new_event=self._host.new_event
            )
            if self.ended is not None or self.ref is None:
                tx.close()
                rx.close()
            elif not self.active:  # idle: the first message activates it
                rx._state.receive_waiter = self
        return tx

    # -- called from other tasks -------------------------------------------------

    def request_stop(self) -> None:
        if self.state in (ActorState.STARTING, ActorState.RUNNING):
            self.state = ActorState.STOPPING
            self.mailbox().close()  # the end of the mailbox wakes an idle actor, which ends

    def cancel(self) -> None:
        if self.ended is not None:
            return
        self.cancelled = True
        task = self.task
        if task is not None:
            task.cancel()
        elif not self.active:  # idle: an activation ends it, as cancelled
            self.activate()

    def add_watcher(self, watcher: Cell[Any, Any], ref: ActorRef[Any, Any]) -> None:
        ended = self.ended
        if ended is not None:
            watcher.notify(Termination(ref, *ended))
        else:
            if self._watchers is None:
                self._watchers = {}
            self._watchers[watcher] = None
            if watcher._watching is None:
                watcher._watching = {}
            watcher._watching[self] = None

    def remove_watcher(self, watcher: Cell[Any, Any]) -> None:
        if self._watchers is not None:
            self._watchers.pop(watcher, None)
        if watcher._watching is not None:
            watcher._watching.pop(self, None)

    def notify(self, termination: Termination) -> None:
        with contextlib.suppress(MailboxClosed):  # the watcher ended: nobody left to tell
            self.mailbox()._send_urgent(Notice(termination))

    def pending(self) -> int:
        rx = self.rx
        if rx is None:
            return 0
        state = rx._state
        return len(state.buffer) + len(state.urgent or ())

    async def wait_done(self) -> None:
        """Wait until the actor has ended (its reference let go of: `_finish` is over)."""
        if self.ref is not None:
            done = self._done
            if done is None:
                done = self._done = self.new_event()
            await done.wait()

    def dead_letter(self, message: object) -> None:
        if self.rx is not None:
            self.rx._count_dead_letter()
        self._host.dead_letters += 1
        _logger.warning(
            "dead_letter",
            actor=self.name,
            state=self.state.value,
            message_type=type(message).__name__,
        )

    # -- activations -------------------------------------------------------------

    def starting(self) -> Starting:
        """What the spawner waits on while the first activation starts the actor."""
        starting = self._starting = Starting(self.new_event())
        return starting

    def set(self) -> None:
        """Mail arrived for the idle actor (the mailbox wakes its waiter so): activate it."""
        if not self.active and self.ended is None:
            self.activate()

    def activate(self) -> None:
        """Start an activation: a task of the system's task group that runs `run`.

        The first one starts the actor (call `starting` before it).
        """
        group = self._host.group
        assert group is not None  # the system runs while any of its actors is alive
        self.active = True
        if self.rx is not None:
            self.rx._state.receive_waiter = None  # no second wake-up while this one runs
        context, self._context = self._context, None
        # The task runs in a copy of the context the last activation left.
        task = self._spawn(group) if context is None else context.run(self._spawn, group)
        if self.active and self.task is None:  # an eager task may have ended already
            self.task = task
            if self.cancelled:  # cancelled from the eager task itself, before this
                task.cancel()

    def _spawn(self, group: TaskGroup) -> TaskHandle[None]:
        """Start the activation's task (called in the context it is to copy)."""
        return group.start_soon(self.run, name=f"actor:{self.name}")

    def _go_idle(self) -> None:
        """End this activation with the actor alive and nothing to do: the mailbox wakes it."""
        self.active = False
        self.task = None
        self._context = contextvars.copy_context()  # what the actor bound, for the next
        if self.rx is not None:  # without one, the mailbox sets its waiter when it opens
            self.rx._state.receive_waiter = self

    async def run(self) -> None:
        """An activation: start the actor if it is new, then handle its mail until none is left.

        The spawner waits on `starting` (a task group's ``start`` would keep
        more objects per actor alive). What ``on_start`` raises goes to the
        spawner, not to the task group. The message loop is written out here
        rather than awaited as a coroutine of its own: an actor parked in a
        handler keeps one frame less alive. The actor is cancelled through the
        activation's own cancel scope (`cancel`): that cancellation propagates
        out of here, after the actor's end is settled, and ends at the task's
        scope.
        """
        kind = TerminationKind.CANCELLED
        error: BaseException | None = None
        actor = self._actor
        started = actor is not None
        idle = False
        try:
            if actor is None:
                actor = self._actor = self.new_actor()
                await self._start(actor)
                started = True
            # No mailbox yet: no mail ever queued, no stop (an empty one stands in).
            rx = self.rx
            state = _EMPTY if rx is None else rx._state
            while True:
                if not (state.urgent or state.buffer) and state.open_send_streams:
                    # Nothing queued: the actor goes idle, or, cancelled (while idle,
                    # say) or its system closing, ends here.
                    idle = not (self.cancelled or self._host.closing)
                    break
                assert rx is not None  # something is queued
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
                    else:
                        await delivery(actor, item)
                except Exception as exc:
                    ended = self._failed(exc, request)
                    if ended is not None:
                        kind, error = ended
                        break
                    actor = self._actor = self.new_actor()
                    await actor.on_restart(exc)
                except BaseException:
                    self._abandon(request)
                    raise
                if request is not None and not (state.urgent or state.buffer):
                    await self._linger()  # drained by a reply: its asker may ask again
        except BaseException as exc:
            kind, error, propagates = self._ending(exc, started)
            if not started and isinstance(exc, Exception):
                await self._failed_start(actor, exc)
            if propagates:
                raise
        finally:
            if idle:
                self._go_idle()
            else:
                await self._settle(actor, kind, error)
                self._started()  # ended without starting: the spawner must not wait on

    async def _linger(self) -> None:
        """Wait up to two turns for more mail before the activation may end.

        An asker woken by a reply often asks again at once: this activation
        then handles it, and no task is started for it. Two turns, because trio
        may run the woken asker after this task in the turn they both wake in.
        An actor whose last two waits brought nothing (a stage asked in turn
        with others, say) waits only once in `_LINGER_RETRY` activations, to
        notice when it pays again.
        """
        misses = self.linger_misses
        if misses >= 2 and misses % _LINGER_RETRY:
            self.linger_misses = misses + 1
            return
        assert self.rx is not None  # a request came through it
        state = self.rx._state
        if state.open_send_streams:
            await checkpoint()
            if not (state.urgent or state.buffer):
                await checkpoint()
            self.linger_misses = 0 if state.urgent or state.buffer else misses + 1

    def _ending(
        self, exc: BaseException, started: bool
    ) -> tuple[TerminationKind, BaseException | None, bool]:
        """How what the actor's code raised ends it: the kind, the error, whether it propagates.

        An ``Exception`` crashes the actor (one raised by ``on_start`` goes to
        the spawner). So does a stray ``BaseException`` (not cancellation, not
        an interrupt) from a started actor: one actor's bug must not cancel
        every other actor of the system. An escalated error crashes it and
        propagates; anything else (cancellation) propagates, the actor cancelled.
        """
        escalated = exc is self.escalated
        if isinstance(exc, Exception):
            return TerminationKind.CRASHED, exc, started and escalated
        if started and (escalated or containable(exc)):
            return TerminationKind.CRASHED, exc, escalated
        return TerminationKind.CANCELLED, None, True

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

    _finish = finish  # record the end, fail pending asks, run ``on_stop``, tell the watchers
