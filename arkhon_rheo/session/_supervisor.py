"""The supervisor actor and its stages: it owns one session's state, runs its stages, commits.

Each step it checks the current state's invariants and the stage's
preconditions, asks the stage for a patch computed from a read-only view,
validates the patch, asks the stage's ``next`` for the move, checks the move
and the target state's invariants, and commits: the new version becomes
authoritative and a `TransitionEvent` is appended to the session's log and
offered to its listeners. What a failed step does is `FailureHandler`'s
(``_failures.py``).

How the stages run, and how their outcomes come back: `run_stage` runs one
stage invocation and returns its patch or its error (and a ``BaseException``
other than cancellation as `Escaped`); it is also the seam of fault injection.
Each stage of a session is an actor, a `StageActor` with its own mailbox: the
supervisor sends it the work (`StageActor.invoke`) and it replies with its
outcome. The supervisor asks it with `ask_here`: a stage is idle whenever its
supervisor asks it, so it runs as an inline activation in the supervisor's
task (no task, no event, no mailbox round trip), and a busy one would be asked
through its mailbox. Replay verification runs stages through `run_stage` too.

The commit is the supervisor's half that checks and commits (`Committing`, a
base of `SessionSupervisor`): `Committing._commit` validates the patch, checks
the move and the target state, builds the event and, with a store, hands the
write to `Persistence.write`; the supervisor's step awaits that write itself (no
coroutine of the commit's, nor of the store's, alive while hundreds of commits
wait for one transaction) and lands the commit (`Committing._land`) once it is
stored.
"""

from __future__ import annotations

import enum
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from .. import _tracing
from .._errors import ArkhonError, IllegalTransition, LeaseLost, PreconditionFailed, StageTimeout
from .._hooks import current_injector, enter_session
from .._log import get_logger
from ..actors import Actor, ActorContext, ActorRef, Termination, TerminationKind
from ..actors._seams import (
    ask_here,
    checkpoint_factory,
    claim_here,
    release_here,
    spawn_here,
    stop_here,
)
from ..core._seams import step_moves
from ..protocols import ErrorClass, EventKind, Patch, StateView
from ._commit_rule import check_edge, check_invariants, state_label
from ._compiled import with_fields
from ._failures import FailureHandler
from ._inbox import Delivery, Inbox
from ._record import ExitReason, failure_record
from ._recording import CallRecorder
from ._subgraph import ChildWaits, tell_parent, wait_for_child

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Awaitable, Callable, Coroutine

    from ..protocols import AgentState, FailureRecord, Machine, Stage, TransitionEvent
    from ..protocols._seams import ScheduledMessage
    from ._compiled import StatePlan
    from ._partials import StageScope
    from ._persist import Mail
    from ._record import Session

__all__ = ["Escaped", "SessionSupervisor", "StageActor", "is_cancellation", "run_stage"]

_logger = get_logger("arkhon_rheo.supervision")

#: The statuses stored with the run's last write (the final commit, or the park).
_STORED_WITH_COMMIT = frozenset(
    reason.value
    for reason in (ExitReason.FINISHED, ExitReason.FAILED, ExitReason.WAITING, ExitReason.PAUSED)
)

#: How long a stopping session may wait to store its status and give up its lease.
_STATUS_TIMEOUT = 10.0


class _Step:
    """Run the next step (the supervisor sends this to itself)."""

    __slots__ = ()


_STEP = _Step()

#: Steps a supervisor runs back to back before yielding to other tasks (it yields at once when a
#: message waits in its mailbox). Each yield leaves the objects of its burst (the state, the task's
#: wake-up) waiting behind every other session, long enough for the cyclic GC to promote them to its
#: oldest generation, which is what triggers full collections: fewer yields, fewer promotions.
#: Sixteen trivial steps are a fraction of a millisecond, and a stage that awaits I/O yields there
#: anyway (``bench/scale.py`` shows the effect at 10,000 sessions).
_STEPS_PER_YIELD = 16


# The stages: how a stage runs, and its actor.


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

    #: The actor's reference; ``None`` until its supervisor first runs the stage (the
    #: instance is made when the session starts, its actor spawned at first use).
    ref: ActorRef[_Invoke, Patch | Exception | Escaped] | None

    def __init__(self, stage: Stage[Any]) -> None:
        self.stage = stage
        self.ref = None

    @property
    def context(self) -> ActorContext[_Invoke, Patch | Exception | Escaped]:
        """This actor's context, made when read."""
        assert self.ref is not None  # a context is read by a spawned actor
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
        assert self.ref is not None  # spawned by the step that asks it
        return ask_here(self.ref, (view, deadline, recorder, scope))

    async def stop(self) -> None:
        """End the stage's actor (in this task: it is idle), and return once it has ended.

        One never spawned (its stage not run yet) has nothing to end.
        """
        ref = self.ref
        if ref is not None and not await stop_here(ref):
            await ref.wait_terminated()


# The commit: the supervisor's half that checks a patch and commits it.

_set = object.__setattr__


def _illegal_transition(
    stage: str, lifecycle: enum.Enum, target: object, plan: StatePlan
) -> IllegalTransition:
    """The refusal of a move from ``lifecycle`` to ``target`` that ``plan`` does not allow."""
    return IllegalTransition(
        stage=stage,
        from_state=state_label(lifecycle),
        to_state=state_label(target) if isinstance(target, enum.Enum) else repr(target),
        allowed=[state_label(s) for s in plan.allowed],
    )


def _info(calls: list[dict[str, Any]] | None, mail: Mail | None) -> dict[str, Any] | None:
    """A step event's ``info``: the calls it made (``"io"``), the message and timers of its mail."""
    info = {"io": calls} if calls else None
    if mail is not None:
        info = {**(info or {}), **mail.info}
    return info


def _chosen_failure(
    stage: str, lifecycle: enum.Enum, target: enum.Enum, attempt: int
) -> FailureRecord:
    """The record of a stage that moved its session to a failed state itself."""
    return failure_record(
        "StageChoseFailure",
        f"stage {stage!r} moved the session to {state_label(target)!r}",
        ErrorClass.FATAL,
        stage=stage,
        lifecycle=lifecycle,
        attempt=attempt,
        reason=ExitReason.FAILED,
    )


class Committing:
    """The commit of a step, mixed into the supervisor (which sets these attributes)."""

    session: Session
    inbox: Inbox
    #: The state the last commit checked against the invariants of its lifecycle.
    verified: AgentState | None
    #: The plan of the state the last commit moved the session to.
    landed: StatePlan
    #: A durable commit's write, for the step to await (no coroutine of its own
    #: alive while it waits), and what the commit lands once it is stored.
    _writing: Awaitable[object] | None
    #: The candidate state (``None``: no commit waits), its event, plan and records:
    #: attributes, not a tuple of them for the GC to walk while the commit waits.
    _landing: AgentState | None
    _landing_event: TransitionEvent | None
    _landing_to: StatePlan
    _landing_verified: AgentState | None
    _landing_record: FailureRecord | None

    def _refusal(self, state: AgentState, plan: StatePlan, name: str) -> ArkhonError | None:
        """Why ``state`` may not run stage ``name`` (an invariant, a precondition), if so."""
        try:
            if plan.invariants and state is not self.verified:
                check_invariants(plan.invariants, state, state.lifecycle, stage=name)
            for condition in plan.preconditions:
                try:
                    holds = condition.holds(state)
                except Exception as exc:
                    raise PreconditionFailed(
                        stage=name, condition=f"{condition.name} (the check raised {exc!r})"
                    ) from exc
                if not holds:
                    raise PreconditionFailed(stage=name, condition=condition.name)
        except ArkhonError as refused:
            return refused
        return None

    def _commit(
        self,
        state: AgentState,
        patch: Patch,
        stage: Stage[Any],
        started: float,
        attempt: int,
        calls: list[dict[str, Any]] | None = None,
        plan: StatePlan | None = None,
        delivery: Delivery | None = None,
        timers: list[ScheduledMessage] | None = None,
    ) -> Exception | None:
        """Validate and commit one stage's patch; return the refusal instead of raising.

        ``plan`` is the compiled plan of ``state``'s lifecycle, when the caller has it;
        ``delivery`` the message the step applied and ``timers`` those it set, if any.
        With a store, the write is left in `_writing` for the caller to await, then `_land`.
        """
        session = self.session
        machine = session.machine
        name = stage.name
        lifecycle = state.lifecycle
        if plan is None:
            plan = session.compiled.plan(lifecycle)
        try:  # (a timer's sensitive fields, without a keyring, refuse the step)
            mail = self.inbox.mail(delivery, timers)
            updates, patch, written = session.validator._validated(
                state, patch, stage=name, writes=stage.writes
            )
            written = plan.shared_writes(written)
            candidate = session.compiled.copy_with(state, updates)
            target = stage.next(candidate)
            # Identity, not equality: a str-valued enum's member of another enum, or a
            # bare string, may compare equal to an allowed state without being one.
            # The plan's targets are keyed by the identity of the allowed states.
            to = plan.targets.get(id(target))
            if to is None:
                raise _illegal_transition(name, lifecycle, target, plan)
            # The stage's own decision to fail: still a structured record.
            record = _chosen_failure(name, lifecycle, target, attempt) if to.failed else None
            moved = step_moves(machine, state, lifecycle, target, record, updates)
            # The candidate is still private to this call: set the moves on it
            # rather than copying the state a second time.
            candidate.__dict__.update(moved)
            share = session.compiled.frozen
            _set(candidate, "__pydantic_fields_set__", with_fields(candidate, moved, share=share))
            verified = None
            if record is None:
                if to.invariants:
                    check_invariants(to.invariants, candidate, target, stage=name)
                verified = candidate
                if (edge := plan.edge_checks.get(id(target))) is not None:
                    check_edge(edge, state, candidate, stage=name)
        except Exception as exc:
            return exc
        event = session.event(
            EventKind.STEP,
            name,
            lifecycle,
            target,
            patch,
            written,
            attempt,
            reads=stage.reads,
            started_at=started,
            error=record,
            info=_info(calls, mail),
        )
        if (persistence := session.persistence) is not None:
            try:  # write-ahead: `_step` awaits it, with no coroutine of this call alive
                self._writing = persistence.write(event, candidate, mail=mail)
            except Exception as exc:
                return exc
            self._landing, self._landing_event, self._landing_to = candidate, event, to
            self._landing_verified, self._landing_record = verified, record
            return None
        if mail is not None:
            return self.inbox.unstored()  # a timer, without a store to keep it
        self._apply(candidate, event, to, verified, record)
        return None

    def _land(self) -> Exception | None:
        """The durable write `_step` awaited returned: land its commit, or return the refusal."""
        candidate, self._landing = self._landing, None
        persistence = self.session.persistence
        assert candidate is not None
        assert persistence is not None
        try:
            persistence.accept()  # the store's refusal, if any, is raised here
        except Exception as exc:
            return exc
        event, self._landing_event = self._landing_event, None
        assert event is not None
        self._apply(
            candidate, event, self._landing_to, self._landing_verified, self._landing_record
        )
        return None

    def _unwaited(self, exc: BaseException) -> Exception:
        """The durable write's wait raised ``exc``: return it (a refusal) or re-raise it."""
        self._landing = self._landing_event = None
        persistence = self.session.persistence
        assert persistence is not None
        persistence.abandon()  # cancelled: the write is committed all the same (or logged)
        if isinstance(exc, Exception):
            return exc
        raise exc

    def _apply(
        self,
        candidate: AgentState,
        event: TransitionEvent,
        to: StatePlan,
        verified: AgentState | None,
        record: FailureRecord | None,
    ) -> None:
        """The commit is authoritative: the session moves to ``candidate``."""
        session = self.session
        if record is not None:
            session.failure = record
        session.applies = None  # applied by this commit, if it was due
        session.commit(candidate, event)
        self.verified = verified
        self.landed = to


class SessionSupervisor(Committing, Actor[_Step, None]):
    """The actor that owns one session's state and drives its machine.

    A ``BaseException`` other than cancellation raised by a stage (or by any other
    user code it runs: ``next``, a condition, a gate) is never classified: the
    supervisor escalates it (`ActorContext.escalate`), so the session ends
    `ExitReason.CRASHED`, its status is stored, its handle's waiters wake, and
    the exception leaves the `AgentSystem` block in a ``BaseExceptionGroup``.
    """

    # `on_stop` bounds its waits itself: hosted stages by the shutdown timeout,
    # the stored status by its own (shielded) one.
    _on_stop_bounded = True

    def __init__(self, session: Session) -> None:
        self.session = session
        # Shared by every session of the machine (read only): not made per session.
        self.order, self.stage_types = _layout(session.machine)
        self.stages: dict[str, StageActor] = {}
        #: What a failed step does (retry, restart, record, fail).
        self.failures = FailureHandler(session)
        self.started = 0.0
        #: The session's trace span (`None` without OpenTelemetry).
        self.span: Any = None
        #: The state this supervisor's last commit checked against the invariants of
        #: its lifecycle: the next step need not check them again.
        self.verified: AgentState | None = None
        #: The plan of the state the last commit moved the session to.
        self.landed: StatePlan = session.compiled.plan(session.state.lifecycle)
        #: The session's inbox: the messages its waiting states apply, its timers.
        self.inbox = Inbox(session)
        #: A durable commit's write, for `_step` to await (no coroutine of its own
        #: alive while it waits), and what the commit lands once it is stored.
        self._writing: Awaitable[object] | None = None
        self._landing = self._landing_event = self._landing_verified = None
        self._landing_to = self.landed
        self._landing_record = None
        #: The yield between bursts of steps: the backend's own checkpoint, not
        #: anyio's (two coroutines fewer kept alive while the session waits its turn).
        #: (It is made by its first activation, on the running loop.)
        self._yield: Callable[[], Awaitable[None]] = checkpoint_factory()

    # -- lifecycle ---------------------------------------------------------------

    async def on_start(self) -> None:
        session = self.session
        structlog.contextvars.bind_contextvars(session_id=session.session_id)
        enter_session(session.session_id)  # its stages' calls find it (`current_session`)
        self.started = time.monotonic()
        self.span = _tracing.start_session(session.session_id, session.machine.name)
        if _logger.is_enabled(logging.INFO):
            _logger.info(
                "session_started",
                session_id=session.session_id,
                machine=session.machine.name,
                lifecycle=state_label(session.state.lifecycle),
                resumed=session.base_seq > 0,
            )
        # Each stage's instance is made now (a stage that cannot be made fails the
        # start); its actor is spawned when its stage first runs (`_spawn_stage`).
        for name in self.order:
            self.stages[name] = StageActor(self.stage_types[name]())
        self.context.ref.tell_nowait(_STEP)

    async def on_stop(self, termination: Termination) -> None:
        session = self.session
        try:
            # Each stage's actor is idle (its inline activations ran in this task),
            # so each ends here at once; one busy all the same is waited for, bounded.
            busy = [
                slot.ref
                for slot in self.stages.values()
                if slot.ref is not None and not await stop_here(slot.ref)
            ]
            if busy:
                with anyio.move_on_after(self.context.system.shutdown_timeout):
                    for ref in busy:
                        await ref.wait_terminated()
        finally:
            try:
                self._conclude(termination)
                self._log_end()
                if session.persistence is not None and session.exit_reason is not None:
                    # Even when the system is being cancelled: the status is stored and
                    # the lease given up (bounded, should the store hang).
                    with anyio.move_on_after(_STATUS_TIMEOUT, shield=True):
                        await self._store_status(session.exit_reason.value)
                        await tell_parent(session)  # a child run its parent waits on, parked
            finally:
                session.close()

    async def _store_status(self, status: str) -> None:
        persistence = self.session.persistence
        assert persistence is not None
        try:
            # "finished", "failed": stored by the final commit; "waiting": by the park.
            ended = status in _STORED_WITH_COMMIT or self.session.handoff  # handoff: "running"
            await persistence.close(None if ended else status)
        except LeaseLost as exc:  # paused past its lease: the session is another owner's
            _logger.error(
                "session_lease_lost",
                session_id=self.session.session_id,
                owner=exc.owner,
                holder=exc.holder,
                stage="status",
            )
        except Exception as exc:  # the outcome is known in memory; the record catches up on resume
            _logger.error("status_not_stored", session_id=self.session.session_id, error=repr(exc))

    def _log_end(self) -> None:
        session = self.session
        reason = None if session.exit_reason is None else session.exit_reason.value
        _tracing.end_session(self.span, reason, session.steps, session.failure)
        if _logger.is_enabled(logging.INFO):
            _logger.info(
                "session_ended",
                session_id=session.session_id,
                exit_reason=reason,
                lifecycle=state_label(session.state.lifecycle),
                steps=session.steps,
                retries=session.retries,
                restarts=session.restarts,
                duration=round(time.monotonic() - self.started, 6),
            )

    def _conclude(self, termination: Termination) -> None:
        session = self.session
        if termination.kind is TerminationKind.CANCELLED:
            if session.hand_over_on_cancel:
                session.handoff = True  # a worker's run: handed over, never ended
            session.finish(ExitReason.CANCELLED)
        elif termination.kind is TerminationKind.CRASHED:
            error = termination.error
            lifecycle = session.state.lifecycle
            stage = session.machine.stages.get(lifecycle)
            session.failure = failure_record(
                type(error).__name__,
                str(error),
                ErrorClass.FATAL,  # a record of the crash, not a classification
                stage=None if stage is None else stage.name,
                lifecycle=lifecycle,
                reason=ExitReason.CRASHED,
            )
            _logger.error("session_crashed", session_id=session.session_id, error=repr(error))
            session.finish(ExitReason.CRASHED)
        else:
            session.finish(session.exit_reason or ExitReason.FINISHED)

    async def _spawn_stage(self, slot: StageActor) -> ActorRef[_Invoke, Any]:
        """Start ``slot``'s actor in this task (see `spawn_here`), the first time its stage runs.

        A parked session holds the actors of the stages it has run only (its
        cell and reference are most of what a stage's actor costs).
        """
        # The supervisor keeps the actor (its stage, its reference):
        # nothing else per stage. Its name, "<session id>/<stage>", is joined when read.
        return await spawn_here(
            self.context.system,
            slot,
            name=slot.stage.name,
            prefix=self.session.session_id,
            mailbox_capacity=self.session.config.mailbox_capacity,
        )

    # -- the step ----------------------------------------------------------------

    async def receive(self, message: _Step) -> None:
        # Steps run back to back while nothing else waits in the mailbox, yielding
        # to the event loop every few steps. The session's own cancellation
        # (`SessionHandle.cancel`, from a listener, say) is checked at each step
        # with a plain read; an enclosing scope's is delivered at the next yield,
        # or at the stage's next await.
        context = self.context
        budget = _STEPS_PER_YIELD
        session = self.session
        try:
            # Handed over (see `Session.handoff`): stop at this commit boundary.
            while (
                not (session.handoff and session.stop_here())
                and not (
                    # A message asked to cut the turn under way: this is a commit boundary.
                    session.interrupt is not None and await self._cut_turn()
                )
                and not await self._step()
            ):
                if context.pending:
                    context.ref.tell_nowait(_STEP)  # let the waiting messages go first
                    return
                budget -= 1
                if not budget or context.cancel_called:
                    budget = _STEPS_PER_YIELD
                    await self._yield()
        except Exception:
            raise  # a supervisor bug: this session crashes, nothing else
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            context.escalate(exc)  # never classified: it must stop the program
        context.stop()

    async def _step(self) -> bool:
        """Run one step; return true once the session has ended."""
        session = self.session
        machine = session.machine
        state = session.state
        lifecycle = state.lifecycle
        plan = session.compiled.plan(lifecycle)
        if (stage_type := self._stage_type(plan, lifecycle)) is None:
            return True  # a terminal state: the session has ended
        name = stage_type.name
        if (session.steps >= session.config.max_steps or machine.gates) and await self._held(
            state, name
        ):
            return True
        delivery = None
        if plan.receives:
            received = await self._receive(stage_type, state, name)
            if type(received) is bool:  # parked, or the message was refused
                return received
            delivery = received
        started = time.time()
        refusal = self._refusal(state, plan, name)
        if refusal is not None:
            return await self.failures.failed(refusal, name, 1, self._restart)

        attempt = 1
        deadline = plan.deadline
        # Where tools with side effects commit their intents (`call_site`).
        ledger = None if session.persistence is None else session.persistence.store
        while True:
            slot = self.stages[name]
            ref = slot.ref if slot.ref is not None else await self._spawn_stage(slot)
            view: StateView[Any] = StateView(state, plan.reads, name)
            seq = session.next_seq()
            recorder = CallRecorder(session.session_id, seq, ledger)
            if delivery is not None:
                slot.stage.delivered = delivery.message  # type: ignore[attr-defined]
            scope = session.partials.scope(name, seq, attempt)
            if self.span is None and claim_here(ref):  # idle (as always): run it here
                try:  # `slot.invoke` written out: no frame of `ask_here` kept while it runs
                    outcome = await slot.receive((view, deadline, recorder, scope))
                finally:
                    release_here(ref)
            else:
                outcome = await self._invoke(slot, (view, deadline, recorder, scope), seq, attempt)
            if isinstance(outcome, Escaped | ChildWaits):  # no patch, and no failure
                return await self._no_patch(outcome, state, name)
            calls = recorder.finished() or None  # no empty list kept while a commit waits
            timers = recorder.timers
            del view, recorder, scope  # not kept alive (and walked by the GC) while a commit waits
            failure = (
                outcome
                if isinstance(outcome, Exception)
                else self._commit(
                    state, outcome, slot.stage, started, attempt, calls, plan, delivery, timers
                )
            )
            del outcome, calls, timers
            if (writing := self._writing) is not None:  # durable: awaited here, in this frame
                self._writing = None
                try:
                    await writing
                except BaseException as exc:
                    failure = self._unwaited(exc)
                else:
                    failure = self._land()
            if failure is None:
                session.steps += 1
                return self.landed.terminal and self._ended()
            error_class = await self.failures.retry(failure, name, attempt)
            if error_class is None:  # retried after its backoff
                attempt += 1
                continue
            return await self.failures.failed(failure, name, attempt, self._restart, error_class)

    async def _invoke(self, slot: StageActor, work: _Invoke, seq: int, attempt: int) -> Any:
        """Ask a stage's actor for its outcome through its mailbox (it is busy), or traced."""
        if self.span is None:
            assert slot.ref is not None  # spawned by the step that asks it
            return await ask_here(slot.ref, work)
        with _tracing.step(self.span, slot.stage.name, seq, attempt) as span:
            outcome = await slot.invoke(*work)
            _tracing.step_outcome(span, outcome)
        return outcome

    async def _no_patch(self, outcome: Escaped | ChildWaits, state: AgentState, stage: str) -> bool:
        """A stage that ended with neither a patch nor a failure; return whether the run ends.

        Its child session waits: the session parks until the child ends (`wait_for_child`).
        A ``BaseException`` escaped it: re-raised, never classified.
        """
        if isinstance(outcome, Escaped):
            raise outcome.error
        return await wait_for_child(self.session, state, stage, outcome)

    def _stage_type(self, plan: StatePlan, lifecycle: enum.Enum) -> type[Stage[Any]] | None:
        """The stage to run in ``lifecycle``; ``None``: the state is terminal (the session ends)."""
        if plan.terminal:
            session = self.session
            reason = ExitReason.FAILED if plan.failed else ExitReason.FINISHED
            session.finish(session.exit_reason or reason)
            return None
        stage_type = plan.stage_type
        if stage_type is None:  # a state the machine does not know
            return self.session.machine.stages[lifecycle]
        return stage_type

    async def _held(self, state: AgentState, stage: str) -> bool:
        """Whether the step stops before ``stage``: out of steps (failed), or paused at a gate."""
        if self.session.steps >= self.session.config.max_steps:
            return await self._out_of_steps(stage)
        return bool(self.session.machine.gates) and await self.inbox.pause_at_gate(state, stage)

    async def _receive(
        self, stage_type: type[Stage[Any]], state: AgentState, stage: str
    ) -> Delivery | bool:
        """The inbox message ``stage`` applies, or whether the session ended without one.

        ``True``: it parked (nothing to apply yet); a refused message (no store, a
        stored message that no longer fits) is a failure of ``stage``.
        """
        try:
            delivery = await self.inbox.receive(stage_type, state)
        except Exception as refused:  # no store, a stored message that no longer fits
            return await self.failures.failed(refused, stage, 1, self._restart)
        if delivery is None:
            return True
        session = self.session
        session.steps = 0  # a new turn: the step budget bounds each turn
        session.turn_start = (state, session.seq)
        return delivery

    async def _out_of_steps(self, stage: str) -> bool:
        """Fail the session, which used up its step budget before ``stage``; it has ended."""
        budget = self.session.config.max_steps
        await self.failures.fail(
            "BudgetExhausted",
            f"the session used its {budget} steps without finishing",
            stage=stage,
            attempt=1,
            error_class=ErrorClass.FATAL,
            reason=ExitReason.MAX_STEPS,
        )
        return True

    async def _cut_turn(self) -> bool:
        """Cut the turn under way (a message asked to interrupt it): back to where it began.

        Recorded as a rollback event to the state the session waited in before
        the turn's message (``info``: ``interrupted_by``, the interrupting
        message's id): the audit log keeps the cut turn's events, and the
        session goes on from a state it was valid in, to its next message.
        With no turn under way (the session waits), nothing is cut. Returns
        false: the session goes on.
        """
        session = self.session
        by, session.interrupt = session.interrupt, None
        if session.compiled.plan(session.state.lifecycle).receives or session.turn_start is None:
            return False  # no turn under way: the message just queues
        target, target_seq = session.turn_start
        session.turn_start = None
        current = session.state
        fields = {
            name: getattr(target, name)
            for name in type(target).model_fields
            if name != "session_id"
        }
        event = session.event(
            EventKind.ROLLBACK,
            None,
            current.lifecycle,
            target.lifecycle,
            Patch(**fields),
            frozenset(fields),
            0,
            info={
                "rolled_back_from": session.seq,
                "rolled_back_to": target_seq,
                "interrupted_by": by,
            },
        )
        if session.persistence is not None:
            await session.persistence.record(event, target)
        session.commit(target, event)
        self.landed = session.compiled.plan(target.lifecycle)
        self.verified = None
        _logger.info("turn_interrupted", session_id=session.session_id, by=by)
        return False

    def _ended(self) -> bool:
        session = self.session
        lifecycle = session.state.lifecycle
        failed = lifecycle is session.machine.failed
        session.finish(ExitReason.FAILED if failed else ExitReason.FINISHED)
        return True

    async def _restart(self, failed: str) -> None:
        """Restart the stages the restart strategy names when ``failed`` failed."""
        session = self.session
        names = session.config.restart_strategy.affected(self.order, failed)
        for name in reversed(names):
            await self.stages[name].stop()
        for name in names:  # fresh instances; each one's actor starts when its stage runs
            self.stages[name] = StageActor(self.stage_types[name]())
        session.restarts += 1
        _logger.warning(
            "stages_restarted",
            session_id=session.session_id,
            stages=names,
            strategy=session.config.restart_strategy.value,
        )
