"""Benchmarks of streaming partial output: what `emit` costs, with and without subscribers.

On each anyio backend (asyncio and trio), in one process and one run, it measures:

(a) emit: the cost of one ``emit(delta)`` call, next to an empty Python function
    call measured in the same run: outside any stage; inside a stage's scope with
    no subscriber (the common case, which should cost about a call); with one
    subscriber that reads (drained every 128 items); with one stalled subscriber
    (every item dropped for it); with four subscribers that read. Printed as ns
    per call and ratios to the empty call and to the no-subscriber case. Then
    the memory ``emit`` allocates with no subscriber (tracemalloc: peak above
    the start, over all calls; 0 means nothing is allocated per delta).
(b) session: one session in memory running the think -> act -> observe loop
    where think emits ``DELTAS`` deltas per step: us per cycle, with no emit at
    all (reference), with emits and no subscriber, with a subscriber reading
    them in another task, and with a subscriber that never reads; ratios to the
    reference.

Timings use ``time.perf_counter()``, best of 5 (``--quick``: 2), GC off while
timed. Nothing is asserted on timing.

Run it from the repository root::

    python bench/stream.py                     # both backends
    python bench/stream.py --backend trio      # one backend only
    python bench/stream.py --quick             # smaller (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import platform
import sys
import time
import tracemalloc
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from arkhon_rheo import AgentSystem, Machine, SessionStream, emit
from arkhon_rheo.session._partials import PartialHub, Subscription
from arkhon_rheo.testing import ReferenceState, reference_machine

if TYPE_CHECKING:
    from collections.abc import Callable

BACKENDS = ("asyncio", "trio")
#: Deltas the think stage emits per step in (b).
DELTAS = 20


@dataclass(frozen=True, slots=True)
class Sizes:
    calls: int
    cycles: int
    repeat: int


FULL = Sizes(calls=200_000, cycles=2_000, repeat=5)
QUICK = Sizes(calls=20_000, cycles=200, repeat=2)


def best(repeat: int, run: Callable[[], float]) -> float:
    gc.collect()
    gc.disable()
    try:
        return min(run() for _ in range(repeat))
    finally:
        gc.enable()


# -- (a) emit --------------------------------------------------------------------------


def noop(data: Any) -> None:
    """The reference: an empty call with the same argument."""


def time_calls(fn: Callable[[Any], None], calls: int, drain: list[Subscription[Any]]) -> float:
    """Seconds per call of ``fn``; the streams in ``drain`` are emptied every 128 calls."""
    delta = "token"
    started = time.perf_counter()
    for n in range(calls):
        fn(delta)
        if drain and not n & 127:
            for stream in drain:
                with contextlib.suppress(anyio.WouldBlock):
                    while True:
                        stream.receive_nowait()
    return (time.perf_counter() - started) / calls


def emit_cases(sizes: Sizes) -> None:
    calls, repeat = sizes.calls, sizes.repeat

    def in_scope(subscribers: int, capacity: int, read: bool) -> float:
        hub = PartialHub("bench")
        streams = [hub.subscribe(capacity) for _ in range(subscribers)]
        with hub.scope("think", 1, 1):
            seconds = time_calls(emit, calls, streams if read else [])
        hub.close()
        return seconds

    reference = best(repeat, lambda: time_calls(noop, calls, []))
    outside = best(repeat, lambda: time_calls(emit, calls, []))
    cases = {
        "no subscriber": best(repeat, lambda: in_scope(0, 1, read=False)),
        "1 reading": best(repeat, lambda: in_scope(1, 256, read=True)),
        "1 stalled (drops)": best(repeat, lambda: in_scope(1, 1, read=False)),
        "4 reading": best(repeat, lambda: in_scope(4, 256, read=True)),
    }
    ns = 1e9
    print(f"  (a) emit, ns/call (empty call {reference * ns:.0f} ns)", flush=True)
    print(
        f"      outside a stage     {outside * ns:6.0f} ns  x{outside / reference:.2f} empty call",
        flush=True,
    )
    base = cases["no subscriber"]
    for label, seconds in cases.items():
        print(
            f"      {label:<19} {seconds * ns:6.0f} ns  x{seconds / reference:.2f} empty call"
            f"  x{seconds / base:.2f} no subscriber",
            flush=True,
        )
    hub = PartialHub("bench")
    with hub.scope("think", 1, 1):
        emit("warm")
        tracemalloc.start()
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(calls):
            emit("token")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    print(
        f"  (a) memory allocated by {calls:,} emits with no subscriber: "
        f"peak {peak - start} bytes above the start ({(peak - start) / calls:.4f} per emit)",
        flush=True,
    )


# -- (b) session -----------------------------------------------------------------------


def build_machine(deltas: int) -> Machine[ReferenceState]:
    """The reference machine; its think stage first emits ``deltas`` deltas."""

    async def emit_deltas(cycle: int) -> None:
        for n in range(deltas):
            emit(n)

    return reference_machine(
        name=f"stream-{deltas}", before={"think": emit_deltas} if deltas else None
    )


async def one_session(machine: Machine[ReferenceState], cycles: int, subscriber: str) -> float:
    """Seconds per cycle of one session; ``subscriber``: "none", "reading" or "stalled"."""
    async with AgentSystem(path=None, max_steps=3 * cycles + 1) as system:

        async def consume(stream: SessionStream[Any]) -> None:
            async for _ in stream:
                pass

        async with anyio.create_task_group() as tg:
            started = time.perf_counter()
            handle = await system.start(machine, ReferenceState(cycles=cycles))
            if subscriber == "reading":
                tg.start_soon(consume, handle.partials())
            elif subscriber == "stalled":
                stalled = handle.partials(capacity=16)
            result = await handle.result()
            elapsed = time.perf_counter() - started
        if len(result.state.steps) != cycles:
            raise RuntimeError(f"bench session ended {result.exit_reason.value} early")
        if subscriber == "stalled":
            stalled.close()
        return elapsed / cycles


async def session_cases(sizes: Sizes) -> None:
    plain, streaming = build_machine(0), build_machine(DELTAS)
    figures: dict[str, float] = {}
    for label, machine, subscriber in (
        ("no emit", plain, "none"),
        (f"{DELTAS} emits, no subscriber", streaming, "none"),
        (f"{DELTAS} emits, 1 reading", streaming, "reading"),
        (f"{DELTAS} emits, 1 stalled", streaming, "stalled"),
    ):
        runs = []
        for _ in range(sizes.repeat):
            gc.collect()
            gc.disable()
            try:
                runs.append(await one_session(machine, sizes.cycles, subscriber))
            finally:
                gc.enable()
        figures[label] = min(runs)
    reference = figures["no emit"]
    print(f"  (b) session, {sizes.cycles:,} cycles (3 steps each), us/cycle", flush=True)
    for label, seconds in figures.items():
        print(
            f"      {label:<27} {seconds * 1e6:7.1f} us  x{seconds / reference:.2f} no emit",
            flush=True,
        )


async def run_backend(sizes: Sizes) -> None:
    emit_cases(sizes)
    await session_cases(sizes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = QUICK if args.quick else FULL
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    versions = f"Python {platform.python_version()}, anyio {version('anyio')}"
    if "trio" in backends:
        versions += f", trio {version('trio')}"
    print(
        f"arkhon_rheo streaming bench ({versions}){', quick' if args.quick else ''}: "
        f"emits N={sizes.calls:,}, cycles N={sizes.cycles:,}, {DELTAS} deltas per think step",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
