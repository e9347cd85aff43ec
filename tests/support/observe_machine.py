"""A small machine for the observability tests: one transient failure, one restart, a gate."""

from __future__ import annotations

import enum

from arkhon_rheo import (
    AgentState,
    Gate,
    Machine,
    Patch,
    Recoverable,
    Stage,
    StateView,
    Transient,
)


class L(enum.Enum):
    START = "start"
    WORK = "work"
    DONE = "done"
    FAILED = "failed"


class Flow(AgentState):
    lifecycle: L = L.START
    count: int = 0
    note: str = ""


class Begin(Stage[Flow], name="begin", reads={"count"}, writes={"note"}):
    async def execute(self, view: StateView[Flow]) -> Patch:
        return Patch(note="begun")

    def next(self, state: Flow) -> enum.Enum:
        return L.WORK


#: Each run of `Work` takes the next outcome; a fresh list per test.
OUTCOMES: list[Exception | None] = []


class Work(Stage[Flow], name="work", reads={"count"}, writes={"count"}):
    async def execute(self, view: StateView[Flow]) -> Patch:
        outcome = OUTCOMES.pop(0) if OUTCOMES else None
        if outcome is not None:
            raise outcome
        return Patch(count=view.count + 1)

    def next(self, state: Flow) -> enum.Enum:
        return L.DONE


def flow_machine(*, gate: bool = False) -> Machine[Flow]:
    """START -> WORK -> DONE; ``gate`` pauses before ``work``."""
    return Machine(
        name="flow",
        state_type=Flow,
        initial=L.START,
        transitions={L.START: {L.WORK, L.FAILED}, L.WORK: {L.DONE, L.FAILED}},
        stages={L.START: Begin, L.WORK: Work},
        terminal={L.DONE, L.FAILED},
        failed=L.FAILED,
        gates=[Gate("review", stage="work")] if gate else [],
    )


def troubled() -> None:
    """Make the next `Work` runs fail once transiently, then once recoverably."""
    OUTCOMES[:] = [Transient("flaky link"), Recoverable("lost its place")]
