"""Sandboxed tools: each call in a real subprocess, confined.

The tools are in tests/support/sandboxed_tools.py (the runner imports their module).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from arkhon_rheo import ConfigurationError, Transient
from arkhon_rheo.errors import ToolTimeout
from arkhon_rheo.protocols import ToolCall
from arkhon_rheo.tools import Sandbox, Toolbox, tool
from tests.support.sandboxed_tools import (
    ALLOWED,
    SECRET,
    chatty,
    crash,
    double,
    environment,
    fails,
    hang,
    hog,
    spin,
)

pytestmark = pytest.mark.anyio

posix_only = pytest.mark.skipif(
    not hasattr(os, "killpg") or sys.platform != "linux", reason="rlimits are enforced on Linux"
)

# The tools (module level, so that the sandbox's runner imports them) are in
# tests/support/sandboxed_tools.py.


def call(name: str, arguments: Any = None) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=json.dumps(arguments or {}))


async def test_the_child_sees_a_scrubbed_environment_and_a_private_cwd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SECRET, "hunter2")
    monkeypatch.setenv(ALLOWED, "yes")
    answer = await Toolbox(environment).call(call("environment"))
    assert not answer.is_error, answer.content
    seen = json.loads(answer.content)
    assert seen["secret"] is None
    assert seen["allowed"] == "yes"
    assert seen["greeting"] == "hello"
    assert seen["path"] == os.defpath
    assert seen["pid"] != os.getpid()
    cwd = Path(seen["cwd"])
    assert seen["home"] == seen["cwd"]
    assert cwd != Path.cwd()
    assert cwd.name.startswith("arkhon-tool-")
    assert not await anyio.Path(cwd).exists()  # removed with what the tool left there


async def test_an_async_tool_runs_in_the_child_and_its_prints_stay_out_of_the_result() -> None:
    answer = await Toolbox(double).call(call("double", {"n": 21, "note": "é"}))
    assert not answer.is_error, answer.content
    assert json.loads(answer.content) == {"n": 42, "note": "é"}


async def test_a_tool_past_its_timeout_is_killed_and_raises_tool_timeout() -> None:
    # The timeout counts the child's start-up too; that every process of the call is
    # killed is tested in test_tools_isolation.py.
    with pytest.raises(ToolTimeout, match=r"tool 'hang' did not finish within 2 s") as info:
        await Toolbox(hang).call(call("hang"))
    assert isinstance(info.value, Transient)


@posix_only
async def test_a_tool_over_its_memory_limit_is_reported() -> None:
    answer = await Toolbox(hog).call(call("hog"))
    assert answer.is_error
    assert "MemoryError" in answer.content
    assert f"memory limit is {1 << 30} bytes" in answer.content


@posix_only
async def test_a_tool_over_its_cpu_limit_is_killed_and_reported() -> None:
    answer = await Toolbox(spin).call(call("spin"))
    assert answer.is_error
    assert "was killed by SIGXCPU (its CPU-time limit is 1 s)" in answer.content


async def test_output_beyond_the_cap_is_refused() -> None:
    box = Toolbox(chatty)
    assert (await box.call(call("chatty", {"size": 10}))).content == "x" * 10
    answer = await box.call(call("chatty", {"size": 5000}))
    assert answer.is_error
    assert "wrote more than 1000 bytes (its result); the output was refused" in answer.content


async def test_a_crash_is_an_error_with_the_stderr_tail() -> None:
    answer = await Toolbox(crash).call(call("crash", {"code": 3}))
    assert answer.is_error
    assert "crashed (exit status 3)" in answer.content
    assert "its stderr ends: about to exit" in answer.content


async def test_exceptions_in_the_child_are_answered_or_raised_as_in_process() -> None:
    box = Toolbox(fails)
    answer = await box.call(call("fails", {"kind": "lookup"}))
    assert (answer.is_error, answer.content) == (True, "KeyError: 'lookup'")
    with pytest.raises(Transient, match="the index is being rebuilt"):
        await box.call(call("fails", {"kind": "transient"}))


async def test_arguments_are_validated_before_a_process_starts() -> None:
    answer = await Toolbox(double).call(call("double", {"n": "many"}))
    assert answer.is_error
    assert "n: Input should be a valid integer" in answer.content


def test_a_sandboxed_tool_must_be_importable_and_limits_positive() -> None:
    def local() -> str:
        return ""

    with pytest.raises(ConfigurationError, match="cannot import"):
        tool(sandbox=Sandbox())(local)
    with pytest.raises(ConfigurationError, match="max_output must be a positive int"):
        Sandbox(max_output=0)
    assert environment.timeout == 30.0  # SANDBOX_TIMEOUT when none is given


def test_the_runner_and_a_tool_module_load_none_of_the_runtime() -> None:
    # A sandboxed call starts an interpreter that imports the runner and the tool's
    # module (``from arkhon_rheo.tools import tool``): neither loads the toolboxes,
    # the stores, the supervisor, the system or structlog (with rich), which it
    # does not use. What is loaded is read in a fresh interpreter.
    import subprocess

    root = str(Path(__file__).resolve().parents[2])
    code = (
        "import sys, arkhon_rheo.tools._child, tests.support.sandboxed_tools;"
        "print(' '.join(sorted(sys.modules)))"
    )
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": path},
    )
    loaded = set(done.stdout.split())
    assert "arkhon_rheo.tools._tool" in loaded
    for heavy in (
        "structlog",
        "rich",
        "arkhon_rheo.tools._toolbox",
        "arkhon_rheo.tools._mcp",
        "arkhon_rheo.store",
        "arkhon_rheo.supervision",
        "arkhon_rheo.system",
        "arkhon_rheo.core",
        "arkhon_rheo.actors",
    ):
        assert heavy not in loaded, f"the runner loads {heavy}"
