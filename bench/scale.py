"""Many agents in one process: 10,000 concurrent ReAct sessions, in memory and on SQLite.

Each session is `react_agent` over a `ScriptedModel` of its own (ten tool calls,
then an answer) and one in-process async tool: ten think -> act cycles and a
last think that answers (22 commits). All sessions start at once. For each
backend and store (in memory, SQLite `Durability.BATCHED`) it prints:

- wall time from the first start to the last result, and cycles/s;
- peak RSS per session: the process's peak RSS less its RSS before the first
  start, over the session count (each run is a fresh child process);
- p50 and p99 session latency (start call to result);
- process CPU time and cycles per CPU-second (on a shared machine the wall
  time includes the time other processes had the cores; CPU time does not);
- GC share: the time the cyclic GC took (``gc.callbacks``) over the wall time,
  and its CPU time over the process's CPU time;
- fair progress: when half of all cycles are done, the min/median/max cycles a
  session has completed, and how many sessions have none (starvation would
  show as a min of 0 with many at 0 and a max of 10).

``--faults`` adds the faulted run: the same sessions (in memory) with every
stage call failing with a seeded 10% transient, 1% recoverable and 0.1% fatal
error, by an `arkhon_rheo.testing.FaultPlan` on every stage (seeded, decided by a
hash of the session, stage and call number). The run checks
every session ended (none hung), each ended as its faults say (failed iff a
fatal was injected; finished with its answer otherwise), and its retries plus
restarts equal the transient and recoverable faults it met.

``--store memory`` (or ``sqlite-batched``) runs one store only. ``--ratios``
adds the quick run (200 sessions) of each store and prints the ratios the
targets are written in: the rate at N sessions over the rate at 200 (per CPU
second and per wall second), and SQLite's rate over the in-memory rate at N.

Figures are for comparison within one run; nothing here fails on a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from arkhon_rheo import (
    AgentSystem,
    Backoff,
    ExitReason,
    RestartIntensity,
)
from arkhon_rheo.protocols import Durability, ModelReply, ToolCall, UserMessage
from arkhon_rheo.react import ReactState, StopReason, react_agent
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import FaultPlan, ScriptedModel
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from arkhon_rheo import SessionResult
    from arkhon_rheo.protocols import Message, ToolSpec, TransitionEvent

#: Think -> act cycles per session (each one tool call); a last think answers.
CYCLES = 10
SESSIONS = 10_000
QUICK_SESSIONS = 200
BACKENDS = ("asyncio", "trio")
STORES = ("memory", "sqlite-batched")
#: Fault rates per stage call of the faulted run.
RATES = {"transient": 0.10, "recoverable": 0.01, "fatal": 0.001}
#: Seconds a run may take before its unfinished sessions count as hung.
HANG_BOUND = 1800.0


@tool
async def lookup(key: int) -> int:
    """Look a number up (doubles it)."""
    return key * 2


CALLS = [
    ToolCall(id=f"c{cycle}", name="lookup", arguments=json.dumps({"key": cycle}))
    for cycle in range(CYCLES)
]


class PerSession:
    """A model client that hands each call to its session's own `ScriptedModel`.

    One machine serves every session; the task text names the session's script.
    The scripted models' records of their requests are dropped after each call.
    """

    def __init__(self) -> None:
        self.models: dict[str, ScriptedModel] = {}

    def add(self, task: str) -> None:
        self.models[task] = ScriptedModel([*CALLS, f"the answer to {task}"])

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        task = next(m.content for m in messages if isinstance(m, UserMessage))
        model = self.models[str(task)]
        reply = await model.complete(messages, tools=tools, json_mode=json_mode)
        # A real client keeps no copy of each prompt: neither does this one (the
        # scripted model's record of its requests is for tests' assertions).
        model.requests.clear()
        if not model.script:
            del self.models[str(task)]  # answered: its script is spent
        return reply


# -- faults ---------------------------------------------------------------------------


def fault_plan(seed: int) -> FaultPlan:
    """Every stage call: 0.1% fatal, else 1% recoverable, else 10% transient (seeded, hashed)."""
    plan = FaultPlan(seed)
    plan.stage().fatal(rate=RATES["fatal"]).recoverable(rate=RATES["recoverable"]).transient(
        rate=RATES["transient"]
    )
    return plan


def injected_by_session(plan: FaultPlan) -> dict[str, Counter[str]]:
    """The faults the plan injected, counted by session and class."""
    met: dict[str, Counter[str]] = {}
    for fault in plan.faults():
        met.setdefault(fault.session_id or "", Counter())[fault.kind.value] += 1
    return met


def mismatch(result: SessionResult[ReactState], met: Counter[str]) -> str | None:
    """How the session's end differs from what its faults call for (None: it matches)."""
    if met["fatal"]:
        failure = result.failure
        if result.exit_reason is not ExitReason.FAILED or failure is None:
            return f"a fatal fault, but it ended {result.exit_reason.value}"
        if failure.error_type != "Fatal":
            return f"a fatal fault, but it failed of {failure.error_type}"
    elif not (
        result.exit_reason is ExitReason.FINISHED
        and result.state.exit is StopReason.ANSWERED
        and result.state.tool_calls == CYCLES
    ):
        return f"no fatal fault, but it ended {result.exit_reason.value} ({result.failure})"
    if result.retries + result.restarts != met["transient"] + met["recoverable"]:
        return (
            f"{met['transient']} transient and {met['recoverable']} recoverable faults, but "
            f"{result.retries} retries and {result.restarts} restarts"
        )
    return None


# -- one run ------------------------------------------------------------------------


class GcClock:
    """Adds up the time the cyclic GC takes (wall and CPU), while installed in ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0
        self.collections = 0
        self.full = 0
        self._started = 0.0
        self._started_cpu = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.process_time()
        else:
            self.seconds += time.perf_counter() - self._started
            self.cpu += time.process_time() - self._started_cpu
            self.collections += 1
            self.full += info["generation"] == 2


class Progress:
    """Counts each session's completed cycles; snapshots the spread at half the work."""

    def __init__(self, sessions: int) -> None:
        self.done = [0] * sessions
        self.total = 0
        self.half = sessions * CYCLES // 2
        self.at_half: list[int] | None = None

    def __call__(self, event: TransitionEvent) -> None:
        if event.stage == "act" and event.kind.value == "step":
            self.done[int(event.session_id[1:])] += 1
            self.total += 1
            if self.total == self.half:
                self.at_half = list(self.done)


def rss_now() -> int:
    """Resident set size now, in bytes (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def run_options(faults: bool) -> dict[str, Any]:
    """The `AgentSystem` options of a faulted run (quick retries, room for its restarts)."""
    if not faults:
        return {}
    return {
        "backoff": Backoff(base=0.001, cap=0.005, max_attempts=5),
        "restart_intensity": RestartIntensity(max_restarts=20, within=1.0),
    }


class Run:
    """One run's sessions and what they leave: results, latencies, progress, the clocks."""

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        self.models = PerSession()
        self.agent = react_agent(self.models, [lookup], system_prompt="Use the tool, then answer.")
        self.progress = Progress(sessions)
        self.latencies: list[float] = []
        self.results: list[SessionResult[ReactState]] = []
        self.clock = GcClock()
        self.wall = self.cpu = 0.0
        self.before = self.peak = 0

    async def one(self, system: AgentSystem, index: int) -> None:
        """Start session ``index``, wait for its result, and forget it (its log goes)."""
        task = f"task {index}"
        self.models.add(task)
        started = time.perf_counter()
        handle = await system.start(self.agent, ReactState(task=task), session_id=f"s{index}")
        self.results.append(await handle.result())
        self.latencies.append(time.perf_counter() - started)
        system.forget(handle.session_id)

    async def all_at_once(self, system: AgentSystem) -> None:
        """Start every session at once; time them (wall, CPU, GC) and read the peak RSS."""
        gc.collect()
        self.before = rss_now()
        gc.callbacks.append(self.clock)
        start = time.perf_counter()
        start_cpu = time.process_time()
        try:
            with anyio.move_on_after(HANG_BOUND):
                async with anyio.create_task_group() as tg:
                    for index in range(self.sessions):
                        tg.start_soon(self.one, system, index)
        finally:
            self.wall = time.perf_counter() - start
            self.cpu = time.process_time() - start_cpu
            gc.callbacks.remove(self.clock)
        self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def figures(self) -> dict[str, Any]:
        """The run's figures as JSON data."""
        sessions, results, clock, wall, cpu = (
            self.sessions,
            self.results,
            self.clock,
            self.wall,
            self.cpu,
        )
        latencies = self.latencies
        quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
        half = self.progress.at_half or self.progress.done
        return {
            "sessions": sessions,
            "ended": len(results),
            "hung": sessions - len(results),
            "wall": wall,
            "cpu": cpu,
            "cycles": sum(self.progress.done),
            "rss_per_session": max(0, self.peak - self.before) / sessions,
            "p50": quantiles[49],
            "p99": quantiles[98],
            "gc_share": clock.seconds / wall,
            "gc_cpu_share": clock.cpu / cpu if cpu else 0.0,
            "gc_collections": clock.collections,
            "gc_full": clock.full,
            "half": [min(half), statistics.median(half), max(half), half.count(0)],
            "finished": sum(r.exit_reason is ExitReason.FINISHED for r in results),
        }


def fault_figures(plan: FaultPlan, results: Sequence[SessionResult[ReactState]]) -> dict[str, Any]:
    """What the fault plan injected, and whether each session ended as its faults call for."""
    by_session = injected_by_session(plan)
    kinds: Counter[str] = Counter()
    for met in by_session.values():
        kinds.update(met)
    mismatches = [
        f"{result.session_id}: {why}"
        for result in results
        if (why := mismatch(result, by_session.get(result.session_id, Counter()))) is not None
    ]
    return {
        "outcomes": dict(Counter(r.exit_reason.value for r in results)),
        "injected": dict(kinds),
        "stage_calls": sum(
            plan.calls(f"stage:{name}", result.session_id)
            for result in results
            for name in ("start", "think", "act")
        ),
        "retries": sum(r.retries for r in results),
        "restarts": sum(r.restarts for r in results),
        "mismatches": mismatches[:10],
        "mismatch_count": len(mismatches),
    }


@contextlib.asynccontextmanager
async def opened_store(store_kind: str) -> AsyncIterator[SQLiteStore | None]:
    """The run's store: None in memory; a SQLite `batched` store in a scratch directory."""
    if store_kind != "sqlite-batched":
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="arkhon-scale-") as directory:
        async with SQLiteStore(
            Path(directory) / "scale.db", durability=Durability.BATCHED
        ) as store:
            yield store


async def run_once(sessions: int, store_kind: str, faults: bool, seed: int) -> dict[str, Any]:
    """Run ``sessions`` agents at once; return the figures as JSON data."""
    run = Run(sessions)
    plan = fault_plan(seed) if faults else None
    async with (
        opened_store(store_kind) as store,
        AgentSystem(
            store=store,
            path=None,
            listeners=[run.progress],
            fault_plan=plan,
            max_steps=4 * CYCLES + 20,
            seed=seed,
            **run_options(faults),
        ) as system,
    ):
        await run.all_at_once(system)
    figures = run.figures()
    if plan is not None:
        figures |= fault_figures(plan, run.results)
    return figures


# -- the report ---------------------------------------------------------------------


def child(backend: str, sessions: int, store_kind: str, faults: bool, seed: int) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter (so its peak RSS is its own)."""
    command = [
        sys.executable,
        __file__,
        "--one",
        json.dumps([backend, sessions, store_kind, faults, seed]),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or done.stderr:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the run {command[-1]} failed ({done.returncode})")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def show(label: str, f: dict[str, Any]) -> None:
    low, median, high, none = f["half"]
    print(
        f"  {label:<15} N={f['sessions']:,}: wall {f['wall']:7.2f} s   "
        f"{f['cycles'] / f['wall']:8,.0f} cycles/s   "
        f"peak RSS {f['rss_per_session'] / 1024:5.1f} KB/session   "
        f"latency p50 {f['p50']:6.2f} s  p99 {f['p99']:6.2f} s   "
        f"GC {f['gc_share']:4.1%} of wall ({f['gc_collections']} collections, "
        f"{f['gc_full']} full)",
        flush=True,
    )
    print(
        f"  {'':<15} CPU {f['cpu']:7.2f} s   "
        f"{f['cycles'] / f['cpu']:8,.0f} cycles per CPU-second   "
        f"collector {f['gc_cpu_share']:4.1%} of CPU",
        flush=True,
    )
    print(
        f"  {'':<15} progress at half the work: min {low} / median {median:g} / max {high} "
        f"cycles per session, {none:,} sessions at 0   ended {f['ended']:,}, hung {f['hung']}, "
        f"finished {f['finished']:,}",
        flush=True,
    )
    if "injected" in f:
        injected = ", ".join(f"{k} {v:,}" for k, v in sorted(f["injected"].items()))
        outcomes = ", ".join(f"{k} {v:,}" for k, v in sorted(f["outcomes"].items()))
        print(
            f"  {'':<15} faults injected over {f['stage_calls']:,} stage calls: {injected}   "
            f"outcomes: {outcomes}   retries {f['retries']:,}, restarts {f['restarts']:,}   "
            f"outcome mismatches {f['mismatch_count']}",
            flush=True,
        )
        for line in f["mismatches"]:
            print(f"  {'':<15}   mismatch {line}", flush=True)


def ratios(runs: dict[tuple[str, int], dict[str, Any]], stores: Sequence[str], n: int) -> None:
    """Print the ratios the targets are written in (rates per CPU second, then per wall second)."""

    def rates(f: dict[str, Any]) -> tuple[float, float]:
        return f["cycles"] / f["cpu"], f["cycles"] / f["wall"]

    for store_kind in stores:
        (cpu_n, wall_n), (cpu_q, wall_q) = (
            rates(runs[store_kind, n]),
            rates(runs[store_kind, QUICK_SESSIONS]),
        )
        print(
            f"  ratio {store_kind}: rate at {n:,} over rate at {QUICK_SESSIONS}: "
            f"{cpu_n / cpu_q:.0%} per CPU-second, {wall_n / wall_q:.0%} per wall-second",
            flush=True,
        )
    if len(stores) == 2:
        (cpu_s, wall_s), (cpu_m, wall_m) = rates(runs[stores[1], n]), rates(runs[stores[0], n])
        print(
            f"  ratio {stores[1]} over {stores[0]} at {n:,}: {cpu_s / cpu_m:.0%} per CPU-second, "
            f"{wall_s / wall_m:.0%} per wall-second",
            flush=True,
        )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SESSIONS} sessions")
    parser.add_argument("--sessions", type=int, help="the session count (default 10,000)")
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--store", choices=[*STORES, "both"], default="both")
    parser.add_argument(
        "--ratios", action="store_true", help=f"add {QUICK_SESSIONS}-session runs; print the ratios"
    )
    parser.add_argument("--faults", action="store_true", help="add the faulted run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    if args.one:
        backend, sessions, store_kind, faults, seed = json.loads(args.one)
        figures = anyio.run(run_once, sessions, store_kind, faults, seed, backend=backend)
        print(json.dumps(figures), flush=True)
        return
    sessions = args.sessions or (QUICK_SESSIONS if args.quick else SESSIONS)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    stores = STORES if args.store == "both" else (args.store,)
    print(
        f"arkhon_rheo scale bench: {sessions:,} concurrent ReAct sessions x {CYCLES} cycles "
        f"(scripted model, one in-process tool){', quick' if args.quick else ''}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        runs: dict[tuple[str, int], dict[str, Any]] = {}
        for store_kind in stores:
            runs[store_kind, sessions] = child(backend, sessions, store_kind, False, args.seed)
            show(store_kind, runs[store_kind, sessions])
        if args.ratios:
            for store_kind in stores:
                runs[store_kind, QUICK_SESSIONS] = small = child(
                    backend, QUICK_SESSIONS, store_kind, False, args.seed
                )
                show(store_kind, small)
            ratios(runs, stores, sessions)
        if args.faults:
            rates = ", ".join(f"{v:.1%} {k}" for k, v in RATES.items())
            show("faulted", child(backend, sessions, "memory", True, args.seed))
            print(f"  {'':<15} (faults per stage call: {rates})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
