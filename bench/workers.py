"""Workers on PostgreSQL: 1, 2 and 4 worker processes against one server, beside SQLite.

The workload is an agent loop of two durable steps per cycle (``think`` then
``act``, each committing one event), C cycles per session, S sessions at once.

- **SQLite, one process**: an `AgentSystem` on an SQLite file (``batched``
  durability, the default) starts the S sessions itself and drives them.
- **PostgreSQL, N workers**: N ``Worker`` processes (this file run with
  ``--child``) on one `PostgresStore` (``batched``) wait, ready; then this
  process submits the S sessions (`AgentSystem.submit`, all at once) and the
  workers claim and drive them (each with ``concurrency`` ceil(S / N), so each
  takes its share). N = 1, 2 and 4.

For each: cycles/s (S x C cycles over the time from the first start or submit
to the last commit) and the step latency, p50 and p99 (the time from one commit
of a session to its next one, as the driving process sees them: the step and
its group commit, queueing included), and the CPU time per cycle of the driving
processes (and, for a throwaway server on Linux, of PostgreSQL's processes): on a
machine shared with other work, CPU time moves less than wall time. The
scaling efficiency is the cycles/s of 4 workers over 1 worker's. Targets: one
worker on PostgreSQL >= 50% of one process on SQLite ``batched``; 4 workers >=
3x one worker on a machine of 4+ cores (each worker process is one core's worth
of Python; PostgreSQL needs cores of its own).

The PostgreSQL server is a throwaway one started from the system's binaries
(`arkhon_rheo.testing.start_postgres`), or the one ``--url`` names (a fresh
schema each run). Sizes: S=1,000, C=10 (``--quick``: S=200, C=3, N=1 and 2).
Nothing is asserted: the targets are goals, not checks. Run it from the
repository root::

    python bench/workers.py            # full size (a minute or two)
    python bench/workers.py --quick    # small sizes (seconds)
    python bench/workers.py --url postgresql://user:pw@host/db
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, SQLiteStore, StateView, stage
from arkhon_rheo.store import PostgresStore
from arkhon_rheo.system import Worker

if TYPE_CHECKING:
    from arkhon_rheo import TransitionEvent

ROOT = Path(__file__).resolve().parents[1]


class Phase(enum.Enum):
    THINK = "think"
    ACT = "act"
    DONE = "done"
    FAILED = "failed"


class Loop(AgentState):
    lifecycle: Phase = Phase.THINK
    cycles: int = 1
    done: int = 0
    thought: str = ""


@stage(reads={"done"}, writes={"thought"}, next=Phase.ACT)
async def think(view: StateView[Loop]) -> Patch:
    return Patch(thought=f"step {view.done}")


def _after_act(state: Loop) -> Phase:
    return Phase.THINK if state.done < state.cycles else Phase.DONE


@stage(reads={"done"}, writes={"done"}, next=_after_act)
async def act(view: StateView[Loop]) -> Patch:
    return Patch(done=view.done + 1)


LOOP = Machine(
    name="bench-loop",
    state_type=Loop,
    initial=Phase.THINK,
    transitions={Phase.THINK: {Phase.ACT}, Phase.ACT: {Phase.THINK, Phase.DONE}},
    stages={Phase.THINK: think, Phase.ACT: act},
    terminal={Phase.DONE, Phase.FAILED},
    failed=Phase.FAILED,
)


@dataclass
class Timings:
    """What one driving process saw: step latencies, and its last commit's time."""

    latencies: list[float] = field(default_factory=list)
    last: float = 0.0
    _previous: dict[str, float] = field(default_factory=dict)

    def __call__(self, event: TransitionEvent) -> None:
        now = time.time()
        previous = self._previous.get(event.session_id)
        if previous is not None and event.kind.value == "step":
            self.latencies.append(now - previous)
        self._previous[event.session_id] = now
        self.last = now


@dataclass
class Result:
    label: str
    cycles: int
    seconds: float
    latencies: list[float]
    #: CPU seconds of the driving processes (SQLite: the one process; else the workers).
    cpu: float = math.nan
    #: CPU seconds of the PostgreSQL server's processes, where they can be read.
    server_cpu: float = math.nan

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds

    def line(self) -> str:
        ordered = sorted(self.latencies) or [math.nan]
        p50 = statistics.median(ordered)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        per = 1000 / self.cycles
        server = "" if math.isnan(self.server_cpu) else f" + server {self.server_cpu * per:.2f}"
        return (
            f"{self.label:<28} {self.rate:>9.1f} cycles/s   "
            f"step p50 {p50 * 1000:>7.1f} ms   p99 {p99 * 1000:>7.1f} ms   "
            f"CPU ms/cycle {self.cpu * per:.2f}{server}"
        )


def _server_cpu(root: Path | None) -> float:
    """CPU seconds used so far by the PostgreSQL server whose data folder is under ``root``.

    Read from Linux's ``/proc`` (the postmaster and its children); NaN elsewhere.
    """
    if root is None:
        return math.nan
    try:
        postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
        ticks = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(stat.parent.name) == postmaster or int(fields[1]) == postmaster:
                    ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


# -- one process on SQLite ------------------------------------------------------------


async def _sqlite(sessions: int, cycles: int) -> Result:
    timings = Timings()
    cpu = time.process_time()
    with tempfile.TemporaryDirectory() as folder:
        async with (
            SQLiteStore(Path(folder) / "bench.db") as store,
            AgentSystem(store=store, listeners=[timings]) as system,
        ):
            began = time.time()
            handles = [
                await system.start(LOOP, Loop(cycles=cycles), session_id=f"s{n}")
                for n in range(sessions)
            ]
            for handle in handles:
                await handle.result()
            cpu = time.process_time() - cpu
    return Result("SQLite batched, 1 process", sessions * cycles, timings.last - began,
                  timings.latencies, cpu)  # fmt: skip


# -- worker processes on PostgreSQL -----------------------------------------------------


async def _child(url: str, schema: str, concurrency: int, out: str) -> None:
    """A worker process: drive sessions until SIGTERM, then write its timings to ``out``."""
    timings = Timings()
    async with PostgresStore(url, schema=schema) as store:
        worker = Worker(
            store, [LOOP], concurrency=concurrency, poll_interval=1.0, listeners=[timings]
        )
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGTERM) as received:

                async def drain() -> None:
                    async for _ in received:
                        worker.drain()

                group.start_soon(drain)
                print("ready", flush=True)
                cpu = time.process_time()
                await worker.run()
                cpu = time.process_time() - cpu
                group.cancel_scope.cancel()
    found = json.dumps({"latencies": timings.latencies, "last": timings.last, "cpu": cpu})
    await anyio.Path(out).write_text(found)


def _start(url: str, schema: str, concurrency: int, out: Path) -> subprocess.Popen[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, __file__, "--child", url, schema, str(concurrency), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


async def _submit(service: AgentSystem, n: int, cycles: int) -> None:
    await service.submit(LOOP, Loop(cycles=cycles), session_id=f"s{n}")


async def _until_ended(store: PostgresStore, ids: set[str]) -> None:
    """Return once every session of ``ids`` has finished.

    One record at a time (the newest unfinished one: it ends last), never every
    session's each poll: this process shares the cores with the workers and
    PostgreSQL, and reading and decoding 1,000 records twenty times a second
    would take a good part of one from them.
    """
    left = sorted(ids, key=lambda sid: int(sid[1:]))
    while left:
        if (await store.record(left[-1])).status == "finished":
            left.pop()
        else:
            await anyio.sleep(0.05)


async def _postgres(
    url: str, workers: int, sessions: int, cycles: int, root: Path | None = None
) -> Result:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as folder:
        outs = [Path(folder) / f"w{n}.json" for n in range(workers)]
        async with PostgresStore(url, schema=schema) as store:
            share = -(-sessions // workers)
            processes = [_start(url, schema, share, out) for out in outs]
            try:
                for process in processes:
                    assert process.stdout is not None
                    await anyio.to_thread.run_sync(process.stdout.readline)  # "ready"
                async with AgentSystem(store=store) as service:
                    server_cpu = _server_cpu(root)
                    began = time.time()
                    async with anyio.create_task_group() as group:
                        for n in range(sessions):
                            group.start_soon(_submit, service, n, cycles)
                    await _until_ended(store, {f"s{n}" for n in range(sessions)})
                    server_cpu = _server_cpu(root) - server_cpu
            finally:
                for process in processes:
                    process.send_signal(signal.SIGTERM)
                for process in processes:
                    await anyio.to_thread.run_sync(process.wait)
                    assert process.stdout is not None
                    process.stdout.close()
        found = [json.loads(out.read_text()) for out in outs]
    latencies = [x for one in found for x in one["latencies"]]
    last = max(one["last"] for one in found)
    label = f"PostgreSQL, {workers} worker{'s' if workers > 1 else ''}"
    cpu = sum(one["cpu"] for one in found)
    return Result(label, sessions * cycles, last - began, latencies, cpu, server_cpu)


# -- the run ----------------------------------------------------------------------------


def _server(url: str | None) -> tuple[str, Any]:
    if url is not None:
        return url, None
    from arkhon_rheo.testing import find_postgres, start_postgres

    bindir = find_postgres()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries found (install postgresql, or pass --url)")
    server = start_postgres(bindir)
    return server.url, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--url", help="a PostgreSQL server to use (else a throwaway one)")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--cycles", type=int)
    parser.add_argument("--workers", type=int, nargs="+")
    args = parser.parse_args()
    sessions = args.sessions or (200 if args.quick else 1000)
    cycles = args.cycles or (3 if args.quick else 10)
    counts = args.workers or ([1, 2] if args.quick else [1, 2, 4])
    cores = os.cpu_count()
    print(f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}")
    print(f"workload: {sessions} sessions x {cycles} cycles of 2 durable steps")
    url, server = _server(args.url)
    try:
        baseline = anyio.run(_sqlite, sessions, cycles)
        print(baseline.line())
        results = {}
        for workers in counts:
            root = None if server is None else server.root
            results[workers] = anyio.run(_postgres, url, workers, sessions, cycles, root)
            print(results[workers].line())
    finally:
        if server is not None:
            server.stop()
    one = results[counts[0]].rate
    share = one / baseline.rate
    print(f"1 worker on PostgreSQL / 1 process on SQLite: {share:.0%} (target >= 50%)")
    top = counts[-1]
    print(f"scaling: {top} workers / 1 worker: {results[top].rate / one:.2f}x "
          f"(target >= 3x for 4 workers on 4+ cores)")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        anyio.run(_child, sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
