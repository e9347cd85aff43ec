"""Sandboxed tools: each call runs in a fresh subprocess with limits.

``@tool(sandbox=Sandbox(...))`` runs each call as ``python -m
arkhon_rheo.tools._child``: the child imports the tool by
``module:qualname``, reads the validated arguments as JSON on stdin, calls the
function and writes a JSON envelope on stdout (what the tool prints goes to
stderr). The parent gives it:

- a **private working directory**, also its ``HOME`` and ``TMPDIR``, removed
  afterwards;
- a **scrubbed environment**: ``PATH`` (``os.defpath``), ``PYTHONPATH`` (the
  parent's ``sys.path``, so the child imports the tool exactly as the parent
  did; ``pass_sys_path=False`` leaves it out), the variables named in
  ``env_allow`` and those given in ``env``; nothing else of the parent's;
- a **timeout**: past it the child's whole process group is killed and the
  call raises `ToolTimeout` (transient: the supervisor retries the stage);
- **CPU time and memory limits** (``RLIMIT_CPU``, ``RLIMIT_AS``) set in the
  child before it calls the tool, where the platform has ``resource``;
  elsewhere they are not applied;
- **bounded output**: stdout and stderr are read up to ``max_output`` bytes
  each; more, and the child is killed and the result refused.

A crash, a nonzero exit, a kill by a limit or refused output is answered as
an error result (`ToolError`) with the tail of the child's stderr: the same
call would fail the same way, so the model hears about it rather than the
supervisor retrying it. An exception the tool raises in the child is answered
as in-process: ``"Type: message"``, and a `Transient`, `Recoverable` or
`Fatal` is raised again in the parent as that class.

A child is POSIX-first: on other platforms the timeout kills the child alone,
not its process group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, Fatal, Recoverable, ToolTimeout, Transient
from ._tool import ToolError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from anyio.abc import ByteReceiveStream, Process
    from pydantic import BaseModel

    from ._tool import Tool

__all__ = ["Sandbox", "run_sandboxed"]

_CHILD = "arkhon_rheo.tools._child"
_TAIL = 800
_RAISED = {"Transient": Transient, "Recoverable": Recoverable, "Fatal": Fatal}


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """How a sandboxed tool's subprocess is confined (see the module's notes).

    Attributes:
        env: Variables to set in the child, as given.
        env_allow: Names of the parent's variables the child inherits (when set).
        cpu_seconds: CPU seconds the tool may use (whole seconds, counted from
            when it is called); past them the child is killed (``SIGXCPU``).
        memory_bytes: The most address space the whole child may map,
            interpreter and imported modules included (a Python with pydantic
            maps ~100-300 MB before the tool runs).
        max_output: Bytes of stdout (the result) and of stderr read at most.
        python: The interpreter that runs the child.
        pass_sys_path: Give the child the parent's ``sys.path`` as ``PYTHONPATH``.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    env_allow: Iterable[str] = ()
    cpu_seconds: int | None = None
    memory_bytes: int | None = None
    max_output: int = 1 << 20
    python: str = sys.executable
    pass_sys_path: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "env_allow", frozenset(self.env_allow))
        for name in ("cpu_seconds", "memory_bytes", "max_output"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigurationError(
                    f"Sandbox {name} must be a positive int (or None for no limit), got {value!r}"
                )
        if not self.max_output:
            raise ConfigurationError("Sandbox max_output must be a positive int")

    def environment(self, workdir: str) -> dict[str, str]:
        """The child's whole environment, given its working directory."""
        env = {
            "PATH": os.defpath,
            "HOME": workdir,
            "TMPDIR": workdir,
            "PYTHONUTF8": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if self.pass_sys_path:
            paths = (os.path.abspath(p) for p in sys.path if p)
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if os.path.isdir(p))
        env.update({name: os.environ[name] for name in self.env_allow if name in os.environ})
        env.update(self.env)
        return env


class _Capped:
    """Bytes read from a pipe, up to a cap; the tail is kept for messages."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False

    def tail(self) -> str:
        text = self.data[-_TAIL:].decode(errors="replace").strip()
        return f"; its stderr ends: {text}" if text else ""


async def _drain(stream: ByteReceiveStream | None, into: _Capped, scope: anyio.CancelScope) -> None:
    if stream is None:
        return
    try:
        async for chunk in stream:
            into.data += chunk
            if len(into.data) > into.cap:
                into.overflow = True
                scope.cancel()
                return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return


def _kill(process: Process) -> None:
    if process.returncode is not None:
        return
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the tool's own children too
        except ProcessLookupError:
            return
        except PermissionError:
            process.kill()
    else:  # pragma: no cover - not POSIX
        process.kill()


async def run_sandboxed(
    tool: Tool[..., Any], arguments: BaseModel, sandbox: Sandbox, limit: float
) -> str:
    """Run one call of ``tool`` in a subprocess confined by ``sandbox``; return its result text.

    Raises:
        ToolTimeout: It ran past ``limit`` seconds; its process group was killed.
        ToolError: It crashed, was killed by a limit, or wrote too much.
        Transient: The tool raised it in the child (so do Recoverable, Fatal).
    """
    payload = json.dumps(
        {
            "target": tool.target,
            "arguments": arguments.model_dump(mode="json", by_alias=True),
            "cpu_seconds": sandbox.cpu_seconds,
            "memory_bytes": sandbox.memory_bytes,
        }
    ).encode()
    workdir = await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "arkhon-tool-")
    out, err = _Capped(sandbox.max_output), _Capped(sandbox.max_output)
    try:
        process = await anyio.open_process(
            [sandbox.python, "-m", _CHILD],
            cwd=workdir,
            env=sandbox.environment(workdir),
            start_new_session=hasattr(os, "killpg"),
        )
        try:
            with anyio.move_on_after(limit) as deadline:
                async with anyio.create_task_group() as group:
                    group.start_soon(_drain, process.stdout, out, group.cancel_scope)
                    group.start_soon(_drain, process.stderr, err, group.cancel_scope)
                    if process.stdin is not None:
                        try:
                            await process.stdin.send(payload)
                            await process.stdin.aclose()
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                            pass  # it exited early: its exit status tells why
                if not (out.overflow or err.overflow):
                    await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                _kill(process)
                await process.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, workdir, True)
    if deadline.cancelled_caught:
        raise ToolTimeout(tool=tool.name, timeout=limit, detail=err.tail().lstrip("; "))
    if out.overflow or err.overflow:
        which = "its result" if out.overflow else "its stderr"
        raise ToolError(
            f"tool {tool.name!r} wrote more than {sandbox.max_output} bytes ({which}); the "
            "output was refused. Ask for less (a summary, a page), or raise max_output"
        )
    return _outcome(tool.name, process.returncode, out, err, sandbox)


def _outcome(name: str, code: int | None, out: _Capped, err: _Capped, sandbox: Sandbox) -> str:
    if code is not None and code < 0:
        try:
            what = signal.Signals(-code).name
        except ValueError:
            what = f"signal {-code}"
        hint = ""
        if what == "SIGXCPU" or (what == "SIGKILL" and sandbox.cpu_seconds is not None):
            hint = f" (its CPU-time limit is {sandbox.cpu_seconds} s)"
        raise ToolError(f"tool {name!r} was killed by {what}{hint}{err.tail()}")
    try:
        envelope = json.loads(out.data) if code == 0 else None
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        raise ToolError(f"tool {name!r} crashed (exit status {code}) without a result{err.tail()}")
    if envelope.get("ok"):
        return str(envelope.get("content", ""))
    kind = str(envelope.get("type", "Exception"))
    message = str(envelope.get("message", ""))
    raised = _RAISED.get(str(envelope.get("class")))
    if raised is not None:
        raise raised(f"{kind}: {message}" if kind != raised.__name__ else message)
    if kind == "MemoryError" and sandbox.memory_bytes is not None:
        message = f"{message or 'out of memory'} (its memory limit is {sandbox.memory_bytes} bytes)"
    if envelope.get("tool_error"):
        raise ToolError(message)
    raise ToolError(f"{kind}: {message}")
