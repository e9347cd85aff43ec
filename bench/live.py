"""A hundred thousand live sessions of the bare runtime: peak RSS per session, and the rate.

On each anyio backend, for N = 100 and N = 100,000 (``--quick``: 100 and 2,000),
a fresh child process starts N sessions of the reference machine
(`arkhon_rheo.testing.reference_machine`: think -> act -> observe, 10 cycles,
no store) through one `AgentSystem`. Every session parks at a gate in its
first stage, so all N are alive at once; the clock runs from opening the gate
until every result is in. Printed per N:

- cycles/s over that run, and its ratio to the N = 100 rate (target: no loss
  past the ~80% the runtime keeps today);
- (each size's process first runs 50 sessions, untimed, so that the first
  calls' costs stay out of the N = 100 figure);
- cycles per second of the process's CPU time over that run (steadier than
  the wall-clock rate on a loaded machine);
- peak RSS per live session: the child's peak RSS (``ru_maxrss``) less its RSS
  just before the first start, over N (target <= 10 KB). Each session is
  released (its handle dropped, `AgentSystem.forget`) once its result is read,
  as a service does with the sessions it is done with: an ended session kept
  holds its result and, without a store, its whole event log (~4.4 KB for 30
  events; ``bench/memory.py`` measures what an ended session keeps);
- parked RSS per session: the RSS once all N are parked at the gate, less the
  same base, over N: what a live session costs while it waits;
- the GC's share of the run (``gc.callbacks``) and its collections, with the
  full ones (generation 2) apart: a full collection walks every live object
  (~78 per parked session), so at N = 20,000 one takes 0.8-1.4 s, and whether
  one falls inside the run or just before it decides most of the share (the
  collector starts one once the objects promoted since the last exceed a
  quarter of the old generation; the run's young collections are cheap).

Figures are for comparison within one run (the machine's load moves them);
nothing is asserted. Run it from the repository root::

    python bench/live.py                     # both backends (minutes)
    python bench/live.py --backend asyncio   # one backend
    python bench/live.py --quick             # 100 and 2,000 sessions (seconds)
    python bench/live.py --sessions 100,10000
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import resource
import subprocess
import sys
import time
from typing import Any

import anyio
import anyio.lowlevel
import structlog
from _loop import SESSION_CYCLES, Gate, build_machine, check_finished

from arkhon_rheo import AgentSystem
from arkhon_rheo.testing import ReferenceState

BACKENDS = ("asyncio", "trio")
FULL = (100, 100_000)
QUICK = (100, 2_000)
#: Sessions run (ungated, untimed) before the timed ones, in the same process.
WARM_UP = 50


class GcClock:
    """Adds up the time the cyclic GC takes, while installed in ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self.full = 0
        self.full_seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            took = time.perf_counter() - self._started
            self.seconds += took
            self.collections += 1
            if info["generation"] == 2:
                self.full += 1
                self.full_seconds += took


def rss_now() -> int:
    """Resident set size now, in bytes (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


async def warm_up(system: AgentSystem) -> None:
    """Run a few ungated sessions first: the first ones pay for imports and first calls."""
    gate = Gate(0)
    gate.open.set()
    machine = build_machine(gate, name="bench-warm-up")
    handles = [
        await system.start(machine, ReferenceState(cycles=SESSION_CYCLES)) for _ in range(WARM_UP)
    ]
    for handle in handles:
        await handle.result()
        system.forget(handle.session_id)


async def run_once(sessions: int) -> dict[str, Any]:
    """Start ``sessions`` gated sessions, open the gate, wait for all; the figures."""
    gate = Gate(sessions)
    machine = build_machine(gate)
    clock = GcClock()
    async with AgentSystem(path=None, max_steps=3 * SESSION_CYCLES + 10) as system:
        await warm_up(system)
        gc.collect()
        before = rss_now()
        state = ReferenceState(cycles=SESSION_CYCLES)
        handles = [await system.start(machine, state) for _ in range(sessions)]
        while not gate.all_in.is_set():  # every session parked in its first stage
            await anyio.lowlevel.checkpoint()
        parked = rss_now()
        gc.callbacks.append(clock)
        try:
            start, cpu = time.perf_counter(), time.process_time()
            gate.open.set()
            handles.reverse()  # read in start order, each popped off the list
            while handles:
                handle = handles.pop()
                result = await handle.result()
                check_finished(result.state, result.exit_reason, SESSION_CYCLES)
                # Read and released, as a service does with a session it is done
                # with: the figure is per *live* session, not per ended one kept.
                system.forget(handle.session_id)
                del handle, result
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu
        finally:
            gc.callbacks.remove(clock)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "sessions": sessions,
        "rate": sessions * SESSION_CYCLES / wall,
        "cpu_rate": sessions * SESSION_CYCLES / cpu,
        "rss_per_session": max(0, peak - before) / sessions,
        "parked_per_session": max(0, parked - before) / sessions,
        "gc_share": clock.seconds / wall,
        "gc_collections": clock.collections,
        "gc_full": clock.full,
        "gc_full_seconds": clock.full_seconds,
    }


def child(backend: str, sessions: int) -> dict[str, Any]:
    """Run one size in a fresh interpreter (so its peak RSS is its own)."""
    command = [sys.executable, __file__, "--one", json.dumps([backend, sessions])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or done.stderr:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the run {command[-1]} failed ({done.returncode})")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="100 and 2,000 sessions")
    parser.add_argument("--sessions", help="comma-separated session counts (the first is the base)")
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    if args.one:
        backend, sessions = json.loads(args.one)
        print(json.dumps(anyio.run(run_once, sessions, backend=backend)), flush=True)
        return
    sizes = (
        tuple(int(n) for n in args.sessions.split(","))
        if args.sessions
        else (QUICK if args.quick else FULL)
    )
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo live-sessions bench: N concurrent bare sessions x {SESSION_CYCLES} cycles "
        f"(reference machine, in memory), N = {', '.join(f'{n:,}' for n in sizes)}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        base: dict[str, Any] | None = None
        for sessions in sizes:
            f = child(backend, sessions)
            base = f if base is None else base
            print(
                f"  N={sessions:<8,} {f['rate']:9,.0f} cycles/s ({f['rate'] / base['rate']:4.0%} "
                f"of N={sizes[0]:,}; {f['cpu_rate']:,.0f} per CPU-s, "
                f"{f['cpu_rate'] / base['cpu_rate']:4.0%})   peak RSS "
                f"{f['rss_per_session'] / 1024:5.1f} KB per live session (parked "
                f"{f['parked_per_session'] / 1024:4.1f} KB)   GC {f['gc_share']:4.1%} of the run "
                f"({f['gc_collections']} collections, {f['gc_full']} full: "
                f"{f['gc_full_seconds']:.2f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
