"""Run a stdio MCP server, and stop every process it started when it stops (Linux).

Run as a script (``python -I -S _mcp_reaper.py COMMAND ARGS...``), standard
library only: it starts the server with its own standard streams, and waits
for it. It is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a process
the server started that outlives its parent, even in a session of its own
(``setsid``), becomes its child, not init's. When the server exits (its stdin
closed by the toolbox, or killed), or this is asked to stop (``SIGTERM``,
passed on to the server first), every process left under it is killed: a
server's helper does not outlive the toolbox. It exits with the server's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
#: Seconds to wait for the processes killed to be reaped, each round.
_GRACE = 2.0
#: Rounds of killing (a process may start another while it is killed); then it gives up.
_ROUNDS = 5


def _descendants(root: int) -> list[int]:
    """The processes under ``root`` (by their parents, read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _kill_all() -> None:
    """Kill every process left under this one, and reap them, until none is (a few rounds)."""
    for _ in range(_ROUNDS):
        left = _descendants(os.getpid())
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + _GRACE
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)


def main() -> int:
    """Serve ``sys.argv[1:]``; the server's exit status."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    server = subprocess.Popen(sys.argv[1:])

    def stop(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    try:
        status = server.wait()
    finally:
        _kill_all()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
