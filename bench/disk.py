"""Bytes on disk of a session whose state grows every step: per event, and the snapshots' share.

One session runs a think -> act -> observe loop whose ``act`` appends a step
(``History[Step]``) and adds to a running total, through `SQLiteStore` with the
default snapshot policy, for 10 and 1,000 cycles (``--quick``: 10 and 200). For
each it prints, once the store is closed: the bytes of the file (with its
``-wal`` and ``-shm``), bytes per event, the bytes of the event and snapshot
tables (SQLite's ``dbstat`` pages, when the build has it) and the snapshots'
share of the file, and how many snapshots were taken.
Target: <= 0.5 MB after 1,000 cycles.

The bench uses only the public API, so the same script measures an older
checkout (``PYTHONPATH=<its worktree> python bench/disk.py``). Both backends run
(``--backend both``, the default); the figures are the same on each.

Run it from the repository root::

    python bench/disk.py            # 10 and 1,000 cycles, asyncio then trio
    python bench/disk.py --quick    # 10 and 200 cycles
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import anyio
import structlog

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.store import SQLiteStore

L = Lifecycle
BACKENDS = ("asyncio", "trio")
FULL = (10, 1_000)
QUICK = (10, 200)
TARGET = 0.5e6


class Step(NamedTuple):
    """One tool call the act stage records."""

    cycle: int
    tool: str
    output: str


class Growing(AgentState):
    """A state that grows every cycle: a list of steps and a running total."""

    lifecycle: Lifecycle = L.THINKING
    user_input: str = "add up the tool's outputs"
    cycles: int = 10
    thought: str | None = None
    observation: str | None = None
    steps: History[Step] = History()
    total: int = 0


def build_machine() -> Machine[Growing]:
    """THINKING -> ACTING -> OBSERVING -> THINKING ... -> FINISHED after ``cycles`` cycles."""

    @stage(reads={"iteration"}, writes={"thought"}, next=L.ACTING)
    async def think(view: StateView[Growing]) -> Patch:
        return Patch(thought=f"call the calculator, cycle {view.iteration}")

    @stage(reads={"iteration", "total"}, writes={"steps", "total"}, next=L.OBSERVING)
    async def act(view: StateView[Growing]) -> Patch:
        output = 6 * 7 + view.iteration
        step = Step(cycle=view.iteration, tool="calculator", output=str(output))
        return Patch(total=view.total + output).append("steps", step)

    @stage(
        reads={"steps"},
        writes={"observation"},
        next=lambda s: L.FINISHED if s.iteration + 1 >= s.cycles else L.THINKING,
    )
    async def observe(view: StateView[Growing]) -> Patch:
        return Patch(observation=f"the calculator said {view.steps[-1].output}")

    return Machine(
        name="bench-disk",
        state_type=Growing,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
    )


@dataclass(frozen=True, slots=True)
class Disk:
    """What one session left on disk."""

    cycles: int
    events: int
    snapshots: int
    #: Bytes of the database, ``-wal`` and ``-shm`` files once closed.
    total: int
    #: Bytes of the pages of the event and snapshot tables (their indexes included),
    #: or ``None`` without ``dbstat``.
    events_bytes: int | None
    snapshot_bytes: int | None
    seconds: float


def table_bytes(db: sqlite3.Connection, table: str) -> int | None:
    """The bytes of ``table``'s pages and its automatic indexes', or None without ``dbstat``."""
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.Error:
        return None
    names = (table, f"sqlite_autoindex_{table}_1")
    return sum(int(size) for name, size in rows if name in names)


async def session(cycles: int) -> Disk:
    """Run one growing session of ``cycles`` cycles in a new file; measure the file."""
    with tempfile.TemporaryDirectory(prefix="arkhon-bench-disk-") as tmp:
        directory = Path(tmp)
        path = directory / "sessions.db"
        started = time.perf_counter()
        async with (
            SQLiteStore(path) as store,
            AgentSystem(store=store, max_steps=3 * cycles + 10) as system,
        ):
            result = await system.run(build_machine(), Growing(cycles=cycles))
        seconds = time.perf_counter() - started
        if result.exit_reason is not ExitReason.FINISHED or len(result.state.steps) != cycles:
            raise RuntimeError(f"the bench session ended {result.exit_reason.value}")
        return measure(cycles, path, seconds)


def measure(cycles: int, path: Path, seconds: float) -> Disk:
    """What the closed store file at ``path`` (and its -wal and -shm files) takes."""
    total = sum(entry.stat().st_size for entry in path.parent.iterdir() if entry.is_file())
    with contextlib.closing(sqlite3.connect(path)) as db:
        (events,) = db.execute("SELECT count(*) FROM events").fetchone()
        (snapshots,) = db.execute("SELECT count(*) FROM snapshots").fetchone()
        events_bytes = table_bytes(db, "events")
        snapshot_bytes = table_bytes(db, "snapshots")
    return Disk(cycles, events, snapshots, total, events_bytes, snapshot_bytes, seconds)


def report(disk: Disk) -> None:
    text = (
        f"      after {disk.cycles:>5,} cycles: {disk.total / 1e6:7.3f} MB total, "
        f"{disk.events:>5,} events, {disk.total / disk.events:6.1f} bytes/event (file)"
    )
    if disk.events_bytes is not None and disk.snapshot_bytes is not None:
        text += (
            f", {disk.events_bytes / disk.events:6.1f} bytes/event (event table), "
            f"snapshot share {disk.snapshot_bytes / disk.total:5.1%}"
        )
    else:
        text += ", table sizes: this SQLite has no dbstat"
    text += f", {disk.snapshots:,} snapshots, {disk.seconds:5.2f} s"
    if disk.cycles == 1_000:
        verdict = "met" if disk.total <= TARGET else "missed"
        text += f"   (target <= {TARGET / 1e6:.1f} MB: {verdict})"
    print(text, flush=True)


async def run_backend(sizes: tuple[int, ...]) -> None:
    print("  one session, state growing by a step and a total every cycle:", flush=True)
    for cycles in sizes:
        report(await session(cycles))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo disk bench (SQLite {sqlite3.sqlite_version})"
        f"{', quick' if args.quick else ''}: one session of "
        f"{' and '.join(f'{n:,}' for n in sizes)} cycles",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
