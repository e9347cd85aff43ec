"""Once-only effects under SIGKILL: many sessions of an agent with a side effect, killed at random.

On each anyio backend (asyncio and trio), `crash_loop` runs S sessions of a
ReAct agent (a model that needs no script, `CALLS` tool calls per session) in
a child process on a SQLite file (``sync`` durability), SIGKILLs the child K
times at seeded random points (after a random number of acknowledged commits,
at once or a moment later), and resumes the orphans in a fresh child each
time; every run also starts new sessions, so there is always work in flight.
The agent's one tool, ``deliver``, appends a line to a world file in one
``write`` (its call's idempotency key first), pausing for a random moment
before and after, and declares ``effect="ask"``: a call that started and never
finished waits for a human at the agent's ``"tool call"`` gate.

After the last kill a child finishes every session it can; then a "human"
answers each gate: if the world file shows the call's effect happened, abort
the session; if not, approve (the call runs, once). Reported:

(1) the kill loop: kills, runs, commits acknowledged and lost, integrity
    checks, sessions replayed against their digests;
(2) how the sessions ended, and how the gates were answered;
(3) ``effects: N calls, N executed, 0 duplicated, K ambiguous -> gate``: tool
    calls whose intent was committed, effects found in the world, effects
    found there more than once (never: the goal), and calls that went to the
    gate because a kill left them ambiguous.

Sizes: K=200 kills, S=400 sessions (+5 per run); ``--quick``: K=25, S=60 (+5),
about two minutes for both backends. Nothing is asserted; run it from the
repository root::

    python bench/crash_effects.py                    # both backends (many minutes)
    python bench/crash_effects.py --backend trio     # one backend only
    python bench/crash_effects.py --quick            # small sizes
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog

from arkhon_rheo import AgentSystem
from arkhon_rheo.protocols import (
    AssistantMessage,
    EffectStatus,
    ModelReply,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import crash_loop
from arkhon_rheo.tools import ToolContext, tool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arkhon_rheo import Machine
    from arkhon_rheo.protocols import Message, ToolSpec
    from arkhon_rheo.testing import CrashReport

#: The environment variable naming the world file (the children inherit it).
WORLD = "ARKHON_BENCH_WORLD"
#: Tool calls per session, one per model turn.
CALLS = 3
#: The pauses of the model and the tool, in seconds (drawn from the seeded `random`).
PAUSES = (0.0, 0.0, 0.0005, 0.001, 0.002, 0.005)


@dataclass(frozen=True)
class Sizes:
    kills: int
    sessions: int
    new_per_run: int
    commits_between_kills: int


FULL = Sizes(kills=200, sessions=400, new_per_run=5, commits_between_kills=200)
QUICK = Sizes(kills=25, sessions=60, new_per_run=5, commits_between_kills=60)


# -- the agent the children run ----------------------------------------------------------


class TurnModel:
    """A model that needs no script: fewer than `CALLS` tool results so far, the next call."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        await anyio.sleep(random.choice(PAUSES))
        task = next(str(m.content) for m in messages if isinstance(m, UserMessage))
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done < CALLS:
            call = ToolCall(id=f"call-{done}", name="deliver", arguments=f'{{"parcel": {done}}}')
            message = AssistantMessage(content=None, tool_calls=(call,))
            return ModelReply(message=message, finish_reason="tool_calls", usage=Usage(), model="t")
        message = AssistantMessage(content=f"{task}: delivered")
        return ModelReply(message=message, finish_reason="stop", usage=Usage(), model="t")


@tool(effect="ask")
async def deliver(parcel: int, ctx: ToolContext) -> str:
    """Deliver a parcel (a human decides about a delivery that may have gone out)."""
    await anyio.sleep(random.choice(PAUSES))
    line = f"{ctx.idempotency_key} {ctx.session_id} {parcel}\n".encode()
    fd = os.open(os.environ[WORLD], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write: a kill leaves the whole line or none of it
    finally:
        os.close(fd)
    await anyio.sleep(random.choice(PAUSES))
    return f"parcel {parcel} delivered"


def machine() -> Machine[ReactState]:
    """The agent (``crash_effects:machine``)."""
    return react_agent(TurnModel(), [deliver], name="deliveries", system_prompt=None)


def initial() -> ReactState:
    """A fresh session's state (``crash_effects:initial``)."""
    return ReactState(task=f"order-{random.getrandbits(32):08x}")


# -- the parent --------------------------------------------------------------------------


def effects_made(world: Path) -> Counter[str]:
    """How many times each call's effect happened, by its idempotency key."""
    if not world.exists():
        return Counter()
    return Counter(line.split()[0] for line in world.read_text().splitlines() if line)


@dataclass
class Gates:
    """How the gates were answered after the kills."""

    approved: int = 0
    aborted: int = 0
    #: Sessions by how they ended, once the gates were answered.
    ended: Counter[str] | None = None


async def answer_gates(db: Path, world: Path) -> Gates:
    """Answer each ambiguous call's gate as a human would, then let the sessions end."""
    agent = machine()
    gates = Gates()
    made = effects_made(world)
    async with SQLiteStore(db) as store, AgentSystem(store=store) as system:
        handles = []
        for record in await store.sessions():
            if record.status != "paused":
                continue
            (entry,) = [
                e
                for e in await store.effects(record.session_id)
                if e.status is EffectStatus.STARTED
            ]
            stored = system.stored(agent, record.session_id)
            if made[entry.key]:  # it went out: do not send it again
                await stored.abort()
                gates.aborted += 1
            else:
                handles.append(await stored.approve())
                gates.approved += 1
        for handle in handles:
            await handle.result()
        gates.ended = Counter(record.status for record in await store.sessions())
    return gates


async def ledger_counts(db: Path) -> tuple[int, int]:
    """Tool calls whose intent was committed, and those that went to the gate (begun twice)."""
    calls = ambiguous = 0
    async with SQLiteStore(db) as store:
        for record in await store.sessions():
            for entry in await store.effects(record.session_id):
                calls += 1
                ambiguous += entry.attempts > 1 or entry.status is EffectStatus.STARTED
    return calls, ambiguous


def run_backend(backend: str, sizes: Sizes, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="arkhon-effects-") as directory:
        db, world = Path(directory) / "agent.db", Path(directory) / "world.txt"
        os.environ[WORLD] = str(world)
        worst = 0

        def check(path: Path) -> None:
            nonlocal worst
            worst = max(worst, max(effects_made(world).values(), default=0))

        started = time.perf_counter()
        report: CrashReport = crash_loop(
            "crash_effects:machine",
            "crash_effects:initial",
            path=db,
            kills=sizes.kills,
            sessions=sizes.sessions,
            new_per_run=sizes.new_per_run,
            seed=seed,
            backend=backend,
            commits_between_kills=sizes.commits_between_kills,
            max_steps=1000,
            check=check,
        )
        killed = time.perf_counter() - started
        after = Counter(r.state.lifecycle.name.lower() for r in report.replays.values())
        paused = len(report.unfinished)
        diverged = sum(not r.ok for r in report.replays.values())
        print(
            f"  (1) {report.kills} kills over {report.runs} runs in {killed:.1f} s: "
            f"{report.acknowledged:,} commits acknowledged, {len(report.lost)} lost, "
            f"{report.checks} integrity checks ({len(report.integrity)} failed), "
            f"{len(report.replays)} sessions replayed ({diverged} diverged)"
        )
        gates = anyio.run(answer_gates, db, world, backend=backend)
        ended = gates.ended or Counter()
        print(
            f"  (2) after the kills: {after.get('finished', 0)} finished, {paused} paused at "
            f"the tool-call gate; the gates: {gates.approved} approved (the effect had not "
            f"happened: run once now), {gates.aborted} aborted (it had); in the end "
            + ", ".join(f"{n} {status}" for status, n in sorted(ended.items()))
        )
        made = effects_made(world)
        calls, ambiguous = anyio.run(ledger_counts, db, backend=backend)
        duplicated = sum(n > 1 for n in made.values())
        worst = max(worst, max(made.values(), default=0))
        print(
            f"  (3) effects: {calls} calls, {len(made)} executed, {duplicated} duplicated, "
            f"{ambiguous} ambiguous -> gate   (most times one effect happened: {worst})"
        )
        print(f"  wall {time.perf_counter() - started:.1f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (about two minutes)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), action="append")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    print(
        f"python {sys.version.split()[0]}, {'quick' if args.quick else 'full'} sizes: "
        f"{sizes.kills} kills, {sizes.sessions} sessions (+{sizes.new_per_run} per run), "
        f"{CALLS} tool calls each"
    )
    for backend in args.backend or ("asyncio", "trio"):
        print(f"backend: {backend}", flush=True)
        run_backend(backend, sizes, args.seed)


if __name__ == "__main__":
    main()
