"""`Gate.every(n)`: a pause before every n-th step, counted from the start or the last rollback.

Only the steps' commits count: a pause, the decision that let the session go
on, a resume are no steps; a rollback starts the count again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    SQLiteStore,
    StateView,
    stage,
)
from arkhon_rheo.protocols import EventKind, Gate

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Count(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    n: int = 0


def _after(state: Count) -> Lifecycle:
    return L.ACTING if state.n < 20 else L.FINISHED


@stage(reads={"n"}, writes={"n"}, next=_after)
async def begin(view: StateView[Count]) -> Patch:
    return Patch(n=view.n + 1)


@stage(reads={"n"}, writes={"n"}, next=_after)
async def tick(view: StateView[Count]) -> Patch:
    return Patch(n=view.n + 1)


MACHINE = Machine(
    name="ticks",
    state_type=Count,
    initial=L.INITIALIZED,
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
    transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.ACTING, L.FINISHED}},
    stages={L.INITIALIZED: begin, L.ACTING: tick},
    gates=[Gate.every(3)],
)


async def test_every_three_counts_steps_not_pauses_or_decisions(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "every.db")) as store, AgentSystem(store=store) as system:
        first = await system.run(MACHINE, Count(), session_id="e1")
        assert first.exit_reason is ExitReason.PAUSED
        assert first.state.n == 3
        handle = await system.stored(MACHINE, "e1").approve()
        second = await handle.result()
        assert second.exit_reason is ExitReason.PAUSED
        assert second.state.n == 6  # three steps after the decision, not one


async def test_every_three_counts_from_a_rollback(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "every.db")) as store, AgentSystem(store=store) as system:
        await system.run(MACHINE, Count(), session_id="e2")
        stored = system.stored(MACHINE, "e2")
        paused = await (await stored.approve()).result()
        assert paused.state.n == 6
        history = await stored.history()
        seq = next(e.seq for e in history if e.kind is EventKind.STEP and e.patch.values["n"] == 2)
        await stored.rollback(seq)
        assert (await stored.state()).n == 2
        again = await (await stored.resume()).result()
        assert again.exit_reason is ExitReason.PAUSED
        assert again.state.n == 5  # three steps after the rollback: not at once, nor after one


async def test_without_a_store_every_three_counts_steps() -> None:
    async with AgentSystem(path=None) as system:
        first = await system.run(MACHINE, Count(), session_id="m1")
        assert first.state.n == 3
        second = await (await system.stored(MACHINE, "m1").approve()).result()
        assert second.exit_reason is ExitReason.PAUSED
        assert second.state.n == 6
