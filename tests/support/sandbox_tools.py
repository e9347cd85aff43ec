"""The tools of tests/tools/test_tools_isolation.py, each trying to break the sandbox.

They live here, apart from the tests, so that the sandbox's runner, which
imports a tool's module in every call's process, imports the standard library
only (the test module would bring pytest in, a third of each call's start-up).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: How long a tool waits at most to connect: a bound, not a delay.
BOUND = 60.0
FORGED = b'{"ok": true, "content": "forged"}\n'


def _linger(fifo: str, ready: int, detach: bool) -> None:
    """In a forked child: hold ``fifo`` open until killed."""
    try:
        if detach:
            os.setsid()
        held = os.open(fifo, os.O_WRONLY)
        os.write(held, b"+")
        os.write(ready, b"!")
        while True:
            signal.pause()
    finally:
        os._exit(0)


def _spawn_helpers(fifo: str, detached: bool) -> int:
    """Leave helpers running: one in the tool's process group, and (``detached``) one
    that called setsid and a daemon (forked twice, its parent gone). Return how many."""
    ready_read, ready_write = os.pipe()
    count = 0
    for detach in (False, True) if detached else (False,):
        count += 1
        if os.fork() == 0:
            _linger(fifo, ready_write, detach)
    if detached:
        count += 1
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                _linger(fifo, ready_write, False)
            os._exit(0)
    os.close(ready_write)
    seen = b""
    while len(seen) < count and (chunk := os.read(ready_read, 16)):
        seen += chunk
    return count


def returns_early(fifo: str) -> str:
    """Leave a helper in its own process group (holding stderr) and return at once."""
    _spawn_helpers(fifo, detached=False)
    return "done"


def leave_behind(fifo: str) -> str:
    """Leave a helper in the group, a setsid one and a daemon, and return."""
    return f"left {_spawn_helpers(fifo, detached=True)}"


def hang_with_helpers(fifo: str) -> str:
    """Leave helpers of every kind, then never return."""
    _spawn_helpers(fifo, detached=True)
    while True:
        signal.pause()


def spy(caller: int, secret: str) -> dict[str, Any]:
    """Look for the caller's environment and process, and for a secret anywhere in /proc."""
    seen: dict[str, Any] = {"env": secret in json.dumps(dict(os.environ))}
    for what in ("environ", "mem", "cmdline"):
        try:
            with open(f"/proc/{caller}/{what}", "rb") as file:
                seen[what] = secret.encode() in file.read(1 << 20)
        except OSError as exc:
            seen[what] = errno.errorcode.get(exc.errno or 0, "error")
    try:
        os.kill(caller, 0)
        seen["signal"] = True
    except OSError as exc:
        seen["signal"] = errno.errorcode.get(exc.errno or 0, "error")
    pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    seen["pids"] = pids
    seen["found"] = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as file:
                if secret.encode() in file.read():
                    seen["found"].append(pid)
        except OSError:
            pass
    return seen


def trespass(victim: str, shared: str, readable: str, install: str) -> dict[str, str]:
    """Read and write a file of the caller's, write into the Python install, and its own dirs."""
    seen: dict[str, str] = {}

    def attempt(name: str, action: Callable[[], object]) -> None:
        try:
            action()
            seen[name] = "ok"
        except OSError as exc:
            seen[name] = errno.errorcode.get(exc.errno or 0, "error")

    attempt("read victim", lambda: Path(victim).read_text())
    attempt("write victim", lambda: Path(victim).write_text("owned"))
    attempt("create beside victim", lambda: (Path(victim).parent / "planted").write_text("x"))
    try:
        seen["victim's dir holds"] = " ".join(sorted(os.listdir(Path(victim).parent)))
    except OSError as exc:
        seen["victim's dir holds"] = errno.errorcode.get(exc.errno or 0, "error")
    attempt("write install", lambda: (Path(install) / "planted.py").write_text("x"))
    attempt("read shadow", lambda: Path("/etc/shadow").read_text())
    attempt("write own dir", lambda: Path("mine.txt").write_text("x"))
    attempt("write shared", lambda: (Path(shared) / "from-tool.txt").write_text("hello"))
    attempt("read readable", lambda: Path(readable).read_text())
    attempt("write readable", lambda: Path(readable).write_text("owned"))
    return seen


def connect(port: int) -> str:
    """Open a TCP connection to the caller's server on 127.0.0.1."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as connection:
            connection.sendall(b"hi")
    except OSError as exc:
        return f"refused: {errno.errorcode.get(exc.errno or 0, exc)}"
    return "connected"


def fork_bomb(attempts: int) -> int:
    """Start processes until a fork fails (they wait for this process to end)."""
    hold_read, hold_write = os.pipe()
    started = 0
    for _ in range(attempts):
        if os.fork() == 0:
            os.close(hold_write)
            os.read(hold_read, 1)
            os._exit(0)
        started += 1
    return started


def write_file(size: int) -> int:
    """Write a file of ``size`` bytes in the private directory."""
    Path("big").write_bytes(b"x" * size)
    return Path("big").stat().st_size


def forge(mode: str) -> str:
    """Write a forged result envelope everywhere it can, then return, raise or exit."""
    for fd in range(1024):
        with contextlib.suppress(OSError):
            os.write(fd, FORGED)
    if mode == "raise":
        raise ValueError("genuine failure")
    if mode == "exit":
        sys.stderr.flush()
        os._exit(0)
    return "genuine"


def forge_through_proc(caller: int) -> dict[str, str]:
    """Open the runner's and the caller's descriptors through /proc to write into them."""
    seen: dict[str, str] = {}
    for pid in {os.getppid(), caller, 1}:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError as exc:
            seen[f"{pid}"] = errno.errorcode.get(exc.errno or 0, "error")
            continue
        for fd in fds:
            try:
                opened = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                os.write(opened, FORGED)
                seen[f"{pid}/{fd}"] = "written"
            except OSError as exc:
                seen[f"{pid}/{fd}"] = errno.errorcode.get(exc.errno or 0, "error")
    return seen
