"""Ask-to-reply latency: what `AgentSystem.ask` adds to a turn, here, across processes, on workers.

The agent is a conversational ReAct agent whose model answers at once
(``You said: ...``): a turn is the listen step that applies the message, a
think step, and their commits. For each ask, the **added latency** is the
time from the call to its return minus the turn's own time (from the start
of the step that applied the message to the commit that ended the turn, as
the events record them): storing the message, waking or reaching the
session, and learning of the reply.

- **in process**: an `AgentSystem` on a SQLite file drives the sessions it is
  asked (each parked between turns: the ask wakes it);
- **SQLite, across processes**: an ``arkhon-rheo worker`` process on the same
  file drives them; this process asks with ``drive=False`` (it learns of the
  reply by reading the session's record, 2 ms at first, then less often);
- **PostgreSQL worker**: the same with a worker on a throwaway PostgreSQL
  server (`arkhon_rheo.testing.start_postgres`), skipped without one.

Each with 1 conversation (``--turns`` asks, one after the other) and with C
conversations at once (one ask each, all at the same moment; C=1,000,
``--quick`` 100). Targets (p50 of the added latency): in process <= 0.5 ms;
PostgreSQL worker <= 10 ms; SQLite across processes <= 50 ms. Nothing is
asserted. Run it from the repository root::

    python bench/ask.py [--quick] [--backend trio]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from arkhon_rheo import AgentSystem, MemoryStore
from arkhon_rheo.protocols import AssistantMessage, Message, ModelReply, ToolSpec, UserMessage
from arkhon_rheo.react import Conversation, UserInput, react_agent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

ROOT = Path(__file__).resolve().parents[1]


class Repeat:
    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        return ModelReply(message=AssistantMessage(content=f"You said: {last}"))


#: ``bench.ask:agent`` for the worker processes.
agent = react_agent(Repeat(), conversational=True, name="bench-ask")


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return p50, p99


async def _added(system: AgentSystem, timed: list[tuple[str, Any, float, float]]) -> Figures:
    """Each ask's latency less its turn's own time, and the two parts of it (see `Figures`)."""
    figures = Figures([], [], [])
    logs: dict[str, Any] = {}
    for session_id, reply, called, returned in timed:
        if session_id not in logs:
            logs[session_id] = {e.seq: e for e in await system.stored(agent, session_id).history()}
        events = logs[session_id]
        applying, end = events[reply.applied_seq], events[reply.seq]
        turn = end.finished_at - applying.started_at
        figures.added.append(returned - called - turn)
        figures.delivery.append(applying.started_at - applying.info["message"]["posted_at"])
        figures.notice.append(returned - end.finished_at)
    return figures


@dataclass
class Figures:
    """Seconds per ask: added in all; of it, the delivery and the reply's notice.

    ``delivery``: from the message stored to the step that applied it starting
    (the session woken here, or claimed by a worker); ``notice``: from the
    commit that ended the turn to the ask returning (what ``ask`` itself adds).
    """

    added: list[float]
    delivery: list[float]
    notice: list[float]


async def one_conversation(system: AgentSystem, turns: int, drive: bool) -> Figures:
    thread = f"one-{time.monotonic_ns()}"
    await Conversation.open(system, agent, thread)
    await system.ask(agent, thread, UserInput(text="warm up"), drive=drive)
    timed = []
    for turn in range(turns):
        called = time.time()
        reply = await system.ask(agent, thread, UserInput(text=f"turn {turn}"), drive=drive)
        timed.append((thread, reply, called, time.time()))
        await anyio.sleep(0.002)  # parked again before the next ask
    return await _added(system, timed)


async def many_conversations(system: AgentSystem, count: int, drive: bool) -> Figures:
    stamp = time.monotonic_ns()
    threads = [f"many-{stamp}-{i}" for i in range(count)]
    async with anyio.create_task_group() as group:
        for thread in threads:
            group.start_soon(Conversation.open, system, agent, thread)
    # Parked, every one of them, before the asks.
    for thread in threads:
        while (await system.stored(agent, thread).record()).status != "waiting":  # noqa: ASYNC110
            await anyio.sleep(0.05)
    timed: list[tuple[str, Any, float, float]] = []

    async def ask(thread: str) -> None:
        called = time.time()
        reply = await system.ask(agent, thread, UserInput(text="hello"), drive=drive)
        timed.append((thread, reply, called, time.time()))

    async with anyio.create_task_group() as group:
        for thread in threads:
            group.start_soon(ask, thread)
    return await _added(system, timed)


@asynccontextmanager
async def worker(store: str, backend: str, concurrency: int) -> AsyncIterator[None]:
    """An ``arkhon-rheo worker`` process on ``store`` while the block runs."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "arkhon_rheo", "worker", "--store", store, "--machine",
               "bench.ask:agent", "--backend", backend, "--concurrency", str(concurrency),
               "--poll", "0.05"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)  # noqa: ASYNC220
    try:
        await anyio.sleep(1.5)  # started and listening
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def report(label: str, figures: Figures, target_ms: float) -> None:
    p50, p99 = _quantiles(figures.added)
    mark = "met" if p50 * 1000 <= target_ms else "MISSED"
    print(
        f"  {label:<28} n={len(figures.added):>5}  added p50 {p50 * 1000:8.2f} ms"
        f"  p99 {p99 * 1000:8.2f} ms  (target p50 <= {target_ms:g} ms: {mark})"
    )
    d50, d99 = _quantiles(figures.delivery)
    n50, n99 = _quantiles(figures.notice)
    print(
        f"  {'':<28}          of it: delivery p50 {d50 * 1000:7.2f} / p99 {d99 * 1000:7.2f} ms,"
        f" reply notice p50 {n50 * 1000:6.2f} / p99 {n99 * 1000:7.2f} ms"
    )


async def run(args: argparse.Namespace) -> None:
    count = args.conversations or (100 if args.quick else 1000)
    turns = args.turns or (30 if args.quick else 100)
    backend = args.backend
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "ask.db")
        print("in process, in memory (MemoryStore: what asking costs, with no disk):")
        async with MemoryStore() as memory, AgentSystem(store=memory) as system:
            report("1 conversation", await one_conversation(system, turns, True), 0.5)
            report(f"{count} at once", await many_conversations(system, count, True), 0.5)
        print("in process (SQLite file, batched):")
        async with AgentSystem(path=path) as system:
            report("1 conversation", await one_conversation(system, turns, True), 0.5)
            report(f"{count} at once", await many_conversations(system, count, True), 0.5)
        print("SQLite, a worker process drives, this one asks:")
        async with worker(path, backend, count), AgentSystem(path=path) as system:
            report("1 conversation", await one_conversation(system, turns, False), 50)
            report(f"{count} at once", await many_conversations(system, count, False), 50)
    url, server = args.url, None
    if url is None:
        from arkhon_rheo.testing import find_postgres, start_postgres

        bindir = find_postgres()
        if bindir is None:
            print("PostgreSQL: skipped (no server binaries; pass --url)")
            return
        server = start_postgres(bindir)
        url = server.url
    try:
        print("PostgreSQL, a worker process drives, this one asks:")
        async with AgentSystem(store=url) as system, worker(url, backend, count):
            report("1 conversation", await one_conversation(system, turns, False), 10)
            report(
                f"{count} at once",
                await many_conversations(system, count, False),
                10,
            )
    finally:
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--conversations", type=int, help="C, the conversations at once")
    parser.add_argument("--turns", type=int, help="the asks of the one conversation")
    parser.add_argument("--url", help="a PostgreSQL server to use (else a throwaway one)")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"backend: {args.backend}")
    anyio.run(run, args, backend=args.backend)


if __name__ == "__main__":
    main()
