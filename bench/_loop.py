"""The workload both session benches run: a think -> act -> observe loop.

A module of the ``bench`` scripts (each run as ``python bench/NAME.py``, so this
directory is on ``sys.path``); not part of the library.
"""

from __future__ import annotations

from typing import NamedTuple

import anyio
from pydantic import Field

from arkhon_rheo import (
    AgentState,
    ExitReason,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)

L = Lifecycle
#: Cycles each session of a crowd runs.
SESSION_CYCLES = 10


class Step(NamedTuple):
    """One tool call, appended to the history by the act stage (a JSON list when stored)."""

    cycle: int
    tool: str
    output: str


class LoopState(AgentState):
    lifecycle: Lifecycle = L.THINKING
    user_input: str = "what is 6 times 7?"
    #: How many think/act/observe cycles the session runs before it finishes.
    cycles: int = Field(default=SESSION_CYCLES, ge=1)
    thought: str | None = None
    observation: str | None = None
    steps: History[Step] = History()


class Gate:
    """Where every session waits in its first stage until the clock starts.

    ``all_in`` is set once ``expected`` sessions have arrived; ``open`` lets them
    go. Once open, passing it costs nothing (no checkpoint), so it does not
    weigh on the timed cycles.
    """

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.all_in = anyio.Event()
        self.open = anyio.Event()

    async def wait(self) -> None:
        if self.open.is_set():
            return
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_in.set()
        await self.open.wait()


def build_machine(gate: Gate | None = None, *, name: str = "bench-loop") -> Machine[LoopState]:
    """THINKING -> ACTING -> OBSERVING -> THINKING ... -> FINISHED after ``cycles`` cycles."""

    @stage(reads={"user_input", "iteration", "observation"}, writes={"thought"}, next=L.ACTING)
    async def think(view: StateView[LoopState]) -> Patch:
        if gate is not None:
            await gate.wait()
        return Patch(thought="use the calculator")

    @stage(reads={"iteration", "thought"}, writes={"steps"}, next=L.OBSERVING)
    async def act(view: StateView[LoopState]) -> Patch:
        return Patch().append("steps", Step(cycle=view.iteration, tool="calc", output="42"))

    @stage(
        reads={"steps"},
        writes={"observation"},
        next=lambda s: L.FINISHED if s.iteration + 1 >= s.cycles else L.THINKING,
    )
    async def observe(view: StateView[LoopState]) -> Patch:
        return Patch(observation=view.steps[-1].output)

    return Machine(
        name=name,
        state_type=LoopState,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
        invariants={
            None: [lambda s: s.user_input is not None],
            L.ACTING: [lambda s: s.thought is not None],
            L.OBSERVING: [lambda s: len(s.steps) > 0],
            L.FINISHED: [lambda s: s.observation is not None],
        },
    )


def check_finished(state: LoopState, exit_reason: ExitReason, cycles: int) -> None:
    """A run that did not do the work it was timed for is a bug, not a figure."""
    if exit_reason is not ExitReason.FINISHED or len(state.steps) != cycles:
        raise RuntimeError(
            f"bench session ended {exit_reason.value} after {len(state.steps)} of {cycles} "
            f"cycles (lifecycle {state.lifecycle!r}, last error {state.last_error!r})"
        )
