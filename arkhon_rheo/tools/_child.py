"""The child side of a sandboxed tool call: ``python -m arkhon_rheo.tools._child``.

Reads ``{"target", "arguments", "cpu_seconds", "memory_bytes"}`` as JSON on
stdin, imports the tool (``module:qualname``), validates the arguments, sets
the limits, calls it and writes one JSON envelope on stdout:
``{"ok": true, "content"}`` or ``{"ok": false, "type", "message", "class",
"tool_error"}``. What the tool prints goes to stderr, so it cannot forge the
envelope.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from typing import Any

import anyio

from .._errors import Fatal, Recoverable, Transient
from ._tool import Tool, ToolError, result_text

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]


def _load(target: str) -> Tool[..., Any]:
    module_name, _, qualname = target.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if isinstance(found, Tool):
        return found
    return Tool(found)


def _limit(cpu_seconds: int | None, memory_bytes: int | None) -> None:
    if resource is None:  # pragma: no cover - not POSIX
        return
    if cpu_seconds is not None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime) + cpu_seconds
        _set(resource.RLIMIT_CPU, soft, soft + 1)  # SIGXCPU at soft, SIGKILL at hard
    if memory_bytes is not None:
        _set(resource.RLIMIT_AS, memory_bytes, memory_bytes)


def _set(which: int, soft: int, hard: int) -> None:
    assert resource is not None
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _call(request: dict[str, Any]) -> dict[str, Any]:
    tool = _load(str(request["target"]))
    arguments = tool.validate(request.get("arguments") or {})
    _limit(request.get("cpu_seconds"), request.get("memory_bytes"))
    # The child is its own program: anyio.run drives an async tool on asyncio.
    value = anyio.run(functools.partial(_no_thread(tool).call_with, arguments))
    return {"ok": True, "content": result_text(value)}


def _no_thread(tool: Tool[..., Any]) -> Tool[..., Any]:
    tool.thread = False  # a sync tool runs on the main thread, where signals reach it
    return tool


def main() -> int:
    """Run one call; the exit status is 0 whenever an envelope was written."""
    request = json.loads(sys.stdin.buffer.read() or b"{}")
    envelope_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the tool's prints go to stderr
    sys.stdout = sys.stderr
    try:
        envelope = _call(request)
    except (Transient, Recoverable, Fatal) as exc:
        classes = [cls.__name__ for cls in (Transient, Recoverable, Fatal) if isinstance(exc, cls)]
        envelope = {
            "ok": False,
            "type": type(exc).__name__,
            "message": str(exc),
            "class": classes[0],
        }
    except ToolError as exc:
        envelope = {
            "ok": False,
            "type": type(exc).__name__,
            "message": str(exc),
            "tool_error": True,
        }
    except Exception as exc:
        envelope = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
    envelope_out.write(json.dumps(envelope))
    envelope_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
