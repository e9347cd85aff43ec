"""Memory of supervised sessions: per live session as history grows, per ended session, RSS.

On each anyio backend (asyncio and trio), in one process and one run, it measures:

(1) live: M sessions of a counting machine (one field, an int: the state does not
    grow) each park in their stage after 10 steps, then M others after 10,000
    (``--quick``: 1,000); traced memory (tracemalloc) with all M parked, minus the
    traced memory before they started, divided by M. With a SQLite store the
    store is the log, so the two figures should match; without a store the log
    is the session's only record and grows with it (shown for contrast).
    Target: with a store, no growth from 10 to 10,000 steps.
(2) ended: K short sessions run to their end through one system and their handles
    dropped; traced memory after minus before (after a warm-up round), divided
    by K: what the system still holds per ended session. Target <= 1 KB.
(3) RSS: 100,000 short sessions (``--quick``: 2,000) through one `AgentSystem`, in
    waves of 100 at once; the process RSS (after a full GC) once 10,000
    (``--quick``: 200) have ended and at the end, and their ratio. Target: the end
    within 10% of the 10,000 mark.

Nothing is asserted: the targets are goals, not checks. Run it from the repository
root::

    python bench/memory.py                    # both backends, full size (minutes)
    python bench/memory.py --backend asyncio  # one backend only
    python bench/memory.py --quick            # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import resource
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from arkhon_rheo import AgentState, AgentSystem, Durability, Lifecycle, Machine, Patch, StateView
from arkhon_rheo import stage as make_stage

L = Lifecycle


class Count(AgentState):
    lifecycle: Lifecycle = L.THINKING
    count: int = 0
    target: int = 3


@dataclass(frozen=True)
class Sizes:
    live: int  # sessions parked at once in (1)
    long: int  # steps of the long run in (1)
    ended: int  # sessions in (2)
    mark: int  # sessions at the first RSS reading in (3)
    total: int  # sessions in all in (3)


FULL = Sizes(live=10, long=10_000, ended=2_000, mark=10_000, total=100_000)
QUICK = Sizes(live=4, long=1_000, ended=200, mark=200, total=2_000)


class Park:
    """Where each session waits once it reaches ``at`` steps, until released."""

    def __init__(self, at: int, expected: int) -> None:
        self.at = at
        self.expected = expected
        self.arrived = 0
        self.all_in = anyio.Event()
        self.release = anyio.Event()

    async def wait(self, count: int) -> None:
        if count != self.at:
            return
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_in.set()
        await self.release.wait()


def counting_machine(park: Park | None = None) -> Machine[Count]:
    """THINKING -> THINKING ... (count + 1 each step) -> FINISHED at ``target``."""

    @make_stage(
        reads={"count", "target"},
        writes={"count"},
        next=lambda s: L.FINISHED if s.count >= s.target else L.THINKING,
    )
    async def tick(view: StateView[Count]) -> Patch:
        if park is not None:
            await park.wait(view.count)
        return Patch(count=view.count + 1)

    return Machine(
        name="bench-count",
        state_type=Count,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.THINKING, L.FINISHED}},
        stages={L.THINKING: tick},
    )


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def rss() -> int:
    """The process's resident set size in bytes (Linux), else its peak."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def system(path: Path | None, **options: Any) -> AgentSystem:
    return AgentSystem(path=path, durability=Durability.BATCHED, **options)


async def live_bytes(path: Path | None, sessions: int, steps: int) -> float:
    """Traced bytes per session with ``sessions`` parked after ``steps`` steps."""
    park = Park(steps, sessions)
    machine = counting_machine(park)
    async with system(path, max_steps=steps + 10) as agents:
        await agents.run(counting_machine(), Count(target=1))  # warm the caches
        tracemalloc.start()
        try:
            before = traced()
            handles = [
                await agents.start(machine, Count(target=steps + 1)) for _ in range(sessions)
            ]
            await park.all_in.wait()
            after = traced()
        finally:
            tracemalloc.stop()
        park.release.set()
        for handle in handles:
            await handle.result()
    return (after - before) / sessions


async def ended_bytes(path: Path | None, sessions: int, **options: Any) -> float:
    """Traced bytes the system holds per ended session whose handle was dropped."""
    machine = counting_machine()
    async with system(path, **options) as agents:
        for _ in range(sessions):  # warm-up round: caches, pools, the store's statements
            await agents.run(machine, Count())
        tracemalloc.start()
        try:
            before = traced()
            for _ in range(sessions):
                await agents.run(machine, Count())
            after = traced()
        finally:
            tracemalloc.stop()
    return (after - before) / sessions


async def rss_run(path: Path | None, sizes: Sizes) -> tuple[int, int]:
    """RSS once ``sizes.mark`` short sessions ended and once ``sizes.total`` have."""
    machine = counting_machine()
    wave = 100
    mark = 0
    async with system(path) as agents:

        async def one() -> None:
            await agents.run(machine, Count())

        done = 0
        while done < sizes.total:
            async with anyio.create_task_group() as group:
                for _ in range(wave):
                    group.start_soon(one)
            done += wave
            if done == sizes.mark:
                gc.collect()
                mark = rss()
        gc.collect()
        end = rss()
    return mark, end


async def run_backend(sizes: Sizes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"(1) live session, {sizes.live} parked at once (traced bytes per session)")
        for label, path in (("sqlite store", folder / "live.db"), ("memory only", None)):
            short = await live_bytes(path, sizes.live, 10)
            if path is not None:
                path.unlink()
            long = await live_bytes(path, sizes.live, sizes.long)
            if path is not None:
                path.unlink()
            print(
                f"    {label:<13} after 10 steps: {short:10,.0f} B   after {sizes.long:,} "
                f"steps: {long:10,.0f} B   growth {long - short:+,.0f} B"
            )
        print(f"(2) ended session, handle dropped, {sizes.ended:,} sessions (target <= 1 KB)")
        for label, path, options in (
            ("sqlite store", folder / "ended.db", {}),
            ("memory only, keep_ended=0", None, {"keep_ended": 0}),
        ):
            held = await ended_bytes(path, sizes.ended, **options)
            print(f"    {label:<26} retained per ended session: {held:8,.0f} B")
        print("(3) RSS, short sessions through one AgentSystem (waves of 100)")
        for label, path in (("sqlite store", folder / "rss.db"), ("memory only", None)):
            mark, end = await rss_run(path, sizes)
            print(
                f"    {label:<13} after {sizes.mark:,}: {mark / 2**20:7.1f} MiB   after "
                f"{sizes.total:,}: {end / 2**20:7.1f} MiB   ratio {end / mark:.3f} "
                "(target <= 1.10)"
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
