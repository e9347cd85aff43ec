"""The ten-thousand-agent chaos run: `chaos_run` of the ReAct agent under a FaultPlan.

N sessions (10,000; ``--quick``: 200) of the same ReAct agent as ``bench/scale.py``
(one machine, a scripted model per session, one in-process tool, 10 cycles each)
run at once in memory under ``bench/scale.py``'s plan: every stage call fails with
a seeded 10% transient, 1% recoverable and 0.1% fatal fault. It prints the
`ChaosReport` (outcomes, retries, restarts, escalations, hung sessions, violations,
faults per target, outcomes by fault class) and the wall time. A session's own
check counts as a violation when its end does not fit its faults (failed iff it
met a fatal fault; retries plus restarts equal its transient and recoverable
faults). Nothing is asserted on timing; hung and violations must be 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import anyio
import structlog
from scale import CYCLES, PerSession, fault_plan, lookup, mismatch

from arkhon_rheo import RestartIntensity
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ChaosReport, FaultPlan, chaos_run

if TYPE_CHECKING:
    from arkhon_rheo import SessionResult

BACKENDS = ("asyncio", "trio")


class FaultIndex:
    """The plan's injected faults by session, read incrementally as sessions end."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.seen = 0
        self.by_session: dict[str, Counter[str]] = {}

    def of(self, session_id: str) -> Counter[str]:
        new = self.plan.injected[self.seen :]
        self.seen += len(new)
        for fault in new:
            self.by_session.setdefault(fault.session_id or "", Counter())[fault.kind.value] += 1
        return self.by_session.get(session_id, Counter())


async def run(sessions: int, seed: int) -> tuple[ChaosReport, float]:
    models = PerSession()
    agent = react_agent(models, [lookup], system_prompt="Use the tool, then answer.")
    plan = fault_plan(seed)
    index = FaultIndex(plan)

    def make_state(i: int) -> ReactState:
        task = f"task {i}"
        models.add(task)
        return ReactState(task=task)

    def check(result: SessionResult[ReactState]) -> str | None:
        return mismatch(result, index.of(result.session_id))

    started = time.perf_counter()
    report = await chaos_run(
        agent,
        make_state,
        sessions=sessions,
        plan=plan,
        hang_after=600.0,
        check=check,
        backoff=Backoff(base=0.001, cap=0.005, max_attempts=5),
        restart_intensity=RestartIntensity(max_restarts=20, within=1.0),
        max_steps=4 * CYCLES + 20,
        seed=seed,
    )
    return report, time.perf_counter() - started


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="200 sessions (a smoke run)")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    sessions = args.sessions or (200 if args.quick else 10_000)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(f"arkhon_rheo chaos run: {sessions:,} ReAct sessions x {CYCLES} cycles, seed {args.seed}")
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        report, wall = anyio.run(run, sessions, args.seed, backend=backend)
        print(report.table(), flush=True)
        print(
            f"  wall {wall:.1f} s; hung {len(report.hung)}, violations {len(report.violations)}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
