"""Which confinement a sandboxed call gets here, and bubblewrap's command line for it.

A sandbox confines its tool with bubblewrap (``bwrap``, Linux) when it is
installed and the kernel lets it create namespaces: `backend` finds it, runs it
once with the sandbox's namespaces to see that they work (cached per process),
and `bwrap_command` builds the command line of a call. Elsewhere, or with
``isolation="none"``, a call is a plain subprocess with resource limits; with
``isolation="require"`` it is refused (`IsolationUnavailable`).

Inside bubblewrap the tool's runner is PID 1 of a new PID namespace (when it
exits, the kernel kills everything left in it) with new IPC, UTS and cgroup
namespaces and, unless ``network=True``, an empty network namespace. Its root
is an empty file system, read-only, holding read-only binds of the system
directories (``/usr``, the ``/bin`` and ``/lib`` links), a few files of
``/etc`` (users, name resolution, certificates, the loader's cache), the
Python installation, the directories the tool is imported from (with
``pass_sys_path``, every directory on ``sys.path``) and ``read_only``; its
private directory and ``read_write`` are bound read-write; ``/proc`` is the
namespace's own and ``/dev`` a minimal one. Run by root, bubblewrap keeps no
capability but those to change user, and the tool's process switches to
``nobody`` before it imports the tool (root is exempt from ``RLIMIT_NPROC``
and may read any file); run by another user, the sandbox is a new user
namespace with no capability, that cannot create further ones.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from .._errors import IsolationUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "Backend",
    "Enforcement",
    "Isolation",
    "SandboxOptions",
    "backend",
    "bwrap_command",
    "enforcement",
    "import_roots",
]

Isolation = Literal["auto", "require", "none"]

#: Top-level system directories, bound read-only (or recreated as the links they are).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/nix/store")
#: What of /etc a program needs: users, name resolution, time zone, certificates, loader.
_ETC = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/crypto-policies",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/protocols",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl",
)
_INSTALL = (
    "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap; Arch: pacman -S bubblewrap) or point Sandbox(bwrap=...) at it"
)


class SandboxOptions(Protocol):
    """What of a `Sandbox`'s options this module reads (a `Sandbox` has them all).

    The `Sandbox` is defined above this module (its ``enforcement`` asks this
    one), so the functions here name the options they need rather than the class.
    """

    @property
    def isolation(self) -> Isolation: ...
    @property
    def bwrap(self) -> str | None: ...
    @property
    def python(self) -> str: ...
    @property
    def network(self) -> bool: ...
    @property
    def pass_sys_path(self) -> bool: ...
    @property
    def read_only(self) -> Iterable[str | os.PathLike[str]]: ...
    @property
    def read_write(self) -> Iterable[str | os.PathLike[str]]: ...
    @property
    def cpu_seconds(self) -> int | None: ...
    @property
    def memory_bytes(self) -> int | None: ...
    @property
    def max_processes(self) -> int | None: ...
    @property
    def max_file_bytes(self) -> int | None: ...


@dataclass(frozen=True)
class Enforcement:
    """What a sandbox enforces on this machine (`Sandbox.enforcement`).

    Attributes:
        backend: ``"bubblewrap"`` (namespaces) or ``"process"`` (a plain subprocess).
        filesystem: The tool sees only its directory (read-write), read-only
            system and Python paths and the paths given to the sandbox.
        network_blocked: The tool has no network (an empty network namespace).
        parent_hidden: The tool cannot see or signal the caller's processes,
            nor read their ``/proc`` entries (its own PID namespace).
        kills_every_descendant: When a call ends, every process the tool
            started is killed, ``setsid`` ones included.
        limits: The resource limits applied: ``"cpu"``, ``"memory"``,
            ``"processes"``, ``"file_size"`` (those the sandbox sets, where the
            platform enforces them).
        user: The user id the tool runs as when it is not the caller's (root's
            tools run as ``nobody`` inside bubblewrap); None otherwise.
        note: Why bubblewrap is not used and how to get it; empty when it is.
    """

    backend: Literal["bubblewrap", "process"]
    filesystem: bool
    network_blocked: bool
    parent_hidden: bool
    kills_every_descendant: bool
    limits: frozenset[str]
    user: int | None
    note: str


@dataclass(frozen=True)
class Backend:
    """How calls of one sandbox run here.

    Attributes:
        bwrap: bubblewrap's path; None for a plain subprocess.
        user: ``(uid, gid)`` the tool switches to before it is imported, or None.
        disable_userns: Pass ``--disable-userns`` (a user namespace is made).
        note: Why bubblewrap is not used (empty when it is).
    """

    bwrap: str | None
    user: tuple[int, int] | None = None
    disable_userns: bool = False
    note: str = ""


_probed: dict[tuple[str, str, bool, int], Backend] = {}


def backend(sandbox: SandboxOptions) -> Backend:
    """The backend of ``sandbox`` here: bubblewrap if it is usable and wanted.

    The first call for a bubblewrap path runs it once (a few milliseconds);
    the answer is kept for the life of the process.

    Raises:
        IsolationUnavailable: ``isolation="require"`` and bubblewrap is missing
            or cannot create the namespaces here.
    """
    if sandbox.isolation == "none":
        return Backend(None, note="isolation='none' was asked for")
    found = _usable(sandbox)
    if found.bwrap is None and sandbox.isolation == "require":
        raise IsolationUnavailable(
            f"this sandbox requires isolation (isolation='require'), but {found.note}. To run "
            "its tools with process limits only, use isolation='auto' or 'none'"
        )
    return found


def _usable(sandbox: SandboxOptions) -> Backend:
    if not sys.platform.startswith("linux"):
        return Backend(None, note=f"namespaces need Linux and this is {sys.platform}")
    path = sandbox.bwrap or shutil.which("bwrap") or "/usr/bin/bwrap"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        where = "on PATH or at /usr/bin/bwrap" if sandbox.bwrap is None else f"at {path}"
        return Backend(None, note=f"bubblewrap (bwrap) was not found {where}: {_INSTALL}")
    key = (path, sandbox.python, sandbox.network, os.geteuid())
    if key not in _probed:
        _probed[key] = _probe(path, sandbox)
    return _probed[key]


def _probe(path: str, sandbox: SandboxOptions) -> Backend:
    root = os.geteuid() == 0
    try:
        help_text = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return Backend(None, note=f"bubblewrap at {path} cannot run ({exc}): {_INSTALL}")
    found = Backend(
        path,
        user=_nobody() if root else None,
        disable_userns=not root and "--disable-userns" in help_text,
    )
    command = bwrap_command(
        found, sandbox, None, import_roots(sandbox, ()), [sandbox.python, "-I", "-S", "-c", ""]
    )
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Backend(None, note=f"bubblewrap at {path} cannot run ({exc}): {_INSTALL}")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return Backend(
            None,
            note=f"bubblewrap at {path} cannot create the sandbox's namespaces here ({said}); "
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "or the AppArmor profile of your distribution), or run the program in a "
            "container that permits them",
        )
    return found


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return 65534, 65534
    return entry.pw_uid, entry.pw_gid


def enforcement(sandbox: SandboxOptions) -> Enforcement:
    """What ``sandbox`` enforces on this machine (see `Enforcement`).

    Raises:
        IsolationUnavailable: ``isolation="require"`` and it cannot isolate here.
    """
    found = backend(sandbox)
    linux = sys.platform.startswith("linux")
    limits = {
        name
        for name, value in (
            ("cpu", sandbox.cpu_seconds),
            ("memory", None if sys.platform == "darwin" else sandbox.memory_bytes),
            ("file_size", sandbox.max_file_bytes),
        )
        if value is not None and hasattr(os, "fork")
    }
    # The kernel exempts root from RLIMIT_NPROC, and elsewhere it counts every process
    # of the user (the runner tops the user's count up on Linux only).
    if sandbox.max_processes is not None and linux and (found.bwrap or os.geteuid() != 0):
        limits.add("processes")
    isolated = found.bwrap is not None
    return Enforcement(
        backend="bubblewrap" if isolated else "process",
        filesystem=isolated,
        network_blocked=isolated and not sandbox.network,
        parent_hidden=isolated,
        kills_every_descendant=isolated or linux,
        limits=frozenset(limits),
        user=found.user[0] if found.user else None,
        note=found.note,
    )


def import_roots(sandbox: SandboxOptions, modules: Iterable[str]) -> list[str]:
    """Directories a call needs to read: the Python installation and import paths.

    They are the interpreter's prefixes, the directories ``modules`` (the tool's
    module and this package) are imported from and, with ``pass_sys_path``,
    every directory on ``sys.path``.
    """
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    for python in (os.path.abspath(sandbox.python), os.path.realpath(sandbox.python)):
        roots.add(os.path.dirname(os.path.dirname(python)))
    if sandbox.pass_sys_path:
        roots.update(os.path.abspath(entry) for entry in sys.path if entry)
    for name in modules:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not path:
            continue
        root = os.path.dirname(os.path.abspath(path))
        depth = name.count(".") + (os.path.basename(path).startswith("__init__."))
        for _ in range(depth):
            root = os.path.dirname(root)
        roots.add(root)
    return sorted(roots)


def bwrap_command(
    found: Backend,
    sandbox: SandboxOptions,
    workdir: str | None,
    roots: Iterable[str],
    command: list[str],
) -> list[str]:
    """The bubblewrap command line that runs ``command`` confined by ``sandbox``.

    Args:
        found: The backend (its ``bwrap`` must be set).
        sandbox: The options (network, extra paths).
        workdir: The call's private directory, bound read-write (None: none).
        roots: Directories bound read-only (see `import_roots`).
        command: What to run inside.
    """
    assert found.bwrap is not None
    args = [found.bwrap, "--die-with-parent", "--new-session", "--as-pid-1"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not sandbox.network:
        args.append("--unshare-net")
    if found.user is not None:  # root: no user namespace (root is exempt from RLIMIT_NPROC)
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--cap-drop", "ALL"]
        if found.disable_userns:
            args.append("--disable-userns")
    writable = [os.fspath(p) for p in sandbox.read_write] + ([workdir] if workdir else [])
    args += _mounts([*roots, *(os.fspath(p) for p in sandbox.read_only)], writable)
    return [*args, "--chdir", "/", "--", *command]


def _mounts(read_only: Iterable[str], read_write: Iterable[str]) -> list[str]:
    links: list[str] = []
    shown: list[str] = []
    for top in _SYSTEM:
        if os.path.islink(top):
            links += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            shown.append(top)
    shown += [os.path.realpath(p) for p in read_only if os.path.exists(p)]
    bound = _outermost(shown)
    writable = sorted({os.path.realpath(p) for p in read_write if os.path.exists(p)})
    etc = [path for path in _ETC if not _under(path, bound)]
    wanted = [*bound, *writable, *etc]
    dirs = {a for path in wanted for a in _ancestors(path) if not _under(a, bound)}
    args = list(links)
    for directory in sorted(dirs, key=lambda d: (d.count("/"), d)):
        args += ["--perms", "0755", "--dir", directory]
    for path in bound:
        args += ["--ro-bind", path, path]
    for path in etc:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for path in writable:
        args += ["--bind", path, path]
    return [*args, "--remount-ro", "/"]


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not _under(path, kept):
            kept.append(path)
    return kept


def _under(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def _ancestors(path: str) -> list[str]:
    found = []
    parent = os.path.dirname(path)
    while parent not in ("/", ""):
        found.append(parent)
        parent = os.path.dirname(parent)
    return found
