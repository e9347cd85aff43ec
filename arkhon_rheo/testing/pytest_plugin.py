"""arkhon-rheo's pytest plugin: fixtures for testing your own agents under faults.

Installing the library registers it (entry point ``pytest11``, name
``arkhon_rheo``); ``-p no:arkhon_rheo`` turns it off. It defines no
``anyio_backend`` of its own and touches no test that does not ask for its
fixtures. Async tests that use them need ``@pytest.mark.anyio`` (anyio's
plugin runs them; without the mark the fixtures fail with an error saying so).
They run on asyncio and on trio where trio is installed; where it is not,
each test's trio variant is reported as skipped (``install
arkhon-rheo[trio]``).

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

__all__ = ["NO_TRIO", "pytest_addoption", "pytest_generate_tests", "pytest_runtest_setup"]

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


#: The plugin's fixtures that need anyio's pytest plugin (they are async).
_ASYNC_FIXTURES = frozenset({"arkhon_store", "arkhon_system"})

#: Why a test's trio variant is skipped where trio is not installed.
NO_TRIO = (
    "trio is not installed: this test runs on asyncio only; install arkhon-rheo[trio] "
    "(or trio) to run it on trio too"
)


def _anyio_backend_is_anyios(metafunc: pytest.Metafunc) -> bool:
    """Whether ``anyio_backend`` is anyio's own fixture: no test or conftest of yours set it."""
    if any(
        "anyio_backend" in mark.args[0] for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return False
    definitions = metafunc._arg2fixturedefs.get("anyio_backend", ())
    if not definitions:
        return False
    return getattr(definitions[-1].func, "__module__", "").startswith("anyio.")


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests that use the async fixtures on both backends, trio skipped where it is missing.

    Only where ``anyio_backend`` is anyio's own fixture: a test's parametrize
    or a conftest's ``anyio_backend`` of yours decides for itself. Where trio
    is installed both backends run (anyio's fixture already has both, on
    recent anyio); where it is not, the trio variant is reported as skipped
    with the reason (`NO_TRIO`) instead of silently missing.
    """
    if _ASYNC_FIXTURES.isdisjoint(metafunc.fixturenames):
        return
    if "anyio_backend" not in metafunc.fixturenames or not _anyio_backend_is_anyios(metafunc):
        return
    if importlib.util.find_spec("trio") is not None:
        if metafunc._arg2fixturedefs["anyio_backend"][-1].params is not None:
            return
        backends: list[object] = ["asyncio", "trio"]
    else:
        backends = ["asyncio", pytest.param("trio", marks=pytest.mark.skip(reason=NO_TRIO))]
    # A mark rather than metafunc.parametrize: pytest's fixture manager then leaves
    # anyio's own parametrized fixture out instead of parametrizing it a second time.
    metafunc.definition.add_marker(
        pytest.mark.parametrize("anyio_backend", backends, scope="module")
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Say what to add when a test uses an async fixture of the plugin without anyio.

    Without ``@pytest.mark.anyio`` (or ``anyio_mode = "auto"``) nothing runs
    the fixture, and pytest's own error says only "no plugin or hook that
    handled it". Tests marked for pytest-trio (``@pytest.mark.trio``) are
    left to it.
    """
    names = getattr(item, "fixturenames", ())
    used = sorted(_ASYNC_FIXTURES.intersection(names))
    if not used or "anyio_backend" in names or item.get_closest_marker("trio") is not None:
        return
    pytest.fail(
        f"{item.name!r} uses arkhon-rheo's async fixture {used[0]!r} without anyio: "
        "mark the test with @pytest.mark.anyio (and make it async def), "
        'or set anyio_mode = "auto" in your pytest configuration',
        pytrace=False,
    )


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
