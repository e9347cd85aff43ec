"""The record of one session: its configuration, its state, its log, how it ended.

`Session` is shared by the session's supervisor (`SessionSupervisor`), which
commits to it, and its handle, which reads it and waits on it. The helpers
here build the two records a session writes besides its state: its events
(`Session.event`) and its failure records (`failure_record`).

What a caller holds of a session is here too, the read side of the record: its
`SessionHandle`, and the `SessionResult` it ends with.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from .._construct import internal_only, make
from .._log import get_logger
from .._redact import scrub_secrets
from ..actors._seams import LazyEvent
from ..protocols import (
    AgentState,
    Clock,
    ErrorClass,
    EventKind,
    FailureRecord,
    TransitionEvent,
    WallClock,
)
from ._commit_rule import state_label
from ._compiled import compiled
from ._eventlog import EventLog
from ._partials import DEFAULT_CAPACITY, PartialHub
from ._persist import linked
from ._policy import Backoff, Classifier, RestartIntensity, RestartStrategy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

    from ..actors import ActorRef
    from ..protocols import Machine, Partial, Patch, SessionStream, StoredMessage
    from ._commit_rule import PatchValidator
    from ._compiled import CompiledMachine
    from ._persist import Persistence

__all__ = [
    "EventListener",
    "ExitReason",
    "Session",
    "SessionConfig",
    "SessionHandle",
    "SessionResult",
    "StageMode",
    "failure_record",
    "gate_commits",
    "new_handle",
    "session_of",
]

_logger = get_logger("arkhon_rheo.supervision")
_STEP = EventKind.STEP
_ROLLBACK = EventKind.ROLLBACK

#: Called with every committed event; a listener's failure is logged, never raised.
EventListener = Callable[[TransitionEvent], None]

#: The clock of a session given none: the machine's own.
_WALL: Clock = WallClock()

#: The read and write sets of an event that reads or writes nothing.
_NOTHING: frozenset[str] = frozenset()


def _log_commit(event: TransitionEvent) -> None:
    """Log one committed event at info level (the caller checked that level is on)."""
    _logger.info(
        "transition_committed",
        session_id=event.session_id,
        seq=event.seq,
        kind=event.kind.value,
        stage=event.stage,
        from_state=state_label(event.from_state),
        to_state=state_label(event.to_state),
        writes=sorted(event.writes),
        attempt=event.attempt,
    )


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
    #: It reached a state that waits for a message (or a timer) and none was due:
    #: it parked, stored as ``"waiting"``, holding no lease and no memory; a
    #: message sent to it (or a timer falling due) wakes it where it is served.
    WAITING = "waiting"
    #: A commit was refused because another owner took the session's lease
    #: (`LeaseLost`: this process was paused, or cut off, past its lease). It
    #: stopped at once, writing nothing more (no status, no lease release): its
    #: new owner drives it from the last commit. Its ``failure`` names the error.
    LEASE_LOST = "lease_lost"


class StageMode(enum.Enum):
    """Deprecated: where a session's stages ran, when there were two ways.

    Every stage is now an actor of its own (a mailbox, restarted with a fresh
    instance), which its supervisor asks in its own task while the stage is
    idle: one way to run a stage, as fast as ``INLINE`` was. ``AgentSystem``
    still takes ``stage_mode=`` for one release, with a `DeprecationWarning`,
    and ignores it.
    """

    #: Deprecated: the one way to run a stage is the only one.
    INLINE = "inline"
    #: Deprecated: the one way to run a stage is the only one.
    TASK = "task"


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """How a session is supervised.

    Attributes:
        max_steps: The most stage steps before the session is stopped (exit reason
            ``max_steps``); every session has one, so no loop is unbounded. In a
            session that takes messages it bounds each turn (the steps after a
            message is applied, until the next one is), never the session's life.
        classifier: Maps failures to transient, recoverable or fatal.
        backoff: Retries of transient failures.
        restart_strategy: Which stage actors restart on a recoverable failure.
        restart_intensity: How many restarts within how long escalate to fatal.
        mailbox_capacity: The mailbox bound of the session's actors (its stages' too).
    """

    max_steps: int = 100
    classifier: Classifier = field(default_factory=Classifier)
    backoff: Backoff = field(default_factory=Backoff)
    restart_strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE
    restart_intensity: RestartIntensity = field(default_factory=RestartIntensity)
    mailbox_capacity: int = 16


class Session:
    """The record of one session, shared by its supervisor and its handle."""

    __slots__ = (
        "__weakref__",
        "_changed",
        "_rng",
        "anchor_seq",
        "applies",
        "base_seq",
        "clock",
        "compiled",
        "config",
        "done",
        "exit_reason",
        "failure",
        "gate_commits",
        "gates_passed",
        "hand_over_on_cancel",
        "handoff",
        "interrupt",
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
        "tell_parent",
        "turn_start",
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
        clock: Clock | None = None,
    ) -> None:
        self.session_id = session_id
        #: What the session tells the time by, for its messages and timers.
        self.clock: Clock = _WALL if clock is None else clock
        #: After a resume: the number of the last event that was not a resume.
        self.anchor_seq = anchor_seq
        #: A child session's link to its parent step, stamped on each of its events.
        self.link = link
        #: A child's run its parent does not await here: its end goes to the parent's inbox.
        self.tell_parent = False
        #: The inbox message of its child's end, which its next commit marks applied.
        self.applies: StoredMessage | None = None
        self.persistence = persistence
        self.base_seq = base_seq
        self.gates_passed = False
        #: The commits a `Gate.every` counts: steps since the session began or was
        #: last rolled back (set by its launch from what it read; see `gate_commits`).
        self.gate_commits = 0
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
        self.log = EventLog(session_id, self.compiled.interned)
        #: The number of the last event committed (or, before any, ``base_seq``).
        self.seq = base_seq
        #: Called once with the session when it has ended (the system releases it).
        self.on_close: Callable[[Session], None] | None = None
        #: The steps run in this turn: since the last message applied (or the run's
        #: start); ``config.max_steps`` bounds them, so a living session's limit is per
        #: turn and a burst of messages never exhausts it.
        self.steps = 0
        #: The state (and its event number) the session waited in before the message
        #: that began the turn under way: where an interrupting message cuts it back to.
        self.turn_start: tuple[AgentState, int] | None = None
        #: The id of a message that asked to cut the turn under way (``on_busy=
        #: "interrupt"``): the supervisor cuts it at its next commit boundary.
        self.interrupt: str | None = None
        self.retries = 0
        self.restarts = 0
        #: Set once the session has ended; its event is made only when somebody waits
        #: (most sessions end with nobody awaiting them: their handle reads the flag).
        self.done = LazyEvent()
        self.exit_reason: ExitReason | None = None
        #: Set to hand the session over (a worker draining): it stops before its next
        #: step (a commit boundary), its stored status left as it is ("running") and
        #: its lease given up, for another driver to go on from its last commit.
        self.handoff = False
        #: Set for a worker's runs: a cancellation (the worker's own, or its task
        #: group's, when another run raised a BaseException) hands the session over
        #: as ``handoff`` does, its record left ``"running"`` (from its last commit)
        #: and its lease given up, instead of storing it ``"cancelled"``.
        self.hand_over_on_cancel = False
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
        if event.kind is _STEP:  # what a `Gate.every` counts, as `gate_commits` counts it
            self.gate_commits += 1
        elif event.kind is _ROLLBACK:
            self.gate_commits = 0
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
                _logger.error("event_listener_failed", session_id=self.session_id, error=repr(exc))
        self._notify()

    def commit_out_of_band(self, state: AgentState, event: TransitionEvent) -> None:
        """Commit ``event``, made outside any stage while the session is stopped (a decision).

        Without a store, the session is its own record: ``state`` becomes its
        state and ``event`` joins its log, as `commit` would do, but nobody is
        told (no run is under way; a stored session's journal tells nobody
        either), and the event is kept as it was made. An event that moves the
        session to the machine's failed state ends it failed, with the event's
        error.
        """
        self.state = state
        self.seq = event.seq
        if self.keep_log:
            self.log.append(event)
        if event.to_state is self.machine.failed:
            self.failure = event.error
            self.exit_reason = ExitReason.FAILED

    def finish(self, reason: ExitReason) -> None:
        """Record how the session ended (the first reason recorded stands)."""
        if self.exit_reason is None:
            self.exit_reason = reason

    def lease_taken(self) -> None:
        """Another owner took the session's lease: the run ends as ``LEASE_LOST``.

        The one way a run learns it (a renewal refused, or an append refused with
        `LeaseLost`): it stops at once (as a handoff does), and writes nothing
        more, not a status, not a release: the session is its new owner's.
        """
        if self.persistence is not None:
            self.persistence.lost = True
        self.handoff = True
        self.finish(ExitReason.LEASE_LOST)

    def stop_here(self) -> bool:
        """End the run at this commit boundary, to hand it over (see ``handoff``); true."""
        self.finish(ExitReason.CANCELLED)
        return True

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
                _logger.error("session_release_failed", session_id=self.session_id, error=repr(exc))

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
        """The number the next event will have."""
        return self.seq + 1

    def event(
        self,
        kind: EventKind,
        stage: str | None,
        from_state: enum.Enum,
        to_state: enum.Enum,
        patch: Patch,
        writes: frozenset[str],
        attempt: int,
        *,
        reads: frozenset[str] = _NOTHING,
        started_at: float | None = None,
        error: FailureRecord | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> TransitionEvent:
        """The session's next event, finished now (and started now, without ``started_at``)."""
        now = time.time()
        return TransitionEvent(
            self.session_id,
            self.seq + 1,
            kind,
            stage,
            from_state,
            to_state,
            reads,
            writes,
            patch,
            attempt,
            now if started_at is None else started_at,
            now,
            error,
            info,
        )

    def step_seq(self) -> int:
        """The number naming the step about to run, the same across a crash and its resume.

        It is `next_seq`, except for the first step after a resume (whose own
        event is no step): then it is the number that step had before the crash.
        """
        if self.seq > self.base_seq or self.anchor_seq is None:
            return self.next_seq()
        return self.anchor_seq + 1


def failure_record(
    error_type: str,
    message: str,
    error_class: ErrorClass,
    *,
    stage: str | None,
    lifecycle: enum.Enum,
    attempt: int = 1,
    reason: ExitReason | None = None,
) -> FailureRecord:
    """The record of a failure of ``stage`` in ``lifecycle`` (``reason``: it ended the session).

    Its message is scrubbed of registered secrets (``_redact``): it is committed to the store.
    """
    return FailureRecord(
        error_type=error_type,
        message=scrub_secrets(message),
        error_class=error_class,
        stage=stage,
        lifecycle=state_label(lifecycle),
        attempt=attempt,
        exit_reason=None if reason is None else reason.value,
    )


# What a caller holds of a session: its handle, and the result it ends with.

S = TypeVar("S", bound=AgentState)


@dataclass(frozen=True, slots=True)
class SessionResult(Generic[S]):
    """How a session ended.

    Attributes:
        session_id: The session.
        state: Its last committed state.
        exit_reason: Why it ended.
        failure: The failure that ended it, if one did.
        steps: Commits made (stage steps and recorded failures).
        retries: Transient retries made.
        restarts: Stage restarts made.
    """

    session_id: str
    state: S
    exit_reason: ExitReason
    failure: FailureRecord | None
    steps: int
    retries: int
    restarts: int

    @property
    def ok(self) -> bool:
        """Whether the run went well: it finished (not failed), or parked waiting for a message."""
        return self.exit_reason is ExitReason.FINISHED or self.exit_reason is ExitReason.WAITING


class SessionHandle(Generic[S]):
    """A caller's handle on a running (or ended) session.

    Handles come from `AgentSystem.start`, `AgentSystem.resume` and the
    stored-session operations that launch a run; they have no public constructor.
    """

    __slots__ = ("__weakref__", "_ref", "_session")

    _session: Session
    _ref: ActorRef[Any, Any]

    __init__ = internal_only(
        "AgentSystem.start() and resume() return one, and AgentSystem.session(id) finds it again"
    )

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self._session.session_id

    @property
    def state(self) -> S:
        """The state as last committed."""
        return self._session.state  # type: ignore[return-value]

    async def history(self) -> tuple[TransitionEvent, ...]:
        """Every event of the session committed so far, from its first, in order.

        The whole history, from any handle: a resumed (or approved) session's
        handle returns the events of its earlier runs too, its resume event
        among them, as ``system.stored(machine, id).history()`` does. With a
        store the store is the log: they are read from it (the session keeps
        none in memory), so read them while the system's store is open. Without
        a store they are kept in memory.

        Raises:
            StoreError: If the store cannot be read (it was closed, say).
        """
        session = self._session
        if session.keep_log:
            return tuple(session.log)
        return tuple(await stored_events(session))

    @property
    def done(self) -> bool:
        """Whether the session has ended."""
        return self._session.done.is_set()

    async def result(self) -> SessionResult[S]:
        """Wait for the session to end and return how it ended.

        A session whose stage raised a ``BaseException`` other than cancellation
        ends `ExitReason.CRASHED`, its ``failure`` naming the exception; the
        exception itself leaves the `AgentSystem` block (so a waiter inside the
        block may be cancelled instead of returning).
        """
        session = self._session
        await session.done.wait()
        assert session.exit_reason is not None
        return SessionResult(
            session_id=session.session_id,
            state=session.state,  # type: ignore[arg-type]
            exit_reason=session.exit_reason,
            failure=session.failure,
            steps=session.steps,
            retries=session.retries,
            restarts=session.restarts,
        )

    async def events(self) -> AsyncIterator[TransitionEvent]:
        """Yield every event of the session from the first, live, until it ends.

        From the session's first event, whichever run this handle is of: on a
        resumed handle the earlier runs' events (and the resume event) come
        first, as in `history`. Consuming slowly never slows the session: each
        iterator reads at its own pace. Without a store it reads the session's
        log in place; with one, the events before it started come from the
        store and the later ones are handed to it as they commit (kept for it
        until read).
        """
        session = self._session
        if not session.keep_log:
            with session.partials.subscribe(
                catch_up=lambda: stored_events(session), partials=False
            ) as stream:
                async for event in stream:
                    yield event
            return
        position = 0
        while True:
            log = session.log
            while position < len(log):
                yield log[position]
                position += 1
            if session.done.is_set():
                return
            await session.wait_changed()

    def partials(self, *, capacity: int = DEFAULT_CAPACITY) -> SessionStream[Partial]:
        """Subscribe to the partial output its stages `emit`, from now until it ends.

        Each call is a subscription of its own, with its own buffer of
        ``capacity`` items; the session never waits for it. When the buffer is
        full, new items are dropped for this subscriber (the next item it gets
        says how many in `Partial.dropped`; ``statistics().dropped`` counts
        all). Items emitted before the call are not delivered; on an ended
        session the iterator ends at once.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        return self._session.partials.subscribe(capacity)

    def stream(
        self, *, capacity: int = DEFAULT_CAPACITY
    ) -> SessionStream[TransitionEvent | Partial]:
        """Subscribe to its events (from its first, as `events`) and partial output, in order.

        The partial items of step ``seq`` come before event ``seq``, whose
        ``attempt`` says which attempt's partials the commit kept. Events are
        never dropped; partial items are, as in `partials`.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        session = self._session
        if session.keep_log:
            return session.partials.subscribe(capacity, log=session.log)
        return session.partials.subscribe(capacity, catch_up=lambda: stored_events(session))

    def cancel(self) -> None:
        """Cancel the session now; its state stays as last committed."""
        self._ref.cancel()

    def __repr__(self) -> str:
        status = self._session.exit_reason.value if self._session.exit_reason else "running"
        return f"<SessionHandle {self.session_id!r} {status}>"


def new_handle(session: Session, ref: ActorRef[Any, Any]) -> SessionHandle[Any]:
    """The handle of ``session``, run by the supervisor behind ``ref`` (the system's only way)."""
    handle: SessionHandle[Any] = make(SessionHandle, _session=session, _ref=ref)
    return handle


def session_of(handle: SessionHandle[Any]) -> Session:
    """The record of the session behind ``handle`` (for the system's own modules)."""
    return handle._session


async def stored_events(session: Session) -> list[TransitionEvent]:
    """Every event of ``session`` (its earlier runs' too), read from its store."""
    persistence = session.persistence
    assert persistence is not None
    decode = persistence.codec.decode_event
    return [decode(event) for event in await persistence.store.history(session.session_id)]


def gate_commits(events: Iterable[TransitionEvent], commits: int = 0) -> int:
    """The commits a `Gate.every` counts after ``events``, ``commits`` counted before them.

    Each step (a ``STEP`` event) adds one; a ``ROLLBACK`` starts again from
    none; every other event (a pause, a decision, a resume, a failure, an
    upgrade) leaves the count as it is. A resumed session starts from this
    count of its history; a live one keeps it up in `Session.commit`.
    """
    for event in events:
        if event.kind is _STEP:
            commits += 1
        elif event.kind is _ROLLBACK:
            commits = 0
    return commits
