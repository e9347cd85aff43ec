"""What the shared rate governor prevents: the retry storm of many sessions on one rate limit.

On each anyio backend, N sessions (``react_agent`` over one shared
``OpenAIChatClient``, one model call each) start at once against a loopback
server that allows LIMIT requests per WINDOW seconds and answers 429 with a
``Retry-After`` past it. Two runs:

(a) without a governor (``set_default_governor(None)``): each session sends
    at once and, refused, retries on its own after the supervisor's backoff
    (which waits at least the ``Retry-After``): a retry storm, and sessions
    whose attempts run out fail.
(b) with the governor: the process's default ``RateGovernor`` with the
    server's limit (``RateLimit(requests_per_minute=LIMIT * 60 / WINDOW,
    window=WINDOW)``): sessions wait their turn, and the server's 429s stop.

Printed per run: requests sent (the most in any WINDOW s against LIMIT, and
per minute against the limit per minute), 429s received, sessions finished
(and failed, and still running at the deadline), p50/p99 seconds per session
(start to result, finished sessions), and the run's time.

The full run is 1,000 sessions against 500 requests a minute (a real minute:
about four minutes a backend). ``--quick`` (about a minute) is 200 sessions
against 20 requests a second (1,200 a minute, counted over 1 s windows);
``--sessions``, ``--limit``, ``--window`` and ``--deadline`` change either.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import structlog
from _limited import open_limited_server, peak_in_window

from arkhon_rheo import AgentSystem
from arkhon_rheo.models import (
    OpenAIChatClient,
    RateGovernor,
    RateLimit,
    default_governor,
    set_default_governor,
)
from arkhon_rheo.react import Limits, ReactState, react_agent

if TYPE_CHECKING:
    from structlog.typing import EventDict

BACKENDS = ("asyncio", "trio")
_COUNTED = frozenset({"session_failed", "stages_restarted"})


class Sizes(NamedTuple):
    sessions: int
    limit: int
    window: float
    deadline: float


FULL = Sizes(sessions=1000, limit=500, window=60.0, deadline=300.0)
QUICK = Sizes(sessions=200, limit=20, window=1.0, deadline=30.0)


class Run(NamedTuple):
    sent: int
    peak: int
    rejected: int
    finished: int
    failed: int
    unfinished: int
    p50: float
    p99: float
    elapsed: float


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run_once(sizes: Sizes, governed: bool) -> Run:
    previous = default_governor()
    set_default_governor(RateGovernor() if governed else None)
    try:
        async with open_limited_server(sizes.limit, sizes.window) as server:
            client = OpenAIChatClient("bench-model", api_key="bench", base_url=server.url)
            governor = default_governor()
            if governor is not None:
                per_minute = sizes.limit * 60.0 / sizes.window
                limit = RateLimit(requests_per_minute=per_minute, window=sizes.window)
                governor.set_limit(client, limit)
            agent = react_agent(
                client,
                system_prompt=None,
                limits=Limits(max_steps=3),
            )
            times: list[float] = []
            outcomes: list[bool] = []

            async def one(n: int) -> None:
                began = anyio.current_time()
                result = await system.run(agent, ReactState(task=f"task {n}"))
                outcomes.append(result.ok)
                if result.ok:
                    times.append(anyio.current_time() - began)

            async with AgentSystem(path=None) as system:
                started = anyio.current_time()
                with anyio.move_on_after(sizes.deadline):
                    async with anyio.create_task_group() as group:
                        for n in range(sizes.sessions):
                            group.start_soon(one, n)
                elapsed = anyio.current_time() - started
            arrivals = list(server.arrivals)
            rejected = server.rejected
    finally:
        set_default_governor(previous)
    finished = sum(outcomes)
    return Run(
        sent=len(arrivals),
        peak=peak_in_window(arrivals, sizes.window),
        rejected=rejected,
        finished=finished,
        failed=len(outcomes) - finished,
        unfinished=sizes.sessions - len(outcomes),
        p50=percentile(times, 0.50),
        p99=percentile(times, 0.99),
        elapsed=elapsed,
    )


def show(label: str, run: Run, sizes: Sizes) -> None:
    scale = 60.0 / sizes.window
    print(
        f"  {label:<22} sent {run.sent:6,} requests, at most {run.peak:5,} in any "
        f"{sizes.window:g} s (limit {sizes.limit:,}): {run.peak * scale:8,.0f}/min against "
        f"{sizes.limit * scale:,.0f}/min",
        flush=True,
    )
    print(
        f"  {'':<22} 429s received {run.rejected:6,}; sessions finished "
        f"{run.finished:5,}/{sizes.sessions:,} (failed {run.failed:,}, still running at the "
        f"deadline {run.unfinished:,}); per session p50 {run.p50:6.2f} s, p99 {run.p99:6.2f} s; "
        f"run {run.elapsed:6.2f} s",
        flush=True,
    )


async def run_backend(sizes: Sizes) -> None:
    show("(a) without governor", await run_once(sizes, governed=False), sizes)
    show("(b) with governor", await run_once(sizes, governed=True), sizes)


def _quiet_failures(_logger: Any, _name: str, event: EventDict) -> EventDict:
    """Drop the warnings of each failed or restarted session: the runs count them instead."""
    if event.get("event") in _COUNTED:
        raise structlog.DropEvent
    return event


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="200 sessions, 20 requests a second")
    parser.add_argument("--sessions", type=int, help="sessions per run")
    parser.add_argument("--limit", type=int, help="requests the server allows per window")
    parser.add_argument("--window", type=float, help="the server's window, in seconds")
    parser.add_argument("--deadline", type=float, help="seconds a run may take at most")
    args = parser.parse_args(argv)
    processors = [_quiet_failures, *structlog.get_config()["processors"]]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    sizes = QUICK if args.quick else FULL
    sizes = sizes._replace(
        **{name: value for name in Sizes._fields if (value := getattr(args, name)) is not None}
    )
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(
        f"arkhon_rheo rate governor bench (Python {platform.python_version()}, "
        f"anyio {version('anyio')}, httpx {version('httpx')}, {time.strftime('%Y-%m-%d')}): "
        f"{sizes.sessions:,} sessions at once, one model call each, against a server allowing "
        f"{sizes.limit:,} requests per {sizes.window:g} s; deadline {sizes.deadline:g} s a run",
        flush=True,
    )
    for backend in backends:
        print(f"backend: {backend}", flush=True)
        anyio.run(run_backend, sizes, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
