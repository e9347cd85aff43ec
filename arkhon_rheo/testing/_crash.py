"""`crash_loop`: kill a user's agent with SIGKILL at random commits, resume it, and check.

The parent process never runs the agent. It starts a child process
(``arkhon_rheo.testing._crash_child``) that imports the machine and the
initial-state factory by their ``module:attr`` names and drives its sessions
in a SQLite file; the child reports every commit the store acknowledged over a
pipe. The parent SIGKILLs the child after a seeded number of acknowledged
commits (sometimes at once, sometimes a moment later, sometimes while it is
still loading), then checks the file as the next process will find it:
every acknowledged commit is stored, and ``PRAGMA integrity_check`` says
``ok``. A fresh child resumes the orphaned sessions (and starts a new one, so
there is always work to kill), and so on. After the last kill a child runs
undisturbed until every session has ended, and each session's log is replayed
(`StoredSession.replay`) against what was committed.

POSIX only (it relies on SIGKILL). It is synchronous: call it from a plain
(non-async) test; it runs its own event loops.
"""

from __future__ import annotations

import functools
import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ConfigurationError, CrashRunFailed
from ..protocols import Durability
from ..store import SQLiteStore
from ..system import AgentSystem
from ._crash_child import load_machine, load_state_factory
from ._crash_report import CrashReport, LostCommit

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import Machine
    from ..system import ReplayReport

__all__ = ["crash_loop"]

_CHILD = "arkhon_rheo.testing._crash_child"


@dataclass
class _Loop:
    """One crash loop's settings and what the parent has seen so far."""

    machine: str
    state: str
    db: Path
    settings: dict[str, Any]
    timeout: float
    #: The most acknowledged commits a run may make before its kill.
    most: int
    #: The user's own check of the file, after each run.
    check: Callable[[Path], None] | None
    runs: int = 0
    kills: int = 0
    acknowledged: int = 0
    checks: int = 0

    def __post_init__(self) -> None:
        self.acked: dict[str, int] = {}
        self.lost: dict[str, LostCommit] = {}
        self.integrity: list[str] = []
        self.failed: list[str] = []


class _Child:
    """A running child: its process, its report pipe, and what it said so far."""

    def __init__(self, loop: _Loop, log: Path) -> None:
        read_fd, write_fd = os.pipe()
        settings = {**loop.settings, "db": str(loop.db), "run": loop.runs, "fd": write_fd}
        settings |= {"machine": loop.machine, "state": loop.state}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", _CHILD, json.dumps(settings)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                # SIGKILL goes to the child itself: nothing of it may run on.
                start_new_session=True,
            )
        os.close(write_fd)
        self.fd = read_fd
        self.buffer = b""
        self.lines: list[str] = []
        self.closed = False
        loop.runs += 1

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def read(self, deadline: float) -> bool:
        """Wait for more report lines until ``deadline``; false once the pipe is closed."""
        if self.closed:
            return False
        readable, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            return True
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.closed = True
            return False
        self.buffer += chunk
        *whole, self.buffer = self.buffer.split(b"\n")
        self.lines += [line.decode() for line in whole]
        return True

    def wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Read until ``done()``; false if the pipe closed first.

        Raises:
            CrashRunFailed: If ``timeout`` seconds pass first.
        """
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() >= deadline:
                self.kill()
                raise CrashRunFailed(
                    f"the child made no progress in {timeout} s (its report: {self.lines[-5:]})",
                    self.output(),
                )
            if not self.read(deadline):
                return done()
        return True

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def finish(self, timeout: float) -> None:
        """Read the rest of the report and reap the child."""
        self.wait_for(lambda: self.closed, timeout)
        self.process.wait(timeout=timeout)
        os.close(self.fd)


def _kill_point(rng: random.Random, most: int) -> tuple[int, float]:
    """After how many acknowledged commits of a run to kill, and how long after that.

    Sometimes before the first (0: counted from ``ready``, while the child loads
    and resumes), mostly after 1..``most``, at once or a moment later.
    """
    roll = rng.random()
    if roll < 0.15:
        return 0, rng.uniform(0.0, 0.05)
    commits = rng.randint(1, most)
    if roll < 0.5:
        return commits, 0.0
    return commits, rng.uniform(0.0, 0.01)


def _reached(child: _Child, commits: int) -> bool:
    """Whether the child has acknowledged ``commits`` commits (0: said ``ready``)."""
    if commits == 0:
        return "ready" in child.lines
    return sum(line.startswith("ack ") for line in child.lines) >= commits


def _take_report(loop: _Loop, child: _Child, *, killed: bool) -> None:
    """Fold a finished child's report into the loop; a child's own failure raises."""
    code = child.process.returncode
    if not (killed and code == -signal.SIGKILL) and code != 0:
        raise CrashRunFailed(f"run {loop.runs - 1}: the child exited with {code}", child.output())
    for line in child.lines:
        word, *rest = line.split()
        if word == "ack":
            session_id, seq = rest[0], int(rest[1])
            loop.acked[session_id] = max(loop.acked.get(session_id, 0), seq)
            loop.acknowledged += 1
        elif word == "fail":
            loop.failed.append(" ".join(rest))


async def _stored(db: Path) -> dict[str, int]:
    async with SQLiteStore(db) as store:
        return {record.session_id: record.last_seq for record in await store.sessions()}


def _integrity(db: Path) -> list[str]:
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        connection.close()
    return [] if rows == [("ok",)] else [str(row[0]) for row in rows]


def _check(loop: _Loop) -> None:
    """Check the file as the next process finds it: nothing acknowledged lost, sound."""
    loop.checks += 1
    stored = anyio.run(_stored, loop.db, backend=loop.settings["backend"])
    for session_id, acked in loop.acked.items():
        last = stored.get(session_id)
        if (last is None or last < acked) and session_id not in loop.lost:
            loop.lost[session_id] = LostCommit(session_id, acked, last)
    loop.integrity += [f"after run {loop.runs - 1}: {line}" for line in _integrity(loop.db)]
    if loop.check is not None:
        loop.check(loop.db)


async def _replay_all(
    machine: Machine[Any], db: Path
) -> tuple[dict[str, ReplayReport[Any]], list[str]]:
    async with SQLiteStore(db) as store, AgentSystem(store=store) as system:
        replays: dict[str, ReplayReport[Any]] = {}
        unfinished: list[str] = []
        for record in await store.sessions():
            report = await system.stored(machine, record.session_id).replay()
            replays[record.session_id] = report
            if not machine.is_terminal(report.state.lifecycle):
                unfinished.append(record.session_id)
    return replays, unfinished


def _check_arguments(
    machine: str,
    state: str,
    backend: str,
    kills: int,
    sessions: int,
    new_per_run: int,
    commits_between_kills: int,
) -> Machine[Any]:
    """Refuse what a child would fail on, here: a name that does not resolve, a bad number.

    Returns:
        The machine ``machine`` names.
    """
    if not hasattr(signal, "SIGKILL"):
        raise ConfigurationError("crash_loop needs SIGKILL (POSIX); this platform has none")
    found = load_machine(machine)  # fail here, not in a child
    load_state_factory(state)
    for name, value, least in (
        ("kills", kills, 0),
        ("sessions", sessions, 0),
        ("new_per_run", new_per_run, 0),
        ("commits_between_kills", commits_between_kills, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigurationError(f"{name} must be an integer >= {least}, got {value!r}")
    if sessions + new_per_run == 0:
        raise ConfigurationError("sessions and new_per_run are both 0: there is nothing to run")
    if backend not in ("asyncio", "trio"):
        raise ConfigurationError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
    return found


def _killed_run(loop: _Loop, log: Path, rng: random.Random) -> None:
    """One run: a child SIGKILLed after a seeded number of commits (unless it ends first)."""
    child = _Child(loop, log)
    try:
        commits, delay = _kill_point(rng, loop.most)
        reached = child.wait_for(functools.partial(_reached, child, commits), loop.timeout)
        if reached and delay:
            time.sleep(delay)
        killed = reached and "done" not in child.lines and child.process.poll() is None
        if killed:
            os.kill(child.process.pid, signal.SIGKILL)
            loop.kills += 1
        child.finish(loop.timeout)
    finally:
        if child.process.poll() is None:
            child.kill()
    _take_report(loop, child, killed=killed)
    _check(loop)


def _last_run(loop: _Loop, log: Path) -> None:
    """The last run: a child left undisturbed until every session has ended."""
    child = _Child(loop, log)
    try:
        child.finish(max(loop.timeout, 120.0))
    finally:
        if child.process.poll() is None:
            child.kill()
    _take_report(loop, child, killed=False)
    if "done" not in child.lines:
        raise CrashRunFailed("the last run did not finish its sessions", child.output())
    _check(loop)


def _run_all(loop: _Loop, kills: int, rng: random.Random) -> None:
    """Run children until ``kills`` of them were killed, then the last one undisturbed.

    Raises:
        CrashRunFailed: If too many runs end on their own before their kill.
    """
    with tempfile.TemporaryDirectory(prefix="arkhon-crash-") as logs:
        log = Path(logs) / "child.log"
        while loop.kills < kills:
            if loop.runs >= 3 * kills + 10:
                raise CrashRunFailed(
                    f"the child finished its work before its kill in {loop.runs} runs out of "
                    f"{loop.runs + loop.kills}: give it more work per run (new_per_run, longer "
                    "sessions) or lower commits_between_kills",
                    "",
                )
            _killed_run(loop, log, rng)
        _last_run(loop, log)


def _report(loop: _Loop, machine: Machine[Any]) -> CrashReport:
    """Replay every stored session, and report what the loop found."""
    replays, unfinished = anyio.run(_replay_all, machine, loop.db, backend=loop.settings["backend"])
    return CrashReport(
        kills=loop.kills,
        runs=loop.runs,
        acknowledged=loop.acknowledged,
        lost=tuple(loop.lost.values()),
        integrity=tuple(loop.integrity),
        checks=loop.checks,
        replays=replays,
        unfinished=tuple(unfinished),
        failed=tuple(loop.failed),
    )


def crash_loop(
    machine: str,
    state: str,
    *,
    path: str | os.PathLike[str],
    kills: int = 10,
    sessions: int = 4,
    new_per_run: int = 1,
    seed: int = 0,
    backend: str = "asyncio",
    durability: Durability = Durability.SYNC,
    commits_between_kills: int = 20,
    lease_ttl: float = 0.3,
    snapshot_every: int = 3,
    max_steps: int = 100,
    timeout: float = 60.0,
    check: Callable[[Path], None] | None = None,
) -> CrashReport:
    """Run a machine's sessions in child processes, SIGKILL them ``kills`` times, and check.

    Each run starts a fresh child that resumes every session the last one left
    running and starts ``sessions`` sessions the first time (ids ``s0000``...)
    plus ``new_per_run`` new ones (``r<run>-<i>``) every time. The parent kills
    it after a seeded number (up to ``commits_between_kills``) of commits the
    store acknowledged. After each run it checks the file: every commit the
    child was told is stored is there (else `CrashReport.lost`), and
    ``PRAGMA integrity_check`` says ``ok``; then ``check(path)`` runs, if given.
    A last child runs undisturbed until all sessions end; each is replayed.

    The same ``seed`` gives the same kill schedule (where exactly a kill lands
    depends on timing). The children seed `random` with ``seed`` and their run
    number, so a machine drawing from it behaves the same for the same run.

    Args:
        machine: ``"module:attr"`` naming your `Machine`, or a function that
            returns one; the module must be importable in a fresh process.
        state: ``"module:attr"`` naming a function (or a state class) that
            returns a fresh initial state.
        path: The SQLite file (created; an existing one is continued).
        kills: How many times to kill a running child.
        sessions: Sessions started by the first run.
        new_per_run: Sessions each run starts besides, so there is always work.
        seed: Seeds the kill schedule.
        backend: ``"asyncio"`` or ``"trio"``: what the children run on.
        durability: The store's durability mode in the children.
        commits_between_kills: The most acknowledged commits a run may make
            before its kill.
        lease_ttl: The children's lease time-to-live, in seconds.
        snapshot_every: The children's snapshot interval, in events.
        max_steps: The step budget of each session (per run).
        timeout: Seconds a child may go without progress before the loop fails.
        check: Your own check of the file, called with ``path`` after each run.

    Returns:
        The report; ``report.ok`` says whether all went well, ``report.summary()``
            what did not.

    Raises:
        ConfigurationError: If a name does not resolve, or a number is out of range.
        CrashRunFailed: If a child fails on its own (not by the kill), hangs,
            or keeps finishing before its kill.
    """
    found = _check_arguments(
        machine, state, backend, kills, sessions, new_per_run, commits_between_kills
    )
    settings = {
        "seed": seed,
        "backend": backend,
        "durability": Durability(durability).value,
        "sessions": sessions,
        "new_per_run": new_per_run,
        "lease_ttl": lease_ttl,
        "snapshot_every": snapshot_every,
        "max_steps": max_steps,
    }
    loop = _Loop(machine, state, Path(path), settings, timeout, commits_between_kills, check)
    _run_all(loop, kills, random.Random(seed))
    return _report(loop, found)
