"""The machine of the crash test (`tests/testing/test_crash.py`), imported by its children.

The crash test runs it under `arkhon_rheo.testing.crash_loop`, whose child
processes import ``tests.support.crash_child:machine`` and ``tests.support.crash_child:initial``.
It is the reference machine (`arkhon_rheo.testing.reference_machine`), looping
think -> act -> observe for `ROUNDS` cycles, with hooks that make its stages
await small random pauses (drawn from `random`, which each child seeds with the
loop's seed and its run number), so a kill lands at varied points: inside a
stage, inside a commit, between the commit and its acknowledgement.
"""

from __future__ import annotations

import random

import anyio

from arkhon_rheo import Lifecycle, Machine
from arkhon_rheo.testing import ReferenceState, reference_machine

L = Lifecycle

#: A snapshot every this many events: loads mix a snapshot and a tail of events.
SNAPSHOT_EVERY = 3
#: Cycles of think -> act -> observe a session makes before it finishes.
ROUNDS = 4
#: The pauses a stage may take (seconds), drawn from the run's RNG.
PAUSES = (0.0, 0.0, 0.0, 0.0005, 0.001, 0.003)


def crash_machine(rng: random.Random | None = None) -> Machine[ReferenceState]:
    """The reference machine; with ``rng``, its stages pause for random short times."""

    async def pause(cycle: int) -> None:
        await anyio.sleep(rng.choice(PAUSES) if rng is not None else 0)

    async def pause_twice(cycle: int) -> None:
        await pause(cycle)
        await pause(cycle)

    hooks = {"think": pause, "act": pause_twice, "observe": pause}
    return reference_machine(name="crash", before=hooks)


def initial() -> ReferenceState:
    """A fresh initial state: `ROUNDS` cycles."""
    return ReferenceState(cycles=ROUNDS)


#: What the crash test checks of a state: its steps (cycle, tool, output), its
#: iteration, its lifecycle, and the thought and observation it last wrote.
Point = tuple[tuple[tuple[int, str, str], ...], int, Lifecycle, str | None, str | None]

THOUGHT = "use the calculator"
OUTPUT = "42"


def point(state: ReferenceState) -> Point:
    """The `Point` of ``state``."""
    steps = tuple((step.cycle, step.tool, step.output) for step in state.steps)
    return steps, state.iteration, state.lifecycle, state.thought, state.observation


def expected_trace(rounds: int) -> list[Point]:
    """The `Point` after each number of steps, from 0 (the start)."""
    trace: list[Point] = [((), 0, L.THINKING, None, None)]
    steps: tuple[tuple[int, str, str], ...] = ()
    for cycle in range(rounds):
        seen = None if cycle == 0 else OUTPUT  # the last cycle's observation
        trace.append((steps, cycle, L.ACTING, THOUGHT, seen))
        steps = (*steps, (cycle, "calc", OUTPUT))
        trace.append((steps, cycle, L.OBSERVING, THOUGHT, seen))
        last = cycle + 1 == rounds
        after = L.FINISHED if last else L.THINKING
        trace.append((steps, cycle if last else cycle + 1, after, THOUGHT, OUTPUT))
    return trace


def machine() -> Machine[ReferenceState]:
    """The machine the children run: pauses drawn from the seeded `random`."""
    return crash_machine(random.Random(random.random()))


def broken_state() -> ReferenceState:
    """An initial-state factory that fails in the child (for the harness's own tests)."""
    raise RuntimeError("broken_state cannot make a state")
