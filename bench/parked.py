"""Parked sessions: what a parked session costs in memory, and how fast a message wakes one.

On each anyio backend (asyncio and trio), in one process and one run, with the
embedded SQLite store (``batched`` durability, the default) in a temporary file:

(1) memory: P sessions of an inbox machine are started, 500 at a time, in ten
    waves; each commits its first step and parks (status ``waiting``: no lease,
    no task, no state in memory). Reported per parked session, once all P have
    parked and after a full GC, from the start and past the first wave (the
    marginal cost: what one more parked session adds, once the allocator's
    high-water mark of 500 running sessions is reached):
    - traced Python memory (tracemalloc), for T of them (tracing slows the run);
    - process RSS, for all P, after glibc's ``malloc_trim`` (so freed memory
      the C allocator kept is not counted; the SQLite page cache is).
    Target: <= 1 KB per parked session.
(2) latency: with W sessions parked, S messages are sent one after another to
    sessions picked at random; for each, the time from the call to ``send`` to
    the moment the step applying it is committed (an event listener sees it):
    the message stored, the session woken (leased, loaded, launched), the
    message applied and committed. p50 and p99, and the sends per second.
(3) flood: F messages of 100 KB are posted to one session that applies none
    (``Store.post``, one transaction each); the mean time per post of the first
    and the last F/6, and their ratio. Target: a post costs the same whatever the
    inbox holds (ratio ~1; it was ~3-10 before schema version 8, issue 41 item 11).

Sizes: P=100,000, T=10,000, W=10,000, S=1,000, F=250 (``--quick``: 2,000, 1,000,
500, 100, 60).
Nothing is asserted: the targets are goals, not checks. Run it from the
repository root::

    python bench/parked.py                    # both backends, full size (minutes)
    python bench/parked.py --backend asyncio  # one backend only
    python bench/parked.py --quick            # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import enum
import gc
import logging
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog
from memory import rss as memory_rss
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo.protocols import NewMessage, Receive
from arkhon_rheo.store import SQLiteStore

if TYPE_CHECKING:
    from arkhon_rheo import TransitionEvent


class Phase(enum.Enum):
    NEW = "new"
    WAIT = "wait"
    DONE = "done"
    FAILED = "failed"


class Counter(AgentState):
    lifecycle: Phase = Phase.NEW
    count: int = 0


class Ping(BaseModel):
    n: int


@stage(reads=(), writes={"count"}, next=Phase.WAIT)
async def opened(view: StateView[Counter]) -> Patch:
    return Patch(count=0)


class Listen(Receive[Counter], reads={"count"}, writes={"count"}, accepts=(Ping,)):
    async def apply(self, view: StateView[Counter], message: Ping) -> Patch:
        return Patch(count=view.count + message.n)

    def next(self, state: Counter) -> Phase:
        return Phase.WAIT


MACHINE = Machine(
    name="parked",
    state_type=Counter,
    initial=Phase.NEW,
    transitions={Phase.NEW: {Phase.WAIT}, Phase.WAIT: {Phase.WAIT, Phase.DONE}},
    stages={Phase.NEW: opened, Phase.WAIT: Listen},
    terminal={Phase.DONE, Phase.FAILED},
    failed=Phase.FAILED,
)


@dataclass(frozen=True)
class Sizes:
    parked: int  # sessions parked at once, for RSS
    traced: int  # sessions parked at once, traced
    waiting: int  # sessions parked while messages are sent
    sends: int  # messages sent, one after another
    flood: int = 250  # messages of 100 KB posted to one session


FULL = Sizes(parked=100_000, traced=10_000, waiting=10_000, sends=1_000)
QUICK = Sizes(parked=2_000, traced=1_000, waiting=500, sends=100, flood=60)


def trim() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``), where there is one.

    What the process still holds is then what it uses: freed memory the
    allocator kept (SQLite's, pydantic-core's, the writer thread's arena) is
    not counted as held by the parked sessions.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def rss() -> int:
    """The process's resident set size now, after `trim` (``bench/memory.py``'s reading)."""
    trim()
    return memory_rss()


async def park(system: AgentSystem, count: int, prefix: str) -> None:
    """Start ``count`` sessions, 500 at a time; return once every one has parked."""
    limiter = anyio.Semaphore(500)

    async def one(index: int) -> None:
        async with limiter:
            result = await system.run(MACHINE, Counter(), session_id=f"{prefix}{index}")
            assert result.exit_reason.value == "waiting", result

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)


async def memory(path: Path, sessions: int, *, traced: bool) -> tuple[float, float, int]:
    """Bytes per parked session with ``sessions`` parked (traced, or RSS), the marginal
    bytes per session parked after the first tenth (RSS: past the allocator's high-water
    mark of the first waves), and how many sessions the system still holds in memory."""
    async with AgentSystem(path=path) as system:
        await park(system, 50, "warm-")  # first-use costs (compiled machine, caches) out
        gc.collect()
        if traced:
            tracemalloc.start()

        def now() -> int:
            return tracemalloc.get_traced_memory()[0] if traced else rss()

        before = now()
        tenth = max(1, sessions // 10)
        await park(system, tenth, "p-")
        gc.collect()
        first = now()
        for wave in range(1, 10):
            await park(system, tenth, f"p{wave}-")
        gc.collect()
        after = now()
        if traced:
            tracemalloc.stop()
        held = system.statistics().sessions
    parked = tenth * 10
    return (after - before) / parked, (after - first) / (parked - tenth), held


async def latency(path: Path, sizes: Sizes) -> tuple[list[float], float]:
    """Seconds from ``send`` to the applied step, per message; and the sends per second."""
    applied: dict[str, float] = {}
    done = anyio.Event()

    def listener(event: TransitionEvent) -> None:
        message = (event.info or {}).get("message")
        if message is not None:
            applied[message["id"]] = time.perf_counter()
            done.set()

    rng = random.Random(7)
    took: list[float] = []
    async with AgentSystem(path=path, listeners=[listener]) as system:
        await park(system, sizes.waiting, "w-")
        started = time.perf_counter()
        for index in range(sizes.sends):
            session_id = f"w-{rng.randrange(sizes.waiting)}"
            message_id = f"m-{index}"
            sent_at = time.perf_counter()
            sent = await system.send(MACHINE, session_id, Ping(n=1), message_id=message_id)
            while message_id not in applied:
                done = anyio.Event()
                await done.wait()
            took.append(applied[message_id] - sent_at)
            if sent.handle is not None:
                await sent.handle.result()  # parked again before the next send
        elapsed = time.perf_counter() - started
    return took, sizes.sends / elapsed


async def flood(path: Path, count: int) -> tuple[float, float]:
    """Mean seconds per post of the first and the last sixth of ``count`` 100 KB posts."""
    body = {"text": "x" * 100_000}
    took: list[float] = []
    async with SQLiteStore(path) as store:
        await store.create_session("flooded", machine="m", snapshot={})
        for index in range(count):
            message = NewMessage(f"f-{index}", "Ping", body, 0.0)
            started = time.perf_counter()
            await store.post("flooded", message, capacity=count)
            took.append(time.perf_counter() - started)
    share = max(1, count // 6)
    return statistics.fmean(took[:share]), statistics.fmean(took[-share:])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def run_backend(sizes: Sizes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        per_traced, marginal, held = await memory(folder / "traced.db", sizes.traced, traced=True)
        print(
            f"  (1) traced Python memory per parked session ({sizes.traced:,} parked): "
            f"{per_traced:,.0f} B, {marginal:,.0f} B past the first tenth   "
            f"(sessions held in memory: {held})   target <= 1,024 B"
        )
        per_rss, marginal, held = await memory(folder / "rss.db", sizes.parked, traced=False)
        print(
            f"  (1) RSS per parked session ({sizes.parked:,} parked): {per_rss:,.0f} B, "
            f"{marginal:,.0f} B past the first tenth   (sessions held in memory: {held})"
        )
        took, rate = await latency(folder / "latency.db", sizes)
        print(
            f"  (2) send -> applied, {sizes.waiting:,} parked, {sizes.sends:,} sends: "
            f"p50 {percentile(took, 0.5) * 1000:.2f} ms, "
            f"p99 {percentile(took, 0.99) * 1000:.2f} ms, "
            f"mean {statistics.fmean(took) * 1000:.2f} ms, {rate:,.0f} sends/s"
        )
        first, last = await flood(folder / "flood.db", sizes.flood)
        print(
            f"  (3) flood, {sizes.flood} posts of 100 KB to one session, per post: "
            f"first {max(1, sizes.flood // 6)} {first * 1000:.2f} ms, "
            f"last {max(1, sizes.flood // 6)} {last * 1000:.2f} ms, "
            f"ratio {last / first:.2f}   target ~1"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), action="append")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    print(f"python {sys.version.split()[0]}, {'quick' if args.quick else 'full'} sizes")
    for backend in args.backend or ("asyncio", "trio"):
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, backend=backend)


if __name__ == "__main__":
    main()
