"""`run_machine`: run one session of a machine to its end and keep what it did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..protocols import AgentState, EventKind, TransitionEvent
from ..system import AgentSystem

if TYPE_CHECKING:
    import enum
    from os import PathLike

    from ..protocols import Machine, Store
    from ..system import SessionResult

__all__ = ["MachineRun", "run_machine"]

S = TypeVar("S", bound=AgentState)


@dataclass(frozen=True, slots=True)
class MachineRun(Generic[S]):
    """What one session did, from its start to its end.

    Attributes:
        result: How it ended (its last state, exit reason, failure, counters).
        events: Every event it committed, in order (steps and recorded failures).
    """

    result: SessionResult[S]
    events: tuple[TransitionEvent, ...]

    @property
    def state(self) -> S:
        """Its last committed state."""
        return self.result.state

    @property
    def path(self) -> list[enum.Enum]:
        """The machine states its steps went to, in order (failure records left out)."""
        return [event.to_state for event in self.events if event.kind is EventKind.STEP]


async def run_machine(
    machine: Machine[S],
    state: S,
    *,
    session_id: str | None = None,
    store: Store | None = None,
    path: str | PathLike[str] | None = None,
    max_steps: int | None = None,
    **options: Any,
) -> MachineRun[S]:
    """Run ``machine`` from ``state`` in a fresh `AgentSystem` and return what it did.

    The one call a test needs for "run my agent and give me its result and its
    events". The system is in memory unless ``store`` or ``path`` names one; the
    events are the session's whole history, read from the store where there is
    one.

    Args:
        machine: What to run.
        state: The state it starts from.
        session_id: Its id (the system makes one if ``None``).
        store: A store to keep it in (you own and close it).
        path: A SQLite file to keep it in instead (the system opens and closes it).
        max_steps: The most steps it may take, as for `AgentSystem.start`.
        **options: Further `AgentSystem` options (``policy``, ``clock``...).
    """
    where: dict[str, Any] = {"store": store} if store is not None else {"path": path}
    async with AgentSystem(**where, **options) as system:
        handle = await system.start(machine, state, session_id=session_id, max_steps=max_steps)
        result = await handle.result()
        if system.store is not None:
            events = tuple(await system.stored(machine, handle.session_id).history())
        else:
            events = tuple(await handle.history())
    return MachineRun(result=result, events=events)
