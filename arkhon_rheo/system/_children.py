"""The agent system's side of subgraphs: running child sessions, and their linked history.

`ChildHost` is what a subgraph stage finds in its session scope (see
`arkhon_rheo.graphs`): it runs each child id at most once, resuming a child the
store has in flight and answering an ended one from its stored state. It runs
children through the agent system's public operations (`SessionRunner`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._errors import SessionNotFound
from ..graphs import SubgraphStage
from ..graphs._seams import ChildOutcome
from ..protocols import AgentState, EventKind
from ..supervision import ExitReason
from ._handle import session_of
from ._journal import Journal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..core import Keyring
    from ..protocols import Machine, Store, TransitionEvent
    from ._handle import SessionHandle
    from ._registry import Registry

__all__ = ["ChildHost", "SessionRunner", "linked_history"]

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
        system = self._system
        self._registry.links[session_id] = dict(link)
        handle: SessionHandle[Any] | None = self._registry.get(session_id)
        if handle is not None and handle.done and session_of(handle).exit_reason in _INTERRUPTED:
            if system.store is None:
                system.forget(session_id)  # nothing to resume from: start it afresh
            handle = None
        if handle is None:
            opened = await self._open(machine, state, session_id, max_steps)
            if isinstance(opened, ChildOutcome):
                return opened
            handle = opened
        try:
            result = await handle.result()
        except BaseException:
            handle.cancel()  # the child never outlives the step that waits for it
            raise
        return ChildOutcome(result.state, result.exit_reason.value, result.failure)

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
                        return ChildOutcome(stored, ExitReason.FINISHED.value)
                    failure = stored.last_error
                    reason = (failure.exit_reason if failure else None) or "failed"
                    return ChildOutcome(stored, reason, failure)
                if record.status == "paused":
                    return ChildOutcome(stored, ExitReason.PAUSED.value)
                return await system.resume(machine, session_id, max_steps=max_steps)
        return await system.start(machine, state, session_id=session_id, max_steps=max_steps)


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
