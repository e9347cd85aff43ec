"""`Sandbox`: the options of a sandboxed tool's calls, checked when it is made.

What they mean on this machine is `arkhon_rheo.tools._isolation`'s part
(`Sandbox.enforcement` asks it); how a call runs under them is the runner's
(`arkhon_rheo.tools._sandbox`, whose notes give the threat model).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from . import _isolation

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._isolation import Enforcement, Isolation

__all__ = ["Sandbox"]

_ISOLATIONS = ("auto", "require", "none")


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """How a sandboxed tool's calls are confined (see the tools how-to, "Sandboxed tools").

    Attributes:
        env: Variables to set in the child, as given.
        env_allow: Names of the parent's variables the child inherits (when set).
        cpu_seconds: CPU seconds the tool may use (whole seconds, counted from
            when it is called); past them the child is killed (``SIGXCPU``).
        memory_bytes: The most address space the whole child may map,
            interpreter and imported modules included (a Python with pydantic
            maps ~100-300 MB before the tool runs).
        max_output: Bytes of the result and of stderr read at most.
        python: The interpreter that runs the child.
        pass_sys_path: Give the child the parent's ``sys.path`` as ``PYTHONPATH``
            (with bubblewrap, those directories are visible to it, read-only).
        network: Let the tool use the network (with bubblewrap it has none
            otherwise; without, nothing stops it).
        isolation: ``"auto"``: bubblewrap where it is usable, else a plain
            subprocess (a warning is logged once); ``"require"``: refuse to run
            (`IsolationUnavailable`) unless bubblewrap isolates the tool;
            ``"none"``: a plain subprocess.
        bwrap: bubblewrap's path (by default ``bwrap`` on ``PATH``, or
            ``/usr/bin/bwrap``).
        max_processes: Processes (threads included) the tool may run at once,
            itself included (``RLIMIT_NPROC``); a ``fork`` past it fails.
        max_file_bytes: The largest file the tool may write (``RLIMIT_FSIZE``);
            a write past it fails with ``EFBIG``.
        read_only: More absolute paths the tool may read (with bubblewrap).
        read_write: Absolute paths the tool may read and write (with
            bubblewrap; run by root, the tool is ``nobody`` and needs the
            permissions to do so).
    """

    env: Mapping[str, str] = field(default_factory=dict)
    env_allow: Iterable[str] = ()
    cpu_seconds: int | None = None
    memory_bytes: int | None = None
    max_output: int = 1 << 20
    python: str = sys.executable
    pass_sys_path: bool = True
    network: bool = False
    isolation: Isolation = "auto"
    bwrap: str | None = None
    max_processes: int | None = 64
    max_file_bytes: int | None = 1 << 30
    read_only: Iterable[str | os.PathLike[str]] = ()
    read_write: Iterable[str | os.PathLike[str]] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "env_allow", frozenset(self.env_allow))
        names = ("cpu_seconds", "memory_bytes", "max_output", "max_processes", "max_file_bytes")
        for name in names:
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ConfigurationError(
                    f"Sandbox {name} must be a positive int (or None for no limit), got {value!r}"
                )
        if not self.max_output:
            raise ConfigurationError("Sandbox max_output must be a positive int")
        if self.isolation not in _ISOLATIONS:
            raise ConfigurationError(
                f"Sandbox isolation must be one of {', '.join(map(repr, _ISOLATIONS))}, "
                f"got {self.isolation!r}"
            )
        for name in ("read_only", "read_write"):
            paths = tuple(os.fspath(p) for p in getattr(self, name))
            relative = [p for p in paths if not os.path.isabs(p)]
            if relative:
                raise ConfigurationError(
                    f"Sandbox {name} takes absolute paths, got {relative[0]!r}; "
                    "pass os.path.abspath(...) of it"
                )
            object.__setattr__(self, name, paths)

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
            paths = (os.path.realpath(p) for p in sys.path if p)
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if os.path.isdir(p))
        env.update({name: os.environ[name] for name in self.env_allow if name in os.environ})
        env.update(self.env)
        return env

    def enforcement(self) -> Enforcement:
        """What this sandbox enforces on this machine.

        The first call for a bubblewrap path runs it once to see that the
        namespaces work (a few milliseconds, blocking); the answer is kept.

        Raises:
            IsolationUnavailable: ``isolation="require"`` and it cannot isolate here.
        """
        return _isolation.enforcement(self)
