"""The tutorial's fault-injection example is a real test: run it with the plugin via pytester."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = re.search(
    r"```python\n# test_weather_agent\.py\n(.*?)```",
    (ROOT / "docs" / "tutorial.md").read_text(),
    re.DOTALL,
)


def plugin_args(config: pytest.Config) -> list[str]:
    """Load the plugin unless its entry point already did (an installed checkout)."""
    loaded = config.pluginmanager.get_plugin("arkhon_rheo") is not None
    return ["-p", "no:cacheprovider"] + (
        [] if loaded else ["-p", "arkhon_rheo.testing.pytest_plugin"]
    )


def test_the_tutorial_example_passes_on_both_backends(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    assert EXAMPLE is not None, "docs/tutorial.md lost its test_weather_agent.py example"
    pytester.makepyfile(test_weather_agent=EXAMPLE.group(1))
    result = pytester.runpytest(*plugin_args(request.config), "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_my_agent_survives_faults?asyncio?*PASSED*",
                                 "*test_my_agent_survives_faults?trio?*PASSED*"])  # fmt: skip
