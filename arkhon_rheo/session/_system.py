"""`AgentSystem`: the main entry point, supervising every session one_for_one.

It keeps the system's lifecycle and its leases; what the operations on
sessions need of it (the claim on a session, the launch of its supervisor...)
is its `SessionHost`'s, which it hands to each `StoredSession`; the operations
on stored sessions are `StoredSession`'s, a session's store record is its
`Journal`'s. It lives in `arkhon_rheo.session` with all of those, above
`store`, since by default it keeps its sessions in a SQLite file;
`arkhon_rheo.system` is its public namespace.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio

from .._errors import SessionError, SessionLocked, SessionNotFound
from ..actors import ActorSystem
from ..protocols import AgentState, Durability, Machine
from ..store._seams import StoreLocation
from ._children import ChildHost, tell_parked_parents, wake_cut_parents, wake_parent, with_subgraphs
from ._client import checked_start, submit
from ._default_store import DEFAULT_PATH, announce_default_store
from ._host import AgentStatistics, Claims, Registry, SessionHost
from ._mail import MAX_MESSAGE_BYTES, Postman
from ._messaging import Messaging, Replies
from ._options import (
    check_lease_ttl,
    check_positive,
    check_snapshot_every,
    kept,
    register_redacted,
    session_config,
)
from ._owner import Owner
from ._record import EventListener
from ._recovery import orphaned
from ._resources import Resources
from ._stored import StoredSession, new_stored

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable
    from types import TracebackType

    from .._hooks import FaultInjector
    from ..core import Keyring
    from ..protocols import Clock, SessionRecord, Store
    from ..store import PostgresStore, SQLiteStore
    from ._policy import Backoff, Classifier, RestartIntensity, RestartStrategy
    from ._record import EventListener, SessionHandle, SessionResult, StageMode

__all__ = ["AgentSystem"]

S = TypeVar("S", bound=AgentState)


class AgentSystem(Messaging):
    """Runs agent sessions, each under its own supervisor actor, inside your event loop.

    Use it as an async context manager on asyncio or trio. Sessions are
    supervised one_for_one: one session's crash or fatal error never touches
    another. Leaving the block cancels sessions still running.

    The system opens the resources of the machines it drives (see
    ``Machine(resources=...)``; `react_agent` declares its model client): each
    one that is an async context manager and not open already is entered once,
    before the first session that needs it is stored or resumed, shared by
    every session, and left when the block is left, after the sessions stopped.

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
        stage_mode: Deprecated, and ignored with a `DeprecationWarning`: there is
            one way to run a stage (each stage is an actor of its own, which its
            supervisor asks in its own task while the stage is idle).
        seed: Seeds each session's RNG (backoff jitter), for exact tests.
        listeners: Called with every committed event of every session.
        shutdown_timeout: Seconds the actors may take to stop on exit.
        store: Where sessions are recorded: every commit is stored before it
            becomes authoritative, and `resume` rebuilds a session from it. A
            store passed here is yours: enter it (``async with``) before the
            system and leave it after. A str (a file path, a ``postgresql://`` URL)
            is opened and closed here.
        path: Without ``store``, the SQLite file the system opens (and closes)
            itself: the embedded default, ``arkhon-rheo.db`` in the working
            directory (logged once at info, logger ``arkhon_rheo.system``), or a
            ``postgresql://`` URL; ``path=None``: in memory only.
        durability: The durability mode of that store (see `Durability`).
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
            keeps none with a store (the store is their record: read it through
            ``system.stored(machine, id)``) and the last 1,000 without one.
        machines: Machines whose parked sessions this system wakes when a timer
            of theirs falls due, from the start (starting, resuming, recovering
            or sending to a session of a machine makes the system serve it too).
        clock: What messages and timers are timed by (an
            `arkhon_rheo.protocols.Clock`): the machine's own clock by default;
            tests pass an ``arkhon_rheo.testing.VirtualClock``.
        inbox_capacity: The most messages a session's inbox holds waiting to
            be applied; one more is refused (`InboxFull`), nothing stored.
        max_message_bytes: The largest payload a message sent to a session may
            have, in bytes of compact UTF-8 JSON (1 MiB by default); a larger one
            is refused (`MessageRefused`), nothing stored.
        poll_interval: The longest the timer watch sleeps before it looks in
            the store again (for timers other processes set), in seconds.
        secrets: The `Keyring` `Sensitive` state values are sealed with in the
            store; a machine with such fields needs it (`KeyringError` otherwise).
        redact: Secrets of your own (a payment key, a token your tools use) to
            mask as ``[REDACTED]`` wherever the library writes or shows them: a
            tool's error before the model sees it, log lines, failure records,
            the store. Registered for the life of the process, as model keys are.

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
        stage_mode: StageMode | None = None,
        seed: int | None = None,
        listeners: Iterable[EventListener] = (),
        shutdown_timeout: float = 5.0,
        store: Store | str | None = None,
        lease_ttl: float = 30.0,
        path: str | os.PathLike[str] | None = DEFAULT_PATH,
        durability: Durability = Durability.BATCHED,
        snapshot_every: int | None = None,
        fault_plan: FaultInjector | None = None,
        keep_ended: int | None = None,
        machines: Iterable[Machine[Any]] = (),
        clock: Clock | None = None,
        inbox_capacity: int = 1000,
        poll_interval: float = 1.0,
        secrets: Keyring | None = None,
        redact: Iterable[str] = (),
        reply_poll: float = 0.05,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        config = session_config(
            max_steps,
            mailbox_capacity,
            stage_mode,
            classifier=classifier,
            backoff=backoff,
            restart_strategy=restart_strategy,
            restart_intensity=restart_intensity,
        )
        check_snapshot_every(snapshot_every)
        register_redacted(redact)
        lease_ttl = check_lease_ttl(lease_ttl)
        identity = Owner.current()
        announce_default_store(store, path)
        self._exit = contextlib.AsyncExitStack()
        self._owned_store = _owned_store(store, path, durability)
        store = self._owned_store or cast("Store | None", store)
        self._store = store
        self._actors = ActorSystem(
            name="agents", mailbox_capacity=mailbox_capacity, shutdown_timeout=shutdown_timeout
        )
        self._registry = Registry(kept(keep_ended, with_store=store is not None))
        self._resources = Resources(close_timeout=shutdown_timeout)
        self._claims = Claims(store, str(identity), lease_ttl)
        self._host = SessionHost(
            actors=self._actors,
            registry=self._registry,
            claims=self._claims,
            children=ChildHost(self, self._registry),
            config=config,
            store=store,
            owner=identity,
            seed=seed,
            snapshot_every=snapshot_every,
            listeners=tuple(listeners),
            faults=fault_plan,
            clock=clock,
            resources=self._resources,
            secrets=secrets,
        )
        self._postman = Postman(
            self._host, inbox_capacity, poll_interval, with_subgraphs(machines), max_message_bytes
        )
        self._postman.resume = self._resume_for_message
        self._host.on_child_run(functools.partial(wake_parent, self._postman))
        #: The asks waiting here, woken by the commits of the sessions they ask.
        check_positive("reply_poll", reply_poll)
        self._replies = Replies(self._host, reply_poll)
        self._host.add_listener(self._replies.listener)
        self._host.on_closed(self._replies.closed)

    async def __aenter__(self) -> AgentSystem:
        async with contextlib.AsyncExitStack() as stack:
            if self._owned_store is not None:
                await stack.enter_async_context(self._owned_store)
            # The machines' resources: left after the actors, once the sessions stopped.
            await stack.enter_async_context(self._resources)
            await stack.enter_async_context(self._actors)
            if self._store is not None:
                # The leases' renewals, and the timer watch beside them.
                await stack.enter_async_context(
                    self._claims.renewing(self._registry, self._postman.watch)
                )
            changes = getattr(self._store, "changed_sessions", None)
            if changes is not None:  # PostgreSQL: asks woken by its notifications
                group = await stack.enter_async_context(anyio.create_task_group())
                group.start_soon(self._replies.follow, changes)
                stack.callback(group.cancel_scope.cancel)
            # Leaving the block cancels the sessions still running first.
            stack.callback(self._registry.cancel_running)
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        # Each part is left in any case (the actors' task group above all, or the
        # host's cancel scopes are corrupted), in the reverse order of entering.
        return await self._exit.__aexit__(exc_type, exc, tb)

    @property
    def store(self) -> Store | None:
        """Where sessions are recorded (``None``: in memory only)."""
        return self._store

    @property
    def secrets(self) -> Keyring | None:
        """The keyring `Sensitive` values are sealed with in the store, if given."""
        return self._host.secrets

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
            KeyringError: If the machine has `Sensitive` fields, and a store but
                no keyring (nothing is stored).
            InvariantViolation: If the initial state breaks an invariant.
            ResourceUnavailable: If a resource of the machine could not be
                opened (nothing is stored).
            StoreError: If the store fails. When it fails after the session was
                stored but before it was leased, the stored session stays
                (``"running"``, with no lease): `resume` it, or `recover` finds it.
        """
        host = self._host
        session_id, state = checked_start(host, self._registry, machine, state, session_id)
        config = host.config_for(max_steps)
        if self._store is not None:
            self._postman.serve(machine)
        await host.open_resources(machine)  # before anything is stored
        async with host.claim(session_id) as claim:
            if self._store is not None:
                parent = host.parent_of(session_id)  # a subgraph's child names its parent
                await host.journal(machine, session_id).create(state, parent=parent)
                await claim.lease()
            return await host.launch(machine, state, config, session_id, base_seq=0, claim=claim)

    async def submit(
        self, machine: Machine[S], state: S, *, session_id: str | None = None
    ) -> StoredSession[S]:
        """Store a new session of ``machine`` from ``state`` for a `Worker` to drive.

        Nothing runs here: stored ``"running"`` with no lease, it is claimed by a
        worker serving ``machine`` on the store. Follow it through the returned
        `StoredSession`; ``send(..., drive=False)`` gives it messages.

        Raises:
            ConfigurationError: Without a store, or if the state does not fit.
            SessionError: If the id is taken. And `start`'s other errors.
        """
        found = await submit(self._host, self._registry, machine, state, session_id)
        return self.stored(machine, found)

    async def resume(
        self, machine: Machine[S], session_id: str, *, max_steps: int | None = None
    ) -> SessionHandle[S]:
        """Rebuild a session from the store and continue it from its last commit.

        The same as ``system.stored(machine, session_id).resume(max_steps=...)``
        (see `StoredSession.resume`). A stage that was running when its process
        died runs again: stages run at least once, commits exactly once.

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
                here is starting or changing it), is paused at a gate, or has ended.
            SessionLocked: If a live owner elsewhere drives it.
            StoreCorrupt: If what is stored does not decode.
            ResourceUnavailable: If a resource of the machine could not be
                opened (nothing is stored).
        """
        if self._store is not None:
            self._postman.serve(machine)
        return await self.stored(machine, session_id).resume(max_steps=max_steps)

    async def _resume_for_message(
        self, machine: Machine[Any], session_id: str
    ) -> SessionHandle[Any]:
        return await self.stored(machine, session_id).resume()

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
        store = self._host.require_store("find orphaned sessions")
        return await orphaned(store, self._registry, machine)

    async def recover(self, machine: Machine[S]) -> list[SessionHandle[S]]:
        """Resume every orphaned session of ``machine`` (see `orphans`), wake its due ones.

        For start-up. Each orphan is resumed as by `resume` (its history
        records who resumed it and the stage that runs again). A session
        another system takes meanwhile, or that turns out to have ended, is
        skipped. Then the parked sessions of ``machine`` whose timers fell due
        (while no process served them) are woken, and so are those parked on a
        child session whose run was cut before it ended (their step resumes the
        child); from now on this system serves the machine's timers.

        Returns:
            The handles of the sessions resumed, oldest first, then those woken.

        Raises:
            ConfigurationError: Without a store, or if a session of that name was
                stored by a machine that differs from ``machine`` (nothing is
                resumed then).
            ResourceUnavailable: If a resource of the machine could not be
                opened (the sessions stay as they were, orphaned).
            SystemNotRunning: Outside the ``async with`` block.
        """
        self._host.check_running()
        orphans = await self.orphans(machine)
        for record in orphans:
            self._host.journal(machine, record.session_id).check(record)
        handles = []
        for record in orphans:
            try:
                handles.append(await self.resume(machine, record.session_id))
            except (SessionLocked, SessionError):
                continue  # taken by another system, or ended: not an orphan any more
        # Woken here before the timer watch serves the machine, which would race us.
        cut = await tell_parked_parents(self._host, [machine])  # a child's end not posted
        handles.extend(await wake_cut_parents(self._postman, machine, cut))
        handles.extend(await self._postman.wake_due(machine))
        self._postman.serve(machine)
        return handles

    def stored(self, machine: Machine[S], session_id: str) -> StoredSession[S]:
        """Session ``session_id`` of ``machine`` as the store keeps it.

        Nothing is read until you call one of its methods: `StoredSession.history`,
        `replay`, `fork`, `rollback`, `resume`, and the answers to a gate:
        `approve`, `abort`, `edit` (these also work without a store, on a
        session paused in this system's memory).

        Raises:
            ConfigurationError: If ``machine`` is not a `Machine` or the id is empty.
        """
        return new_stored(self._host, machine, session_id)

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
        handle = self._registry.find(session_id)
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
        self._registry.forget_ended(session_id, stored=self._store is not None)

    def sessions(self) -> list[str]:
        """The ids of the sessions this system holds: running, and the ended ones it keeps.

        Oldest first. Ended sessions are kept up to ``keep_ended`` (none by
        default with a store, whose records keep them), not forgotten.
        """
        return self._registry.ids()

    def statistics(self) -> AgentStatistics:
        """Return a snapshot of the system's counters."""
        return self._registry.statistics(self._actors.statistics())


def _owned_store(
    store: object, path: str | os.PathLike[str] | None, durability: Durability
) -> SQLiteStore | PostgresStore | None:
    """The store an `AgentSystem` opens (and closes) itself: ``store`` given as a str, or ``path``.

    ``None``: it was given a `Store` (its caller's, which it neither opens nor
    closes), or neither.
    """
    if isinstance(store, str):
        return StoreLocation(store).open(durability=durability)
    if store is None and path is not None:
        return StoreLocation(path).open(durability=durability)
    return None
