"""Benchmarks of supervised sessions: commit cost, cycle latency, many sessions at once.

On each anyio backend (asyncio and trio), in one process and one run, it measures:

(a) commit: the cost of one validated commit with a ``History[ReferenceStep]`` field
    that already holds 10 items, then 10,000 items. Two figures per length:
    ``validate+copy+check`` is ``PatchValidator.updates`` + ``state.model_copy`` +
    the invariant check, called through the public pieces; ``_commit`` is the
    supervisor's own ``SessionSupervisor._commit`` (the same, plus the stage's
    ``next``, the lifecycle move, the ``TransitionEvent`` and the log append). Each
    commit appends one step; the base states cycle over 64 consecutive lengths from
    10 (or 10,000) so every position in a `History` chunk is covered (amortized
    cost). Printed as us per commit and the ratio 10,000 / 10 (target <= 1.5).
(b) cycle: one session in memory running a looping machine THINKING -> ACTING ->
    OBSERVING -> THINKING ... with trivial stages (no model) for N cycles; us per
    cycle (3 stage steps, 3 commits), next to the bare ``ActorRef.ask`` echo round
    trip (``timeout=math.inf``, as the supervisor asks) measured in the same run,
    and the ratio cycle / ask. Target <= 100 us per cycle on asyncio.
(c) sessions: N sessions x 10 cycles in one `AgentSystem`, for N = 100, 1,000 and
    10,000 (``--quick``: 100 and 1,000). All N are started first and park at a
    gate in their first stage, so they are all alive at once; the clock runs from
    opening the gate until every result is in. Each N runs twice: with the cyclic
    GC on (as deployed; the collections made during the run and the share of the
    run they took are shown), then with ``gc.disable()`` for the whole run, which
    shows what the collector walking a growing heap costs. Memory per session is
    traced memory (tracemalloc) while all N sessions are alive and parked at the
    gate (one supervisor actor and an actor per stage each, nothing run yet), divided
    by N; it is taken during the start phase of the GC-off run, and tracemalloc is
    stopped before its timed phase. A last, fully traced run (never timed) adds
    the peak while running and what each ended session still retains (its
    handle, log and final state).
    Targets: >= 10,000 cycles/s at 1,000 sessions, >= 8,000 at 10,000, <= 20 KB
    per session.

Timings use ``time.perf_counter()``: (a) is the best of 5 (interleaving the two
lengths, GC off), (b) and the (c) sizes of up to 1,000 cycles in all the best of 3,
larger (c) sizes run once per GC mode. Nothing is asserted on timing: the targets
printed are goals, not checks. structlog is set to drop records below WARNING
before anything is timed. The default run takes minutes, mostly N=10,000 with the
GC on; ``--sessions 100,1000`` leaves that size out.

Run it from the repository root::

    python bench/commit.py                     # both backends, full size (minutes)
    python bench/commit.py --backend asyncio   # one backend only
    python bench/commit.py --quick             # ~10x smaller (seconds)
    python bench/commit.py --sessions 100,1000 # other session counts for (c)
    python bench/commit.py --profile           # also profile (b) under cProfile
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import logging
import math
import os
import platform
import pstats
import sys
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING

import anyio
import structlog
from _loop import SESSION_CYCLES, Gate, build_machine, check_finished

from arkhon_rheo import AgentSystem, History, Lifecycle, Machine, Patch
from arkhon_rheo._hooks import current_injector
from arkhon_rheo.actors import Actor, ActorSystem
from arkhon_rheo.session._commit_rule import PatchValidator
from arkhon_rheo.session._record import Session, SessionConfig
from arkhon_rheo.session._supervisor import SessionSupervisor
from arkhon_rheo.testing import FaultPlan, ReferenceState, ReferenceStep

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from arkhon_rheo import SessionHandle

BACKENDS = ("asyncio", "trio")
L = Lifecycle
#: Cycles each session runs in (c).
#: The chunk size of `History`: base states cover this many consecutive lengths.
SPREAD = 64


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each measurement does."""

    commits: int
    cycles: int
    asks: int
    sessions: tuple[int, ...]
    memory_sessions: int
    #: Best of how many runs, for (a).
    commit_repeat: int
    #: Best of how many runs, for (b), and for (c) up to `crowd_cycles`.
    repeat: int
    #: Above this many cycles in all, a (c) size runs once per GC mode.
    crowd_cycles: int


FULL = Sizes(
    commits=10_000,
    cycles=5_000,
    asks=20_000,
    sessions=(100, 1_000, 10_000),
    memory_sessions=300,
    commit_repeat=5,
    repeat=3,
    crowd_cycles=1_000,
)
QUICK = Sizes(
    commits=2_000,
    cycles=500,
    asks=2_000,
    sessions=(100, 1_000),
    memory_sessions=100,
    commit_repeat=2,
    repeat=2,
    crowd_cycles=1_000,
)


# -- the machine --------------------------------------------------------------------


# -- helpers --------------------------------------------------------------------------


@contextmanager
def gc_mode(enabled: bool) -> Iterator[None]:
    """Collect now, then run the block with the cyclic GC on or off."""
    was_enabled = gc.isenabled()
    gc.collect()
    if enabled:
        gc.enable()
    else:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()


def per(value: float, count: int) -> float:
    return value / count * 1e6


# -- (a) commit cost ------------------------------------------------------------------


PIECES = ("pieces", "updates", "copy", "check", "full")
PIECE_LABELS = (("updates", "updates"), ("model_copy", "copy"), ("invariants", "check"))


def commit_round(length: int) -> Callable[[int], dict[str, float]]:
    """Set up commits of one appended step onto histories of ``length`` (+0..63) items.

    Returns a function that times ``commits`` commits of each kind once and
    returns the seconds each kind took.
    """
    machine = build_machine()
    validator = PatchValidator(machine)
    act = machine.stages[L.ACTING]()
    name, writes = act.name, act.writes
    items = [ReferenceStep(cycle=i, tool="calc", output=str(i)) for i in range(length + SPREAD)]
    bases = [
        ReferenceState(
            lifecycle=L.ACTING,
            session_id="bench-commit",
            thought="use the calculator",
            steps=History(items[: length + offset]),
        )
        for offset in range(SPREAD)
    ]
    patch = Patch().append("steps", ReferenceStep(cycle=0, tool="calc", output="42"))
    target = L.OBSERVING
    session = Session(
        "bench-commit",
        machine,
        bases[0],
        SessionConfig(),
        validator=validator,
        seed="0",
    )
    supervisor = SessionSupervisor(session)
    # One commit outside the clock, to check that it is accepted at all.
    failure = supervisor._commit(bases[0], patch, act, 0.0, 1)
    if failure is not None:
        raise RuntimeError(f"bench commit refused: {failure!r}")
    if len(session.state.steps) != length + 1:  # type: ignore[attr-defined]
        raise RuntimeError("bench commit did not append its step")
    mask = SPREAD - 1

    def run(commits: int) -> dict[str, float]:
        took: dict[str, float] = {}
        with gc_mode(enabled=False):
            start = time.perf_counter()
            for k in range(commits):
                state = bases[k & mask]
                updates = validator.updates(state, patch, stage=name, writes=writes)
                candidate = state.model_copy(update=updates)
                validator.check_invariants(candidate, target, stage=name)
            took["pieces"] = time.perf_counter() - start

            start = time.perf_counter()
            for k in range(commits):
                validator.updates(bases[k & mask], patch, stage=name, writes=writes)
            took["updates"] = time.perf_counter() - start

            update = validator.updates(bases[0], patch, stage=name, writes=writes)
            start = time.perf_counter()
            for k in range(commits):
                bases[k & mask].model_copy(update=update)
            took["copy"] = time.perf_counter() - start

            candidate = bases[0].model_copy(update=update)
            start = time.perf_counter()
            for _ in range(commits):
                validator.check_invariants(candidate, target, stage=name)
            took["check"] = time.perf_counter() - start

            commit = supervisor._commit
            start = time.perf_counter()
            for k in range(commits):
                commit(bases[k & mask], patch, act, 0.0, 1)
            took["full"] = time.perf_counter() - start
            session.log.clear()
        return took

    return run


def report_commit(sizes: Sizes) -> None:
    lengths = (10, 10_000)
    rounds = {length: commit_round(length) for length in lengths}
    best = {length: dict.fromkeys(PIECES, math.inf) for length in lengths}
    for _ in range(sizes.commit_repeat):  # interleaved, so that both lengths see the same noise
        for length, run in rounds.items():
            for key, value in run(sizes.commits).items():
                best[length][key] = min(best[length][key], per(value, sizes.commits))
    short, long = best[10], best[10_000]
    for label, key in (("validate+copy+check", "pieces"), ("_commit (full)", "full")):
        small, large = short[key], long[key]
        print(
            f"  (a) commit {label:<20} history 10: {small:6.2f} us   "
            f"history 10,000: {large:6.2f} us   ratio 10,000/10 {large / small:5.2f}x  "
            f"(target <= 1.5x)",
            flush=True,
        )
    print(
        "      pieces at 10 / 10,000: "
        + ", ".join(f"{label} {short[key]:.2f} / {long[key]:.2f} us" for label, key in PIECE_LABELS)
        + f" ({sizes.commits:,} commits, GC off, best of {sizes.commit_repeat})",
        flush=True,
    )


# -- (b) one cycle --------------------------------------------------------------------


class Echo(Actor[int, int]):
    async def receive(self, message: int) -> int:
        return message


async def ask_round_trip(asks: int) -> float:
    """Seconds for ``asks`` sequential asks to an echo actor, as the supervisor asks."""
    async with ActorSystem(name="bench-ask", mailbox_capacity=16) as system:
        ref = await system.spawn(Echo)
        with gc_mode(enabled=True):
            start = time.perf_counter()
            for i in range(asks):
                await ref.ask(i, timeout=math.inf)
            elapsed = time.perf_counter() - start
        ref.stop()
    return elapsed


async def one_session(cycles: int, plan: FaultPlan | None = None) -> float:
    """Seconds for one session to run ``cycles`` cycles, from start to result."""
    machine = build_machine()
    async with AgentSystem(path=None, max_steps=3 * cycles + 10, fault_plan=plan) as system:
        with gc_mode(enabled=True):
            start = time.perf_counter()
            result = await system.run(machine, ReferenceState(cycles=cycles))
            elapsed = time.perf_counter() - start
    check_finished(result.state, result.exit_reason, cycles)
    return elapsed


async def report_cycle(sizes: Sizes) -> None:
    cycle = ask = math.inf
    for _ in range(sizes.repeat):
        cycle = min(cycle, per(await one_session(sizes.cycles), sizes.cycles))
        ask = min(ask, per(await ask_round_trip(sizes.asks), sizes.asks))
    print(
        f"  (b) cycle  think->act->observe {cycle:7.2f} us/cycle ({cycle / 3:.2f} us/step)   "
        f"ask echo {ask:6.2f} us/rt   cycle/ask {cycle / ask:5.2f}x   "
        f"(target <= 100 us/cycle on asyncio; {sizes.cycles:,} cycles, best of {sizes.repeat})",
        flush=True,
    )
    await report_fault_seam(sizes, cycle)


def seam_check_ns(calls: int = 200_000) -> float:
    """Nanoseconds of the fault seam with no plan installed: a ContextVar get and ``is None``."""
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            if current_injector() is not None:
                raise AssertionError("no plan is installed in the bench")
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e9


async def report_fault_seam(sizes: Sizes, baseline: float) -> None:
    """The fault-injection seam: free with no plan installed, measured with an empty one."""
    unplanned = planned = math.inf
    for _ in range(sizes.repeat):
        unplanned = min(unplanned, per(await one_session(sizes.cycles), sizes.cycles))
        planned = min(planned, per(await one_session(sizes.cycles, plan=FaultPlan()), sizes.cycles))
    check = seam_check_ns()
    # Per cycle the seams run 3 stage checks (store and tool seams: none in memory, no tools).
    print(
        f"      fault seam: no plan {unplanned:7.2f} us/cycle   ratio no-plan/baseline "
        f"{unplanned / baseline:5.2f}x   (its check: {check:.0f} ns, x3 per cycle = "
        f"{3 * check / 10 / unplanned:.2f}% of a cycle)   empty FaultPlan installed "
        f"{planned:7.2f} us/cycle   ratio {planned / unplanned:5.2f}x",
        flush=True,
    )


# -- (c) many sessions ----------------------------------------------------------------


class GcClock:
    """Counts the cyclic GC's collections and the time they take, while installed."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    @contextmanager
    def installed(self) -> Iterator[GcClock]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


@dataclass(frozen=True, slots=True)
class Crowd:
    """One run of N sessions started at a gate, then released together."""

    #: Seconds to start them all (every actor spawned, every session parked).
    start: float
    #: Seconds from opening the gate until every result is in.
    run: float
    #: Collections by generation during the run phase, and the seconds they took.
    collections: tuple[int, int, int]
    gc_seconds: float
    #: Traced bytes per session while all are parked at the gate (when traced).
    alive: float | None


async def start_gated(
    system: AgentSystem, machine: Machine[ReferenceState], count: int
) -> list[SessionHandle[ReferenceState]]:
    state = ReferenceState(cycles=SESSION_CYCLES)
    handles = [await system.start(machine, state) for _ in range(count)]
    for _ in range(3):  # let every session reach the gate
        await anyio.lowlevel.checkpoint()
    return handles


async def finish_all(handles: list[SessionHandle[ReferenceState]]) -> None:
    for handle in handles:
        result = await handle.result()
        check_finished(result.state, result.exit_reason, SESSION_CYCLES)


def traced_now() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def crowd(count: int, *, gc_enabled: bool, trace_start: bool = False) -> Crowd:
    """Start ``count`` sessions parked at a gate, open it, and wait for all of them.

    With ``gc_enabled`` false the cyclic GC is off for the whole run (start phase
    included). With ``trace_start``, tracemalloc runs during the start phase only
    (so that figure is not a timing) and is stopped before the timed run phase.
    """
    gate = Gate(count)
    machine = build_machine(gate)
    alive: float | None = None
    clock = GcClock()
    with gc_mode(enabled=gc_enabled):
        async with AgentSystem(path=None, max_steps=3 * SESSION_CYCLES + 10) as system:
            if trace_start:
                tracemalloc.start()
                before = traced_now()
            start = time.perf_counter()
            handles = await start_gated(system, machine, count)
            started = time.perf_counter() - start
            if trace_start:
                alive = (traced_now() - before) / count
                tracemalloc.stop()
            with clock.installed():
                start = time.perf_counter()
                gate.open.set()
                await finish_all(handles)
                elapsed = time.perf_counter() - start
    c0, c1, c2 = clock.collections
    return Crowd(started, elapsed, (c0, c1, c2), clock.seconds, alive)


@dataclass(frozen=True, slots=True)
class Footprint:
    """Traced bytes per session, and the files that allocated the most while alive."""

    alive: float
    peak: float
    retained: float
    top: list[tuple[str, float]]


async def footprint(count: int) -> Footprint:
    """Traced memory per session: parked at the gate, at the peak of the run, after it."""
    gate = Gate(count)
    machine = build_machine(gate)
    gc.collect()
    tracemalloc.start()
    try:
        async with AgentSystem(path=None, max_steps=3 * SESSION_CYCLES + 10) as system:
            before_snapshot = tracemalloc.take_snapshot()
            before = traced_now()
            handles = await start_gated(system, machine, count)
            alive = traced_now() - before
            alive_snapshot = tracemalloc.take_snapshot()
            tracemalloc.reset_peak()
            gate.open.set()
            await finish_all(handles)
            peak = tracemalloc.get_traced_memory()[1] - before
            retained = traced_now() - before
    finally:
        tracemalloc.stop()
    diffs = alive_snapshot.compare_to(before_snapshot, "filename")
    top = [
        (os.path.basename(str(diff.traceback[0].filename)), diff.size_diff / count)
        for diff in diffs[:5]
    ]
    return Footprint(alive / count, peak / count, retained / count, top)


def gc_text(run: Crowd) -> str:
    c0, c1, c2 = run.collections
    return f"{c0 + c1 + c2} collections ({c2} full) took {run.gc_seconds / run.run:4.0%} of the run"


async def report_sessions(sizes: Sizes) -> None:
    for count in sizes.sessions:
        cycles = count * SESSION_CYCLES
        repeat = sizes.repeat if cycles <= sizes.crowd_cycles else 1
        ons: list[Crowd] = []
        offs: list[Crowd] = []
        for index in range(repeat):
            ons.append(await crowd(count, gc_enabled=True))
            offs.append(await crowd(count, gc_enabled=False, trace_start=index == 0))
        on = min(ons, key=lambda run: run.run)
        off = min(offs, key=lambda run: run.run)
        alive = offs[0].alive or math.nan
        target = {1_000: ">= 10,000", 10_000: ">= 8,000"}.get(count, "none")
        print(
            f"  (c) sessions N={count:<6,} gc on {cycles / on.run:>7,.0f} cycles/s   "
            f"gc off {cycles / off.run:>7,.0f} cycles/s   (target {target}; "
            f"{SESSION_CYCLES} cycles each, best of {repeat})",
            flush=True,
        )
        print(
            f"      N={count:<6,} start {per(on.start, count):5.0f} us/session (gc on)   "
            f"gc during run: {gc_text(on)}   "
            f"memory {alive / 1024:4.1f} KB per session alive at the gate (target <= 20 KB)",
            flush=True,
        )
    count = sizes.memory_sessions
    memory = await footprint(count)
    print(
        f"  (c) memory N={count:,}, traced: {memory.alive / 1024:4.1f} KB per session alive at "
        f"the gate   peak {memory.peak / 1024:4.1f} KB per session while running   "
        f"{memory.retained / 1024:4.1f} KB retained per ended session",
        flush=True,
    )
    top = ", ".join(f"{name} {size / 1024:.1f}" for name, size in memory.top)
    print(f"      largest per alive session, KB by file: {top}", flush=True)


# -- the run --------------------------------------------------------------------------


async def run_backend(sizes: Sizes) -> None:
    report_commit(sizes)
    await report_cycle(sizes)
    await report_sessions(sizes)


#: Where a profiled function belongs: the first pattern found in "path:function".
LAYERS = (
    ("gc.collect", "(bench set-up, left out)"),
    ("arkhon_rheo/supervision", "arkhon supervision: step, commit, validation"),
    ("arkhon_rheo/core", "arkhon supervision: step, commit, validation"),
    ("arkhon_rheo/actors", "arkhon actors: mailbox, cell, ask"),
    ("arkhon_rheo/protocols", "arkhon protocols: Patch, StateView, History, Machine"),
    ("/anyio/", "anyio: checkpoints, Event, cancel scopes"),
    ("sniffio", "anyio: checkpoints, Event, cancel scopes"),
    ("/asyncio/", "asyncio: event loop, handles, futures, Event"),
    ("selectors.py", "asyncio: event loop, handles, futures, Event"),
    ("_asyncio.", "asyncio: event loop, handles, futures, Event"),
    ("contextvars", "asyncio: event loop, handles, futures, Event"),
    ("select.epoll", "asyncio: event loop, handles, futures, Event"),
    ("/trio/", "trio: scheduler, cancel status, parking lots"),
    ("pydantic", "pydantic: model_copy, validation"),
    ("copy.py", "pydantic: model_copy, validation"),
    ("enum.py", "enum: hashing lifecycle members"),
    ("bench/commit.py", "the bench's own trivial stages"),
)


BUILTINS = "builtins called from every layer (dict.get, len, ...)"


def profile_cycle(backend: str, cycles: int, top: int) -> None:
    """Run (b) under cProfile and print where the time of a cycle goes."""
    profiler = cProfile.Profile()
    profiler.enable()
    elapsed = anyio.run(one_session, cycles, backend=backend)
    profiler.disable()
    print(
        f"profile of (b) on {backend}: {cycles:,} cycles, {per(elapsed, cycles):.1f} us/cycle "
        "under the profiler",
        flush=True,
    )
    layers: dict[str, float] = {}
    for entry in profiler.getstats():
        code = entry.code
        where = code if isinstance(code, str) else f"{code.co_filename}:{code.co_name}"
        layer = next((name for pattern, name in LAYERS if pattern in where), BUILTINS)
        layers[layer] = layers.get(layer, 0.0) + entry.inlinetime
    layers.pop("(bench set-up, left out)", None)
    total = sum(layers.values())
    print("  own time by layer:", flush=True)
    for layer, seconds in sorted(layers.items(), key=lambda item: -item[1]):
        print(f"    {seconds / total:6.1%}  {layer}", flush=True)
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print(f"  by {order}:", flush=True)
        for line in lines[start:]:
            if line.strip():
                print(f"    {line}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="~10x smaller sizes (smoke run)")
    parser.add_argument(
        "--profile", action="store_true", help="also run (b) under cProfile and print the top"
    )
    parser.add_argument(
        "--sessions",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        help="comma-separated session counts for (c), replacing the default sizes",
    )
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    if args.sessions:
        sizes = dataclasses.replace(sizes, sessions=args.sessions)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    versions = (
        f"Python {platform.python_version()}, anyio {version('anyio')}, "
        f"pydantic {version('pydantic')}"
    )
    if "trio" in backends:
        versions += f", trio {version('trio')}"
    print(
        f"arkhon_rheo session bench ({versions}){', quick' if args.quick else ''}: "
        f"commits N={sizes.commits:,}, cycles N={sizes.cycles:,}, "
        f"sessions {', '.join(f'{n:,}' for n in sizes.sessions)} x {SESSION_CYCLES} cycles",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        started = time.perf_counter()
        anyio.run(run_backend, sizes, backend=backend)
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    if args.profile:
        for backend in backends:
            profile_cycle(backend, sizes.cycles, 30)


if __name__ == "__main__":
    main(sys.argv[1:])
