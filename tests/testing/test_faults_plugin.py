"""The pytest plugin's fixtures and hooks, run in a pytester sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.testing.test_docs_fault_example import plugin_args

if TYPE_CHECKING:
    import pytest

pytest_plugins = ["pytester"]

AGENT = """
import pytest
from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import (
    FaultPlan, ScriptedModel, assert_all_ended, assert_nothing_lost, assert_replay_verifies,
)

pytestmark = pytest.mark.anyio

class Job(AgentState):
    lifecycle: L = L.INITIALIZED
    answer: str = ""

@stage(reads=set(), writes={"answer"}, next=L.FINISHED)
async def work(view):
    return Patch(answer="ok")

machine = Machine(name="job", state_type=Job, initial=L.INITIALIZED,
                  transitions={L.INITIALIZED: {L.FINISHED}}, stages={L.INITIALIZED: work},
                  terminal={L.FINISHED, L.FAILED}, failed=L.FAILED)
"""


def test_the_fixtures(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    pytester.makepyfile(
        test_agent=AGENT
        + """
async def test_system_store_and_plan(arkhon_system, arkhon_store, fault_plan, anyio_backend):
    assert isinstance(fault_plan, FaultPlan) and fault_plan.seed == 7
    assert isinstance(arkhon_store, SQLiteStore) and arkhon_system.store is arkhon_store
    fault_plan.stage("work").fatal(when=lambda call: call.session_id == "b")
    a = await arkhon_system.run(machine, Job(), session_id="a")
    b = await arkhon_system.run(machine, Job(), session_id="b")
    assert_all_ended([a, b])
    with pytest.raises(AssertionError, match="b: failed"):
        assert_all_ended([a, b], exit_reasons=["finished"])
    await assert_nothing_lost(arkhon_system, machine, [a, b])
    await assert_replay_verifies(arkhon_system, machine, ["a", "b"])
    print("backend", anyio_backend)

def test_scripted_model(scripted_model):
    model = scripted_model(["hi"], model="m")
    assert isinstance(model, ScriptedModel) and model.model == "m" and model.script == ["hi"]

def test_untouched(request):
    assert "anyio_backend" not in request.fixturenames
"""
    )
    result = pytester.runpytest(*plugin_args(request.config), "--arkhon-seed=7", "-v", "-s")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*backend asyncio*", "*backend trio*"])


def test_a_conftests_own_backends_win(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makeconftest(
        """
import pytest

@pytest.fixture(params=["trio"])
def anyio_backend(request):
    return request.param
"""
    )
    pytester.makepyfile(
        test_agent=AGENT
        + """
async def test_runs(arkhon_system, anyio_backend):
    assert anyio_backend == "trio"
    assert (await arkhon_system.run(machine, Job())).ok
"""
    )
    result = pytester.runpytest(*plugin_args(request.config))
    result.assert_outcomes(passed=1)
