"""The sandboxed tools of tests/tools/test_tools_sandbox.py.

They live here, apart from the tests, so that the sandbox's runner, which
imports a tool's module in every call's process, does not import pytest too.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from arkhon_rheo import Transient
from arkhon_rheo.tools import Sandbox, tool

SECRET = "ARKHON_TEST_SECRET"
ALLOWED = "ARKHON_TEST_ALLOWED"


@tool(sandbox=Sandbox(env={"GREETING": "hello"}, env_allow=[ALLOWED]))
def environment() -> dict[str, Any]:
    """What the child sees of its environment and working directory."""
    cwd = os.getcwd()
    Path("scratch.txt").write_text("left behind?")
    return {
        "secret": os.environ.get(SECRET),
        "allowed": os.environ.get(ALLOWED),
        "greeting": os.environ.get("GREETING"),
        "path": os.environ.get("PATH"),
        "home": os.environ.get("HOME"),
        "cwd": cwd,
        "pid": os.getpid(),
    }


@tool(sandbox=Sandbox())
async def double(n: int, note: str = "") -> dict[str, Any]:
    """Double a number, in an async tool."""
    print("this goes to stderr, not into the result")
    return {"n": n * 2, "note": note}


@tool(sandbox=Sandbox(), timeout=2)
def hang() -> str:
    time.sleep(3600)
    return "never"


@tool(sandbox=Sandbox(memory_bytes=1 << 30))
def hog() -> int:
    block = bytearray(4 << 30)
    return len(block)


@tool(sandbox=Sandbox(cpu_seconds=1))
def spin() -> int:
    n = 0
    while True:
        n += 1


@tool(sandbox=Sandbox(max_output=1000))
def chatty(size: int) -> str:
    return "x" * size


@tool(sandbox=Sandbox())
def crash(code: int) -> str:
    sys.stderr.write("about to exit\n")
    sys.stderr.flush()
    os._exit(code)


@tool(sandbox=Sandbox())
def fails(kind: str) -> str:
    if kind == "transient":
        raise Transient("the index is being rebuilt")
    raise KeyError(kind)
