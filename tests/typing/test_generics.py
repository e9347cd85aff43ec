"""The public generics keep their state type: checked by mypy (``assert_type``), run by pytest.

This folder has no ``__init__.py`` on purpose: a package named ``typing`` under
``tests/`` would hide the standard library's from scripts run out of ``tests/``.

mypy checks ``tests/`` under ``--strict``: each ``assert_type`` below fails the
type check if a public generic loses its parameter (turns into ``Any`` or the
``AgentState`` base). At run time the same calls run for real.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_type

import pytest

from arkhon_rheo import (
    AgentSystem,
    Lifecycle,
    Machine,
    Patch,
    ReplayReport,
    SessionHandle,
    SessionResult,
    Stage,
    StateView,
    StoredSession,
)
from arkhon_rheo.testing import MachineRun, ReferenceState, reference_machine, run_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


class Counted(ReferenceState):
    pass


seen: list[object] = []


class Look(Stage[Counted], reads={"user_input"}, writes={"thought"}):
    async def execute(self, view: StateView[Counted]) -> Patch:
        assert_type(view, StateView[Counted])
        seen.append(view.user_input)
        return Patch(thought="looked")

    def next(self, state: Counted) -> Lifecycle:
        assert_type(state, Counted)
        return Lifecycle.FINISHED


def look_machine() -> Machine[Counted]:
    return Machine(
        name="look",
        state_type=Counted,
        stages={Lifecycle.THINKING: Look},
        transitions={Lifecycle.THINKING: {Lifecycle.FINISHED, Lifecycle.FAILED}},
        initial=Lifecycle.THINKING,
        terminal={Lifecycle.FINISHED, Lifecycle.FAILED},
        failed=Lifecycle.FAILED,
    )


async def test_a_handle_and_its_result_keep_the_state_type(tmp_path: Path) -> None:
    machine = reference_machine()
    assert_type(machine, Machine[ReferenceState])
    async with AgentSystem(path=tmp_path / "g.db") as system:
        handle = await system.start(machine, ReferenceState(cycles=1), session_id="g")
        assert_type(handle, SessionHandle[ReferenceState])
        result = await handle.result()
        assert_type(result, SessionResult[ReferenceState])
        assert_type(result.state, ReferenceState)
        assert_type(handle.state, ReferenceState)
        stored = system.stored(machine, "g")
        assert_type(stored, StoredSession[ReferenceState])
        state = await stored.state()
        assert_type(state, ReferenceState)
        report = await stored.replay()
        assert_type(report, ReplayReport[ReferenceState])
        assert state == result.state == report.state


async def test_a_stage_sees_a_view_of_its_own_state_type() -> None:
    seen.clear()
    done = await run_machine(look_machine(), Counted(user_input="typed"))
    assert_type(done, MachineRun[Counted])
    assert_type(done.state, Counted)
    assert done.state.thought == "looked"
    assert seen == ["typed"]
