"""arkhon-rheo's pytest plugin: fixtures for testing your own agents under faults.

Installing the library registers it (entry point ``pytest11``, name
``arkhon_rheo``); ``-p no:arkhon_rheo`` turns it off. It defines no
``anyio_backend`` of its own and touches no test that does not ask for its
fixtures. Async tests that use them need ``@pytest.mark.anyio`` (anyio's
plugin runs them, on asyncio and on trio when it is installed).

Fixtures:
    fault_plan: An empty `FaultPlan` (seed from ``--arkhon-seed``, 0 by
        default); add rules in the test.
    arkhon_store: An open `SQLiteStore` in the test's temporary directory.
    arkhon_system: A running `AgentSystem` on ``arkhon_store`` with
        ``fault_plan`` installed (rules added later still apply), seeded.
    scripted_model: A factory: ``scripted_model(["hi", ToolCall(...)])`` is a
        `ScriptedModel` with that script.

The assertion helpers (`assert_all_ended`, `assert_none_hung`,
`assert_nothing_lost`, `assert_replay_verifies`) live in
`arkhon_rheo.testing`.
"""

from __future__ import annotations

import importlib.util
import typing

import pytest

__all__ = ["pytest_addoption", "pytest_generate_tests"]

if typing.TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable
    from pathlib import Path

    from ..store import SQLiteStore
    from ..system import AgentSystem
    from . import FaultPlan, ScriptedModel, Step


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--arkhon-seed``: the seed of the ``fault_plan`` fixture."""
    group = parser.getgroup("arkhon_rheo")
    group.addoption(
        "--arkhon-seed",
        type=int,
        default=0,
        help="seed of the fault_plan fixture (arkhon-rheo); the same seed, the same faults",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests that use ``arkhon_system`` on every backend available.

    Only where ``anyio_backend`` is not parametrized already (anyio's own
    fixture is, on recent anyio; a conftest of yours may be too).
    """
    if "arkhon_system" not in metafunc.fixturenames:
        return
    if "anyio_backend" not in metafunc.fixturenames:
        return
    if any(
        "anyio_backend" in mark.args[0] for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return
    definitions = metafunc._arg2fixturedefs.get("anyio_backend", ())
    if definitions and definitions[-1].params is not None:
        return
    backends = ["asyncio"] + (["trio"] if importlib.util.find_spec("trio") else [])
    metafunc.parametrize("anyio_backend", backends, scope="module")


@pytest.fixture(name="fault_plan")
def _fault_plan(request: pytest.FixtureRequest) -> FaultPlan:
    """An empty `FaultPlan`, seeded by ``--arkhon-seed``: add the faults in your test."""
    from . import FaultPlan

    return FaultPlan(seed=request.config.getoption("--arkhon-seed"))


@pytest.fixture(name="arkhon_store")
async def _arkhon_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """An open SQLite store in the test's temporary directory (``sync`` durability)."""
    from ..protocols import Durability
    from ..store import SQLiteStore

    async with SQLiteStore(tmp_path / "arkhon.db", durability=Durability.SYNC) as store:
        yield store


@pytest.fixture(name="arkhon_system")
async def _arkhon_system(
    arkhon_store: SQLiteStore, fault_plan: FaultPlan
) -> AsyncIterator[AgentSystem]:
    """A running `AgentSystem` on ``arkhon_store`` with ``fault_plan`` installed, seeded."""
    from ..system import AgentSystem

    async with AgentSystem(store=arkhon_store, fault_plan=fault_plan, seed=0) as system:
        yield system


@pytest.fixture(name="scripted_model")
def _scripted_model() -> Callable[..., ScriptedModel]:
    """Make a `ScriptedModel`: ``scripted_model(["hi"], model="scripted")``."""
    from . import ScriptedModel

    def make(script: Iterable[Step] = (), *, model: str = "scripted") -> ScriptedModel:
        return ScriptedModel(script, model=model)

    return make
