"""The machine of the crash test (`tests/test_crash.py`), found by name in its child processes.

The crash test runs it under `arkhon_rheo.testing.crash_loop`, whose child
processes import ``tests.crash_child:machine`` and ``tests.crash_child:Crash``.
The machine loops think -> act -> observe for `ROUNDS` rounds, and its stages
await small random pauses (drawn from `random`, which each child seeds with the
loop's seed and its run number), so a kill lands at varied points: inside a
stage, inside a commit, between the commit and its acknowledgement.
"""

from __future__ import annotations

import random

import anyio

from arkhon_rheo import AgentState, History, Lifecycle, Machine, Patch, StateView, stage

L = Lifecycle

#: A snapshot every this many events: loads mix a snapshot and a tail of events.
SNAPSHOT_EVERY = 3
#: Rounds of think -> act -> observe a session makes before it finishes.
ROUNDS = 4
#: The pauses a stage may take (seconds), drawn from the run's RNG.
PAUSES = (0.0, 0.0, 0.0, 0.0005, 0.001, 0.003)


class Crash(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    notes: History[str] = History()
    total: int = 0


def crash_machine(rounds: int, rng: random.Random | None = None) -> Machine[Crash]:
    """The looping machine; with ``rng``, its stages pause for random short times."""

    async def pause() -> None:
        await anyio.sleep(rng.choice(PAUSES) if rng is not None else 0)

    @stage(reads=(), writes={"notes"}, next=L.THINKING)
    async def load(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch().append("notes", "load")

    @stage(reads={"notes"}, writes={"notes"}, next=L.ACTING)
    async def think(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch().append("notes", f"think {len(view.notes)}")

    @stage(reads={"notes"}, writes={"notes"}, next=L.OBSERVING)
    async def act(view: StateView[Crash]) -> Patch:
        await pause()
        await pause()
        return Patch().append("notes", f"act {len(view.notes)}")

    def after(state: Crash) -> Lifecycle:
        return L.FINISHED if state.notes.count("observe") >= rounds else L.THINKING

    @stage(reads={"notes", "total"}, writes={"notes", "total"}, next=after)
    async def observe(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch(total=view.total + len(view.notes)).append("notes", "observe")

    return Machine(
        name="crash",
        state_type=Crash,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={L.INITIALIZED: load, L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
    )


Point = tuple[tuple[str, ...], int, Lifecycle]


def expected_trace(rounds: int) -> list[Point]:
    """``(notes, total, lifecycle)`` after each event number, from 0 (the start)."""
    notes: list[str] = []
    total = 0
    trace: list[Point] = [((), 0, L.INITIALIZED)]
    notes.append("load")
    trace.append((tuple(notes), total, L.THINKING))
    for done in range(1, rounds + 1):
        notes.append(f"think {len(notes)}")
        trace.append((tuple(notes), total, L.ACTING))
        notes.append(f"act {len(notes)}")
        trace.append((tuple(notes), total, L.OBSERVING))
        total += len(notes)
        notes.append("observe")
        trace.append((tuple(notes), total, L.FINISHED if done == rounds else L.THINKING))
    return trace


def machine() -> Machine[Crash]:
    """The machine the children run: `ROUNDS` rounds, pauses drawn from the seeded `random`."""
    return crash_machine(ROUNDS, random.Random(random.random()))


def broken_state() -> Crash:
    """An initial-state factory that fails in the child (for the harness's own tests)."""
    raise RuntimeError("broken_state cannot make a state")
