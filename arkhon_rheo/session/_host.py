"""`SessionHost`: what the operations on sessions need of the agent system running them.

`AgentSystem` builds one from its parts, uses it itself and hands it to each
`StoredSession`: the check that the system runs, the claim on a session for one
operation, the launch of a session's supervisor, the sessions' configuration,
the store, and the sessions it holds in memory. Nothing else of the system is
reached from another module.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._errors import ConfigurationError, SessionBusy, SessionNotFound, SystemNotRunning
from .._hooks import installed, resources_scope
from ..protocols import AgentState, WallClock
from ..protocols._seams import gate_commits
from ._child_wait import post_child_end
from ._compiled import compiled
from ._handle import new_handle, session_of
from ._journal import Journal
from ._options import check_budget, check_keyring
from ._record import ExitReason, Session
from ._scope import session_scope
from ._secrets import HeldValues, held_values
from ._supervisor import SessionSupervisor

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from .._hooks import FaultInjector
    from ..actors import ActorSystem
    from ..core import Keyring
    from ..protocols import Clock, Machine, Store, TransitionEvent
    from ._claims import Claim, Claims
    from ._handle import SessionHandle
    from ._owner import Owner
    from ._record import EventListener, SessionConfig
    from ._registry import Registry
    from ._resources import Resources
    from ._scope import SubgraphHost

__all__ = ["SessionHost", "child_link"]

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
