"""The runner of a sandboxed tool call: ``python -m arkhon_rheo.tools._child``.

The caller (`arkhon_rheo.tools._sandbox`) writes one JSON line on its stdin
(``target``, ``arguments``, ``workdir``, ``user``, ``max_output`` and the
limits) and keeps stdin open: its end means *stop now* (a timeout, a
cancellation, the caller's death). The runner writes one JSON envelope on its
stdout: ``{"ok": true, "content"}``; ``{"ok": false, "type", "message"}``
(with ``"class"``, ``"tool_error"`` or ``"errno"``) for an exception the tool
raised; or ``{"ok": false}`` with ``"exit"``, ``"signal"``, ``"overflow"`` or
``"malformed"`` when the tool's process ended without a valid result.

The runner forks the tool's process (the worker). Before anything of the tool
runs, the worker puts the null device on fd 0 and its stderr on fd 1 (what
the tool prints goes to stderr), keeps only the write end of a private pipe
to the runner, makes its own process group, switches user if asked, sets its
limits, then imports the tool, calls it and sends a framed message on the
pipe. The runner waits for the worker to end (its exit status is the fact the
tool cannot fake), takes the last frame the worker wrote, checks its shape
and size, kills every process the worker left (its process group, then every
descendant: on Linux the runner is a child subreaper, so orphans, ``setsid``
ones included, become its children; inside bubblewrap it is PID 1, and its
exit ends the namespace) and writes the envelope.

What the result channel withstands: the tool's process never holds the
runner's stdout, so whatever it writes, to any descriptor it has, reaches at
most the private pipe; there, only a frame ending the pipe's content counts,
and only if the worker exits with status 0 (anything its code writes before
returning is overridden by the frame written after it returns). The runner is
not dumpable (Linux): another process of the same user without
``CAP_SYS_PTRACE`` cannot ptrace it nor open its ``/proc`` descriptors or
memory. What the tool's own process sends is the tool's to decide: code in
that process may write any frame and exit, which is no more than returning
that value. Without namespaces, a tool of the same user can still reach the
caller's process itself (``/proc/<pid>/fd``, ptrace where Yama allows it), and
a tool running as root can do anything: only bubblewrap closes those.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import select
import signal
import sys
import traceback
from typing import Any, NoReturn

import anyio

from .._errors import Fatal, Recoverable, ToolError, Transient
from ._sandbox import envelope_cap
from ._tool import Tool, result_text

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

_MAGIC = b"\nARKHON-TOOL-RESULT\n"
_SIZE = 16  # hex digits of a frame's payload size
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_CLASSES = (Transient, Recoverable, Fatal)


def main() -> int:
    """Run one call; the exit status is 0 whenever the runner itself did not fail."""
    request = _read_request()
    if not hasattr(os, "fork"):  # pragma: no cover - Windows: the tool runs here
        result = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        _write(result, _call_safely(request))
        return 0
    _prctl(_PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<runner>/fd for the tool
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # the tool's orphans become the runner's children
    max_output = int(request.get("max_output") or 1 << 20)
    read_end, write_end = os.pipe()
    runner = os.getpid()
    worker = os.fork()
    if worker == 0:
        os.close(read_end)
        _work(request, write_end, runner)
    os.close(write_end)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envelope = _watch(worker, read_end, max_output)
    if envelope is not None:
        _write(1, envelope)
    return 0


def _read_request() -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        data += chunk
    request = json.loads(data or b"{}")
    return request if isinstance(request, dict) else {}


def _write(fd: int, envelope: dict[str, Any]) -> None:
    data = json.dumps(envelope).encode()
    while data:
        data = data[os.write(fd, data) :]


# --- The runner: watch the worker, take its result, kill what it left -----------


def _watch(worker: int, read_end: int, max_output: int) -> dict[str, Any] | None:
    """Wait for the worker to end, or for the caller to stop the call; return the envelope.

    None: the caller stopped the call (its stdin ended); everything was killed.
    """
    cap = envelope_cap(max_output) + _SIZE + len(_MAGIC)
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # it only wakes select up
    data = bytearray()
    reading = True
    while (status := _ended(worker)) is None:
        ready = select.select([0, wake_read, *([read_end] if reading else [])], [], [])[0]
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_read, 512):
                    pass
        if read_end in ready:
            chunk = os.read(read_end, 1 << 16)
            reading = bool(chunk)
            data += chunk
            if len(data) > cap:
                _kill_all(worker)
                return {"ok": False, "overflow": True}
        if 0 in ready and not os.read(0, 1 << 12):
            _kill_all(worker)
            return None
    _kill_all(worker)
    os.set_blocking(read_end, False)
    with contextlib.suppress(BlockingIOError):  # what the worker wrote before it ended
        while len(data) <= cap and (chunk := os.read(read_end, 1 << 16)):
            data += chunk
    if len(data) > cap:
        return {"ok": False, "overflow": True}
    return _verdict(status, bytes(data), max_output)


def _ended(worker: int) -> int | None:
    """Reap the tool's orphans; the worker's exit code once it ended (left unreaped)."""
    if not hasattr(os, "waitid"):  # pragma: no cover - macOS before Python 3.13
        pid, status = os.waitpid(worker, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if pid else None
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None:
            return None
        if info.si_pid == worker:  # a zombie until killed and reaped: its ids stay ours
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)


def _kill_all(worker: int) -> None:
    """Kill the worker, its process group and every other descendant; reap them."""
    if os.getpid() == 1:
        return  # PID 1 of a namespace: when it exits, the kernel kills all the rest
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(worker, signal.SIGKILL)
    me = os.getpid()
    while children := _children(me):
        killed = []
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        if not killed:
            break
        for pid in killed:  # once reaped, its own children are ours (a subreaper's)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(worker, 0)


def _children(me: int) -> set[int]:
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found  # no /proc: the process group was all there was to kill
    try:
        for task in tasks:
            with open(f"/proc/{me}/task/{task}/children") as listing:
                found.update(int(pid) for pid in listing.read().split())
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        for entry in os.listdir("/proc"):
            with (
                contextlib.suppress(OSError, ValueError, IndexError),
                open(f"/proc/{entry}/stat") as stat,
            ):
                if int(stat.read().rpartition(")")[2].split()[1]) == me:
                    found.add(int(entry))
    return found


def _verdict(code: int, data: bytes, max_output: int) -> dict[str, Any]:
    if code < 0:
        return {"ok": False, "signal": -code}
    if code > 0 or not data:
        return {"ok": False, "exit": code}
    envelope = _valid(_unframe(data))
    if envelope is None:
        return {"ok": False, "malformed": True}
    if envelope["ok"] and len(envelope["content"].encode(errors="surrogatepass")) > max_output:
        return {"ok": False, "overflow": True}
    return envelope


def _unframe(data: bytes) -> Any:
    """The payload of the frame that ends ``data`` (payload, its size, the magic)."""
    if not data.endswith(_MAGIC):
        return None
    head = data[: -len(_MAGIC)]
    digits = head[-_SIZE:]
    try:
        size = int(digits, 16)
    except ValueError:
        return None
    if len(digits) != _SIZE or size > len(head) - _SIZE:
        return None
    try:
        return json.loads(head[-_SIZE - size : -_SIZE])
    except ValueError:
        return None


def _valid(message: Any) -> dict[str, Any] | None:
    """The envelope of a well-formed message, built from its known fields only."""
    if not isinstance(message, dict):
        return None
    if message.get("ok") is True:
        content = message.get("content")
        return {"ok": True, "content": content} if isinstance(content, str) else None
    kind, text = message.get("type"), message.get("message")
    if message.get("ok") is not False or not isinstance(kind, str) or not isinstance(text, str):
        return None
    envelope: dict[str, Any] = {"ok": False, "type": kind, "message": text}
    if message.get("class") is not None:
        if message["class"] not in {cls.__name__ for cls in _CLASSES}:
            return None
        envelope["class"] = message["class"]
    if message.get("tool_error") is True:
        envelope["tool_error"] = True
    if type(message.get("errno")) is int:
        envelope["errno"] = message["errno"]
    return envelope


# --- The worker: the tool's own process ----------------------------------------


def _work(request: dict[str, Any], write_end: int, runner: int) -> NoReturn:
    """Confine this process, call the tool, send the framed result to the runner; exit."""
    code = 0
    envelope: dict[str, Any] | None = None
    try:
        write_end = _confine(request, write_end, runner)
        envelope = _call_safely(request)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    if envelope is not None:
        payload = json.dumps(envelope).encode()
        frame = payload + b"%016x" % len(payload) + _MAGIC
        with contextlib.suppress(OSError):
            while frame:
                frame = frame[os.write(write_end, frame) :]
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def _confine(request: dict[str, Any], write_end: int, runner: int) -> int:
    """Everything before the tool's code runs; return the pipe's descriptor (now 3)."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # the runner's stdout is gone: the tool's prints go to stderr
    os.dup2(write_end, 3)
    sys.stdout = sys.stderr
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if resource is not None else 1 << 16
    os.closerange(4, files if 0 < files < 1 << 16 else 1 << 16)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setpgid(0, 0)
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != runner:
        os._exit(1)  # the runner is already gone
    user = request.get("user")
    if user:
        os.setgroups([])
        os.setresgid(user[1], user[1], user[1])
        os.setresuid(user[0], user[0], user[0])
    os.chdir(str(request["workdir"]))
    if request.get("max_file_bytes"):
        _set("RLIMIT_FSIZE", int(request["max_file_bytes"]))
    if request.get("max_processes") and sys.platform.startswith("linux") and os.getuid() != 0:
        # RLIMIT_NPROC counts every task of the user (in its user namespace): allow
        # this many more than run now, this process counted as one of them.
        _set("RLIMIT_NPROC", _tasks_of(os.getuid()) - 1 + int(request["max_processes"]))
    return 3


def _tasks_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
    return count


def _call_safely(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return _call(request)
    except Exception as exc:
        return _failure(exc)


def _call(request: dict[str, Any]) -> dict[str, Any]:
    tool = _load(str(request["target"]))
    arguments = tool.validate(request.get("arguments") or {})
    if request.get("cpu_seconds") is not None and resource is not None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime) + int(request["cpu_seconds"])
        _set("RLIMIT_CPU", soft, soft + 1)  # SIGXCPU at soft, SIGKILL at hard
    if request.get("memory_bytes") is not None:
        _set("RLIMIT_AS", int(request["memory_bytes"]))
    tool.thread = False  # a sync tool runs on the main thread, where signals reach it
    # The worker is its own program: anyio.run drives an async tool on asyncio.
    value = anyio.run(functools.partial(tool.call_with, arguments))
    return {"ok": True, "content": result_text(value)}


def _failure(exc: Exception) -> dict[str, Any]:
    try:
        message = str(exc)
    except Exception:
        message = "(its message cannot be printed)"
    envelope: dict[str, Any] = {"ok": False, "type": type(exc).__name__, "message": message}
    classes = [cls.__name__ for cls in _CLASSES if isinstance(exc, cls)]
    if classes:
        envelope["class"] = classes[0]
    elif isinstance(exc, ToolError):
        envelope["tool_error"] = True
    elif isinstance(exc, OSError) and type(exc.errno) is int:
        envelope["errno"] = exc.errno
    return envelope


def _load(target: str) -> Tool[..., Any]:
    module_name, _, qualname = target.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if isinstance(found, Tool):
        return found
    return Tool(found)


def _set(name: str, soft: int, hard: int | None = None) -> None:
    which = getattr(resource, name, None)
    if resource is None or which is None:  # pragma: no cover - not POSIX
        return
    hard = soft if hard is None else hard
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
