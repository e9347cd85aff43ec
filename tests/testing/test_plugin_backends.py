"""The pytest plugin on each backend: both where trio is installed, a skip saying so where not.

And an async fixture of the plugin used without ``pytest.mark.anyio`` fails with an error
naming the mark. The trio-less run is a pytest subprocess whose first plugin (``-p``, loaded
before the installed plugins) marks trio as absent in ``sys.modules``, as on a machine
without the ``trio`` extra; the plugins that need trio (pytest-trio's, hypothesis') are off
there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arkhon_rheo.testing.pytest_plugin import NO_TRIO
from tests.testing.test_docs_fault_example import plugin_args

if TYPE_CHECKING:
    import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent.parent

STORE_TEST = """
import pytest

@pytest.mark.anyio
async def test_store(arkhon_store, anyio_backend):
    assert await arkhon_store.sessions() == ()
    print("backend", anyio_backend)
"""

#: Plugins that need trio off (pytest-trio; hypothesis', whose entry points import trio).
NO_TRIO_ARGS = ("-p", "no_trio_here", "-p", "no:trio", "-p", "no:hypothesispytest")

NO_TRIO_PLUGIN = """
import sys

# As where trio is not installed: `import trio` raises ImportError and
# importlib.util.find_spec("trio") is None.
sys.modules["trio"] = None
"""


def test_both_backends_run_where_trio_is_installed(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(test_agent=STORE_TEST)
    result = pytester.runpytest(*plugin_args(request.config), "-v", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*backend asyncio*", "*backend trio*"])


def test_without_trio_the_trio_variant_is_skipped_saying_what_to_install(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(no_trio_here=NO_TRIO_PLUGIN, test_agent=STORE_TEST)
    result = pytester.runpytest_subprocess(
        *NO_TRIO_ARGS, *plugin_args(request.config), "-v", "-s", "-rs"
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*test_store?asyncio? backend asyncio", "PASSED", "*test_store?trio? SKIPPED*"]
    )
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED [1] test_agent.py")]
    assert skips == [f"SKIPPED [1] test_agent.py:3: {NO_TRIO}"], result.stdout.str()
    assert "install arkhon-rheo[trio]" in NO_TRIO
    assert "backend trio" not in result.stdout.str()


def test_a_conftests_own_backend_is_left_alone_without_trio(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""
    )
    pytester.makepyfile(no_trio_here=NO_TRIO_PLUGIN, test_agent=STORE_TEST)
    result = pytester.runpytest_subprocess(*NO_TRIO_ARGS, *plugin_args(request.config), "-v", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*backend asyncio*"])


def test_an_async_fixture_without_the_anyio_mark_names_the_mark(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(
        test_agent="""
async def test_async_unmarked(arkhon_system):
    pass

def test_sync(arkhon_store):
    pass

def test_plain(fault_plan, scripted_model):
    assert fault_plan.seed == 0
"""
    )
    result = pytester.runpytest(*plugin_args(request.config))
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*'test_async_unmarked' uses arkhon-rheo's async fixture 'arkhon_store' without"
            " anyio: mark the test with @pytest.mark.anyio*",
            "*'test_sync' uses arkhon-rheo's async fixture 'arkhon_store' without anyio*",
        ]
    )
    assert "no plugin or hook" not in result.stdout.str()
