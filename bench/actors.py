"""Micro-benchmarks of the actor runtime, measured against bare anyio primitives.

On each anyio backend (asyncio and trio), in one process and one run, it measures:

1. tell throughput: one producer task does ``await ref.tell(i)`` N times to one
   actor that counts them; the clock stops when the actor has handled all N.
   The floor is a bare ``anyio.create_memory_object_stream`` of the same capacity
   (``await send()`` in the producer, ``async for`` in a consumer task doing the
   same counting). Printed as msg/s, plus the time ratio ours / bare.
2. ask latency: N sequential ``await ref.ask(i)`` to an echo actor, once with the
   default timeout (a cancel scope per ask) and once with ``timeout=math.inf``
   (no cancel scope). The floor is a ping-pong over two memory object streams
   (request and reply) with an echo task. Printed as us per round trip and the
   ratio ours / bare.
3. memory per idle actor: with tracemalloc on, spawn 10,000 idle actors (``--idle``
   sets the count) in one ``ActorSystem`` (default mailbox capacity) and divide
   the growth of traced memory by the count; the largest contributors by source
   file are shown. An idle actor holds no task (the target is at most 1 KB). The
   floor is a bare task parked on ``async for`` over its own memory object stream.
4. scaling: the same total number of messages told round-robin by a driver task
   to 100 actors and to 10,000 actors (both sets alive, runs interleaved); cost
   per message (ns/msg) at both sizes and their ratio, which should stay near 1.
   The floor is the same driver sending round-robin to 100 and to 10,000 bare
   consumer tasks, each on its own memory object stream: it shows how much of any
   growth comes from the event loop and the CPU caches rather than from us.

Timings use ``time.perf_counter()``; each figure is the best of a few runs (ours
and the floor interleaved), with the garbage collector paused during timed runs.
Nothing is asserted: the targets printed next to the ratios are goals, not checks.

Run it from the repository root::

    python bench/actors.py                     # both backends, full size (1-2 min)
    python bench/actors.py --backend trio      # one backend only
    python bench/actors.py --quick             # ~10x smaller, a few seconds
    python bench/actors.py --memory-only --idle 100000   # just the idle actor, 100,000 of them
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import platform
import sys
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo.actors import Actor, ActorRef, ActorSystem

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from anyio.abc import TaskGroup, TaskStatus
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

BACKENDS = ("asyncio", "trio")
#: The mailbox capacity every measurement uses: the ActorSystem default.
CAPACITY = ActorSystem().mailbox_capacity


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each measurement does."""

    tell: int
    ask: int
    idle_actors: int
    scale_messages: int
    scale_bare_messages: int
    scale_small: int
    scale_large: int
    repeat: int


FULL = Sizes(
    tell=200_000,
    ask=40_000,
    idle_actors=10_000,
    scale_messages=100_000,
    scale_bare_messages=25_000,
    scale_small=100,
    scale_large=10_000,
    repeat=3,
)
QUICK = Sizes(
    tell=10_000,
    ask=2_000,
    idle_actors=1_000,
    scale_messages=10_000,
    scale_bare_messages=2_500,
    scale_small=100,
    scale_large=1_000,
    repeat=2,
)


# -- helpers --------------------------------------------------------------------


@contextmanager
def gc_disabled() -> Iterator[None]:
    """Keep the cyclic garbage collector off in the block.

    Used around timed runs, and around mass spawns: with thousands of actors alive
    the automatic full collections make spawning them several times slower.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collect now, then keep the cyclic garbage collector off for a timed run."""
    gc.collect()
    with gc_disabled():
        yield


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Move every object alive now out of the collector's sight, for cheap collections.

    With thousands of actors alive a full collection takes a noticeable time on a
    slow machine; freezing them keeps `gc_paused` cheap.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Tally:
    """Counts handled messages down and sets an event when the last one arrives."""

    __slots__ = ("done", "left")

    def __init__(self) -> None:
        self.left = 0
        self.done = anyio.Event()

    def reset(self, expected: int) -> None:
        self.left = expected
        self.done = anyio.Event()

    def hit(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


class Counter(Actor[int, None]):
    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    async def receive(self, message: int) -> None:
        self.tally.hit()


class Echo(Actor[int, int]):
    async def receive(self, message: int) -> int:
        return message


class Idle(Actor[int, None]):
    async def receive(self, message: int) -> None:
        pass


async def stop_all(refs: list[ActorRef[int, None]]) -> None:
    for ref in refs:
        ref.stop()
    for ref in refs:
        await ref.wait_terminated()


async def best_of(repeat: int, *runs: Callable[[], Awaitable[float]]) -> tuple[float, ...]:
    """Run each measurement ``repeat`` times, interleaved; return the best time of each."""
    best = [math.inf] * len(runs)
    for _ in range(repeat):
        for index, run in enumerate(runs):
            best[index] = min(best[index], await run())
    return tuple(best)


# -- 1. tell throughput -----------------------------------------------------------


async def tell_ours(system: ActorSystem, n: int) -> float:
    tally = Tally()
    ref = await system.spawn(Counter, tally)
    tally.reset(n)
    with gc_paused():
        start = time.perf_counter()
        for i in range(n):
            await ref.tell(i)
        await tally.done.wait()
        elapsed = time.perf_counter() - start
    await stop_all([ref])
    return elapsed


async def tell_bare(n: int) -> float:
    tally = Tally()
    tally.reset(n)
    send, receive = anyio.create_memory_object_stream[int](CAPACITY)

    async def consume(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with receive:
            task_status.started()
            async for _ in receive:
                tally.hit()

    async with anyio.create_task_group() as tg, send:
        await tg.start(consume)
        with gc_paused():
            start = time.perf_counter()
            for i in range(n):
                await send.send(i)
            await tally.done.wait()
            elapsed = time.perf_counter() - start
    return elapsed


# -- 2. ask latency ---------------------------------------------------------------


async def ask_ours(system: ActorSystem, n: int, timeout: float | None) -> float:  # noqa: ASYNC109
    ref = await system.spawn(Echo)
    with gc_paused():
        start = time.perf_counter()
        for i in range(n):
            await ref.ask(i, timeout=timeout)
        elapsed = time.perf_counter() - start
    ref.stop()
    await ref.wait_terminated()
    return elapsed


async def ask_bare(n: int) -> float:
    request_tx, request_rx = anyio.create_memory_object_stream[int](CAPACITY)
    reply_tx, reply_rx = anyio.create_memory_object_stream[int](CAPACITY)

    async def echo(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with request_rx, reply_tx:
            task_status.started()
            async for item in request_rx:
                await reply_tx.send(item)

    async with anyio.create_task_group() as tg, request_tx, reply_rx:
        await tg.start(echo)
        with gc_paused():
            start = time.perf_counter()
            for i in range(n):
                await request_tx.send(i)
                await reply_rx.receive()
            elapsed = time.perf_counter() - start
    return elapsed


# -- 3. memory per idle actor -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Memory:
    per_item: float
    top: list[tuple[str, float]]


@contextmanager
def traced(count: int) -> Iterator[list[Memory]]:
    """Trace allocations in the block; yields a list that receives the result."""
    result: list[Memory] = []
    gc.collect()
    tracemalloc.start()
    try:
        before_snapshot = tracemalloc.take_snapshot()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        yield result
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        after_snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    diffs = after_snapshot.compare_to(before_snapshot, "filename")
    top = [
        (os.path.basename(str(diff.traceback[0].filename)), diff.size_diff / count)
        for diff in diffs[:3]
    ]
    result.append(Memory((after - before) / count, top))


async def memory_ours(count: int) -> Memory:
    refs: list[ActorRef[int, None] | None] = [None] * count
    async with ActorSystem(name="bench-memory") as system:
        with traced(count) as result, gc_disabled():
            for index in range(count):
                refs[index] = await system.spawn(Idle)
    return result[0]


async def memory_bare(count: int) -> Memory:
    sends: list[MemoryObjectSendStream[int] | None] = [None] * count

    async def idle(
        receive: MemoryObjectReceiveStream[int],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with receive:
            task_status.started()
            async for _ in receive:
                pass

    async with anyio.create_task_group() as tg:
        with traced(count) as result, gc_disabled():
            for index in range(count):
                send, receive = anyio.create_memory_object_stream[int](CAPACITY)
                sends[index] = send
                await tg.start(idle, receive)
        for sender in sends:
            if sender is not None:
                sender.close()
    return result[0]


# -- 4. scaling -------------------------------------------------------------------


async def round_robin(
    targets: list[Callable[[int], Awaitable[None]]], tally: Tally, total: int
) -> float:
    """Send ``total`` messages round-robin to ``targets``; time until all are handled."""
    count = len(targets)
    tally.reset(total)
    with gc_paused():
        start = time.perf_counter()
        for i in range(total):
            await targets[i % count](i)
        await tally.done.wait()
        elapsed = time.perf_counter() - start
    return elapsed


async def start_consumers(
    tg: TaskGroup, count: int, tally: Tally
) -> list[MemoryObjectSendStream[int]]:
    """Start ``count`` bare consumer tasks, each on its own memory object stream."""

    async def consume(
        receive: MemoryObjectReceiveStream[int],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with receive:
            task_status.started()
            async for _ in receive:
                tally.hit()

    sends = []
    for _ in range(count):
        send, receive = anyio.create_memory_object_stream[int](CAPACITY)
        sends.append(send)
        await tg.start(consume, receive)
    return sends


@dataclass(frozen=True, slots=True)
class Scale:
    ours_small: float
    ours_large: float
    bare_small: float
    bare_large: float


async def scale(sizes: Sizes) -> Scale:
    """Best ns/msg at both sizes, ours and bare; all four measurements interleaved."""
    small, large = sizes.scale_small, sizes.scale_large
    total, bare_total = sizes.scale_messages, sizes.scale_bare_messages
    tallies = [Tally() for _ in range(4)]
    async with ActorSystem(name="bench-scale") as system, anyio.create_task_group() as tg:
        with gc_disabled():
            small_refs = [await system.spawn(Counter, tallies[0]) for _ in range(small)]
            large_refs = [await system.spawn(Counter, tallies[1]) for _ in range(large)]
            small_sends = await start_consumers(tg, small, tallies[2])
            large_sends = await start_consumers(tg, large, tallies[3])
        with heap_frozen():
            times = await best_of(
                sizes.repeat,
                partial(round_robin, [ref.tell for ref in small_refs], tallies[0], total),
                partial(round_robin, [ref.tell for ref in large_refs], tallies[1], total),
                partial(round_robin, [send.send for send in small_sends], tallies[2], bare_total),
                partial(round_robin, [send.send for send in large_sends], tallies[3], bare_total),
            )
        await stop_all(small_refs + large_refs)
        for send in small_sends + large_sends:
            send.close()
    return Scale(
        ours_small=times[0] / total * 1e9,
        ours_large=times[1] / total * 1e9,
        bare_small=times[2] / bare_total * 1e9,
        bare_large=times[3] / bare_total * 1e9,
    )


# -- the run ----------------------------------------------------------------------


def ratio_text(ratio: float, target: str) -> str:
    return f"ratio {ratio:5.2f}x  ({target})"


def row(label: str, ours: str, bare: str, ratio: str) -> None:
    print(f"  {label:<16} ours {ours:>20}   bare {bare:>20}   {ratio}", flush=True)


async def run_memory_only(sizes: Sizes) -> None:
    """Print the memory per idle actor alone (no floor: a bare task each would take GBs)."""
    count = sizes.idle_actors
    memory = await memory_ours(count)
    top = ", ".join(f"{name} {size:,.0f}" for name, size in memory.top)
    print(
        f"  memory           {memory.per_item:,.0f} bytes per idle actor ({count:,} actors, "
        f"mailbox capacity {CAPACITY}; target <= 1,024); largest by file: {top}",
        flush=True,
    )


async def run_backend(sizes: Sizes) -> None:
    repeat = sizes.repeat
    async with ActorSystem(name="bench") as system:
        n = sizes.tell
        ours, bare = await best_of(repeat, partial(tell_ours, system, n), partial(tell_bare, n))
        row(
            "tell",
            f"{n / ours:,.0f} msg/s",
            f"{n / bare:,.0f} msg/s",
            ratio_text(ours / bare, "target <= 1.5x"),
        )

        n = sizes.ask
        ours, ours_inf, bare = await best_of(
            repeat,
            partial(ask_ours, system, n, None),
            partial(ask_ours, system, n, math.inf),
            partial(ask_bare, n),
        )
        for label, value in (("ask", ours), ("ask timeout=inf", ours_inf)):
            row(
                label,
                f"{value / n * 1e6:.2f} us/rt",
                f"{bare / n * 1e6:.2f} us/rt",
                ratio_text(value / bare, "target <= 2x"),
            )

    count = sizes.idle_actors
    mem_ours = await memory_ours(count)
    mem_bare = await memory_bare(count)
    row(
        "memory",
        f"{mem_ours.per_item:,.0f} B/actor",
        f"{mem_bare.per_item:,.0f} B/task",
        ratio_text(mem_ours.per_item / mem_bare.per_item, "no target"),
    )
    top = ", ".join(f"{name} {size:,.0f}" for name, size in mem_ours.top)
    print(
        f"  {'':<16} {mem_ours.per_item:,.0f} bytes per idle actor ({count:,} actors, mailbox "
        f"capacity {CAPACITY}; target <= 1,024); largest by file: {top}",
        flush=True,
    )

    result = await scale(sizes)
    small, large = f"{sizes.scale_small:,}", f"{sizes.scale_large:,}"
    for label, noun, at_small, at_large, total, target in (
        (
            "ours",
            "actors",
            result.ours_small,
            result.ours_large,
            sizes.scale_messages,
            "target ~1x",
        ),
        (
            "bare",
            "tasks ",
            result.bare_small,
            result.bare_large,
            sizes.scale_bare_messages,
            "floor",
        ),
    ):
        print(
            f"  scale {label:<10} {small:>6} {noun} {at_small:>8,.0f} ns/msg   "
            f"{large:>6} {noun} {at_large:>8,.0f} ns/msg   "
            f"{ratio_text(at_large / at_small, target)}  ({total:,} msgs round-robin)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="~10x fewer iterations (smoke run)")
    parser.add_argument("--idle", type=int, help="idle actors for the memory figure")
    parser.add_argument(
        "--memory-only", action="store_true", help="only the memory per idle actor, no floor"
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.idle is not None:
        sizes = dataclasses.replace(sizes, idle_actors=args.idle)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    versions = f"Python {platform.python_version()}, anyio {version('anyio')}"
    if "trio" in backends:
        versions += f", trio {version('trio')}"
    print(
        f"arkhon_rheo actor bench ({versions}){', quick' if args.quick else ''}: "
        f"tell N={sizes.tell:,}, ask N={sizes.ask:,}, best of {sizes.repeat}",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        started = time.perf_counter()
        anyio.run(run_memory_only if args.memory_only else run_backend, sizes, backend=backend)
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
