"""Stage hosting: how a session's stages run, and how their outcomes come back.

`run_stage` runs one stage invocation and returns its patch or its error (and
a ``BaseException`` other than cancellation as `Escaped`); it is also the seam
of fault injection. Each stage of a session is an actor, a `StageActor` with
its own mailbox: the supervisor sends it the work (`StageActor.invoke`) and it
replies with its outcome. The supervisor asks it with `ask_here`: a stage is
idle whenever its supervisor asks it, so it runs as an inline activation in
the supervisor's task (no task, no event, no mailbox round trip), and a busy
one would be asked through its mailbox. Replay verification runs stages
through `run_stage` too.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from .._errors import StageTimeout
from .._hooks import current_injector, enter_session
from ..actors import Actor, ActorContext, ActorRef
from ..actors._seams import ask_here, stop_here

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Awaitable, Coroutine

    from ..protocols import Machine, Patch, Stage, StateView
    from ._partials import StageScope
    from ._recording import CallRecorder

__all__ = ["Escaped", "StageActor", "is_cancellation", "run_stage"]


class Escaped:
    """A ``BaseException`` other than cancellation that a stage raised.

    It is never classified: `run_stage` hands it over to the supervisor (as the
    stage actor's reply), which re-raises it in its own task.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is the backend's cancellation, or a group holding one."""
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(cancelled) is not None
    return isinstance(exc, cancelled)


async def run_stage(
    stage: Stage[Any],
    view: StateView[Any],
    deadline: float | None,
    recorder: CallRecorder,
    partials: StageScope | None = None,
) -> Any:
    """Run ``stage`` on ``view`` within ``deadline``; return its patch or its error.

    The calls it makes through `record_call` go to ``recorder``, what it emits
    to ``partials`` (nowhere without it). Errors are returned, not raised: the
    supervisor classifies them. Any other ``BaseException`` is returned as
    `Escaped`, for the supervisor to re-raise. Cancellation (or a group holding
    one) is never caught.
    """
    try:
        # ``with recorder, partials:`` without the context-manager protocol: this
        # runs at every step, and ``open``/``close`` are the whole of what it does.
        recording = recorder.open()
        try:
            emitting = None if partials is None else partials.open()
            try:
                if deadline is None:
                    if current_injector() is not None:
                        await _inject(stage.name, recorder.session_id)
                    return await stage.execute(view)
                with anyio.move_on_after(deadline) as scope:
                    if current_injector() is not None:
                        await _inject(stage.name, recorder.session_id)
                    return await stage.execute(view)
            finally:
                if partials is not None:
                    partials.close(emitting)  # type: ignore[arg-type]
        finally:
            recorder.close(recording)
        if scope.cancelled_caught:
            return StageTimeout(stage=stage.name, deadline=deadline)
        raise AssertionError("unreachable")  # pragma: no cover
    except Exception as exc:  # classified by the supervisor, never here
        return exc
    except BaseException as exc:
        if is_cancellation(exc):
            raise
        return Escaped(exc)  # not classified: re-raised by the supervisor


async def _inject(stage: str, session_id: str) -> None:
    """The stage seam of fault injection: act out the installed plan's fault, if any."""
    injector = current_injector()
    if injector is not None:
        enter_session(session_id)
        await injector.inject(f"stage:{stage}", session_id, {"stage": stage})


#: structlog's context variable for ``stage``, once `_bind_stage` has bound it.
_stage_var: contextvars.ContextVar[Any] | None = None


def _bind_stage(name: str) -> None:
    """``structlog.contextvars.bind_contextvars(stage=name)``, at the cost of one ``set``.

    The first call binds through structlog, which makes the variable its
    ``merge_contextvars`` reads; later calls set that variable directly (a
    stage's actor binds its stage at every step).
    """
    global _stage_var
    var = _stage_var
    if var is None:
        _stage_var = structlog.contextvars.bind_contextvars(stage=name)["stage"].var
    else:
        var.set(name)


#: Each machine's stage layout (see `_layout`), made once and shared by its sessions.
_LAYOUTS: weakref.WeakKeyDictionary[Machine[Any], tuple[tuple[str, ...], dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _layout(machine: Machine[Any]) -> tuple[tuple[str, ...], dict[str, type[Stage[Any]]]]:
    """The names of ``machine``'s stages in start order, and each name's stage class.

    A stage class may serve several states: it is one stage (one instance, one
    actor), started and restarted once, in the order it first appears.
    """
    found = _LAYOUTS.get(machine)
    if found is None:
        stages = machine.stages.values()
        order = tuple(dict.fromkeys(stage.name for stage in stages))
        found = _LAYOUTS[machine] = (order, {stage.name: stage for stage in stages})
    return found


#: The work a supervisor sends its stage's actor: run the stage on this view, within
#: this deadline, its calls to this recorder, its partial output to this scope. A
#: tuple, built without a call: one is sent at every step.
_Invoke = tuple["StateView[Any]", "float | None", "CallRecorder", "StageScope | None"]


class StageActor(Actor[_Invoke, "Patch | Exception | Escaped"]):
    """The actor of one stage instance: answers each invocation with its patch or its error.

    It never crashes on a stage error: the supervisor decides what the error
    means and restarts this actor (a fresh stage instance) when it must. A
    ``BaseException`` from the stage comes back as `Escaped`, for the supervisor
    to raise in its own task. Its supervisor asks it with `ask_here`: idle (as
    it is whenever its supervisor asks), it runs in the supervisor's task.
    """

    # It has no ``on_stop`` to bound: its end costs no timer.
    _on_stop_bounded = True

    # A session has one per stage: no ``__dict__`` each, and no `ActorContext` kept
    # (it keeps its reference and its system; `context` makes one when read).
    __slots__ = ("_system", "ref", "stage")

    ref: ActorRef[_Invoke, Patch | Exception | Escaped]

    def __init__(self, stage: Stage[Any]) -> None:
        self.stage = stage

    @property
    def context(self) -> ActorContext[_Invoke, Patch | Exception | Escaped]:
        """This actor's context, made when read."""
        return ActorContext(self.ref._cell, self._system)  # type: ignore[arg-type]

    @context.setter
    def context(self, context: ActorContext[_Invoke, Patch | Exception | Escaped]) -> None:
        self.ref, self._system = context.ref, context.system

    def receive(self, message: _Invoke) -> Coroutine[Any, Any, Patch | Exception | Escaped]:
        """`run_stage` on the work, its coroutine returned: no frame of its own while it runs."""
        # The log lines of the stage name it (the supervisor's task has bound the session):
        # `_bind_stage`'s common case written out.
        var = _stage_var
        if var is None:
            _bind_stage(self.stage.name)
        else:
            var.set(self.stage.name)
        outcome: Coroutine[Any, Any, Patch | Exception | Escaped] = run_stage(self.stage, *message)
        return outcome

    def invoke(
        self,
        view: StateView[Any],
        deadline: float | None,
        recorder: CallRecorder,
        scope: StageScope | None = None,
    ) -> Awaitable[Patch | Exception | Escaped]:
        """Ask the stage's actor for its outcome on ``view`` (in this task: it is idle)."""
        return ask_here(self.ref, (view, deadline, recorder, scope))

    async def stop(self) -> None:
        """End the stage's actor (in this task: it is idle), and return once it has ended."""
        ref = self.ref
        if not await stop_here(ref):
            await ref.wait_terminated()
