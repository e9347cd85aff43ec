"""`SessionHost`: what the operations on sessions need of the agent system running them.

`AgentSystem` builds one from its parts, uses it itself and hands it to each
`StoredSession`: the check that the system runs, the claim on a session for one
operation, the launch of a session's supervisor, the sessions' configuration,
the store, and the sessions it holds in memory. Nothing else of the system is
reached from another module.

The host's parts are here too, since each serves the operations above:

* `Registry`, the sessions the system holds in memory, and when it lets them
  go. Running sessions are held; ended ones are kept up to a bound, newest
  first, and released beyond it (a released session lives on while someone
  holds its handle, found through a weak map). A session paused without a
  store is held until it is decided: nothing else keeps it.
* `Claims`: one operation at a time on a session, its lease given up once. A
  store's lease keeps a second *system* from driving a session, but a system
  renews its own lease, so two calls of one system (two ``resume`` of one
  session, a ``rollback`` while a ``resume`` is starting) would both get it. A
  claim closes that gap: it reserves the session id in the system
  synchronously, before the operation's first await, and frees it on every way
  out. A claim also carries the operation's lease. Whatever happens after
  `Claim.lease` was called (an error, a cancellation, even one that cut the
  acquire short after the store took it), the claim gives the lease up exactly
  once, shielded from cancellation, unless a launched session took it over:
  the session gives it up when it ends.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
import weakref
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._errors import (
    ConfigurationError,
    LeaseLost,
    SessionBusy,
    SessionLocked,
    SessionNotFound,
    StoreError,
    SystemNotRunning,
)
from .._hooks import installed, resources_scope
from .._log import get_logger
from ..protocols import AgentState, WallClock
from ._compiled import compiled
from ._journal import Journal
from ._options import check_budget, check_keyring
from ._owner import is_dead
from ._record import ExitReason, Session, gate_commits, new_handle, session_of
from ._secrets import HeldValues, held_values
from ._subgraph import post_child_end, session_scope
from ._supervisor import SessionSupervisor

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Awaitable,
        Callable,
        Coroutine,
        Iterator,
        Mapping,
        Sequence,
    )
    from contextlib import AbstractAsyncContextManager

    from .._hooks import FaultInjector
    from ..actors import ActorSystem, SystemStatistics
    from ..core import Keyring
    from ..protocols import Clock, Machine, Store, TransitionEvent
    from ._owner import Owner
    from ._record import EventListener, SessionConfig, SessionHandle
    from ._resources import Resources
    from ._subgraph import SubgraphHost

__all__ = ["AgentStatistics", "Claim", "Claims", "Registry", "SessionHost", "child_link"]


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


class Registry:
    """The sessions of one system, by id.

    Args:
        keep: How many ended sessions to keep, newest (see ``keep_ended``).
    """

    __slots__ = ("_ended", "_held", "_sessions", "awaited", "keep", "links")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        # Running sessions, and the newest `keep` ended ones, oldest first.
        self._sessions: dict[str, SessionHandle[Any]] = {}
        # The ids of the ended sessions in `_sessions`, in the order they ended.
        self._ended: collections.deque[str] = collections.deque()
        # Released ended sessions whose handles someone still holds.
        self._held: weakref.WeakValueDictionary[str, SessionHandle[Any]] = (
            weakref.WeakValueDictionary()
        )
        # Subgraphs: each child session's link to its parent step, by child id.
        self.links: dict[str, dict[str, Any]] = {}
        # The child sessions a parent's step here started and awaits.
        self.awaited: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        """Whether a session of that id is held, kept, or released but still referenced."""
        return session_id in self._sessions or session_id in self._held

    def __iter__(self) -> Iterator[SessionHandle[Any]]:
        """The handles held (running and kept), oldest first."""
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def cancel_running(self) -> None:
        """Cancel every session held that is still running."""
        for handle in list(self._sessions.values()):
            if not handle.done:
                handle.cancel()

    def ids(self) -> list[str]:
        """The ids held (running and kept), oldest first."""
        return list(self._sessions)

    def get(self, session_id: str) -> SessionHandle[Any] | None:
        """The handle held for ``session_id`` (running or kept), if any."""
        return self._sessions.get(session_id)

    def find(self, session_id: str) -> SessionHandle[Any] | None:
        """The handle of ``session_id`` held, kept, or released but still referenced."""
        return self._sessions.get(session_id) or self._held.get(session_id)

    def running(self, session_id: str) -> bool:
        """Whether ``session_id`` runs here now."""
        handle = self._sessions.get(session_id)
        return handle is not None and not handle.done

    def add(self, handle: SessionHandle[Any]) -> None:
        """Hold a session just launched (it replaces any earlier run of that id)."""
        session = handle._session
        self.drop(session.session_id)
        self._sessions[session.session_id] = handle
        if session.done.is_set():  # it ended before its handle existed
            self.closed(session)

    def closed(self, session: Session) -> None:
        """A session ended: keep it among the newest `keep`, or release it."""
        session_id = session.session_id
        handle = self._sessions.get(session_id)
        if handle is None or handle._session is not session:
            return  # a run replaced since (or its handle is not made yet)
        if session.keep_log and session.exit_reason is ExitReason.PAUSED:
            return  # without a store, nothing else holds it until it is decided
        self._ended.append(session_id)
        while len(self._ended) > self.keep:
            self._release(self._ended.popleft())

    def _release(self, session_id: str) -> None:
        """Stop holding an ended session: it lives on while someone holds its handle."""
        handle = self._sessions.get(session_id)
        if handle is None or not handle.done:
            return  # forgotten, or running again (resumed) since
        del self._sessions[session_id]
        self.links.pop(session_id, None)
        self._held[session_id] = handle

    def drop(self, session_id: str) -> None:
        """Stop holding ``session_id`` in any way (before it runs again, or to forget it)."""
        if self._sessions.pop(session_id, None) is not None:
            with contextlib.suppress(ValueError):
                self._ended.remove(session_id)
        self._held.pop(session_id, None)

    def statistics(self, actors: SystemStatistics) -> AgentStatistics:
        """The counters of the sessions held, with those of the system's ``actors``."""
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

    def forget(self, session_id: str) -> None:
        """Drop ``session_id`` and its subgraph link."""
        self.drop(session_id)
        self.links.pop(session_id, None)

    def forget_ended(self, session_id: str, *, stored: bool) -> None:
        """`AgentSystem.forget`: drop an ended session (``stored``: the system has a store).

        Raises:
            SessionNotFound: Without a store, if no session here has that id.
            SessionBusy: If the session is still running.
        """
        if stored and session_id not in self:
            self.links.pop(session_id, None)
            return  # released already: the store holds its record
        handle = self.find(session_id)
        if handle is None:
            raise SessionNotFound(session_id=session_id)
        if not handle.done:
            raise SessionBusy(
                f"session {session_id!r} is still running; cancel it or wait for its "
                "result before forgetting it",
                session_id=session_id,
            )
        self.forget(session_id)


_logger = get_logger("arkhon_rheo.system")


def _renews(store: Store | None) -> bool:
    """Whether ``store.acquire`` takes ``renew`` (see `Store.acquire`)."""
    if store is None:
        return False
    try:
        parameters = inspect.signature(store.acquire).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the protocol's
        return True
    return any(p.name == "renew" or p.kind is p.VAR_KEYWORD for p in parameters)


class Claim:
    """One operation's hold on a session: reserved in this system, perhaps leased in the store."""

    __slots__ = ("_claims", "_leased", "session_id")

    def __init__(self, claims: Claims, session_id: str) -> None:
        self._claims = claims
        self.session_id = session_id
        self._leased = False

    @property
    def owner(self) -> str:
        """The lease owner name this claim takes the lease as (its system's)."""
        return self._claims.owner

    async def lease(self) -> str | None:
        """Take the session's lease in the store for this operation.

        A lease held by a process of this host that is dead (or whose pid now
        names another process) is taken over at once instead of waiting for it
        to run out.

        Returns:
            The dead owner whose lease was taken over, if any.

        Raises:
            SessionLocked: If a live owner, or one on another host, holds it.
        """
        store = self._claims.store
        assert store is not None, "a claim takes a lease only with a store"
        owner, ttl = self._claims.owner, self._claims.ttl
        # From here the lease may be ours, even if the acquire is cut short.
        self._leased = True
        try:
            try:
                await store.acquire(self.session_id, owner, ttl=ttl)
            except SessionLocked as exc:
                if not is_dead(exc.owner):
                    raise
                await store.acquire(self.session_id, owner, ttl=ttl, replacing=exc.owner)
                return exc.owner
        except SessionLocked:
            self._leased = False  # another owner's: nothing of ours to give up
            raise
        return None

    def hand_over(self) -> None:
        """A launched session holds the lease now; it gives it up when it ends."""
        self._leased = False

    async def _give_up(self) -> None:
        if self._leased:
            self._leased = False
            store = self._claims.store
            assert store is not None
            with anyio.CancelScope(shield=True):
                await store.release(self.session_id, self._claims.owner)


class Claims:
    """The sessions a system has an operation under way on.

    Args:
        store: Where leases are taken, if the system has a store.
        owner: The system's lease owner name.
        ttl: The lease's time to live, in seconds.
    """

    __slots__ = ("_busy", "_renewal", "owner", "store", "ttl")

    def __init__(self, store: Store | None, owner: str, ttl: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        #: Whether renewals take the lease only while held (``renew=True``): where the
        #: store's ``acquire`` takes it (a store written before it had it: a plain take).
        self._renewal = _renews(store)
        self._busy: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._busy

    @asynccontextmanager
    async def renewing(
        self, registry: Registry, *also: Callable[[], Coroutine[Any, Any, None]]
    ) -> AsyncIterator[None]:
        """Renew the lease of every session running in ``registry`` while the block runs.

        Every third of the lease's time to live; a session whose lease another
        owner took is cancelled (it never writes beside that owner), and a
        transient store failure waits for the next round. Leaving the block
        stops the renewals, whatever the block raised; the tasks of ``also``
        (the system's timer watch) run beside them, and stop with them.
        """
        # The group is entered by hand so that the block's own exception passes
        # through unwrapped (trio's nurseries would group it); its exit must not
        # replace that exception either, so a failure of the exit itself (a
        # cancellation delivered there) only surfaces when the block succeeded.
        # A crash of the renewer is the exception: it cancelled the group's scope,
        # which encloses the block, so what the block raised is that cancellation,
        # and the crash (raised by the group's exit) is what must come out.
        group = anyio.create_task_group()
        await group.__aenter__()
        group.start_soon(self._renew, registry)
        for task in also:
            group.start_soon(task)
        body_failed = False
        try:
            yield
        except BaseException:
            body_failed = True
            raise
        finally:
            renewer_failed = group.cancel_scope.cancel_called  # only the renewer sets it
            group.cancel_scope.cancel()
            try:
                await group.__aexit__(None, None, None)
            except BaseException:
                if renewer_failed or not body_failed:
                    raise

    async def _renew(self, registry: Registry) -> None:
        while True:
            await anyio.sleep(self.ttl / 3)
            # All at once, so that they ride in the store's group commits together: one
            # at a time, a round of many leases on a busy store outlasts the leases.
            async with anyio.create_task_group() as group:
                for handle in registry:
                    if not handle.done:
                        group.start_soon(self._renew_one, handle)

    async def _renew_one(self, handle: SessionHandle[Any]) -> None:
        store = self.store
        assert store is not None
        session = session_of(handle)
        if session.exit_reason is not None:
            return  # ended (parked, finished): it gave its lease up, or is giving it up
        try:
            # Renewed only while this owner holds it: a lease given up (a park), or
            # taken by another owner since (this process was paused past it), is not
            # taken back: another owner may have driven the session on meanwhile.
            if self._renewal:
                await store.acquire(handle.session_id, self.owner, ttl=self.ttl, renew=True)
            else:
                await store.acquire(handle.session_id, self.owner, ttl=self.ttl)
        except (SessionLocked, LeaseLost) as exc:
            if session.exit_reason is not None:
                return  # it parked or ended meanwhile: its lease was given up
            # Another owner took over: never write beside it, not even a status. The
            # run ends as an append refused with LeaseLost ends it (LEASE_LOST).
            _logger.error(
                "session_lease_lost",
                session_id=handle.session_id,
                owner=self.owner,
                holder=exc.owner if isinstance(exc, SessionLocked) else exc.holder,
                stage="renewal",
            )
            session.lease_taken()
            handle.cancel()
        except StoreError:
            pass  # a transient store failure; the next round tries again

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[Claim]:
        """Reserve ``session_id`` for the block; on the way out, give its lease up and free it.

        The reservation is made before the first await, so of two calls racing
        for one session, the second always finds the first's.

        Raises:
            SessionBusy: If another operation of this system holds the session.
        """
        if session_id in self._busy:
            raise SessionBusy(
                f"session {session_id!r} is busy here: another call of this system is "
                "starting or changing it; wait for that call to return first",
                session_id=session_id,
            )
        self._busy.add(session_id)
        claim = Claim(self, session_id)
        try:
            yield claim
        finally:
            try:
                await claim._give_up()
            finally:
                self._busy.discard(session_id)


S = TypeVar("S", bound=AgentState)


class SessionHost:
    """An agent system's operations on its sessions, for the code that runs them.

    Args:
        actors: The actor system the sessions' supervisors run in.
        registry: The sessions held in memory.
        claims: The operations under way, and their leases.
        children: What the subgraph stages of a launched session run their
            child sessions with.
        config: The sessions' configuration.
        store: Where sessions are recorded (``None``: in memory only).
        owner: Who this system is, for the store's leases and resume events.
        seed: Seeds each session's RNG, for exact tests.
        snapshot_every: The snapshot interval of a stored session's runs.
        listeners: Called with every committed event of every session.
        faults: The faults to inject into every session launched, if any.
        clock: What the sessions' messages and timers are timed by.
        resources: The machines' resources the system opened.
        secrets: The keyring stored sessions' sensitive values are sealed with.

    Attributes:
        config: The sessions' configuration.
        store: Where sessions are recorded (``None``: in memory only).
        owner: Who this system is.
    """

    __slots__ = (
        "_actors",
        "_children",
        "_claims",
        "_counter",
        "_faults",
        "_listeners",
        "_on_child_run",
        "_on_closed",
        "_on_park",
        "_owner_name",
        "_presubscribed",
        "_registry",
        "_resources",
        "_seed",
        "_snapshot_every",
        "clock",
        "config",
        "hand_over_on_cancel",
        "owner",
        "poison_after",
        "secrets",
        "store",
    )

    def __init__(
        self,
        *,
        actors: ActorSystem,
        registry: Registry,
        claims: Claims,
        children: SubgraphHost,
        config: SessionConfig,
        store: Store | None,
        owner: Owner,
        seed: int | None,
        snapshot_every: int | None,
        listeners: tuple[EventListener, ...],
        faults: FaultInjector | None,
        resources: Resources,
        clock: Clock | None = None,
        secrets: Keyring | None = None,
    ) -> None:
        self._actors = actors
        self._registry = registry
        self._claims = claims
        self._children = children
        self.config = config
        self.store = store
        self.owner = owner
        self._owner_name = str(owner)
        self._seed = seed
        self._counter = itertools.count()
        self._snapshot_every = snapshot_every
        self._listeners = listeners
        self._faults = faults
        self.clock: Clock = WallClock() if clock is None else clock
        #: Called when a session launched here parks (the system's timer watch looks again).
        self._on_park: Callable[[], None] | None = None
        #: Called with a child's id and link when a decision or a message runs it on
        #: here, or ends it (its parent, parked on it, is woken here if served).
        self._on_child_run: Callable[[str, Mapping[str, Any]], Awaitable[None]] | None = None
        #: Called with a session's id whenever a run of it here ends (its asks look again).
        self._on_closed: Callable[[str], None] | None = None
        self._resources = resources
        check_keyring(secrets)
        #: The keyring sensitive values are sealed with in the store (``None``: none given).
        self.secrets = secrets
        #: The partial output wanted of the next run here of a session, by its id: each run
        #: launched subscribes these before it starts (see `presubscribe`).
        self._presubscribed: dict[str, list[list[Any]]] = {}
        #: A worker's system: a run cancelled is handed over, not ended (see `Session`).
        self.hand_over_on_cancel = False
        #: A worker's system: a resume finding this many claims since the session's
        #: last commit fails it instead (see `_poison`); ``None``: never.
        self.poison_after: int | None = None

    def presubscribe(self, session_id: str) -> list[Any]:
        """Want the partial output of a run of ``session_id`` launched here from now on.

        Returns a list that gets, before such a run starts, its subscription
        (so nothing it emits is missed); call `unsubscribe_next` when done.
        """
        slot: list[Any] = []
        self._presubscribed.setdefault(session_id, []).append(slot)
        return slot

    def unsubscribe_next(self, session_id: str, slot: list[Any]) -> None:
        """Give up what `presubscribe` asked (closing any subscription it got)."""
        slots = self._presubscribed.get(session_id, [])
        if slot in slots:
            slots.remove(slot)
        if not slots:
            self._presubscribed.pop(session_id, None)
        for subscription in slot:
            subscription.close()

    def journal(self, machine: Machine[Any], session_id: str) -> Journal:
        """The store's record of session ``session_id`` of ``machine`` (a store is needed)."""
        return Journal(
            self.require_store("read a session"), machine, session_id, secrets=self.secrets
        )

    def check_running(self) -> None:
        """Raise `SystemNotRunning` outside the agent system's ``async with`` block."""
        if self._actors.state.value != "running":
            raise SystemNotRunning(
                f"cannot start a session: the agent system is {self._actors.state.value}; "
                "start sessions inside its `async with` block"
            )

    def require_store(self, purpose: str) -> Store:
        """The store; `ConfigurationError` (naming ``purpose``) without one."""
        if self.store is None:
            raise ConfigurationError(
                f"cannot {purpose} without a store: pass store=... to AgentSystem"
            )
        return self.store

    async def open_resources(self, machine: Machine[Any]) -> None:
        """Open the resources of ``machine`` (and its subgraphs') that are not open yet.

        Call it before storing or changing anything for a session, so that a
        resource that cannot open leaves nothing behind.

        Raises:
            ResourceUnavailable: If one could not be opened.
            SystemNotRunning: Outside the system's ``async with`` block.
        """
        await self._resources.open(machine)

    def config_for(self, max_steps: int | None) -> SessionConfig:
        """The sessions' configuration, with ``max_steps`` if one is given (checked)."""
        if max_steps is None:
            return self.config
        check_budget(max_steps)
        return replace(self.config, max_steps=max_steps)

    def claim(self, session_id: str) -> AbstractAsyncContextManager[Claim]:
        """Hold ``session_id`` for one operation: not running here, and no other call on it.

        Entering reserves the id before any await; leaving gives up the lease the
        operation took (unless a launched session took it over) and frees the id.

        Raises:
            SessionBusy: If the session runs here, or another call here holds it.
        """
        if self._registry.running(session_id):
            raise SessionBusy(
                f"session {session_id!r} is running here; cancel it (or wait for it) first",
                session_id=session_id,
            )
        return self._claims.hold(session_id)

    def running(self, session_id: str) -> SessionHandle[Any] | None:
        """The handle of ``session_id``'s run here, if it is running."""
        if not self._registry.running(session_id):
            return None
        return self._registry.get(session_id)

    def on_park(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a session launched here parks."""
        self._on_park = callback

    def on_child_run(self, callback: Callable[[str, Mapping[str, Any]], Awaitable[None]]) -> None:
        """Await ``callback(child_id, link)`` when a child its parent does not await runs on."""
        self._on_child_run = callback

    async def child_ended(self, session_id: str, parent: str | None, exit_reason: str) -> None:
        """Tell the parent of ``session_id``, ended out of band (aborted), that it ended."""
        link = self.link_of(session_id, parent)
        if link is None or self.store is None:
            return
        now = self.clock.now()
        await post_child_end(self.store, str(link["session_id"]), session_id, exit_reason, now)
        await self._child_ran(session_id, link)

    def link_of(self, session_id: str, parent: str | None) -> dict[str, Any] | None:
        """The link of child session ``session_id`` to its parent's step (``None``: no child).

        ``parent`` is the parent its record names, if it was read.
        """
        return self._registry.links.get(session_id) or child_link(session_id, parent)

    async def _child_ran(self, session_id: str, link: Mapping[str, Any]) -> None:
        if self._on_child_run is not None:
            await self._on_child_run(session_id, link)

    def on_closed(self, callback: Callable[[str], None]) -> None:
        """Call ``callback`` with its id whenever a run of a session here ends."""
        self._on_closed = callback

    def add_listener(self, listener: EventListener) -> None:
        """Offer ``listener`` every commit of the sessions launched from now on."""
        self._listeners = (*self._listeners, listener)

    def _release(self, held: HeldValues, session: Session) -> None:
        held.release()
        self._closed(session)

    def _closed(self, session: Session) -> None:
        self._registry.closed(session)
        # Parked, or a child that posted its end to its parent: the timer watch looks again.
        if self._on_park is not None and (
            session.exit_reason is ExitReason.WAITING or session.tell_parent
        ):
            self._on_park()
        if self._on_closed is not None:
            self._on_closed(session.session_id)

    def held(self, session_id: str) -> Session:
        """The record of session ``session_id`` held here in memory.

        Raises:
            SessionNotFound: If no session here has that id.
        """
        handle = self._registry.find(session_id)
        if handle is None:
            raise SessionNotFound(session_id=session_id)
        return session_of(handle)

    def drop(self, session_id: str) -> None:
        """Stop holding an earlier run of ``session_id``, which is about to run again."""
        self._registry.drop(session_id)

    async def launch(
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
        journal: Journal | None = None,
    ) -> SessionHandle[S]:
        """Spawn the session's supervisor; it takes over ``claim``'s lease, if any.

        ``history`` is an in-memory session's earlier events, kept on by this run.
        ``journal`` is the one the session was loaded through (its commits are
        recorded as it writes them: snapshots of an upgraded session are marked).
        The machine's resources are open before it starts (the operations that
        store something opened them first: this finds them open).
        """
        await self._resources.open(machine)
        held = held_values(machine, state)
        session = self._session(
            machine, state, config, session_id, base_seq, anchor_seq, held, journal
        )
        session.gates_passed = gates_passed
        session.hand_over_on_cancel = self.hand_over_on_cancel
        if any(gate.steps is not None for gate in machine.gates):
            session.gate_commits = await self._gate_commits(
                machine, session_id, history, base_seq, journal
            )
        session.log.extend(history)
        session.seq += len(history)
        for slot in self._presubscribed.get(session_id, ()):
            slot.append(session.partials.subscribe())
        session.on_close = self._closed if held is None else functools.partial(self._release, held)
        try:
            # Shielded: the session starts whole (and the lease passes to it) or not at all.
            with anyio.CancelScope(shield=True):
                with (
                    session_scope(self._children, session),  # subgraph stages find us
                    installed(self._faults),  # its tasks inherit the fault plan, if any
                    resources_scope(machine.resources),  # and its tools' ToolContext these
                ):
                    ref = await self._actors.spawn(
                        SessionSupervisor, session, name=f"{session_id}/supervisor"
                    )
        except BaseException:
            if claim is not None and session.done.is_set():
                claim.hand_over()  # its supervisor ran and stopped: it gave the lease up
            if held is not None and not session.done.is_set():
                held.release()  # never ran: nothing will close it
            raise
        if claim is not None:
            claim.hand_over()
        handle: SessionHandle[S] = new_handle(session, ref)
        self._registry.add(handle)  # replaces a run before this one (a pause decided here)
        if session.tell_parent and session.link is not None:
            await self._child_ran(session_id, session.link)  # its parent, parked, wakes
        return handle

    async def _gate_commits(
        self,
        machine: Machine[Any],
        session_id: str,
        history: Sequence[TransitionEvent],
        base_seq: int,
        journal: Journal | None,
    ) -> int:
        """The commits a `Gate.every` of a run counts before its first: read from its record.

        ``history`` is an in-memory session's; a stored session's is read (only
        for a machine with such a gate, only for a session with events).
        """
        if history or not base_seq or self.store is None:
            return gate_commits(history)
        journal = journal or self.journal(machine, session_id)
        return gate_commits(await journal.history())

    def _session(
        self,
        machine: Machine[Any],
        state: AgentState,
        config: SessionConfig,
        session_id: str,
        base_seq: int,
        anchor_seq: int | None,
        held: HeldValues | None,
        journal: Journal | None = None,
    ) -> Session:
        """A new run's session record, recording each commit to the store if there is one.

        ``held``: the run's sensitive values, which each commit adds to;
        ``journal``: the one the session was loaded through, if any.
        """
        seed = None if self._seed is None else f"{self._seed}/{next(self._counter)}"
        link = self._registry.links.get(session_id)
        if link is None and journal is not None:  # a child run on by a decision, a message
            link = child_link(session_id, journal.parent)
        persistence = None
        if self.store is not None:
            journal = journal or self.journal(machine, session_id)
            persistence = journal.persistence(
                state, snapshot_every=self._snapshot_every, owner=self._owner_name, link=link
            )
        listeners = self._listeners if held is None else (*self._listeners, held.event)
        session = Session(
            session_id,
            machine,
            state,
            config,
            validator=compiled(machine).validator,
            seed=seed,
            listeners=listeners,
            persistence=persistence,
            base_seq=base_seq,
            link=link,
            anchor_seq=anchor_seq,
            clock=self.clock,
        )
        # A run its parent's step does not await here: its end wakes the parent.
        session.tell_parent = link is not None and session_id not in self._registry.awaited
        return session

    def parent_of(self, session_id: str) -> str | None:
        """The parent session of child ``session_id``, when a parent's step here starts it."""
        link = self._registry.links.get(session_id)
        return None if link is None else str(link["session_id"])


def child_link(session_id: str, parent: str | None) -> dict[str, Any] | None:
    """The link of child ``session_id`` to its parent's step, read off its id and record.

    A subgraph's child is named ``"<parent>/<stage>/<seq>"`` and its record names
    its parent; a session that is no such child (a fork, say) has no link.
    """
    if parent is None or not session_id.startswith(parent + "/"):
        return None
    stage, _, seq = session_id[len(parent) + 1 :].rpartition("/")
    if not stage or not seq.isdigit():
        return None
    return {"session_id": parent, "stage": stage, "seq": int(seq)}
