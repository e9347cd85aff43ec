"""A throwaway PostgreSQL server for tests and benches, started from the system's binaries.

`start_postgres` runs ``initdb`` and ``pg_ctl`` (as the ``postgres`` user when
run as root: PostgreSQL refuses to run as root) on a data directory in a
temporary folder, listening on 127.0.0.1 on a free port and on a unix socket
in that folder. `find_postgres` looks for the binaries (``pg_config
--bindir``, ``/usr/lib/postgresql/*/bin``, ``PATH``); without them the tests
that need PostgreSQL skip, saying so (``.ci/run`` installs ``postgresql``).
The library's tests, its benches (``bench/workers.py``) and a third-party
store's `StoreConformance` tests use the same one.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres", "start_postgres"]


def find_postgres() -> str | None:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``."""
    candidates: list[str] = []
    if shutil.which("pg_config"):
        try:
            out = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates += sorted(glob.glob("/usr/local/pgsql/bin"))
    if found := shutil.which("initdb"):
        candidates.append(os.path.dirname(found))
    for folder in candidates:
        if all(os.access(os.path.join(folder, name), os.X_OK) for name in ("initdb", "pg_ctl")):
            return folder
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """A running throwaway server: its URL, and how to stop it (`stop`).

    Attributes:
        bindir: The folder of the binaries it runs from.
        root: Its temporary folder (data, log, socket), removed by `stop`.
        port: The TCP port it listens on, on 127.0.0.1.
        prefix: The command prefix that runs its binaries (``runuser`` as root).
    """

    bindir: str
    root: Path
    port: int
    prefix: list[str]

    @property
    def url(self) -> str:
        """The URL of its ``postgres`` database, as the ``postgres`` superuser (password ``pw``)."""
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        """The URL of ``database`` on this server."""
        return f"postgresql://postgres:pw@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Stop the server (immediate: it is thrown away) and remove its folder."""
        try:
            subprocess.run(
                [
                    *self.prefix,
                    f"{self.bindir}/pg_ctl",
                    "-D",
                    str(self.root / "data"),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:  # gone astray: stop its postmaster by its pid
            pid = (self.root / "data" / "postmaster.pid").read_text().split()[0]
            os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(bindir: str) -> PostgresServer:
    """Initialise and start a server from ``bindir`` in a new temporary folder.

    Args:
        bindir: The folder of ``initdb`` and ``pg_ctl`` (see `find_postgres`).

    Raises:
        RuntimeError: It could not be started (with its log).
    """
    root = Path(tempfile.mkdtemp(prefix="arkhon-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses root: run it as the postgres user
        shutil.chown(root, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    root.chmod(0o700)
    pwfile = root / "pw"
    pwfile.write_text("pw\n")
    if prefix:
        shutil.chown(pwfile, "postgres", "postgres")
    port = _free_port()
    run = {"capture_output": True, "text": True, "timeout": 120, "check": False}
    init = subprocess.run(
        [
            *prefix,
            f"{bindir}/initdb",
            "-D",
            str(root / "data"),
            "-U",
            "postgres",
            f"--pwfile={pwfile}",
            "-A",
            "scram-sha-256",
            "--no-sync",
        ],
        **run,  # type: ignore[call-overload]
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root}"
    start = subprocess.run(
        [
            *prefix,
            f"{bindir}/pg_ctl",
            "-D",
            str(root / "data"),
            "-o",
            options,
            "-l",
            str(root / "log"),
            "-w",
            "start",
        ],
        **run,  # type: ignore[call-overload]
    )
    if start.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {start.stdout}{start.stderr}{log}")
    return PostgresServer(bindir, root, port, prefix)
