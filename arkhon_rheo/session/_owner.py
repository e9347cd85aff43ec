"""Who holds a lease: a process named so that another process can tell it is dead.

An `AgentSystem` leases its sessions as ``host/pid/start/token``: the host
name, the process id, the process's start time (from ``/proc``, in clock ticks
since boot; ``-`` where there is none) and a random token per system. A
process on the same host can then tell the owner is gone at once, instead of
waiting for its lease to run out: its pid no longer exists, is a zombie, or
belongs to a process started at another time (the pid was reused). On another
host nothing can be told: its leases run out as before.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Owner", "is_dead"]


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of process ``pid`` from ``/proc``, or ``None`` without it."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]  # fields 3 (state) and 22 (starttime)


@dataclass(frozen=True, slots=True)
class Owner:
    """A lease owner: one agent system in one process on one host.

    Attributes:
        host: The host name.
        pid: The process id.
        started: The process's start time from ``/proc`` (``"-"``: unknown).
        token: Tells apart the systems of one process.
    """

    host: str
    pid: int
    started: str
    token: str

    @classmethod
    def current(cls) -> Owner:
        """A new owner for a system in this process."""
        pid = os.getpid()
        stat = _proc_stat(pid)
        started = "-" if stat is None else stat[1]
        return cls(socket.gethostname(), pid, started, uuid.uuid4().hex[:8])

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lease names, or ``None`` if it is not of this form."""
        parts = text.split("/")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    def __str__(self) -> str:
        return f"{self.host}/{self.pid}/{self.started}/{self.token}"

    def describe(self) -> dict[str, object]:
        """The owner as JSON data, for an event's record."""
        return {"host": self.host, "pid": self.pid, "system": str(self)}


def is_dead(owner: str) -> bool:
    """Whether the owner a lease names is certainly a dead process on this host.

    ``False`` when it lives, when it is on another host, or when it cannot be told.
    """
    found = Owner.parse(owner)
    if found is None or found.host != socket.gethostname() or os.name != "posix":
        return False
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    stat = _proc_stat(found.pid)
    if stat is None:
        return False  # no /proc: it exists, nothing more can be told
    state, started = stat
    return state in ("Z", "X") or (found.started != "-" and started != found.started)
