"""Sandboxed tools: each call runs in a fresh subprocess, confined, under limits.

Threat model: the tool's code is untrusted (model-written, or a dependency's),
the rest of the program is not. A call must not let the tool read the
program's secrets or files, reach the network unless allowed, outlive the
call, exhaust the machine, or make the program believe a result it did not
return. How much of that holds depends on the platform (`Sandbox.enforcement`
says what holds here; the docs' tools how-to has the table):

- **Linux with bubblewrap** (``isolation="auto"`` finds it; ``"require"``
  refuses to run without it): namespaces, see `arkhon_rheo.tools._isolation`.
  No network, a file system of read-only system and Python paths plus its
  private directory, its own PID namespace (the caller's processes and their
  ``/proc`` entries do not exist for it), every process of the call killed
  when it ends, and the limits below.
- **Linux without bubblewrap**: a plain subprocess of the same user, with the
  limits below, a scrubbed environment and a private working directory; every
  descendant killed when the call ends (the runner is a child subreaper).
  The tool can read what the user can, use the network, and reach the
  caller's process through ``/proc`` or signals: this contains mistakes, not
  hostile code.
- **macOS and other POSIX**: as Linux without bubblewrap, but descendants that
  left the process group (``setsid``) may survive, ``RLIMIT_NPROC`` (counted per
  user) is not set and macOS does not enforce ``RLIMIT_AS``.
- **Windows**: a subprocess with a scrubbed environment, a private directory
  and a timeout; no limits, and the tool runs in its runner's process.

A call runs ``python -m arkhon_rheo.tools._child`` (the runner), which forks
the tool's own process: that process imports the tool (``module:qualname``)
and calls it with the validated arguments, the runner watches it and writes
the result on a pipe the tool's process never holds. The runner also sets:

- a **scrubbed environment**: ``PATH`` (``os.defpath``), ``PYTHONPATH`` (the
  parent's ``sys.path``; ``pass_sys_path=False`` leaves it out), the variables
  named in ``env_allow`` and those given in ``env``; nothing else;
- a **private working directory**, also ``HOME`` and ``TMPDIR``, removed after;
- **limits**: ``RLIMIT_CPU`` (``cpu_seconds``, from the call on), ``RLIMIT_AS``
  (``memory_bytes``), ``RLIMIT_NPROC`` (``max_processes``, 64 by default) and
  ``RLIMIT_FSIZE`` (``max_file_bytes``, 1 GiB by default);
- **bounded output**: the result and stderr are read up to ``max_output``
  bytes each; more, and the call is stopped and its output refused;
- a **timeout**: past it, or when the caller cancels, the runner kills every
  process of the call and the call raises `ToolTimeout` (transient: the
  supervisor retries the stage). A tool that returned is never reported as
  timed out because a process it left behind still runs: that process is
  killed when the result is taken.

A crash, a kill by a limit or refused output is answered as an error result
(`ToolError`) with the tail of the tool's stderr: the same call would fail the
same way, so the model hears about it rather than the supervisor retrying it.
An exception the tool raises is answered as in-process: ``"Type: message"``;
a `Transient`, `Recoverable` or `Fatal` is raised again as that class.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from .._errors import ConfigurationError, Fatal, Recoverable, ToolError, ToolTimeout, Transient
from .._log import get_logger
from . import _isolation

if TYPE_CHECKING:
    from anyio.abc import ByteReceiveStream, Process
    from pydantic import BaseModel

    from ._config import Sandbox

__all__ = ["envelope_cap", "run_sandboxed"]

_CHILD = "arkhon_rheo.tools._child"
_TAIL = 800
#: Seconds the runner has to kill the call's processes once told to stop, and the
#: pipes to reach their end once it exited, before the caller kills what is left.
_GRACE = 5.0
_RAISED = {"Transient": Transient, "Recoverable": Recoverable, "Fatal": Fatal}
_logger = get_logger("arkhon_rheo.tools")
_warned: set[str] = set()
#: What a sandbox with ``isolation="auto"`` does without bubblewrap, as its warning says.
_NOT_ISOLATED = (
    "isolation is off: the sandbox's tools run as plain subprocesses, with process limits "
    "only, able to read and write what this user may and to reach the network; "
    "Sandbox(isolation='require') refuses to run them instead"
)


def envelope_cap(max_output: int) -> int:
    """The most bytes of a result envelope: the result JSON-escaped, and some."""
    return 6 * max_output + 4096


class _Capped:
    """Bytes read from a pipe, up to a cap; the tail is kept for messages."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False
        self.done = anyio.Event()

    def tail(self) -> str:
        text = self.data[-_TAIL:].decode(errors="replace").strip()
        return f"; its stderr ends: {text}" if text else ""


async def _drain(stream: ByteReceiveStream | None, into: _Capped, stop: anyio.Event) -> None:
    try:
        if stream is None:
            return
        async for chunk in stream:
            into.data += chunk
            if len(into.data) > into.cap:
                into.overflow = True
                stop.set()
                return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return
    finally:
        into.done.set()


@dataclass
class _Ended:
    """How a call's runner ended."""

    code: int | None
    out: _Capped
    err: _Capped
    timed_out: bool


async def run_sandboxed(
    name: str, target: str, arguments: BaseModel, sandbox: Sandbox, limit: float
) -> str:
    """Run one call of a tool in a subprocess confined by ``sandbox``; return its result text.

    Args:
        name: The tool's name (for messages).
        target: ``"module:qualname"`` of its function, which the subprocess imports.
        arguments: The validated arguments of the call.
        sandbox: The confinement.
        limit: Seconds the call may run.

    Raises:
        ToolTimeout: It ran past ``limit`` seconds; its processes were killed.
        ToolError: It crashed, was killed by a limit, or wrote too much.
        IsolationUnavailable: ``isolation="require"`` and it cannot isolate here.
        ConfigurationError: A path of ``read_only`` or ``read_write`` does not exist.
        Transient: The tool raised it in the child (so do Recoverable, Fatal).
    """
    found = await anyio.to_thread.run_sync(_isolation.backend, sandbox)
    if found.bwrap is None and sandbox.isolation == "auto" and found.note not in _warned:
        _warned.add(found.note)
        _logger.warning(
            "sandbox_not_isolated",
            reason=found.note,
            effect=_NOT_ISOLATED,
        )
    workdir = await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "arkhon-tool-")
    try:
        command = await anyio.to_thread.run_sync(_command, found, sandbox, target, workdir)
        request = {
            "target": target,
            "arguments": arguments.model_dump(mode="json", by_alias=True),
            "workdir": workdir,
            "user": found.user,
            "max_output": sandbox.max_output,
            "cpu_seconds": sandbox.cpu_seconds,
            "memory_bytes": sandbox.memory_bytes,
            "max_processes": sandbox.max_processes,
            "max_file_bytes": sandbox.max_file_bytes,
        }
        ended = await _run(command, workdir, sandbox, json.dumps(request).encode() + b"\n", limit)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, workdir, True)
    if ended.timed_out:
        raise ToolTimeout(tool=name, timeout=limit, detail=ended.err.tail().lstrip("; "))
    if ended.out.overflow or ended.err.overflow:
        _refuse(name, "its result" if ended.out.overflow else "its stderr", sandbox)
    return _outcome(name, ended, sandbox)


def _command(found: _isolation.Backend, sandbox: Sandbox, target: str, workdir: str) -> list[str]:
    """The runner's command line (inside bubblewrap where it is used).

    Raises:
        ConfigurationError: A path of ``read_only`` or ``read_write`` does not exist.
    """
    for path in (*sandbox.read_only, *sandbox.read_write):
        if not os.path.exists(path):
            raise ConfigurationError(
                f"Sandbox path {path!r} (read_only or read_write) does not exist; create "
                "it before the call, or leave it out"
            )
    if found.user is not None:
        os.chown(workdir, *found.user)  # the tool's user must own its directory
    python = os.path.join(
        os.path.realpath(os.path.dirname(sandbox.python)), os.path.basename(sandbox.python)
    )
    command = [python, "-m", _CHILD]
    if found.bwrap is None:
        return command
    module = target.partition(":")[0]
    roots = _isolation.import_roots(sandbox, [module, __name__])
    return _isolation.bwrap_command(found, sandbox, workdir, roots, command)


async def _run(
    command: list[str], workdir: str, sandbox: Sandbox, request: bytes, limit: float
) -> _Ended:
    """Run the runner until it ends, ``limit`` passes or output overflows; then stop it.

    Its stdin stays open for the whole call: closing it tells the runner to
    kill the tool's processes and exit.
    """
    process = await anyio.open_process(
        command,
        cwd=workdir,
        env=sandbox.environment(workdir),
        start_new_session=hasattr(os, "killpg"),
    )
    out = _Capped(envelope_cap(sandbox.max_output))
    err = _Capped(sandbox.max_output)
    stop = anyio.Event()
    timed_out = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_drain, process.stdout, out, stop)
            group.start_soon(_drain, process.stderr, err, stop)
            try:
                with anyio.move_on_after(limit) as deadline:
                    await _send(process, request)
                    async with anyio.create_task_group() as waiting:
                        waiting.start_soon(_until_exit, process, waiting.cancel_scope)
                        waiting.start_soon(_until_set, stop, waiting.cancel_scope)
                timed_out = deadline.cancelled_caught and process.returncode is None
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                    with anyio.move_on_after(_GRACE):
                        await out.done.wait()
                        await err.done.wait()
                    group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return _Ended(process.returncode, out, err, timed_out)


async def _send(process: Process, request: bytes) -> None:
    if process.stdin is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await process.stdin.send(request)  # if it exited early, its exit status tells why


async def _until_exit(process: Process, scope: anyio.CancelScope) -> None:
    await process.wait()
    scope.cancel()


async def _until_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _stop(process: Process) -> None:
    """End the call: the runner kills the tool's processes and exits, or all is killed."""
    if process.stdin is not None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.aclose()  # EOF: the runner's signal to stop
    if process.returncode is None:
        with anyio.move_on_after(_GRACE):
            await process.wait()
    if process.returncode is None:  # not reaped: its group id cannot have been reused
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (AttributeError, ProcessLookupError, PermissionError):
            process.kill()
        await process.wait()


def _refuse(name: str, which: str, sandbox: Sandbox) -> None:
    raise ToolError(
        f"tool {name!r} wrote more than {sandbox.max_output} bytes ({which}); the "
        "output was refused. Ask for less (a summary, a page), or raise max_output"
    )


def _outcome(name: str, ended: _Ended, sandbox: Sandbox) -> str:
    try:
        envelope = json.loads(ended.out.data) if ended.out.data else None
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        raise ToolError(
            f"tool {name!r} crashed (exit status {ended.code}) without a result{ended.err.tail()}"
        )
    if envelope.get("ok") is True:
        return str(envelope.get("content", ""))
    if envelope.get("overflow"):
        _refuse(name, "its result", sandbox)
    if isinstance(envelope.get("signal"), int):
        raise ToolError(_killed(name, envelope["signal"], sandbox) + ended.err.tail())
    if isinstance(envelope.get("exit"), int):
        raise ToolError(
            f"tool {name!r} crashed (exit status {envelope['exit']}) without a result"
            f"{ended.err.tail()}"
        )
    if envelope.get("malformed"):
        raise ToolError(
            f"tool {name!r} ended without a valid result (its process sent its runner "
            f"something else){ended.err.tail()}"
        )
    kind = str(envelope.get("type", "Exception"))
    message = str(envelope.get("message", ""))
    raised = _RAISED.get(str(envelope.get("class")))
    if raised is not None:
        raise raised(f"{kind}: {message}" if kind != raised.__name__ else message)
    if kind == "MemoryError" and not message:
        message = "out of memory"
    message += _hint(kind, envelope.get("errno"), sandbox)
    if envelope.get("tool_error"):
        raise ToolError(message)
    raise ToolError(f"{kind}: {message}")


def _killed(name: str, number: int, sandbox: Sandbox) -> str:
    try:
        what = signal.Signals(number).name
    except ValueError:
        what = f"signal {number}"
    hint = ""
    if what == "SIGXCPU" or (what == "SIGKILL" and sandbox.cpu_seconds is not None):
        hint = f" (its CPU-time limit is {sandbox.cpu_seconds} s)"
    elif what == "SIGXFSZ":
        hint = f" (its file-size limit is {sandbox.max_file_bytes} bytes)"
    return f"tool {name!r} was killed by {what}{hint}"


def _hint(kind: str, number: object, sandbox: Sandbox) -> str:
    if kind == "MemoryError" and sandbox.memory_bytes is not None:
        return f" (its memory limit is {sandbox.memory_bytes} bytes)"
    if number == errno.EFBIG and sandbox.max_file_bytes is not None:
        return f" (its file-size limit is {sandbox.max_file_bytes} bytes)"
    if number == errno.EAGAIN and kind == "BlockingIOError" and sandbox.max_processes:
        return f" (if it was starting a process: its process limit is {sandbox.max_processes})"
    return ""
