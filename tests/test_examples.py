"""Every script in examples/ runs to completion on both backends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda path: path.stem)
def test_example_runs(script: Path, backend: str) -> None:
    result = subprocess.run(
        [sys.executable, str(script), backend],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should show what it did"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_main_job_stores_its_history_and_replays_it(tmp_path: Path, backend: str) -> None:
    script = next(path for path in EXAMPLES if path.stem == "lifecycle_agent")
    result = subprocess.run(
        [sys.executable, str(script), backend],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "exit: finished, iteration 2, answer 42" in lines
    assert "  #5 act: ACTING -> OBSERVING (recorded calls: tool:calculator)" in lines
    assert (
        "replay: ok; 6 events folded, 6 stages re-executed on their recorded calls, "
        "without the model" in lines
    )
    assert (tmp_path / "arkhon-rheo.db").exists()  # the embedded SQLite default


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_subgraph_example_links_the_child_to_its_parent_step(backend: str) -> None:
    script = next(path for path in EXAMPLES if path.stem == "subgraph_agent")
    result = subprocess.run(
        [sys.executable, str(script), backend],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "s1: finished in DONE: alice is in with tok-alice" in lines
    child = [line for line in lines if line.startswith("    s1/auth_subgraph/2 ")]
    assert child == [
        "    s1/auth_subgraph/2 #1 validate_credentials: VALIDATE -> GENERATE",
        "    s1/auth_subgraph/2 #2 generate_token: GENERATE -> DONE",
    ]
    assert lines.index(child[-1]) + 1 == lines.index("  s1 #2 auth_subgraph: AUTH -> PROCESS")
    assert "replay: ok; 3 stages re-executed, the child's run" in lines
    assert "s2: DENIED: SubgraphFailed (recoverable)" in lines
