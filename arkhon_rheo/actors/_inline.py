"""Inline activations: an idle actor run in its caller's task, as a calling-thread dispatcher does.

An actor that is idle (started, not stopping or cancelled, no activation under
way, an empty mailbox) and is asked by a caller in its own system need not wait
for an activation task: `ask_here` claims the actor's cell for the caller, runs
the actor's ``receive`` in the caller's task and returns its reply, as Akka's
calling-thread dispatcher does, or an Erlang scheduler that runs the process
it just sent to. No task is started, no event made, nothing queued. While the
cell is claimed it counts as active: mail that arrives meanwhile queues behind
the inline handler, and a normal activation handles it afterwards, in order.
An actor that is not idle is asked through its mailbox, as `ActorRef.ask` does.
`spawn_here` starts an actor the same way (its ``on_start`` runs in the
caller's task), and `stop_here` ends an idle one without an activation.
A caller that runs activations back to back yields between bursts with
`checkpoint_factory`'s checkpoint, the backend's own (the one backend-specific
adapter here; see its docstring).

What an inline activation does differently from one in its own task:

- it runs in the caller's task and context: what the handler binds in context
  variables is bound in the caller's context (a session's stage binds
  ``stage=`` for its log lines, as the supervisor's own code did when stages
  ran in its task), and the caller's cancel scopes are the handler's;
- the caller's cancellation (a cancelled scope, a deadline) cancels the
  handler: the cancellation propagates to the caller, and the actor stays
  alive, idle, as an asker's cancelled ``ask`` leaves it (an activation's own
  cancellation, `ActorRef.cancel`, ends the actor instead);
- an ``Exception`` from the handler goes to the actor's failure policy (stop
  or restart, in the caller's task) and is raised at the caller, as for an
  ``ask``; a stray ``BaseException`` (not cancellation, an interrupt, an exit
  request or a group) ends the actor as crashed and reaches the caller as
  `ActorStopped` from it, as an asker would see it; those, and an error the
  actor escalated, propagate to the caller as they are, the actor alive.

The session supervisor asks its stages so: a stage is an actor with its own
mailbox, and the common step costs what a call to the stage costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

import anyio.lowlevel

from .._errors import ActorStopped
from ._behaviour import containable
from ._records import ActorState, TerminationKind

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator

    from ._behaviour import Behaviour
    from ._cell import Cell
    from ._ref import ActorRef
    from ._system import Actor, ActorSystem

__all__ = [
    "ask_here",
    "checkpoint_factory",
    "claim_here",
    "release_here",
    "spawn_here",
    "stop_here",
]

M = TypeVar("M")
R = TypeVar("R")
_RUNNING = ActorState.RUNNING
_FOREVER = float("inf")
Ts = TypeVarTuple("Ts")


def _claim(cell: Cell[M, R]) -> Behaviour[M, R] | None:
    """Claim ``cell`` for an inline activation; its actor, or ``None`` if it is not idle."""
    rx = cell.rx
    if (
        cell.active
        or cell.state is not ActorState.RUNNING
        or cell.cancelled
        or cell._host.closing
        or (rx is not None and (rx._state.buffer or rx._state.urgent))
    ):
        return None
    cell.active = True
    if rx is not None:
        rx._state.receive_waiter = None  # mail that comes meanwhile queues: no activation for it
    return cell._actor


def _release(cell: Cell[Any, Any]) -> None:
    """End an inline activation: the actor goes idle, or an activation handles what came."""
    cell.active = False
    if cell.ended is not None:
        return
    rx = cell.rx  # opened meanwhile, maybe: by mail, a stop, a notice
    if rx is None:
        if cell.cancelled or cell._host.closing:
            cell.activate()  # the cancel that came meanwhile
        return
    state = rx._state
    if (
        state.buffer
        or state.urgent
        or not state.open_send_streams
        or cell.cancelled
        or cell._host.closing
    ):
        cell.activate()  # the mail, the stop or the cancel that came meanwhile
    else:
        state.receive_waiter = cell


async def ask_here(ref: ActorRef[M, R], message: M) -> R:
    """Ask ``ref``'s actor for its reply to ``message``, in this task if it is idle.

    An idle actor handles ``message`` here, as an inline activation (see the
    module); a busy one is asked through its mailbox with no timeout, as
    ``ref.ask(message, timeout=math.inf)``.

    Raises:
        ActorStopped: If the actor has stopped, or ends before replying.
        Exception: Whatever the actor's handler raised.
    """
    # `_claim` and `_release`, written out: this runs at every step of every session.
    cell: Cell[M, R] = ref._cell  # type: ignore[assignment]
    rx = cell.rx  # an actor asked only inline has none: nothing queued
    if (
        cell.active
        or cell.state is not _RUNNING
        or cell.cancelled
        or cell._host.closing
        or (rx is not None and (rx._state.buffer or rx._state.urgent))
    ):
        return await ref.ask(message, timeout=_FOREVER)
    cell.active = True
    if rx is not None:
        rx._state.receive_waiter = None  # mail that comes meanwhile queues: no activation for it
    actor = cell._actor
    assert actor is not None  # a running actor has its instance
    try:
        return await actor.receive(message)
    except Exception as exc:
        await _handler_failed(cell, actor, exc)
        raise
    except BaseException as exc:
        if exc is cell.escalated or not containable(exc):
            raise  # the caller's cancellation (or a group), an interrupt, an escalated error
        await cell._settle(actor, TerminationKind.CRASHED, exc)
        raise ActorStopped(actor=cell.name, detail="crashed before replying") from exc
    finally:
        if cell.rx is None and not (cell.cancelled or cell._host.closing):  # no mail: idle
            cell.active = False
        else:
            _release(cell)


def claim_here(ref: ActorRef[Any, Any]) -> bool:
    """Claim ``ref``'s actor for an inline activation that the caller runs; whether it is idle.

    `ask_here` taken apart, for a caller that owns the actor and knows its
    handler returns its errors rather than raising them (a session's stage):
    claimed, the caller awaits the handler itself (no frame of ``ask_here``
    alive while it runs) and calls `release_here` after, whatever happens.
    Not claimed (the actor is not idle), it asks with `ask_here`.
    """
    cell: Cell[Any, Any] = ref._cell  # type: ignore[assignment]
    rx = cell.rx  # `_claim`, written out: this runs at every step of every session
    if (
        cell.active
        or cell.state is not _RUNNING
        or cell.cancelled
        or cell._host.closing
        or (rx is not None and (rx._state.buffer or rx._state.urgent))
    ):
        return False
    cell.active = True
    if rx is not None:
        rx._state.receive_waiter = None  # mail that comes meanwhile queues: no activation for it
    return True


def release_here(ref: ActorRef[Any, Any]) -> None:
    """End the inline activation `claim_here` claimed: idle again, or activated for what came."""
    cell: Cell[Any, Any] = ref._cell  # type: ignore[assignment]
    if cell.rx is None and not (cell.cancelled or cell._host.closing):  # no mail: idle
        cell.active = False
    else:
        _release(cell)


async def _handler_failed(cell: Cell[Any, Any], actor: Behaviour[Any, Any], exc: Exception) -> None:
    """The actor's failure policy, for ``exc`` from an inline handler: restart it, or end it."""
    ended = cell._failed(exc, None)
    if ended is not None:
        await cell._settle(actor, *ended)
        return
    actor = cell._actor = cell.new_actor()
    await actor.on_restart(exc)


async def spawn_here(
    system: ActorSystem,
    factory: Callable[[*Ts], Actor[M, R]] | Actor[M, R],
    *args: *Ts,
    name: str,
    mailbox_capacity: int | None = None,
    prefix: str | None = None,
) -> ActorRef[M, R]:
    """`ActorSystem.spawn`, with the actor's ``on_start`` run in this task (no activation).

    The actor starts idle; its first activation (for mail that finds it idle)
    runs in a copy of the context of the task that starts it. Its name is
    ``f"{prefix}/{name}"`` with a ``prefix``, joined only when it is read.
    ``factory`` may be the actor itself, made (and kept) by the caller: none
    spawned here is restarted, so it is the only instance.
    """
    cell = system._new_cell(factory, name, mailbox_capacity, args=tuple(args), prefix=prefix)
    ref = cell.ref
    assert ref is not None
    cell.active = True
    try:
        actor = cell._actor = cell.new_actor()
        await cell._start(actor)
    except BaseException as exc:
        cell._host.cells.pop(cell, None)
        if not isinstance(exc, Exception):
            await cell._settle(cell._actor, TerminationKind.CANCELLED, None)
            raise
        await cell._failed_start(cell._actor, exc)
        raise
    finally:
        _release(cell)
    return ref


async def stop_here(ref: ActorRef[Any, Any]) -> bool:
    """End ``ref``'s actor as cancelled, in this task if it is idle; whether it has ended.

    An idle actor's end (its ``on_stop``, its watchers told) runs here, in the
    caller's cancel scopes (a supervisor stops its stages from its own
    ``on_stop``, shielded already), and this returns true. A busy one is
    cancelled (`ActorRef.cancel`) and this returns false at once: wait for
    its end with `ActorRef.wait_terminated`.
    """
    cell: Cell[Any, Any] = ref._cell  # type: ignore[assignment]
    if cell.ended is not None:
        return True
    actor = _claim(cell)
    if actor is None:
        cell.cancel()
        return cell.ended is not None
    try:
        await cell._finish(actor, TerminationKind.CANCELLED, None)
    finally:
        _release(cell)
    return True


# -- the yield between bursts: the one backend-specific adapter here --------------
#
# ``anyio.lowlevel.checkpoint()`` is a coroutine that awaits the backend's
# checkpoint, itself a coroutine: on asyncio ``asyncio.sleep(0)`` (two more
# objects), on trio ``trio.lowlevel.checkpoint()``. A task parked in a checkpoint
# keeps that whole chain alive (about 0.8 KB on asyncio) while the other tasks
# run, and a session's supervisor yields so every few steps, in turn with every
# other session. `checkpoint_factory` returns the backend's own checkpoint
# instead: on asyncio a bare yield (what ``asyncio.sleep(0)`` does: the task goes
# to the back of the ready queue, and a cancellation is thrown in when it
# resumes, as anyio's cancel scopes deliver one), on trio trio's own.

_BARE = (None,)


class _BareYield:
    """Awaited, yields ``None`` to asyncio's task once: the task is stepped again next turn."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return iter(_BARE)  # type: ignore[return-value]


_BARE_YIELD = _BareYield()


def _asyncio_checkpoint() -> Awaitable[None]:
    return _BARE_YIELD


def checkpoint_factory() -> Callable[[], Awaitable[None]]:
    """What makes a checkpoint on the running backend (call it on that loop, then at will).

    The same as ``anyio.lowlevel.checkpoint``: it lets the other tasks run, and
    a cancellation of the caller's scopes is raised at it.
    """
    try:
        import sniffio  # installed with trio; without it we can only be on asyncio
    except ImportError:  # pragma: no cover - trio (which needs sniffio) is not installed
        return _asyncio_checkpoint
    library = sniffio.current_async_library()
    if library == "asyncio":
        return _asyncio_checkpoint
    if library == "trio":
        import trio.lowlevel  # only where trio runs the loop (trio is optional)

        checkpoint: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint
        return checkpoint
    return anyio.lowlevel.checkpoint  # pragma: no cover - anyio runs only these two
