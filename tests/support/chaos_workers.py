"""The workers' chaos harness: worker processes killed and paused at random while sessions run.

`run_chaos` submits ``sessions`` sessions of the counting machine
(`tests.support.work_machine`; each counts to 3, then waits for a ``Poke``
the harness sends and a ``Tick`` timer of its own), starts ``workers`` worker
processes (`tests/support/worker_child.py`) on the same store, and until
every session has ended: SIGKILLs a random worker (and starts another in its
place) ``kills`` times, and SIGSTOPs one for ``pause_for`` seconds then
SIGCONTs it ``pauses`` times. Then it drains the workers with SIGTERM and
checks, from the store: every session finished; no commit acknowledged to a
worker (each one's event listener appends it to a file the moment it is
called) is missing from the store; no step was committed twice (each
session's ``n`` is written once per value, its messages applied once each);
no commit of a stale lease holder was accepted: along each session's history
the fencing tokens its acknowledged commits carried never go down (a commit
under a token older than one already committed would be a holder's that
another had replaced; PostgreSQL's tokens: the other stores record none), and
none is newer than the session's lease token in the store. The workers' logs
tell how many appends were refused (``LeaseLost``) and how many leases a
renewal found taken, and whether a worker that was paused found its sessions
taken when it woke (`ChaosReport.paused_lost`). Every start, kill, pause and
wake of a worker is a line of ``actions.log`` beside the workers' logs (time,
what, pid; a pause, how many leases it held): with a failure's kept files, the
chaos each session met can be read against its history.

The store is a parameter: `open_store` turns a spec into a store, the one
place to teach another kind of store (an SQLite path or a PostgreSQL URL).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from arkhon_rheo import AgentSystem, SQLiteStore
from tests.support.work_machine import COUNTER, Counting, Poke, check_history

if TYPE_CHECKING:
    from collections.abc import Callable

    from arkhon_rheo import TransitionEvent
    from arkhon_rheo.protocols import LeaseRecord, Store

__all__ = ["ChaosReport", "ack_line", "keep", "open_store", "run_chaos"]

CHILD = Path(__file__).resolve().parent / "worker_child.py"
ROOT = str(Path(__file__).resolve().parents[2])
ENDED = {"finished", "failed", "max_steps", "aborted", "cancelled", "crashed"}


def open_store(spec: str, *, paused: bool = True) -> Any:
    """The (not yet entered) store a spec names: a ``postgresql://`` URL, or an SQLite file path.

    ``paused``: for a worker, which the harness pauses (see below); the harness's
    own store is never paused.
    """
    if spec.startswith(("postgresql://", "postgres://")):
        from arkhon_rheo.store import PostgresStore

        # A worker paused inside a transaction holds its row locks until PostgreSQL
        # ends it: within the pause, so that the others can take its sessions over.
        # The harness's own transactions get the default: on a loaded machine, one of
        # its batches may wait a second for CPU, and must not be ended for it.
        return PostgresStore(spec, transaction_idle_timeout=1.0 if paused else 5.0)
    return SQLiteStore(spec)


def ack_line(event: TransitionEvent) -> str:
    """One acknowledged commit, as a line: ``session seq kind stage n``."""
    n = event.patch.values.get("n", "-") if event.patch is not None else "-"
    return f"{event.session_id} {event.seq} {event.kind.value} {event.stage} {n}\n"


@dataclass
class ChaosReport:
    """What a chaos run did and found."""

    sessions: int = 0
    finished: int = 0
    kills: int = 0
    pauses: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    takeovers: int = 0
    seconds: float = 0.0
    #: Commits accepted under a token older than one the session committed before.
    stale: list[str] = field(default_factory=list)
    #: Acknowledged commits whose fencing token was checked.
    fenced: int = 0
    #: Appends refused with ``LeaseLost``, and leases a renewal found taken (from the logs).
    refused: int = 0
    renewals_lost: int = 0
    #: The paused workers that, woken, found sessions of theirs taken.
    paused_lost: int = 0
    #: The sessions that ended otherwise than finished: id, status, the error type their
    #: histories end on (``PoisonSession``: claimed too often without a commit; their histories
    #: are in ``unfinished.txt`` beside the workers' logs).
    unfinished: list[str] = field(default_factory=list)


class _Workers:
    """The worker processes, started, killed, paused and drained."""

    def __init__(self, spec: str, acks: Path, ttl: float, concurrency: int) -> None:
        self.spec, self.acks, self.ttl, self.concurrency = spec, acks, ttl, concurrency
        self.live: list[subprocess.Popen[bytes]] = []
        self.dead: list[subprocess.Popen[bytes]] = []
        self.logs = acks.parent / "worker-logs"
        self.logs.mkdir(exist_ok=True)
        self.outs: dict[int, Path] = {}
        self.paused: set[int] = set()  # ever paused
        self.stopped: set[int] = set()  # paused now
        #: What the harness did to which worker, when: one line each (kept with a failure).
        self.actions = acks.parent / "actions.log"

    def note(self, action: str, pid: int, held: int | None = None) -> None:
        """Append ``TIME ACTION PID [HELD]`` to the actions' log (``held``: leases it held)."""
        with self.actions.open("a") as out:
            out.write(f"{time.time():.3f} {action} {pid}{'' if held is None else f' {held}'}\n")

    def start(self) -> None:
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
        log = self.logs / f"{len(self.live) + len(self.dead)}.out"
        out = open(log, "wb")  # noqa: SIM115
        command = [sys.executable, str(CHILD), self.spec, str(self.acks)]
        command += [str(self.ttl), str(self.concurrency)]
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": path}
        )
        out.close()
        self.live.append(process)
        self.outs[process.pid] = log
        self.note("start", process.pid)

    def kill(self, rng: random.Random) -> None:
        # Not one paused now: it is to wake and find its sessions taken.
        awake = [p for p in self.live if p.pid not in self.stopped] or self.live
        process = rng.choice(awake)
        self.live.remove(process)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.note("kill", process.pid)
        self.dead.append(process)
        self.start()

    def ready(self) -> bool:
        """Whether every live worker is ready (a start takes a while on a busy machine)."""
        return all(b"ready" in self.outs[process.pid].read_bytes() for process in self.live)

    async def holding(self, store: Store) -> list[subprocess.Popen[bytes]]:
        """The awake workers that hold leases now (a lease owner names its pid)."""
        owners = {lease.owner.split("/")[1] for lease in await store.leases()}
        return [p for p in self.live if p.pid not in self.stopped and str(p.pid) in owners]

    async def pause(self, rng: random.Random, seconds: float, store: Store) -> None:
        # One that holds sessions now (waited for a while), so that it has some to lose.
        busy: list[subprocess.Popen[bytes]] = []
        with anyio.move_on_after(10):
            while not (busy := await self.holding(store)):  # noqa: ASYNC110 - another process's
                await anyio.sleep(0.02)
        process = rng.choice(busy or self.live)
        mine = {lease.session_id for lease in await store.leases() if _pid(lease) == process.pid}
        self.paused.add(process.pid)
        self.stopped.add(process.pid)
        process.send_signal(signal.SIGSTOP)
        self.note("pause", process.pid, len(mine))
        try:
            await anyio.sleep(seconds)
            if self.spec.startswith("postgresql://"):
                # And on until another worker has taken one of its sessions over (on a
                # busy machine the worker started after a kill may take seconds to be
                # ready), so that it wakes to find them taken. (On SQLite a worker
                # paused in a write transaction holds the file: nobody takes anything.)
                with anyio.move_on_after(30):
                    while mine and not await self.taken(store, process.pid, mine):  # noqa: ASYNC110 - another process's
                        await anyio.sleep(0.05)
        finally:
            process.send_signal(signal.SIGCONT)
            self.stopped.discard(process.pid)
            self.note("wake", process.pid)

    async def taken(self, store: Store, pid: int, sessions: set[str]) -> bool:
        """Whether another process holds the lease of one of ``sessions`` now."""
        return any(
            lease.session_id in sessions and _pid(lease) != pid for lease in await store.leases()
        )

    def lease_losses(self, report: ChaosReport) -> None:
        """Count the leases lost in the workers' logs, and the paused workers that lost some."""
        for pid, log in self.outs.items():
            lines = [line for line in log.read_text().splitlines() if "session_lease_lost" in line]
            renewals = sum("'renewal'" in line for line in lines)
            report.renewals_lost += renewals
            report.refused += len(lines) - renewals
            report.paused_lost += pid in self.paused and bool(lines)

    def output(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.logs.iterdir()))

    async def drain(self) -> list[int | None]:
        def ready(process: subprocess.Popen[bytes]) -> bool:
            return b"ready" in self.outs[process.pid].read_bytes() or process.poll() is not None

        # Ready (its SIGTERM handler in place) before it is told, or it dies unclean.
        await _eventually(lambda: all(map(ready, self.live)))
        for process in self.live:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
        await _eventually(lambda: all(process.poll() is not None for process in self.live))
        return [process.returncode for process in self.live]


def _pid(lease: LeaseRecord) -> int | None:
    """The process id a worker's lease owner names (``host/pid/...``), if it names one."""
    parts = lease.owner.split("/")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


async def _eventually(check: Callable[[], bool], limit: float = 60.0) -> None:
    """Wait until ``check()`` holds, looking every 50 ms (a hung child fails after ``limit``)."""
    with anyio.fail_after(limit):
        while True:
            if check():
                return
            await anyio.sleep(0.05)


def _why(history: list[TransitionEvent]) -> str:
    """The error type a session's history ends on (``PoisonSession``, say), or ``-``."""
    last = history[-1] if history else None
    return last.error.error_type if last is not None and last.error is not None else "-"


async def _statuses(store: Store, ids: list[str]) -> dict[str, str]:
    wanted = set(ids)
    return {r.session_id: r.status for r in await store.sessions() if r.session_id in wanted}


async def _poke_all(system: AgentSystem, ids: list[str], rng: random.Random) -> None:
    for sid in rng.sample(ids, len(ids)):
        await system.send(COUNTER, sid, Poke(text="poke"), message_id=f"poke-{sid}", drive=False)
        if rng.random() < 0.05:
            await anyio.sleep(rng.random() * 0.05)


async def _chaos(
    store: Store,
    workers: _Workers,
    rng: random.Random,
    kills: int,
    pauses: int,
    pause_for: float,
    report: ChaosReport,
    in_order: bool,
) -> None:
    actions = ["pause"] * pauses + ["kill"] * kills
    if not in_order:
        rng.shuffle(actions)
    async with anyio.create_task_group() as group:
        for action in actions:
            await _eventually(workers.ready)
            await anyio.sleep(0.2 + rng.random() * 0.6)
            if action == "kill":
                workers.kill(rng)
                report.kills += 1
            else:
                group.start_soon(workers.pause, rng, pause_for, store)
                report.pauses += 1


def _check_acks(
    acks: Path,
    histories: dict[str, list[TransitionEvent]],
    tokens: dict[str, int],
    report: ChaosReport,
) -> None:
    seen: dict[tuple[str, int], str] = {}
    fenced: dict[str, list[tuple[int, int]]] = {}
    for log in acks.iterdir():
        for line in log.read_text().splitlines():
            token, line = line.split(" ", 1)
            sid, seq, rest = line.split(" ", 2)
            report.acknowledged += 1
            key = (sid, int(seq))
            if seen.setdefault(key, rest) != rest:
                report.doubled.append(f"{sid}#{seq} acknowledged as {seen[key]!r} and {rest!r}")
            history = histories.get(sid, [])
            stored = ack_line(history[int(seq) - 1]) if int(seq) <= len(history) else None
            if stored != line + "\n":
                report.lost.append(f"{line!r} acknowledged, stored {stored!r}")
            if token != "-":
                fenced.setdefault(sid, []).append((int(seq), int(token)))
    for sid, commits in fenced.items():
        report.fenced += len(commits)
        newest = 0
        for number, under in sorted(commits):
            if under < newest or under > tokens.get(sid, 0):
                report.stale.append(f"{sid}#{number} committed under token {under} after {newest}")
            newest = max(newest, under)


def _write_unfinished(
    path: Path, report: ChaosReport, histories: dict[str, list[TransitionEvent]]
) -> None:
    """Write each unfinished session's status and history, one event a line, to ``path``."""
    with path.open("w") as out:
        for entry in report.unfinished:
            out.write(f"=== {entry}\n")
            for event in histories.get(entry.split(" ", 1)[0], []):
                out.write(f"{event!r}\n")


def keep(tmp: Path) -> Path:
    """Copy a failed run's files (workers' logs, acks, unfinished histories) out of pytest's tmp.

    pytest keeps only its last few temporary directories: a failure's logs would be
    gone by the time anyone looks. Returns the copy, ``/tmp/chaos-fail-<pid>-<n>``.
    """
    import shutil
    import tempfile

    for n in itertools.count():
        kept = Path(tempfile.gettempdir()) / f"chaos-fail-{os.getpid()}-{n}"
        if not kept.exists():
            shutil.copytree(tmp, kept)
            return kept
    raise AssertionError("unreachable")  # pragma: no cover


async def _lease_tokens(spec: str) -> dict[str, int]:
    """Each session's lease token in the store (PostgreSQL's: the others keep none)."""
    if not spec.startswith(("postgresql://", "postgres://")):
        return {}
    import psycopg

    def read() -> dict[str, int]:  # psycopg's async connection is asyncio's: a thread for trio
        with psycopg.connect(spec) as connection:
            rows = connection.execute("SELECT session_id, token FROM arkhon_rheo.leases")
            return dict(rows.fetchall())

    return await anyio.to_thread.run_sync(read)


async def run_chaos(
    spec: str,
    tmp: Path,
    *,
    workers: int = 4,
    sessions: int = 1000,
    kills: int = 10,
    pauses: int = 10,
    lease_ttl: float = 2.0,
    pause_for: float | None = None,
    concurrency: int = 64,
    step_for: float = 0.0,
    pauses_first: bool = False,
    seed: int = 0,
    limit: float = 900.0,
) -> ChaosReport:
    """Run the chaos described in the module docstring on the store ``spec`` names.

    ``pause_for`` defaults to a quarter of ``lease_ttl`` (a paused worker keeps
    its leases); past ``lease_ttl``, its sessions go to other workers, and it
    must find them taken when it wakes (the store's fencing). Each ``count``
    step of a session takes ``step_for`` seconds. The kills and pauses come in
    a random order, or the pauses first with ``pauses_first``.
    """
    rng = random.Random(seed)
    report = ChaosReport(sessions=sessions)
    acks = tmp / "acks"
    acks.mkdir()
    pool = _Workers(spec, acks, lease_ttl, concurrency)
    began = time.perf_counter()
    ids = [f"c{n:05d}" for n in range(sessions)]
    try:
        async with open_store(spec, paused=False) as store, AgentSystem(store=store) as service:
            for _ in range(workers):
                pool.start()
            for sid in ids:
                state = Counting(
                    target=3, wait_for=2, timer_after=rng.random() * 0.5, step_for=step_for
                )
                await service.submit(COUNTER, state, session_id=sid)
            with anyio.fail_after(limit):
                async with anyio.create_task_group() as group:
                    group.start_soon(_poke_all, service, ids, rng)
                    group.start_soon(
                        _chaos,
                        store,
                        pool,
                        rng,
                        kills,
                        pauses,
                        pause_for or lease_ttl / 4,
                        report,
                        pauses_first,
                    )
                    while True:
                        if all(s in ENDED for s in (await _statuses(store, ids)).values()):
                            break
                        await anyio.sleep(0.1)
                    group.cancel_scope.cancel()
            codes = await pool.drain()
            assert codes == [0] * len(codes), f"workers' exit codes {codes}\n{pool.output()}"
            report.seconds = time.perf_counter() - began
            histories = {}
            for sid in ids:
                stored = service.stored(COUNTER, sid)
                status = (await stored.record()).status
                history = histories[sid] = await stored.history()
                if status == "finished":
                    report.finished += 1
                else:
                    report.unfinished.append(f"{sid} {status} {_why(history)}")
                report.takeovers += sum(1 for e in history if e.kind.value == "resume") - 1
                try:
                    check_history(history, await stored.state())
                except AssertionError as exc:
                    report.doubled.append(f"{sid}: {exc}")
            _check_acks(acks, histories, await _lease_tokens(spec), report)
            pool.lease_losses(report)
            _write_unfinished(tmp / "unfinished.txt", report, histories)
    finally:
        for process in pool.live:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait()
    return report
