"""Benchmark of memory with a machine per session: does a per-request `Machine` leak?

A service often builds its `Machine` in a factory called per request (as the
examples' factories invite). The runtime derives a validator, a codec and
per-state tables from each machine; they must live as long as the machine, not
as long as the `AgentSystem`.

For each anyio backend it runs N short sessions (one think -> act -> observe
cycle each, in memory) one after another through one `AgentSystem`,
forgetting each ended session as a service would, twice, each time in a fresh
child process so that the figures do not mix:

- ``one machine``: every session runs the same machine;
- ``a machine per session``: every session runs a machine built for it.

Each mode runs in two children. The first prints its RSS (``/proc/self/statm``;
the peak from ``getrusage`` where that is missing) once all N sessions have
ended, how much of it grew since just before the first session, and the
sessions per second. The second runs the same sessions under tracemalloc and
prints the memory it traces (after a full collection) then, less what it
traced before the first session. (They are apart because tracemalloc's own
tables, one entry per distinct allocation traceback, are part of the RSS, and
building a machine per session allocates from many more places: under
tracemalloc the per-session RSS comes out ~5 MB higher, however many sessions
run.) The parent prints the ratio per-session / one of the RSS. Target:
within 1.1x. Nothing is asserted.

Run it from the repository root::

    python bench/machines.py                    # N = 20,000 sessions, both backends (minutes)
    python bench/machines.py --quick            # N = 1,000 (seconds)
    python bench/machines.py --sessions 5000 --backend asyncio
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from importlib.metadata import version
from pathlib import Path

import anyio
import structlog
from _loop import build_machine, check_finished

from arkhon_rheo import AgentSystem
from arkhon_rheo.testing import ReferenceState

BACKENDS = ("asyncio", "trio")
MODES = {"one": "one machine", "per": "a machine per session"}
FULL = 20_000
QUICK = 1_000


def rss_bytes() -> int:
    """The process's resident set size now (its peak where /proc is missing)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):  # not Linux: the peak, in KB (bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    return pages * os.sysconf("SC_PAGE_SIZE")


async def run_sessions(mode: str, count: int, traced: bool) -> dict[str, float]:
    """Run ``count`` one-cycle sessions, forgetting each; the memory they leave behind.

    ``traced``: under tracemalloc (which then counts in the RSS: see the module's doc).
    """
    shared = build_machine()
    async with AgentSystem(path=None, max_steps=10) as system:
        # A first session outside the count: imports, adapters and caches warm up.
        warm = await system.run(build_machine(), ReferenceState(cycles=1))
        system.forget(warm.session_id)
        del warm
        gc.collect()
        if traced:
            tracemalloc.start()
        rss_before = rss_bytes()
        traced_before = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        for _ in range(count):
            machine = shared if mode == "one" else build_machine()
            result = await system.run(machine, ReferenceState(cycles=1))
            check_finished(result.state, result.exit_reason, 1)
            system.forget(result.session_id)
        elapsed = time.perf_counter() - started
        del machine, result
        gc.collect()
        traced_bytes = tracemalloc.get_traced_memory()[0] - traced_before
        rss = rss_bytes()
        if traced:
            tracemalloc.stop()
        held = len(system.sessions())
    return {
        "rss": rss,
        "grew": rss - rss_before,
        "traced": traced_bytes,
        "seconds": elapsed,
        "held": held,
    }


def child(mode: str, count: int, backend: str, traced: bool) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(json.dumps(anyio.run(run_sessions, mode, count, traced, backend=backend)), flush=True)


def run_child(mode: str, count: int, backend: str, traced: bool) -> dict[str, float]:
    """Run one mode in a fresh interpreter and return what it printed."""
    done = subprocess.run(
        [
            *(sys.executable, "-W", "error::ResourceWarning", __file__, "--child", mode),
            *("--sessions", str(count), "--backend", backend),
            *(["--traced"] if traced else []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    if done.stderr:
        sys.stderr.write(done.stderr)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def measure(mode: str, count: int, backend: str) -> dict[str, float]:
    """One mode's RSS, growth and speed (untraced), and its traced memory (traced)."""
    figures = run_child(mode, count, backend, traced=False)
    figures["traced"] = run_child(mode, count, backend, traced=True)["traced"]
    return figures


def mb(value: float) -> str:
    return f"{value / 2**20:7.1f} MB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help=f"N = {QUICK:,} (smoke run)")
    parser.add_argument("--sessions", type=int, help="how many sessions per run")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    count = args.sessions or (QUICK if args.quick else FULL)
    if args.child:
        child(args.child, count, args.backend, args.traced)
        return
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo machines bench (Python {platform.python_version()}, anyio "
        f"{version('anyio')}, pydantic {version('pydantic')}){', quick' if args.quick else ''}: "
        f"{count:,} one-cycle sessions in memory, each forgotten once ended",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        runs = {mode: measure(mode, count, backend) for mode in MODES}
        for mode, label in MODES.items():
            run = runs[mode]
            print(
                f"  {label:<22} RSS {mb(run['rss'])} (grew {mb(run['grew'])})   "
                f"traced {mb(run['traced'])} "
                f"({run['traced'] / count:6.0f} B per session)   sessions held "
                f"{run['held']:.0f}   ({count / run['seconds']:,.0f} sessions/s)",
                flush=True,
            )
        one, per = runs["one"], runs["per"]
        print(
            f"  ratio per-session / one machine: RSS {per['rss'] / one['rss']:5.2f}x "
            f"(target <= 1.10x)   traced, per session: {per['traced'] / count:,.0f} B "
            f"against {one['traced'] / count:,.0f} B",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
