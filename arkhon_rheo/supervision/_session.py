"""One session: its record, its stage actors, and the supervisor actor that drives it.

The supervisor owns the authoritative state. Each step it checks the current
state's invariants and the stage's preconditions, asks the stage's actor for a
patch computed from a read-only view, validates the patch, asks the stage's
``next`` for the move, checks the move and the target state's invariants, and
commits: the new version becomes authoritative and a `TransitionEvent` is
appended to the session's log and offered to its listeners.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

from .. import _tracing
from .._errors import (
    ArkhonError,
    IllegalTransition,
    PreconditionFailed,
    RestartIntensityExceeded,
    StageTimeout,
    Transient,
)
from .._log import get_logger
from ..actors import Actor, ActorRef, Termination, TerminationKind
from ..protocols import (
    AgentState,
    CallRecorder,
    ErrorClass,
    EventKind,
    FailureRecord,
    Machine,
    Patch,
    Stage,
    StateView,
    TransitionEvent,
)
from ..protocols._faults import current_injector, enter_session
from ..protocols._stream import PartialHub, StageScope
from ._codec import step_moves
from ._compiled import compiled
from ._persist import linked
from ._policy import Backoff, Classifier, RestartIntensity, RestartStrategy, RestartWindow
from ._validate import check_edge, check_invariants

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._compiled import CompiledMachine, StatePlan
    from ._persist import Persistence
    from ._validate import PatchValidator

__all__ = ["ExitReason", "Session", "SessionConfig", "SessionSupervisor", "StageMode"]

_logger = get_logger("arkhon_rheo.supervision")

#: Called with every committed event; a listener's failure is logged, never raised.
EventListener = Callable[[TransitionEvent], None]


#: How long a stopping session may wait to store its status and give up its lease.
_STATUS_TIMEOUT = 10.0


_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _log(level: str, event: str, **fields: Any) -> None:
    with contextlib.suppress(Exception):  # a broken log pipeline must not break a commit
        getattr(_logger, level)(event, **fields)


def _log_commit(event: TransitionEvent) -> None:
    """Log one committed event at info level (the caller checked that level is on)."""
    _log(
        "info",
        "transition_committed",
        session_id=event.session_id,
        seq=event.seq,
        kind=event.kind.value,
        stage=event.stage,
        from_state=_label(event.from_state),
        to_state=_label(event.to_state),
        writes=sorted(event.writes),
        attempt=event.attempt,
    )


def _label(state: enum.Enum) -> str:
    return str(state.value) if isinstance(state.value, str) else state.name


class ExitReason(enum.Enum):
    """Why a session ended."""

    #: It reached a terminal state other than the failed one.
    FINISHED = "finished"
    #: A fatal error moved it to the failed state.
    FAILED = "failed"
    #: It used up its step budget and was moved to the failed state.
    MAX_STEPS = "max_steps"
    #: It was cancelled; its state is the last one committed.
    CANCELLED = "cancelled"
    #: A ``BaseException`` other than cancellation ended it (a stage's
    #: ``KeyboardInterrupt``, ``SystemExit`` or your own subclass; it then leaves the
    #: `AgentSystem` block), or the supervisor itself crashed (a bug). Its state is
    #: the last one committed, and `AgentSystem.resume` continues from there.
    CRASHED = "crashed"
    #: It reached a gate and waits, durably, for a human decision.
    PAUSED = "paused"


class StageMode(enum.Enum):
    """Where a session's stages run.

    Both give each stage its own instance and deadline scope, restart it with a
    fresh instance, and supervise it the same way.
    """

    #: Each stage is a child of the supervisor that runs in the supervisor's own
    #: task: no task or mailbox of its own, so a step costs no message round trip
    #: and an idle session a few kilobytes. The default.
    INLINE = "inline"
    #: Each stage runs in its own long-lived actor (its own task and mailbox) and
    #: the supervisor asks it for each patch: stages are isolated in their own
    #: tasks (task-local context, their own cancellation) at the cost of a
    #: round trip per step and an actor per stage.
    TASK = "task"


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """How a session is supervised.

    Attributes:
        max_steps: The most stage steps before the session is stopped (exit reason
            ``max_steps``); every session has one, so no loop is unbounded.
        classifier: Maps failures to transient, recoverable or fatal.
        backoff: Retries of transient failures.
        restart_strategy: Which stage actors restart on a recoverable failure.
        restart_intensity: How many restarts within how long escalate to fatal.
        mailbox_capacity: The mailbox bound of the session's actors.
        stage_mode: Where stages run: in the supervisor's task, or each in its own actor.
    """

    max_steps: int = 100
    classifier: Classifier = field(default_factory=Classifier)
    backoff: Backoff = field(default_factory=Backoff)
    restart_strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE
    restart_intensity: RestartIntensity = field(default_factory=RestartIntensity)
    mailbox_capacity: int = 16
    stage_mode: StageMode = StageMode.INLINE


class Session:
    """The record of one session, shared by its supervisor and its handle."""

    __slots__ = (
        "__weakref__",
        "_changed",
        "_rng",
        "anchor_seq",
        "base_seq",
        "compiled",
        "config",
        "done",
        "exit_reason",
        "failure",
        "gates_passed",
        "keep_log",
        "link",
        "listeners",
        "log",
        "machine",
        "on_close",
        "partials",
        "persistence",
        "restarts",
        "retries",
        "seed",
        "seq",
        "session_id",
        "state",
        "steps",
        "validator",
    )

    def __init__(
        self,
        session_id: str,
        machine: Machine[Any],
        state: AgentState,
        config: SessionConfig,
        *,
        validator: PatchValidator | None = None,
        seed: str | None,
        listeners: Sequence[EventListener] = (),
        persistence: Persistence | None = None,
        base_seq: int = 0,
        link: Mapping[str, Any] | None = None,
        anchor_seq: int | None = None,
    ) -> None:
        self.session_id = session_id
        #: After a resume: the number of the last event that was not a resume.
        self.anchor_seq = anchor_seq
        #: A child session's link to its parent step, stamped on each of its events.
        self.link = link
        self.persistence = persistence
        self.base_seq = base_seq
        self.gates_passed = False
        self.machine = machine
        #: The machine's compiled form (validator, codec, per-state plans), shared.
        self.compiled: CompiledMachine = compiled(machine)
        self.state = state
        self.config = config
        self.validator = self.compiled.validator if validator is None else validator
        self.seed = seed
        self._rng: random.Random | None = None
        self.listeners = tuple(listeners)
        #: Without a store, the session keeps its events here (its only record);
        #: with one, the store is the log and this stays empty: memory per session
        #: does not grow with its history (live subscribers are fed as it commits).
        self.keep_log = persistence is None
        self.log: list[TransitionEvent] = []
        #: The number of the last event committed (or, before any, ``base_seq``).
        self.seq = base_seq
        #: Called once with the session when it has ended (the system releases it).
        self.on_close: Callable[[Session], None] | None = None
        self.steps = 0
        self.retries = 0
        self.restarts = 0
        self.done = anyio.Event()
        self.exit_reason: ExitReason | None = None
        self.failure: FailureRecord | None = None
        self._changed: anyio.Event | None = None
        #: Subscribers of the partial output its stages `emit` (see `SessionStream`).
        self.partials = PartialHub(session_id)

    def commit(self, state: AgentState, event: TransitionEvent) -> None:
        """Make ``state`` authoritative and publish ``event``; listeners never block it."""
        if self.link is not None:
            event = linked(event, self.link)
        self.state = state
        self.seq = event.seq
        if self.keep_log:
            self.log.append(event)
        else:
            self.partials.publish_event(event)
        if _logger.is_enabled(logging.INFO):  # no fields built unless someone listens
            _log_commit(event)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as exc:  # audit or sink failure must not break the answer path
                _log("error", "event_listener_failed", session_id=self.session_id, error=repr(exc))
        self._notify()

    def finish(self, reason: ExitReason) -> None:
        """Record how the session ended (the first reason recorded stands)."""
        if self.exit_reason is None:
            self.exit_reason = reason

    def close(self) -> None:
        """Mark the session ended, its actors gone, and wake everybody waiting on it."""
        self.done.set()
        self.partials.close()
        self._notify()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            try:
                on_close(self)
            except Exception as exc:  # a bookkeeping failure must not break the session's end
                _log("error", "session_release_failed", session_id=self.session_id, error=repr(exc))

    def _notify(self) -> None:
        self.partials.wake()
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    async def wait_changed(self) -> None:
        """Wait for the next commit or for the end of the session."""
        if self.done.is_set():
            return
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    @property
    def rng(self) -> random.Random:
        """The session's RNG (backoff jitter), made on first use: ~2.5 KB saved per session."""
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng

    def next_seq(self) -> int:
        return self.seq + 1

    def step_seq(self) -> int:
        """The number naming the step about to run, the same across a crash and its resume.

        It is `next_seq`, except for the first step after a resume (whose own
        event is no step): then it is the number that step had before the crash.
        """
        if self.seq > self.base_seq or self.anchor_seq is None:
            return self.next_seq()
        return self.anchor_seq + 1


class Escaped:
    """A ``BaseException`` other than cancellation that a stage raised.

    It is never classified: `run_stage` hands it over to the supervisor (across
    tasks in `StageMode.TASK`), which re-raises it in its own task.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _is_cancellation(exc: BaseException) -> bool:
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
        with recorder, partials if partials is not None else _NO_SCOPE:
            if deadline is None:
                if current_injector() is not None:
                    await _inject(stage.name, recorder.session_id)
                return await stage.execute(view)
            with anyio.move_on_after(deadline) as scope:
                if current_injector() is not None:
                    await _inject(stage.name, recorder.session_id)
                return await stage.execute(view)
        if scope.cancelled_caught:
            return StageTimeout(stage=stage.name, deadline=deadline)
        raise AssertionError("unreachable")  # pragma: no cover
    except Exception as exc:  # classified by the supervisor, never here
        return exc
    except BaseException as exc:
        if _is_cancellation(exc):
            raise
        return Escaped(exc)  # not classified: re-raised by the supervisor


_NO_SCOPE = contextlib.nullcontext()


async def _inject(stage: str, session_id: str) -> None:
    """The stage seam of fault injection: act out the installed plan's fault, if any."""
    injector = current_injector()
    if injector is not None:
        enter_session(session_id)
        await injector.inject(f"stage:{stage}", session_id, {"stage": stage})


class _Invoke:
    """Run the stage on this view."""

    __slots__ = ("deadline", "recorder", "scope", "view")

    def __init__(
        self,
        view: StateView[Any],
        deadline: float | None,
        recorder: CallRecorder,
        scope: StageScope | None = None,
    ) -> None:
        self.view = view
        self.deadline = deadline
        self.recorder = recorder
        self.scope = scope


class StageActor(Actor[_Invoke, "Patch | Exception | Escaped"]):
    """Runs one stage instance; answers each invocation with its patch or its error.

    It never crashes on a stage error: the supervisor decides what the error
    means and restarts this actor (a fresh stage instance) when it must. A
    ``BaseException`` from the stage comes back as `Escaped`, for the supervisor
    to raise as in `StageMode.INLINE`.
    """

    def __init__(self, stage: Stage[Any], session_id: str) -> None:
        self.stage = stage
        self.session_id = session_id

    async def on_start(self) -> None:
        # Bound in this actor's own task: every log line of the stage names both.
        structlog.contextvars.bind_contextvars(session_id=self.session_id, stage=self.stage.name)

    async def receive(self, message: _Invoke) -> Patch | Exception | Escaped:
        outcome: Patch | Exception | Escaped = await run_stage(
            self.stage, message.view, message.deadline, message.recorder, message.scope
        )
        return outcome


class _TaskSlot:
    """A stage hosted by its own `StageActor`."""

    __slots__ = ("ref", "stage")

    def __init__(
        self, ref: ActorRef[_Invoke, Patch | Exception | Escaped], stage: Stage[Any]
    ) -> None:
        self.ref = ref
        self.stage = stage

    async def invoke(
        self,
        view: StateView[Any],
        deadline: float | None,
        recorder: CallRecorder,
        scope: StageScope | None = None,
    ) -> Any:
        return await self.ref.ask(_Invoke(view, deadline, recorder, scope), timeout=math.inf)

    async def stop(self) -> None:
        self.ref.cancel()
        await self.ref.wait_terminated()


class _InlineSlot:
    """A stage hosted in its supervisor's task."""

    __slots__ = ("stage",)

    def __init__(self, stage: Stage[Any]) -> None:
        self.stage = stage

    async def invoke(
        self,
        view: StateView[Any],
        deadline: float | None,
        recorder: CallRecorder,
        scope: StageScope | None = None,
    ) -> Any:
        structlog.contextvars.bind_contextvars(stage=self.stage.name)
        return await run_stage(self.stage, view, deadline, recorder, scope)

    async def stop(self) -> None:
        """Nothing runs between invocations, so there is nothing to stop."""


class _Step:
    """Run the next step (the supervisor sends this to itself)."""

    __slots__ = ()


_STEP = _Step()

#: Steps a supervisor runs back to back before yielding to other tasks.
_STEPS_PER_YIELD = 4


class SessionSupervisor(Actor[_Step, None]):
    """The actor that owns one session's state and drives its machine.

    A ``BaseException`` other than cancellation raised by a stage (or by any other
    user code it runs: ``next``, a condition, a gate) is never classified: the
    supervisor escalates it (`ActorContext.escalate`), so the session ends
    `ExitReason.CRASHED`, its status is stored, its handle's waiters wake, and
    the exception leaves the `AgentSystem` block in a ``BaseExceptionGroup``.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        # A stage class may serve several states: it is one stage (one instance, one
        # actor), started and restarted once, in the order it first appears.
        self.order: list[str] = list(
            dict.fromkeys(stage.name for stage in session.machine.stages.values())
        )
        self.stage_types: dict[str, type[Stage[Any]]] = {
            stage.name: stage for stage in session.machine.stages.values()
        }
        self.stages: dict[str, _TaskSlot | _InlineSlot] = {}
        self.window: RestartWindow = session.config.restart_intensity.window()
        self.started = 0.0
        #: The session's trace span (`None` without OpenTelemetry).
        self.span: Any = None

    # -- lifecycle ---------------------------------------------------------------

    async def on_start(self) -> None:
        session = self.session
        structlog.contextvars.bind_contextvars(session_id=session.session_id)
        self.started = time.monotonic()
        self.span = _tracing.start_session(session.session_id, session.machine.name)
        if _logger.is_enabled(logging.INFO):
            _log(
                "info",
                "session_started",
                session_id=session.session_id,
                machine=session.machine.name,
                lifecycle=_label(session.state.lifecycle),
                resumed=session.base_seq > 0,
            )
        for name in self.order:
            await self._spawn_stage(name)
        self.context.ref.tell_nowait(_STEP)

    async def on_stop(self, termination: Termination) -> None:
        session = self.session
        try:
            for slot in self.stages.values():
                await slot.stop()
        finally:
            try:
                self._conclude(termination)
                self._log_end()
                if session.persistence is not None and session.exit_reason is not None:
                    # Even when the system is being cancelled: the status is stored and
                    # the lease given up (bounded, should the store hang).
                    with anyio.move_on_after(_STATUS_TIMEOUT, shield=True):
                        await self._store_status(session.exit_reason.value)
            finally:
                session.close()

    async def _store_status(self, status: str) -> None:
        persistence = self.session.persistence
        assert persistence is not None
        try:
            # "finished" and "failed" went with the final commit, in its transaction.
            if status not in (ExitReason.FINISHED.value, ExitReason.FAILED.value):
                await persistence.store.set_status(self.session.session_id, status)
            if persistence.owner is not None:
                await persistence.store.release(self.session.session_id, persistence.owner)
        except Exception as exc:  # the outcome is known in memory; the record catches up on resume
            _log("error", "status_not_stored", session_id=self.session.session_id, error=repr(exc))

    def _log_end(self) -> None:
        session = self.session
        reason = None if session.exit_reason is None else session.exit_reason.value
        _tracing.end_session(self.span, reason, session.steps, session.failure)
        if _logger.is_enabled(logging.INFO):
            _log(
                "info",
                "session_ended",
                session_id=session.session_id,
                exit_reason=reason,
                lifecycle=_label(session.state.lifecycle),
                steps=session.steps,
                retries=session.retries,
                restarts=session.restarts,
                duration=round(time.monotonic() - self.started, 6),
            )

    def _conclude(self, termination: Termination) -> None:
        session = self.session
        if termination.kind is TerminationKind.CANCELLED:
            session.finish(ExitReason.CANCELLED)
        elif termination.kind is TerminationKind.CRASHED:
            error = termination.error
            lifecycle = session.state.lifecycle
            stage = session.machine.stages.get(lifecycle)
            session.failure = FailureRecord(
                error_type=type(error).__name__,
                message=str(error),
                error_class=ErrorClass.FATAL,  # a record of the crash, not a classification
                stage=None if stage is None else stage.name,
                lifecycle=_label(lifecycle),
                exit_reason=ExitReason.CRASHED.value,
            )
            _log("error", "session_crashed", session_id=session.session_id, error=repr(error))
            session.finish(ExitReason.CRASHED)
        else:
            session.finish(session.exit_reason or ExitReason.FINISHED)

    async def _spawn_stage(self, name: str) -> None:
        stage = self.stage_types[name]()
        if self.session.config.stage_mode is StageMode.INLINE:
            self.stages[name] = _InlineSlot(stage)
            return
        actor = StageActor(stage, self.session.session_id)
        ref = await self.context.system.spawn(
            lambda: actor,
            name=f"{self.session.session_id}/{name}",
            mailbox_capacity=self.session.config.mailbox_capacity,
        )
        self.stages[name] = _TaskSlot(ref, stage)

    # -- the step ----------------------------------------------------------------

    async def receive(self, message: _Step) -> None:
        # Steps run back to back while nothing else waits in the mailbox, yielding
        # to the event loop every few steps (cancellation is checked at each one).
        context = self.context
        budget = _STEPS_PER_YIELD
        try:
            while not await self._step():
                if context.pending:
                    context.ref.tell_nowait(_STEP)  # let the waiting messages go first
                    return
                budget -= 1
                if budget:
                    await checkpoint_if_cancelled()
                else:
                    budget = _STEPS_PER_YIELD
                    await checkpoint()
        except Exception:
            raise  # a supervisor bug: this session crashes, nothing else
        except BaseException as exc:
            if _is_cancellation(exc):
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
        if plan.terminal:
            reason = ExitReason.FAILED if plan.failed else ExitReason.FINISHED
            session.finish(session.exit_reason or reason)
            return True
        stage_type = plan.stage_type
        if stage_type is None:  # a state the machine does not know
            stage_type = machine.stages[lifecycle]
        name = stage_type.name
        if session.steps >= session.config.max_steps:
            await self._fail(
                "BudgetExhausted",
                f"the session used its {session.config.max_steps} steps without finishing",
                stage=name,
                attempt=1,
                error_class=ErrorClass.FATAL,
                reason=ExitReason.MAX_STEPS,
            )
            return True
        if machine.gates and await self._pause_at_gate(state, name):
            return True
        started = time.time()
        try:
            if plan.invariants:
                check_invariants(plan.invariants, state, lifecycle, stage=name)
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
            return await self._failed(refused, name, 1)

        attempt = 1
        deadline = plan.deadline
        while True:
            slot = self.stages[name]
            view: StateView[Any] = StateView(state, plan.reads, name)
            recorder = CallRecorder(session.session_id)
            seq = session.next_seq()
            scope = session.partials.scope(name, seq, attempt)
            with _tracing.step(self.span, name, seq, attempt) as span:
                outcome = await slot.invoke(view, deadline, recorder, scope)
                _tracing.step_outcome(span, outcome)
            if isinstance(outcome, Escaped):
                raise outcome.error
            failure = (
                outcome
                if isinstance(outcome, Exception)
                else await self._commit(
                    state, outcome, slot.stage, started, attempt, recorder.finished(), plan
                )
            )
            if failure is None:
                session.steps += 1
                return session.compiled.plan(session.state.lifecycle).terminal and self._ended()
            error_class = session.config.classifier.classify(failure)
            if error_class is ErrorClass.TRANSIENT:
                if attempt < session.config.backoff.max_attempts:
                    hint = failure.retry_after if isinstance(failure, Transient) else None
                    delay = session.config.backoff.delay(attempt, session.rng, at_least=hint)
                    _log(
                        "info",
                        "stage_retrying",
                        session_id=session.session_id,
                        stage=name,
                        attempt=attempt + 1,
                        delay=delay,
                        error=repr(failure),
                    )
                    await anyio.sleep(delay)
                    attempt += 1
                    session.retries += 1
                    continue
                error_class = ErrorClass.RECOVERABLE
            return await self._failed(failure, name, attempt, error_class)

    def _ended(self) -> bool:
        session = self.session
        lifecycle = session.state.lifecycle
        failed = lifecycle is session.machine.failed
        session.finish(ExitReason.FAILED if failed else ExitReason.FINISHED)
        return True

    async def _pause_at_gate(self, state: AgentState, stage: str) -> bool:
        """Pause, durably, if a gate guards this step; return true if it did."""
        session = self.session
        if session.gates_passed:
            session.gates_passed = False  # the step a human just let through
            return False
        commits = session.next_seq() - 1
        for gate in session.machine.gates:
            try:
                triggered = gate.triggers(state, stage, commits)
            except Exception as exc:
                _log("error", "gate_check_failed", session_id=session.session_id, error=repr(exc))
                triggered = True  # a broken gate pauses rather than lets through
            if not triggered:
                continue
            now = time.time()
            event = TransitionEvent(
                session_id=session.session_id,
                seq=session.next_seq(),
                kind=EventKind.PAUSE,
                stage=stage,
                from_state=state.lifecycle,
                to_state=state.lifecycle,
                reads=frozenset(),
                writes=frozenset(),
                patch=Patch(),
                attempt=0,
                started_at=now,
                finished_at=now,
                info={"gate": gate.name, "stage": stage},
            )
            if session.persistence is not None:
                await session.persistence.record(event, state, status="paused")
            session.commit(state, event)
            session.finish(ExitReason.PAUSED)
            _log(
                "info", "session_paused", session_id=session.session_id, gate=gate.name, stage=stage
            )
            return True
        return False

    async def _commit(
        self,
        state: AgentState,
        patch: Patch,
        stage: Stage[Any],
        started: float,
        attempt: int,
        calls: list[dict[str, Any]] | None = None,
        plan: StatePlan | None = None,
    ) -> Exception | None:
        """Validate and commit one stage's patch; return the refusal instead of raising.

        ``plan`` is the compiled plan of ``state``'s lifecycle, when the caller has it.
        """
        session = self.session
        machine = session.machine
        name = stage.name
        lifecycle = state.lifecycle
        if plan is None:
            plan = session.compiled.plan(lifecycle)
        try:
            updates, patch, written = session.validator._validated(
                state, patch, stage=name, writes=stage.writes
            )
            candidate = session.compiled.copy_with(state, updates)
            target = stage.next(candidate)
            # Identity, not equality: a str-valued enum's member of another enum, or a
            # bare string, may compare equal to an allowed state without being one.
            # The plan's targets are keyed by the identity of the allowed states.
            to = plan.targets.get(id(target))
            if to is None:
                allowed = plan.allowed
                raise IllegalTransition(
                    stage=name,
                    from_state=_label(lifecycle),
                    to_state=_label(target) if isinstance(target, enum.Enum) else repr(target),
                    allowed=[_label(s) for s in allowed],
                )
            record = None
            if to.failed:
                # The stage's own decision to fail: still a structured record.
                record = FailureRecord(
                    error_type="StageChoseFailure",
                    message=f"stage {name!r} moved the session to {_label(target)!r}",
                    error_class=ErrorClass.FATAL,
                    stage=name,
                    lifecycle=_label(lifecycle),
                    attempt=attempt,
                    exit_reason=ExitReason.FAILED.value,
                )
            moved = step_moves(machine, state, lifecycle, target, record, updates)
            # The candidate is still private to this call: set the moves on it
            # rather than copying the state a second time.
            candidate.__dict__.update(moved)
            candidate.__pydantic_fields_set__.update(moved)
            if record is None:
                if to.invariants:
                    check_invariants(to.invariants, candidate, target, stage=name)
                edge = plan.edge_checks.get(id(target))
                if edge is not None:
                    check_edge(edge, state, candidate, stage=name)
        except Exception as exc:
            return exc
        event = TransitionEvent(
            session_id=session.session_id,
            seq=session.next_seq(),
            kind=EventKind.STEP,
            stage=name,
            from_state=lifecycle,
            to_state=target,
            reads=stage.reads,
            writes=written,
            patch=patch,
            attempt=attempt,
            started_at=started,
            finished_at=time.time(),
            error=record,
            info={"io": calls} if calls else None,
        )
        if session.persistence is not None:
            try:  # write-ahead: the store has it before it becomes authoritative
                await session.persistence.record(event, candidate)
            except Exception as exc:
                return exc
        if record is not None:
            session.failure = record
        session.commit(candidate, event)
        return None

    # -- failures ----------------------------------------------------------------

    async def _failed(
        self,
        error: Exception,
        stage: str,
        attempt: int,
        error_class: ErrorClass | None = None,
    ) -> bool:
        """Handle a classified failure of ``stage``; return true if the session ended."""
        session = self.session
        if error_class is None:
            error_class = session.config.classifier.classify(error)
        if error_class is ErrorClass.RECOVERABLE:
            if not self.window.allow(anyio.current_time()):
                intensity = session.config.restart_intensity
                error = RestartIntensityExceeded(
                    stage=stage, restarts=intensity.max_restarts, window=intensity.within
                )
                error_class = ErrorClass.FATAL
            else:
                await self._restart(stage)
                return await self._record(error, stage, attempt)
        await self._fail(
            type(error).__name__,
            str(error),
            stage=stage,
            attempt=attempt,
            error_class=error_class,
            reason=ExitReason.FAILED,
        )
        return True

    async def _restart(self, failed: str) -> None:
        session = self.session
        names = session.config.restart_strategy.affected(self.order, failed)
        for name in reversed(names):
            await self.stages.pop(name).stop()
        for name in names:
            await self._spawn_stage(name)
        session.restarts += 1
        _log(
            "warning",
            "stages_restarted",
            session_id=session.session_id,
            stages=names,
            strategy=session.config.restart_strategy.value,
        )

    async def _record(self, exc: Exception, stage: str, attempt: int) -> bool:
        """Record a recoverable error in the state; follow the error route if there is one."""
        session = self.session
        state = session.state
        lifecycle = state.lifecycle
        record = _record(exc, ErrorClass.RECOVERABLE, stage, lifecycle, attempt)
        machine = session.machine
        target = machine.error_routes.get(lifecycle, lifecycle)
        updates: dict[str, Any] = {"last_error": record}
        if target is not lifecycle:
            updates["lifecycle"] = target
            if target is machine.loop_state:
                updates["iteration"] = state.iteration + 1
            try:
                candidate = state.model_copy(update=updates)
                session.validator.check_invariants(candidate, target, stage=stage)
                session.validator.check_transition(state, candidate, stage=stage)
            except ArkhonError as violation:
                _log(
                    "error",
                    "error_route_refused",
                    session_id=session.session_id,
                    error=repr(violation),
                )
                updates = {"last_error": record}
        await self._commit_failure(updates, record, stage, attempt)
        session.steps += 1
        return False

    async def _fail(
        self,
        error_type: str,
        message: str,
        *,
        stage: str | None,
        attempt: int,
        error_class: ErrorClass,
        reason: ExitReason,
    ) -> None:
        """Move the session to the failed state with a structured record."""
        session = self.session
        state = session.state
        record = FailureRecord(
            error_type=error_type,
            message=message,
            error_class=error_class,
            stage=stage,
            lifecycle=_label(state.lifecycle),
            attempt=attempt,
            exit_reason=reason.value,
        )
        updates = {"last_error": record, "lifecycle": session.machine.failed}
        await self._commit_failure(updates, record, stage, attempt)
        session.failure = record
        _log(
            "warning",
            "session_failed",
            session_id=session.session_id,
            stage=stage,
            error_type=error_type,
            reason=reason.value,
        )
        session.finish(reason)

    async def _commit_failure(
        self,
        updates: dict[str, Any],
        record: FailureRecord,
        stage: str | None,
        attempt: int,
    ) -> None:
        """Commit a supervisor-owned patch recording ``record`` (and maybe a move)."""
        session = self.session
        state = session.state
        now = time.time()
        candidate = state.model_copy(update=updates)
        event = TransitionEvent(
            session_id=session.session_id,
            seq=session.next_seq(),
            kind=EventKind.FAILURE,
            stage=stage,
            from_state=state.lifecycle,
            to_state=updates.get("lifecycle", state.lifecycle),
            reads=frozenset(),
            writes=frozenset(updates),
            patch=Patch.of(updates),
            attempt=attempt,
            started_at=now,
            finished_at=now,
            error=record,
        )
        if session.persistence is not None:
            try:
                await session.persistence.record(event, candidate)
            except Exception as exc:  # the failure still ends or redirects the session here
                _log(
                    "error",
                    "failure_not_stored",
                    session_id=session.session_id,
                    error=repr(exc),
                )
        session.commit(candidate, event)


def _record(
    exc: Exception, error_class: ErrorClass, stage: str, lifecycle: enum.Enum, attempt: int
) -> FailureRecord:
    return FailureRecord(
        error_type=type(exc).__name__,
        message=str(exc),
        error_class=error_class,
        stage=stage,
        lifecycle=_label(lifecycle),
        attempt=attempt,
    )
