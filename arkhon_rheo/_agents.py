"""`AgentSystem`: the main entry point, supervising every session one_for_one.

It sits above both `supervision` and `store`, since by default it keeps its
sessions in a SQLite file.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import time
import uuid
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import anyio

from ._children import ChildHost, linked_history
from ._claims import Claims
from ._errors import (
    ConfigurationError,
    SessionError,
    SessionLocked,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
    SystemNotRunning,
)
from ._owner import Owner, is_dead
from .actors import ActorRef, ActorSystem
from .graphs._host import session_scope
from .protocols import (
    SUPERVISOR_FIELDS,
    AgentState,
    Durability,
    ErrorClass,
    EventKind,
    FailureRecord,
    Machine,
    Patch,
    TransitionEvent,
)
from .protocols._faults import installed
from .protocols._stream import DEFAULT_CAPACITY
from .store import SQLiteStore
from .supervision._codec import replay
from .supervision._compiled import compiled
from .supervision._fingerprint import differences
from .supervision._persist import Persistence
from .supervision._replay import ReplayReport, verify
from .supervision._session import (
    EventListener,
    ExitReason,
    Session,
    SessionConfig,
    SessionSupervisor,
    StageMode,
)

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    from anyio.abc import TaskGroup

    from ._claims import Claim
    from .protocols import LoadedSession, Partial, SessionRecord, SessionStream, Store
    from .protocols._faults import FaultInjector
    from .supervision._codec import EventCodec
    from .supervision._digest import StateHasher
    from .supervision._policy import Backoff, Classifier, RestartIntensity, RestartStrategy
    from .supervision._validate import PatchValidator

__all__ = ["AgentStatistics", "AgentSystem", "SessionHandle", "SessionResult"]

S = TypeVar("S", bound=AgentState)

#: The SQLite file an `AgentSystem` keeps its sessions in by default.
DEFAULT_PATH = "arkhon-rheo.db"

#: Ended sessions an `AgentSystem` without a store keeps in memory by default.
DEFAULT_KEEP_ENDED = 1000


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
        """Whether the session finished in a terminal state other than the failed one."""
        return self.exit_reason is ExitReason.FINISHED


class SessionHandle(Generic[S]):
    """A caller's handle on a running (or ended) session."""

    __slots__ = ("__weakref__", "_ref", "_session")

    def __init__(self, session: Session, ref: ActorRef[Any, Any]) -> None:
        self._session = session
        self._ref = ref

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self._session.session_id

    @property
    def state(self) -> S:
        """The state as last committed."""
        return self._session.state  # type: ignore[return-value]

    async def history(self) -> tuple[TransitionEvent, ...]:
        """The events this run of the session committed so far, in order.

        With a store the store is the log: they are read from it (the session
        keeps none in memory), so read them while the system's store is open.
        A resumed session's run starts after its resume event; the whole stored
        history is `AgentSystem.history`. Without a store they are kept in memory.

        Raises:
            StoreError: If the store cannot be read (it was closed, say).
        """
        session = self._session
        if session.keep_log:
            return tuple(session.log)
        return tuple(await _stored_events(session))

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

        Consuming slowly never slows the session: each iterator reads at its own
        pace. Without a store it reads the session's log in place; with one, the
        events before it started come from the store and the later ones are
        handed to it as they commit (kept for it until read).
        """
        session = self._session
        if not session.keep_log:
            with session.partials.subscribe(
                catch_up=lambda: _stored_events(session), partials=False
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
        """Subscribe to its events (from the first, as `events`) and partial output, in order.

        The partial items of step ``seq`` come before event ``seq``, whose
        ``attempt`` says which attempt's partials the commit kept. Events are
        never dropped; partial items are, as in `partials`.

        Raises:
            ConfigurationError: If ``capacity`` is not a positive integer.
        """
        session = self._session
        if session.keep_log:
            return session.partials.subscribe(capacity, log=session.log)
        return session.partials.subscribe(capacity, catch_up=lambda: _stored_events(session))

    def cancel(self) -> None:
        """Cancel the session now; its state stays as last committed."""
        self._ref.cancel()

    def __repr__(self) -> str:
        status = self._session.exit_reason.value if self._session.exit_reason else "running"
        return f"<SessionHandle {self.session_id!r} {status}>"


async def _stored_events(session: Session) -> list[TransitionEvent]:
    """The events ``session``'s run committed, read from its store."""
    persistence = session.persistence
    assert persistence is not None
    codec = session.compiled.codec
    stored = await persistence.store.history(session.session_id)
    return [codec.decode_event(event) for event in stored if event.seq > session.base_seq]


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    """A snapshot of an agent system's counters.

    Attributes:
        sessions: Sessions this system holds: started or resumed here and not
            yet forgotten (`AgentSystem.forget`), ended ones included.
        running: Sessions not ended yet.
        actors: Actors alive (supervisors and stage actors).
        dead_letters: Messages that reached no actor.
        statuses: Those sessions by status: ``"running"`` or their `ExitReason`
            value (``"finished"``, ``"failed"``, ``"paused"``...), only those present.
        queued: Messages waiting now in the mailboxes of their supervisors.
    """

    sessions: int
    running: int
    actors: int
    dead_letters: int
    statuses: Mapping[str, int] = field(default_factory=dict)
    queued: int = 0


class AgentSystem:
    """Runs agent sessions, each under its own supervisor actor, inside your event loop.

    Use it as an async context manager on asyncio or trio. Sessions are
    supervised one_for_one: one session's crash or fatal error never touches
    another. Leaving the block cancels sessions still running.

    Only ``Exception`` is classified. A stage's ``BaseException`` other than
    cancellation (``KeyboardInterrupt``, ``SystemExit``, a subclass of your own)
    ends its session as `ExitReason.CRASHED` (stored as ``"crashed"``, so
    `resume` continues from the last commit), in either stage mode, then
    cancels the block and every other session, and leaves the block in a
    ``BaseExceptionGroup`` (catch it with ``except*``).

    Args:
        max_steps: The default step budget of a session.
        classifier: Maps failures to transient, recoverable or fatal.
        backoff: Retries of transient failures.
        restart_strategy: Which stage actors restart on a recoverable failure.
        restart_intensity: Restarts allowed within a window before escalating.
        mailbox_capacity: The mailbox bound of session actors.
        stage_mode: Where stages run: `StageMode.INLINE` (in the supervisor's task,
            the default) or `StageMode.TASK` (each in its own actor).
        seed: Seeds each session's RNG (backoff jitter), for exact tests.
        listeners: Called with every committed event of every session.
        shutdown_timeout: Seconds the actors may take to stop on exit.
        store: Where sessions are recorded: every commit is stored before it
            becomes authoritative, and `resume` rebuilds a session from it. A
            store passed here is yours: enter it (``async with``) before the
            system and leave it after.
        path: Without ``store``, the SQLite file the system opens (and closes)
            itself: the embedded default, ``arkhon-rheo.db`` in the working
            directory. ``path=None`` (and no store) keeps sessions in memory only.
        durability: The durability mode of that file (see `Durability`).
        lease_ttl: With a store, each running session is leased to this system
            for this many seconds, renewed every third of it: a second system
            (in this process or another on the same file) cannot drive it. If
            this process dies, a system on the same host takes its leases over
            at once (see `orphans` and `recover`); elsewhere they run out.
        snapshot_every: With a store, a snapshot every this many events (loading
            a session is its latest snapshot plus the events after it). ``None``
            (the default) takes them by cost: once the events since the last one
            weigh as much as the state, so snapshots take no more room than the
            events and a load folds at most about a state's worth of events.
        fault_plan: Faults to inject into every session this system starts or
            resumes (an `arkhon_rheo.testing.FaultPlan`), through the stage,
            tool, model and store seams; ``None`` (the default) injects nothing.
        keep_ended: How many ended sessions the system keeps in memory, newest
            (`session`, `sessions`, `statistics` see them); older ones are
            released, oldest first. A session whose handle you hold stays
            reachable through `session` until you drop it. ``None`` (the default)
            keeps none with a store (the store is their record: read it with
            `history`, `replay`, `resume`...) and the last 1,000 without one.

    Raises:
        ConfigurationError: If a bound is out of range.
    """

    def __init__(
        self,
        *,
        max_steps: int = 100,
        classifier: Classifier | None = None,
        backoff: Backoff | None = None,
        restart_strategy: RestartStrategy | None = None,
        restart_intensity: RestartIntensity | None = None,
        mailbox_capacity: int = 16,
        stage_mode: StageMode = StageMode.INLINE,
        seed: int | None = None,
        listeners: Iterable[EventListener] = (),
        shutdown_timeout: float = 5.0,
        store: Store | None = None,
        lease_ttl: float = 30.0,
        path: str | os.PathLike[str] | None = DEFAULT_PATH,
        durability: Durability = Durability.BATCHED,
        snapshot_every: int | None = None,
        fault_plan: FaultInjector | None = None,
        keep_ended: int | None = None,
    ) -> None:
        if not isinstance(stage_mode, StageMode):
            raise ConfigurationError(f"stage_mode must be a StageMode, got {stage_mode!r}")
        config = SessionConfig(
            max_steps=max_steps, mailbox_capacity=mailbox_capacity, stage_mode=stage_mode
        )
        overrides: dict[str, Any] = {
            "classifier": classifier,
            "backoff": backoff,
            "restart_strategy": restart_strategy,
            "restart_intensity": restart_intensity,
        }
        self._config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
        _check_budget(max_steps)
        if snapshot_every is None:
            pass
        elif isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise ConfigurationError(f"snapshot_every must be an integer, got {snapshot_every!r}")
        elif snapshot_every < 1:
            raise ConfigurationError(f"snapshot_every must be at least 1, got {snapshot_every}")
        self._seed = seed
        if not (isinstance(lease_ttl, int | float) and lease_ttl > 0):
            raise ConfigurationError(f"lease_ttl must be positive seconds, got {lease_ttl!r}")
        self._lease_ttl = float(lease_ttl)
        self._identity = Owner.current()
        self._owner = str(self._identity)
        self._renewer: TaskGroup | None = None
        self._owned_store: SQLiteStore | None = None
        if store is None and path is not None:
            store = self._owned_store = SQLiteStore(path, durability=durability)
        self._store = store
        self._snapshot_every = snapshot_every
        self._listeners = tuple(listeners)
        self._actors = ActorSystem(
            name="agents", mailbox_capacity=mailbox_capacity, shutdown_timeout=shutdown_timeout
        )
        if keep_ended is None:
            keep_ended = 0 if store is not None else DEFAULT_KEEP_ENDED
        elif isinstance(keep_ended, bool) or not isinstance(keep_ended, int) or keep_ended < 0:
            raise ConfigurationError(
                f"keep_ended must be a non-negative integer (ended sessions kept), "
                f"got {keep_ended!r}"
            )
        self._keep_ended = keep_ended
        # Running sessions, and the newest `keep_ended` ended ones, oldest first.
        self._sessions: dict[str, SessionHandle[Any]] = {}
        # The ids of the ended sessions in `_sessions`, in the order they ended.
        self._ended: collections.deque[str] = collections.deque()
        # Released ended sessions whose handles someone still holds.
        self._held: weakref.WeakValueDictionary[str, SessionHandle[Any]] = (
            weakref.WeakValueDictionary()
        )
        self._counter = itertools.count()
        self._claims = Claims(store, self._owner, self._lease_ttl)
        # Subgraphs: each child session's link to its parent step, by child id.
        self._links: dict[str, dict[str, Any]] = {}
        self._children = ChildHost(self)
        self._faults = fault_plan

    async def __aenter__(self) -> AgentSystem:
        if self._owned_store is not None:
            await self._owned_store.__aenter__()
        try:
            await self._actors.__aenter__()
            if self._store is not None:
                self._renewer = anyio.create_task_group()
                await self._renewer.__aenter__()
                self._renewer.start_soon(self._renew_leases)
        except BaseException as exc:
            if self._owned_store is not None:
                await self._owned_store.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _renew_leases(self) -> None:
        """Renew the lease of every running session; a session that lost its own stops."""
        store = self._store
        assert store is not None
        while True:
            await anyio.sleep(self._lease_ttl / 3)
            for session_id, handle in list(self._sessions.items()):
                if handle.done:
                    continue
                try:
                    await store.acquire(session_id, self._owner, ttl=self._lease_ttl)
                except SessionLocked:
                    handle.cancel()  # another owner took over: never write beside it
                except StoreError:
                    pass  # a transient store failure; the next round tries again

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        for handle in self._sessions.values():
            if not handle.done:
                handle.cancel()
        try:
            if self._renewer is not None:
                self._renewer.cancel_scope.cancel()
                await self._renewer.__aexit__(None, None, None)
        except BaseException as error:  # the block was cancelled meanwhile (an escalation)
            # The actors' task group must be left in any case, or the host's cancel
            # scopes are corrupted; it absorbs a cancellation of its own scope.
            if exc is None:
                exc_type, exc, tb = type(error), error, error.__traceback__
        try:
            return await self._actors.__aexit__(exc_type, exc, tb)
        finally:
            if self._owned_store is not None:
                await self._owned_store.__aexit__(None, None, None)

    @property
    def store(self) -> Store | None:
        """Where sessions are recorded (``None``: in memory only)."""
        return self._store

    async def start(
        self,
        machine: Machine[S],
        state: S,
        *,
        session_id: str | None = None,
        max_steps: int | None = None,
    ) -> SessionHandle[S]:
        """Start a session of ``machine`` from ``state`` and return its handle.

        Args:
            machine: The machine to run.
            state: The initial state; its lifecycle must be the machine's initial
                state and it must satisfy that state's invariants.
            session_id: The id; a fresh one is made by default.
            max_steps: The step budget; the system's default otherwise.

        Returns:
            The session's handle; the session runs on its own.

        Raises:
            SystemNotRunning: Outside the ``async with`` block.
            SessionError: If the id is taken, or another call here is starting it.
            ConfigurationError: If the state does not fit the machine.
            InvariantViolation: If the initial state breaks an invariant.
        """
        if not isinstance(state, machine.state_type):
            raise ConfigurationError(
                f"machine {machine.name!r} runs on {machine.state_type.__name__}, "
                f"got {type(state).__name__}"
            )
        if state.lifecycle is not machine.initial:
            raise ConfigurationError(
                f"a session of {machine.name!r} starts in {machine.initial!r}, "
                f"but the state is in {state.lifecycle!r}"
            )
        if session_id is None:
            session_id = uuid.uuid4().hex[:12]
        if session_id in self._sessions or session_id in self._held:
            raise SessionError(
                f"session {session_id!r} exists already; pick another id", session_id=session_id
            )
        config = self._config
        if max_steps is not None:
            _check_budget(max_steps)
            config = replace(config, max_steps=max_steps)
        validator = self._validator(machine)
        if state.session_id != session_id:
            state = state.model_copy(update={"session_id": session_id})
        validator.check_invariants(state, machine.initial, stage="(start)")
        self._check_running()
        async with self._claim(session_id) as claim:
            if self._store is not None:
                await self._store.create_session(
                    session_id,
                    machine=machine.name,
                    snapshot=self._codec(machine).encode_state(state),
                    fingerprint=self._fingerprint(machine),
                )
                await claim.lease()
            return await self._launch(machine, state, config, session_id, base_seq=0, claim=claim)

    async def resume(
        self, machine: Machine[S], session_id: str, *, max_steps: int | None = None
    ) -> SessionHandle[S]:
        """Rebuild a session from the store and continue it from its last commit.

        A stage that was running when its process died runs again: stages run at
        least once, commits exactly once (event numbers are unique per session).

        Args:
            machine: The session's machine (the same one it was started with).
            session_id: The session to resume.
            max_steps: The step budget for this run; the system's default otherwise.

        Returns:
            The session's handle; it runs on its own from its last committed state.

        Raises:
            ConfigurationError: If the system has no store, or ``machine`` is not
                the session's machine.
            SessionNotFound: If the store has no such session.
            SessionError: If the session is running here already (or another call
                here is starting or changing it), or has ended.
            StoreCorrupt: If what is stored does not decode.
        """
        store = self._require_store("resume a session")
        self._check_running()
        async with self._claim(session_id) as claim:
            loaded = await store.load(session_id)  # SessionNotFound before any lease
            taken_over = await claim.lease()
            return await self._resume_owned(
                store, machine, loaded, max_steps, taken_over, claim=claim
            )

    async def _resume_owned(
        self,
        store: Store,
        machine: Machine[S],
        loaded: LoadedSession,
        max_steps: int | None,
        taken_over: str | None,
        *,
        claim: Claim | None = None,
    ) -> SessionHandle[S]:
        session_id = loaded.record.session_id
        # Again, now that nobody else can write.
        loaded = await self._load(store, machine, session_id)
        if loaded.record.status == "paused":
            raise SessionError(
                f"session {session_id!r} is paused at a gate; answer it with decide()",
                session_id=session_id,
            )
        codec = self._codec(machine)
        state = cast(
            "S",
            replay(
                machine,
                codec.decode_state(loaded.snapshot),
                [codec.decode_event(event) for event in loaded.events],
            ),
        )
        if machine.is_terminal(state.lifecycle):
            ended = "failed" if state.lifecycle is machine.failed else "finished"
            if loaded.record.status not in (ended, "max_steps", "cancelled", "crashed"):
                await store.set_status(session_id, ended)  # repair a record a crash left behind
            raise SessionError(
                f"session {session_id!r} has ended in {state.lifecycle.name}; "
                "fork it or roll it back to go on",
                session_id=session_id,
            )
        config = self._config
        if max_steps is not None:
            _check_budget(max_steps)
            config = replace(config, max_steps=max_steps)
        record = loaded.record
        stage = machine.stages.get(state.lifecycle)
        anchor = max(
            (e.seq for e in await store.history(session_id) if e.kind != EventKind.RESUME.value),
            default=0,
        )
        info = {
            "resumed_by": self._identity.describe(),
            "from_seq": record.last_seq,
            "previous_status": record.status,
            "taken_over": taken_over,
            # Still "running": its driver stopped without a word, in (or just
            # before) this state's stage, which runs again from its start.
            "rerun": stage.name if stage is not None and record.status == "running" else None,
        }
        event = await self._append_owned(
            machine, record, EventKind.RESUME, state, state, {}, info=info, status="running"
        )
        self._drop(session_id)
        return await self._launch(
            machine, state, config, session_id, base_seq=event.seq, claim=claim, anchor_seq=anchor
        )

    async def orphans(self, machine: Machine[Any] | None = None) -> list[SessionRecord]:
        """The stored sessions left "running" by a driver that is gone, oldest first.

        A session is orphaned when its status is still ``"running"`` and nobody
        drives it: it runs nowhere in this system, and its lease has run out or
        is held by a dead process on this host. Sessions leased to a live owner,
        or to one on another host whose lease has not run out, are left out.

        Args:
            machine: Only the sessions of this machine (by name); all by default.

        Returns:
            Their records; `recover` resumes them.

        Raises:
            ConfigurationError: Without a store.
        """
        store = self._require_store("find orphaned sessions")
        held = {lease.session_id: lease.owner for lease in await store.leases()}
        found = []
        for record in await store.sessions():
            if record.status != "running" or (machine and record.machine != machine.name):
                continue
            handle = self._sessions.get(record.session_id)
            if handle is not None and not handle.done:
                continue
            owner = held.get(record.session_id)
            if owner is None or is_dead(owner):
                found.append(record)
        return found

    async def recover(self, machine: Machine[S]) -> list[SessionHandle[S]]:
        """Resume every orphaned session of ``machine`` (see `orphans`); for start-up.

        Each is resumed as by `resume` (its history records who resumed it and
        the stage that runs again). A session another system takes meanwhile,
        or that turns out to have ended, is skipped.

        Returns:
            The handles of the sessions resumed, oldest first.

        Raises:
            ConfigurationError: Without a store, or if a session of that name was
                stored by a machine that differs from ``machine`` (nothing is
                resumed then).
            SystemNotRunning: Outside the ``async with`` block.
        """
        self._check_running()
        orphans = await self.orphans(machine)
        for record in orphans:
            self._check_machine(machine, record)
        handles = []
        for record in orphans:
            try:
                handles.append(await self.resume(machine, record.session_id))
            except (SessionLocked, SessionError):
                continue  # taken by another system, or ended: not an orphan any more
        return handles

    async def history(
        self, machine: Machine[Any], session_id: str, *, children: bool = False
    ) -> list[TransitionEvent]:
        """Every event of a session, from the store, in order, with patches and timings.

        With ``children``, the events of the child sessions its subgraph stages
        ran (see `subgraph`) come too, each child's right before the parent's
        event for that step (a child still running last); a child's events
        carry ``info["parent"]``: the parent session, stage and event number.

        Raises:
            ConfigurationError: If the system has no store, or ``machine`` is not
                the session's machine.
            SessionNotFound: If the store has no such session.
        """
        if not isinstance(machine, Machine):
            raise ConfigurationError(
                f"history() takes the machine first, then the session id: got {machine!r}"
            )
        if children:
            return await linked_history(self, machine, session_id)
        store = self._require_store("read a session's history")
        self._check_machine(machine, await store.record(session_id))
        codec = self._codec(machine)
        return [codec.decode_event(event) for event in await store.history(session_id)]

    async def replay(
        self, machine: Machine[S], session_id: str, *, reexecute: bool = False
    ) -> ReplayReport[S]:
        """Fold a session's whole log from its start and check it against what was committed.

        Each event's replayed state is compared with the digest the event was
        stored with, and the end result with the stored state a resume would
        run from; the first event that does not fit is reported with the
        reason. A session running meanwhile is checked as it was when the replay
        began. With ``reexecute``, every step's stage also runs again, on a fresh
        instance and the replayed state, its model and tool calls answered from
        the calls the event recorded (see `record_call`): it must make the same
        calls, propose the same patch and choose the same next state. Nothing is
        written; stage code runs, but the model and the tools are not called in
        so far as the stages call them through `record_call`.

        Args:
            machine: The session's machine.
            session_id: The session.
            reexecute: Also run each step's stage again against its recorded calls.

        Returns:
            The report: ``report.ok``, or ``report.divergence`` (the event number
            and what differed), and the replayed state.

        Raises:
            ConfigurationError: Without a store, or if ``machine`` is not the
                session's machine.
            SessionNotFound: If the store has no such session.
            StoreCorrupt: If the session's first snapshot does not decode.
        """
        store = self._require_store("replay a session")
        codec = self._codec(machine)
        loaded = await self._load(store, machine, session_id)
        last = loaded.record.last_seq
        # A running session may commit between these reads: it is checked as it
        # was when the replay began (its record, snapshot and events up to last).
        stored_events = [event for event in await store.history(session_id) if event.seq <= last]
        _, first = await store.snapshot_at(session_id, 0)
        initial = codec.decode_state(first)
        events: list[tuple[TransitionEvent | str, int | None]] = []
        for stored in stored_events:
            try:
                events.append((codec.decode_event(stored), stored.digest))
            except StoreCorrupt as exc:
                events.append((f"the stored event does not decode: {exc}", None))
        current: AgentState | str
        try:
            tail = [codec.decode_event(event) for event in loaded.events]
            current = replay(machine, codec.decode_state(loaded.snapshot), tail)
        except StoreCorrupt as exc:
            current = f"the stored state does not decode: {exc}"
        report = await verify(
            machine,
            codec,
            self._hasher(machine),
            self._validator(machine),
            session_id=session_id,
            initial=initial,
            events=events,
            stored=(last, current),
            reexecute=reexecute,
        )
        return cast("ReplayReport[S]", report)

    async def decide(
        self,
        machine: Machine[S],
        session_id: str,
        decision: str,
        *,
        value: Any = None,
        edit: dict[str, Any] | None = None,
    ) -> SessionHandle[S] | None:
        """Answer a session paused at a gate: ``"resume"``, ``"abort"`` or ``"edit"``.

        With a store the decision is stored and works across processes; without
        one (``path=None``) it applies to the paused session this system holds in
        memory, with the same checks, and the decision event joins its history.

        Args:
            machine: The session's machine.
            session_id: The paused session.
            decision: ``"resume"`` goes on (with ``value`` written to the gate's
                field, validated like any patch); ``"abort"`` moves it to the failed
                state; ``"edit"`` applies ``edit`` (field values, validated like a
                patch, invariants checked) and leaves it paused.
            value: The resume value, for a gate that takes one.
            edit: The fields a human changes.

        Returns:
            The running session's handle after ``"resume"``, else ``None``.

        Raises:
            ConfigurationError: For an unknown decision, or if ``machine`` is not
                the session's machine.
            SessionNotFound: If there is no such session (in the store, or without
                one, started here).
            SessionError: If the session is not paused (or runs here, or another call
                here is starting or changing it).
            InvalidPatch: If the value or an edited field fails validation; the
                session stays paused, nothing is written.
            UndeclaredWrite: If an edit touches a field only the supervisor writes.
            InvariantViolation: If the edited state breaks an invariant.
        """
        if decision not in ("resume", "abort", "edit"):
            raise ConfigurationError(
                f"decision must be 'resume', 'abort' or 'edit', got {decision!r}"
            )
        self._check_running()
        store = self._store
        if store is None:
            async with self._claim(session_id):
                return await self._decide_in_memory(machine, session_id, decision, value, edit)
        async with self._claim(session_id) as claim:
            await store.load(session_id)  # SessionNotFound before any lease
            await claim.lease()
            state, record = await self._state_at(machine, session_id, None)
            if record.status != "paused":
                raise _not_paused(session_id, record.status)
            pause = (await self.history(machine, session_id))[-1]
            gate = (pause.info or {}).get("gate")
            updates, kind, status, error = self._decision(
                machine, state, gate, decision, value, edit
            )
            decided = state.model_copy(update=updates)
            event = await self._append_owned(
                machine,
                record,
                kind,
                state,
                decided,
                updates,
                info={"decision": decision, "gate": gate},
                status=status,
                error=error,
            )
            if decision != "resume":
                return None
            return await self._launch(
                machine,
                cast("S", decided),
                self._config,
                session_id,
                base_seq=event.seq,
                gates_passed=True,
                claim=claim,
            )

    async def _decide_in_memory(
        self,
        machine: Machine[S],
        session_id: str,
        decision: str,
        value: Any,
        edit: dict[str, Any] | None,
    ) -> SessionHandle[S] | None:
        """`decide` for a session paused here without a store."""
        session = self.session(session_id)._session
        if session.machine.name != machine.name:
            raise ConfigurationError(
                f"session {session_id!r} runs machine {session.machine.name!r}, "
                f"not {machine.name!r}"
            )
        reason = session.exit_reason
        if reason is not ExitReason.PAUSED:
            raise _not_paused(session_id, "running" if reason is None else reason.value)
        state = session.state
        gate = (session.log[-1].info or {}).get("gate")
        updates, kind, _, error = self._decision(machine, state, gate, decision, value, edit)
        decided = state.model_copy(update=updates)
        event = _owned_event(
            session_id,
            session.next_seq(),
            kind,
            state,
            decided,
            updates,
            info={"decision": decision, "gate": gate},
            error=error,
        )
        session.log.append(event)
        session.seq = event.seq
        session.state = decided
        if decision == "abort":
            session.failure = error
            session.exit_reason = ExitReason.FAILED
        if decision != "resume":
            return None
        return await self._launch(
            machine,
            cast("S", decided),
            self._config,
            session_id,
            base_seq=session.base_seq,
            gates_passed=True,
            history=session.log,
        )

    def _decision(
        self,
        machine: Machine[Any],
        state: AgentState,
        gate_name: str | None,
        decision: str,
        value: Any,
        edit: dict[str, Any] | None,
    ) -> tuple[dict[str, Any], EventKind, str, FailureRecord | None]:
        """Check a human decision on ``state``; return its updates, event kind, status, error."""
        if decision == "abort":
            failure = FailureRecord(
                error_type="Aborted",
                message=f"aborted by a human at gate {gate_name!r}",
                error_class=ErrorClass.FATAL,
                lifecycle=state.lifecycle.name,
                exit_reason="aborted",
            )
            updates = {"last_error": failure, "lifecycle": machine.failed}
            return updates, EventKind.FAILURE, "aborted", failure
        if decision == "resume":
            gate = next((g for g in machine.gates if g.name == gate_name), None)
            if gate is None or gate.field is None:
                if value is not None:
                    raise ConfigurationError(f"gate {gate_name!r} takes no resume value")
                fields: dict[str, Any] = {}
            else:
                fields = {gate.field: value}
            writes = frozenset(fields)
        else:
            fields = dict(edit or {})
            writes = frozenset(machine.state_type.model_fields) - SUPERVISOR_FIELDS
        validator = self._validator(machine)
        updates, _ = validator.validate(state, Patch.of(fields), stage="(human)", writes=writes)
        validator.check_invariants(
            state.model_copy(update=updates), state.lifecycle, stage="(human)"
        )
        return updates, EventKind.DECISION, "running" if decision == "resume" else "paused", None

    async def rollback(
        self, machine: Machine[Any], session_id: str, to_seq: int
    ) -> TransitionEvent:
        """Return a stopped session's state to what it was after event ``to_seq``.

        The audit log stays append-only: the rollback is a new event whose patch
        sets every field to its value at ``to_seq`` and whose ``info`` records
        ``rolled_back_from`` and ``rolled_back_to``. Resume the session to go on.

        Returns:
            The rollback event.

        Raises:
            ConfigurationError: Without a store, or if ``to_seq`` is out of range.
            SessionNotFound: If the store has no such session.
            SessionError: If the session is running here, or another call here is
                starting or changing it.
            SessionLocked: If another system drives it.
        """
        self._require_store("roll a session back")
        async with self._claim(session_id) as claim:
            await claim.lease()  # nobody drives it
            return await self._rollback(machine, session_id, to_seq)

    async def _rollback(
        self, machine: Machine[Any], session_id: str, to_seq: int
    ) -> TransitionEvent:
        current, record = await self._state_at(machine, session_id, None)
        target, _ = await self._state_at(machine, session_id, to_seq)
        fields = {
            name: getattr(target, name)
            for name in machine.state_type.model_fields
            if name != "session_id"
        }
        return await self._append_owned(
            machine,
            record,
            EventKind.ROLLBACK,
            current,
            target,
            fields,
            info={"rolled_back_from": record.last_seq, "rolled_back_to": to_seq},
            status="rolled_back",
        )

    async def _append_owned(
        self,
        machine: Machine[Any],
        record: SessionRecord,
        kind: EventKind,
        before: AgentState,
        after: AgentState,
        updates: dict[str, Any],
        *,
        info: dict[str, Any],
        status: str,
        error: FailureRecord | None = None,
    ) -> TransitionEvent:
        """Store an event made outside any stage (a rollback, a human decision).

        It follows the session's last event, carries ``updates`` as its patch,
        and is stored with a snapshot of ``after`` and the session's new status.
        """
        store = self._require_store("change a stored session")
        codec = self._codec(machine)
        event = _owned_event(
            record.session_id,
            record.last_seq + 1,
            kind,
            before,
            after,
            updates,
            info=info,
            error=error,
        )
        await store.append(
            record.session_id,
            [codec.encode_event(event, self._hasher(machine).of(after))],
            snapshot=(event.seq, codec.encode_state(after)),
            status=status,
        )
        return event

    async def fork(
        self,
        machine: Machine[Any],
        session_id: str,
        *,
        at_seq: int | None = None,
        new_id: str | None = None,
    ) -> str:
        """Start a new session from another's state after event ``at_seq`` (default: last).

        The fork's first snapshot is that state, its parent is ``session_id``;
        the original is untouched. Resume the fork to run it.

        Returns:
            The new session's id.

        Raises:
            ConfigurationError: Without a store, or if ``at_seq`` is out of range.
            SessionNotFound: If the store has no such session.
            SessionError: If ``new_id`` is taken (or another call here is starting it).
        """
        store = self._require_store("fork a session")
        new_id = new_id or uuid.uuid4().hex[:12]
        async with self._claim(new_id):
            state, _ = await self._state_at(machine, session_id, at_seq)
            state = state.model_copy(update={"session_id": new_id})
            await store.create_session(
                new_id,
                machine=machine.name,
                snapshot=self._codec(machine).encode_state(state),
                parent=session_id,
                status="forked",
                fingerprint=self._fingerprint(machine),
            )
        return new_id

    async def _state_at(
        self, machine: Machine[Any], session_id: str, seq: int | None
    ) -> tuple[AgentState, SessionRecord]:
        """The stored state after event ``seq`` (``None``: the last), and the session's record."""
        store = self._require_store("read a session")
        codec = self._codec(machine)
        loaded = await self._load(store, machine, session_id)
        last = loaded.record.last_seq
        if seq is None or seq == last:
            events = [codec.decode_event(event) for event in loaded.events]
            return replay(machine, codec.decode_state(loaded.snapshot), events), loaded.record
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
            raise ConfigurationError(
                f"event number must be between 0 (the start) and {last} for session "
                f"{session_id!r}, got {seq!r}"
            )
        snapshot_seq, snapshot = await store.snapshot_at(session_id, seq)
        events = [
            codec.decode_event(event)
            for event in await store.history(session_id)
            if snapshot_seq < event.seq <= seq
        ]
        return replay(machine, codec.decode_state(snapshot), events), loaded.record

    async def _load(self, store: Store, machine: Machine[Any], session_id: str) -> LoadedSession:
        """The stored session, checked to be a session of ``machine``."""
        loaded = await store.load(session_id)
        self._check_machine(machine, loaded.record)
        return loaded

    def _check_machine(self, machine: Machine[Any], record: SessionRecord) -> None:
        """Raise `ConfigurationError` unless ``record`` is a session of ``machine``.

        A session stored before fingerprints (schema version 3) is checked by
        name only; one of an unnamed machine then still has the old default name.
        """
        stored = record.fingerprint
        if stored is None:
            default = self._fingerprint(machine)["state"]  # an unnamed machine's name
            legacy = record.machine == "machine" and machine.name == default
            found = [] if record.machine == machine.name or legacy else ["the name differs"]
        else:
            found = differences(stored, self._fingerprint(machine))
        if found:
            raise ConfigurationError(
                f"session {record.session_id!r} runs machine {record.machine!r}, not "
                f"{machine.name!r}: {'; '.join(found)}. Pass the machine it was started with"
            )

    def _check_not_running(self, session_id: str) -> None:
        handle = self._sessions.get(session_id)
        if handle is not None and not handle.done:
            raise SessionError(
                f"session {session_id!r} is running here; cancel it (or wait for it) first",
                session_id=session_id,
            )

    def _claim(self, session_id: str) -> AbstractAsyncContextManager[Claim]:
        """Hold ``session_id`` for one operation: not running here, and no other call on it.

        Entering reserves the id before any await; leaving gives up the lease the
        operation took (unless a launched session took it over) and frees the id.

        Raises:
            SessionError: If the session runs here, or another call here holds it.
        """
        self._check_not_running(session_id)
        return self._claims.hold(session_id)

    async def _launch(
        self,
        machine: Machine[S],
        state: S,
        config: SessionConfig,
        session_id: str,
        *,
        base_seq: int,
        gates_passed: bool = False,
        claim: Claim | None = None,
        history: Sequence[TransitionEvent] = (),
        anchor_seq: int | None = None,
    ) -> SessionHandle[S]:
        """Spawn the session's supervisor; it takes over ``claim``'s lease, if any."""
        seed = None if self._seed is None else f"{self._seed}/{next(self._counter)}"
        link = self._links.get(session_id)
        persistence = None
        if self._store is not None:
            persistence = Persistence(
                self._store,
                self._codec(machine),
                session_id,
                snapshot_every=self._snapshot_every,
                owner=self._owner,
                digest=self._hasher(machine).start(state),
                link=link,
            )
        session = Session(
            session_id,
            machine,
            state,
            config,
            validator=self._validator(machine),
            seed=seed,
            listeners=self._listeners,
            persistence=persistence,
            base_seq=base_seq,
            link=link,
            anchor_seq=anchor_seq,
        )
        session.gates_passed = gates_passed
        session.log.extend(history)  # an in-memory session's earlier events, kept on
        session.seq += len(history)
        session.on_close = self._closed
        try:
            # Shielded: the session starts whole (and the lease passes to it) or not at all.
            with anyio.CancelScope(shield=True):
                with (
                    session_scope(self._children, session),  # subgraph stages find us
                    installed(self._faults),  # its tasks inherit the fault plan, if any
                ):
                    ref = await self._actors.spawn(
                        SessionSupervisor, session, name=f"{session_id}/supervisor"
                    )
        except BaseException:
            if claim is not None and session.done.is_set():
                claim.hand_over()  # its supervisor ran and stopped: it gave the lease up
            raise
        if claim is not None:
            claim.hand_over()
        handle: SessionHandle[S] = SessionHandle(session, ref)
        self._drop(session_id)  # a run before this one (a paused session decided here)
        self._sessions[session_id] = handle
        if session.done.is_set():  # it ended before its handle existed
            self._closed(session)
        return handle

    def _closed(self, session: Session) -> None:
        """A session ended: keep it among the newest `keep_ended`, or release it."""
        session_id = session.session_id
        handle = self._sessions.get(session_id)
        if handle is None or handle._session is not session:
            return  # a run replaced since (or its handle is not made yet)
        if session.keep_log and session.exit_reason is ExitReason.PAUSED:
            return  # without a store, nothing else holds it until it is decided
        self._ended.append(session_id)
        while len(self._ended) > self._keep_ended:
            self._release(self._ended.popleft())

    def _release(self, session_id: str) -> None:
        """Stop holding an ended session: it lives on while someone holds its handle."""
        handle = self._sessions.get(session_id)
        if handle is None or not handle.done:
            return  # forgotten, or running again (resumed) since
        del self._sessions[session_id]
        self._links.pop(session_id, None)
        self._held[session_id] = handle

    def _check_running(self) -> None:
        if self._actors.state.value != "running":
            raise SystemNotRunning(
                f"cannot start a session: the agent system is {self._actors.state.value}; "
                "start sessions inside its `async with` block"
            )

    def _require_store(self, purpose: str) -> Store:
        if self._store is None:
            raise ConfigurationError(
                f"cannot {purpose} without a store: pass store=... to AgentSystem"
            )
        return self._store

    # The machine's compiled pieces live on the machine (see `compiled`), not here:
    # a machine built per request is freed with its sessions.

    def _codec(self, machine: Machine[Any]) -> EventCodec:
        return compiled(machine).codec

    def _fingerprint(self, machine: Machine[Any]) -> dict[str, Any]:
        return compiled(machine).fingerprint

    def _hasher(self, machine: Machine[Any]) -> StateHasher:
        return compiled(machine).hasher

    async def run(
        self,
        machine: Machine[S],
        state: S,
        *,
        session_id: str | None = None,
        max_steps: int | None = None,
    ) -> SessionResult[S]:
        """Start a session and wait for its result (see `start`)."""
        handle = await self.start(machine, state, session_id=session_id, max_steps=max_steps)
        return await handle.result()

    def session(self, session_id: str) -> SessionHandle[Any]:
        """The handle of a session started here: running, kept (see ``keep_ended``) or held.

        An ended session the system released is found while its handle is held
        somewhere; after that, its record is in the store (if there is one).

        Raises:
            SessionNotFound: If no session has that id.
        """
        handle = self._sessions.get(session_id) or self._held.get(session_id)
        if handle is None:
            raise SessionNotFound(session_id=session_id)
        return handle

    def forget(self, session_id: str) -> None:
        """Drop an ended session's record (log, state, handle) to free its memory.

        Ended sessions are released on their own beyond ``keep_ended`` (with a
        store, at once): forget the ones kept sooner; handles already held keep
        working. With a store, forgetting a session no longer held here (its
        record is in the store) does nothing.

        Raises:
            SessionNotFound: Without a store, if no session here has that id.
            SessionError: If the session is still running; cancel it first.
        """
        if (
            self._store is not None
            and session_id not in self._sessions
            and session_id not in self._held
        ):
            self._links.pop(session_id, None)
            return  # released already: the store holds its record
        handle = self.session(session_id)
        if not handle.done:
            raise SessionError(
                f"session {session_id!r} is still running; cancel it or wait for its "
                "result before forgetting it",
                session_id=session_id,
            )
        self._drop(session_id)
        self._links.pop(session_id, None)

    def _drop(self, session_id: str) -> None:
        """Stop holding ``session_id`` in any way (before it runs again, or to forget it)."""
        if self._sessions.pop(session_id, None) is not None:
            with contextlib.suppress(ValueError):
                self._ended.remove(session_id)
        self._held.pop(session_id, None)

    def sessions(self) -> list[str]:
        """The ids of the sessions this system holds: running, and the ended ones it keeps.

        Oldest first. Ended sessions are kept up to ``keep_ended`` (none by
        default with a store, whose records keep them), not forgotten.
        """
        return list(self._sessions)

    def statistics(self) -> AgentStatistics:
        """Return a snapshot of the system's counters."""
        actors = self._actors.statistics()
        statuses: dict[str, int] = {}
        queued = 0
        for handle in self._sessions.values():
            reason = handle._session.exit_reason
            status = "running" if reason is None or not handle.done else reason.value
            statuses[status] = statuses.get(status, 0) + 1
            if not handle.done:
                queued += handle._ref.statistics().queued
        return AgentStatistics(
            sessions=len(self._sessions),
            running=statuses.get("running", 0),
            actors=actors.alive,
            dead_letters=actors.dead_letters,
            statuses=statuses,
            queued=queued,
        )

    def _validator(self, machine: Machine[Any]) -> PatchValidator:
        return compiled(machine).validator


def _not_paused(session_id: str, status: str) -> SessionError:
    return SessionError(
        f"session {session_id!r} is not paused (it is {status}); "
        "only a session waiting at a gate takes a decision",
        session_id=session_id,
    )


def _owned_event(
    session_id: str,
    seq: int,
    kind: EventKind,
    before: AgentState,
    after: AgentState,
    updates: dict[str, Any],
    *,
    info: dict[str, Any],
    error: FailureRecord | None,
) -> TransitionEvent:
    """An event made outside any stage (a rollback, a human decision)."""
    now = time.time()
    return TransitionEvent(
        session_id=session_id,
        seq=seq,
        kind=kind,
        stage=None,
        from_state=before.lifecycle,
        to_state=after.lifecycle,
        reads=frozenset(),
        writes=frozenset(updates),
        patch=Patch.of(updates),
        attempt=0,
        started_at=now,
        finished_at=now,
        error=error,
        info=info,
    )


def _check_budget(max_steps: int) -> None:
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigurationError(
            f"max_steps must be a positive integer, got {max_steps!r}: every session needs "
            "a bound on its steps"
        )
