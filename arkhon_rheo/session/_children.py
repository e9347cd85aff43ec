"""The agent system's side of subgraphs: running child sessions, and their linked history.

`ChildHost` is what a subgraph stage finds in its session scope (see
`arkhon_rheo.graphs`): it runs each child id at most once, resuming a child the
store has in flight and answering an ended one from its stored state, and one
that waits (paused, parked) as waiting, so that its parent parks. It runs
children through the agent system's public operations (`SessionRunner`).

A parked parent wakes when its child runs on here (`wake_parent`, once a
decision or a message launched the child) or, wherever the child ran, when its
end reaches the parent's inbox; `tell_parked_parents` posts an end a dead
process did not, and finds the parents whose child's run was cut before it
ended (its process killed, its system left): `wake_cut_parents` wakes those
here, whose step resumes the child. Such a parent is woken, never sent a
message: a child resumed so may pause again, and the one message that tells a
parent of its child's end (by the child's id) must still be its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._errors import ArkhonError, SessionLocked, SessionNotFound
from .._log import get_logger
from ..protocols import AgentState, EventKind, Machine
from ._journal import Journal
from ._mail import ENDED
from ._owner import is_dead
from ._record import ExitReason, session_of
from ._subgraph import ChildOutcome, SubgraphStage, post_child_end

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..core import Keyring
    from ..protocols import SessionRecord, Store, TransitionEvent
    from ._host import Registry, SessionHost
    from ._mail import Postman
    from ._record import SessionHandle

__all__ = [
    "ChildHost",
    "SessionRunner",
    "linked_history",
    "parked_on_child",
    "tell_parked_parents",
    "wake_cut_parents",
    "wake_parent",
    "with_subgraphs",
]

_logger = get_logger("arkhon_rheo.system")

S = TypeVar("S", bound=AgentState)


class SessionRunner(Protocol):
    """What `ChildHost` uses of the agent system: its public operations on sessions."""

    @property
    def store(self) -> Store | None:
        """Where sessions are recorded (``None``: in memory only)."""
        ...

    @property
    def secrets(self) -> Keyring | None:
        """The keyring sensitive values are sealed with in the store."""
        ...

    async def start(
        self,
        machine: Machine[S],
        state: S,
        *,
        session_id: str | None = None,
        max_steps: int | None = None,
    ) -> SessionHandle[S]:
        """Start a session (see `AgentSystem.start`)."""
        ...

    async def resume(
        self, machine: Machine[S], session_id: str, *, max_steps: int | None = None
    ) -> SessionHandle[S]:
        """Resume a stored session (see `AgentSystem.resume`)."""
        ...

    def forget(self, session_id: str) -> None:
        """Drop an ended session's record (see `AgentSystem.forget`)."""
        ...


#: How a child that ran here may have ended without an outcome of its own: run on.
_INTERRUPTED = frozenset({ExitReason.CANCELLED, ExitReason.CRASHED})
#: How a child stops without ending: it waits (at a gate, for a message), and its parent parks.
_STOPPED = frozenset({ExitReason.PAUSED, ExitReason.WAITING})
_STOPPED_STATUS = frozenset(reason.value for reason in _STOPPED)
#: How a child whose run was cut before it ended is stored, if not ``"running"``.
_CUT_STATUS = frozenset(reason.value for reason in _INTERRUPTED)


class ChildHost:
    """Runs the child sessions of subgraph stages in one agent system.

    Args:
        system: The agent system's public operations.
        registry: The sessions it holds, and the links of its child sessions.
    """

    __slots__ = ("_registry", "_system")

    def __init__(self, system: SessionRunner, registry: Registry) -> None:
        self._system = system
        self._registry = registry

    async def run_child(
        self,
        machine: Machine[Any],
        state: AgentState,
        *,
        session_id: str,
        link: Mapping[str, Any],
        max_steps: int | None,
    ) -> ChildOutcome:
        """Run the child ``session_id`` to its end (see `SubgraphHost.run_child`)."""
        system, registry = self._system, self._registry
        registry.links[session_id] = dict(link)
        handle: SessionHandle[Any] | None = registry.get(session_id)
        if handle is not None and handle.done:
            reason = session_of(handle).exit_reason
            if reason in _INTERRUPTED:
                if system.store is None:
                    system.forget(session_id)  # nothing to resume from: start it afresh
                handle = None
            elif reason in _STOPPED and system.store is not None:
                handle = None  # the store says where it is now (a decision may have run it on)
        unawaited = handle is not None  # a run we did not start: a decision's, a message's
        if handle is None:
            registry.awaited.add(session_id)  # the run started here does not tell us its end
            try:
                opened = await self._open(machine, state, session_id, max_steps)
            except BaseException:
                registry.awaited.discard(session_id)
                raise
            if isinstance(opened, ChildOutcome):
                registry.awaited.discard(session_id)
                return opened
            handle = opened
        try:
            result = await handle.result()
        except BaseException:
            handle.cancel()  # the child never outlives the step that waits for it
            raise
        finally:
            if not unawaited:
                registry.awaited.discard(session_id)
        return ChildOutcome(result.state, result.exit_reason.value, result.failure, unawaited)

    async def _open(
        self, machine: Machine[Any], state: AgentState, session_id: str, max_steps: int | None
    ) -> SessionHandle[Any] | ChildOutcome:
        """Resume the stored child, answer from its end, or start it."""
        system = self._system
        if system.store is not None:
            try:
                journal = Journal(system.store, machine, session_id, secrets=system.secrets)
                stored, record = await journal.state()
            except SessionNotFound:
                pass
            else:
                if machine.is_terminal(stored.lifecycle):
                    if stored.lifecycle is not machine.failed:
                        return ChildOutcome(stored, ExitReason.FINISHED.value, unawaited=True)
                    failure = stored.last_error
                    reason = (failure.exit_reason if failure else None) or "failed"
                    return ChildOutcome(stored, reason, failure, unawaited=True)
                if record.status in _STOPPED_STATUS:  # paused at a gate, parked for a message
                    return ChildOutcome(stored, record.status, unawaited=True)
                try:
                    return await system.resume(machine, session_id, max_steps=max_steps)
                except SessionLocked:  # run on by a decision or a message, elsewhere
                    return ChildOutcome(stored, "running", unawaited=True)
        return await system.start(machine, state, session_id=session_id, max_steps=max_steps)


async def wake_parent(postman: Postman, child_id: str, link: Mapping[str, Any]) -> None:
    """Wake here the parent parked on child ``child_id``, which a decision or a message ran on.

    Its step runs again and awaits the child's run here. A parent whose machine
    this system does not serve is left parked: the child's end, posted to its
    inbox, makes it due for a system or a worker that serves it.
    """
    parent_id = str(link["session_id"])
    store = postman.host.store
    if store is None:
        return
    try:
        record = await store.record(parent_id)
        waiting = record.waiting if isinstance(record.waiting, dict) else {}
        if record.status != "waiting" or waiting.get("child") != child_id:
            return
        machine = _served(postman, record.machine)
        if machine is not None:
            await postman.wake(machine, parent_id)
    except ArkhonError as exc:  # the child runs on all the same; the parent wakes at its end
        _logger.error("parent_not_woken", session_id=parent_id, child=child_id, error=repr(exc))


async def tell_parked_parents(
    host: SessionHost, machines: Iterable[Machine[Any]]
) -> list[SessionRecord]:
    """Post the end of each ended child whose parent, of one of ``machines``, still waits on it.

    A child's end is posted after its last commit: a process that died between
    the two left its parent parked. This posts it again (once: by its id). It
    reads nothing unless one of ``machines`` has a subgraph stage.

    Returns:
        The records of the parents, of ``machines``, parked on a child whose run
        was cut before it ended: stored ``"cancelled"`` or ``"crashed"``, or
        ``"running"`` where it runs nowhere here and its lease is free or its
        owner dead (as `AgentSystem.orphans` finds). Nothing would wake them:
        `wake_cut_parents` does.
    """
    names = {machine.name for machine in machines if _subgraphs(machine)}
    if not names:
        return []
    store, now = host.require_store("recover sessions"), host.clock.now()
    cut: list[SessionRecord] = []
    leases: dict[str, str] | None = None  # read once, if a child is stored "running"
    for record in await store.sessions():
        waiting = record.waiting if isinstance(record.waiting, dict) else {}
        child = waiting.get("child")
        if record.status != "waiting" or record.machine not in names or child is None:
            continue
        try:
            status = (await store.record(str(child))).status
        except SessionNotFound:
            continue
        if status in ENDED:
            await post_child_end(store, record.session_id, str(child), status, now)
        elif status in _CUT_STATUS:
            cut.append(record)
        elif status == "running" and host.running(str(child)) is None:
            if leases is None:
                leases = {lease.session_id: lease.owner for lease in await store.leases()}
            owner = leases.get(str(child))
            if owner is None or is_dead(owner):
                cut.append(record)
    return cut


async def wake_cut_parents(
    postman: Postman, machine: Machine[Any], parents: Iterable[SessionRecord]
) -> list[SessionHandle[Any]]:
    """Wake here each of ``parents`` (of ``machine``), parked on a child whose run was cut.

    Its step runs again and resumes the child (see `ChildHost.run_child`): the
    child ends, and the step goes on with its result, or it waits again (a gate
    before the stage it was cut in pauses it again), and the parent parks on it
    again. A parent another process wakes meanwhile is left to it (the lease
    decides), so is one that runs or ended since.

    Returns:
        The handles of the parents woken here.
    """
    handles = []
    for record in parents:
        try:
            handle = await postman.wake(machine, record.session_id)
        except ArkhonError as exc:  # one parent's trouble never stops the others'
            _logger.error("parent_not_woken", session_id=record.session_id, error=repr(exc))
            continue
        if handle is not None:
            handles.append(handle)
    return handles


def parked_on_child(record: SessionRecord) -> bool:
    """Whether the session of ``record`` is parked on its child (its step then runs again)."""
    return isinstance(record.waiting, dict) and "child" in record.waiting


def with_subgraphs(machines: Iterable[Machine[Any]]) -> list[Machine[Any]]:
    """``machines`` and the machines their subgraph stages run, at any depth, each once."""
    found: list[Machine[Any]] = []
    todo = list(machines)
    while todo:
        machine = todo.pop(0)
        if any(machine is seen for seen in found):
            continue
        found.append(machine)
        if isinstance(machine, Machine):
            todo.extend(_subgraphs(machine).values())
    return found


def _served(postman: Postman, name: str) -> Machine[Any] | None:
    """The machine named ``name`` that ``postman`` serves, or a subgraph of one (at any depth)."""
    seen: set[int] = set()
    todo = [*postman.served.values(), *postman.given]
    while todo:
        machine = todo.pop()
        if id(machine) in seen:
            continue
        seen.add(id(machine))
        if machine.name == name:
            return machine
        todo.extend(_subgraphs(machine).values())
    return None


def _subgraphs(machine: Machine[Any]) -> dict[str, Machine[Any]]:
    return {
        stage.name: stage.machine
        for stage in machine.stages.values()
        if issubclass(stage, SubgraphStage) and hasattr(stage, "machine")
    }


async def linked_history(journal: Journal) -> list[TransitionEvent]:
    """A stored session's events with its children's spliced in, each before the parent step.

    A child's events come right before the parent's event that has the child's
    seq (the step that committed its result, or the failure it caused); a child
    still in flight comes last. Grandchildren are spliced the same way.

    Raises:
        ConfigurationError: If the machine is not the session's.
        SessionNotFound: If the store has no such session.
    """
    machine, session_id = journal.machine, journal.session_id
    await journal.record()
    events = await journal.history()
    subgraphs = _subgraphs(machine)
    if not subgraphs:
        return events
    # A child is named after the step that ran it: one more than the last event
    # before it that was not a resume (a resume re-runs the step it interrupted).
    candidates: list[tuple[int, int, str]] = []  # (splice before, child's step, stage)
    last_step = 0
    for event in events:
        if event.kind is EventKind.RESUME or event.kind is EventKind.UPGRADE:
            continue
        if event.stage in subgraphs:
            candidates.append((event.seq, last_step + 1, event.stage))
        last_step = event.seq
    current = events[-1].to_state if events else machine.initial
    stage = machine.stages.get(current)
    if stage is not None and stage.name in subgraphs:
        candidates.append(((events[-1].seq if events else 0) + 1, last_step + 1, stage.name))
    spliced: dict[int, list[TransitionEvent]] = {}
    for at, step, name in candidates:
        child_id = f"{session_id}/{name}/{step}"
        try:
            child = Journal(journal.store, subgraphs[name], child_id, secrets=journal.secrets)
            spliced[at] = await linked_history(child)
        except SessionNotFound:
            continue
    tree: list[TransitionEvent] = []
    for event in events:
        tree.extend(spliced.pop(event.seq, ()))
        tree.append(event)
    for rest in spliced.values():
        tree.extend(rest)
    return tree
