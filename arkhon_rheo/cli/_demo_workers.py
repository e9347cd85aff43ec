"""``arkhon-rheo demo --workers N``: the demo's agents submitted, and driven by N worker processes.

The demo stores its agents with `AgentSystem.submit` (nothing runs in the demo's
process), starts N ``arkhon-rheo worker`` processes on the same store, waits
until every agent's session has ended (read from the store, as any service
would), drains the workers with SIGTERM and prints the outcome. The workers
run the demo's plain agent: no fault plan (it belongs to a process's
`AgentSystem`) and no gates (nobody would answer them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import anyio
from rich.table import Table

from ..react import ReactState
from ..system import AgentSystem
from ._common import (
    CommandError,
    ExitStatus,
    console,
    print_json,
    shown,
    store_file,
    store_label,
)
from ._demo import _task, demo, demo_agent

if TYPE_CHECKING:
    import argparse

__all__ = ["demo_command", "run_with_workers"]

_MACHINE = "arkhon_rheo.cli:demo_agent"
#: The statuses of a session that has ended.
_ENDED = frozenset({"finished", "failed", "max_steps", "aborted", "cancelled", "crashed"})
#: How often the demo reads the store while the workers run, in seconds.
_POLL = 0.1
#: How long the workers may take to drain once told, in seconds.
_DRAIN = 60.0


def _start_workers(args: argparse.Namespace) -> list[subprocess.Popen[bytes]]:
    each = max(1, -(-args.concurrency // args.workers))
    command = [
        sys.executable,
        "-m",
        "arkhon_rheo",
        "worker",
        "--store",
        args.store,
        "--machine",
        _MACHINE,
        "--concurrency",
        str(each),
        "--poll",
        "0.2",
        "--backend",
        args.backend,
    ]
    return [
        subprocess.Popen(command, stdout=subprocess.PIPE, env=dict(os.environ))
        for _ in range(args.workers)
    ]


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    for process in workers:
        assert process.stdout is not None
        process.stdout.readline()  # "ready": its signal handler is in place (or it exited)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    codes = []
    for process in workers:
        try:
            process.communicate(timeout=_DRAIN)
            codes.append(process.returncode)
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait())
    return codes


async def _submit_and_wait(
    args: argparse.Namespace, run: str, workers: list[subprocess.Popen[bytes]]
) -> dict[str, tuple[str, int]]:
    machine = demo_agent()
    async with AgentSystem(path=args.store) as system:
        for agent in range(args.sessions):
            await system.submit(
                machine, ReactState(task=_task(agent)), session_id=f"{run}{agent:04d}"
            )
        store = system.store
        assert store is not None
        while True:
            mine = {r.session_id: (r.status, r.last_seq) for r in await store.sessions()
                    if r.session_id.startswith(run)}  # fmt: skip
            if all(status in _ENDED for status, _ in mine.values()):
                return mine
            if all(process.poll() is not None for process in workers):
                raise CommandError(
                    "every worker process exited before the agents ended; see their errors above",
                    code=ExitStatus.FAILED,
                )
            await anyio.sleep(_POLL)


def run_with_workers(args: argparse.Namespace) -> dict[str, Any]:
    """Submit the demo's agents, drive them in ``args.workers`` processes; the summary."""
    run = f"demo-{uuid.uuid4().hex[:6]}-"
    began = time.perf_counter()
    workers = _start_workers(args)
    try:
        ended = args.run(_submit_and_wait, args, run, workers)
    finally:
        codes = _stop_workers(workers)
    seconds = time.perf_counter() - began
    outcomes = Counter(status for status, _ in ended.values())
    events = sum(last for _, last in ended.values())
    return {
        "store": store_label(args.store),
        "workers": args.workers,
        "worker_exit_codes": codes,
        "sessions": len(ended),
        "outcomes": dict(sorted(outcomes.items())),
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_second": round(events / seconds, 1) if seconds else None,
    }


def demo_command(args: argparse.Namespace) -> int:
    """``arkhon-rheo demo``: in this process, or with ``--workers N`` in N worker processes."""
    if not args.workers:
        return demo(args)
    store_file(args.store)
    summary = run_with_workers(args)
    if args.json:
        print_json(summary)
        return 0
    out = console()
    table = Table(title=f"{summary['sessions']} ReAct agents driven by {args.workers} workers")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for status, count in summary["outcomes"].items():
        table.add_row(f"sessions {status}", str(count))
    table.add_row("events committed", str(summary["events"]))
    table.add_row("wall time (s)", f"{summary['seconds']:.2f}")
    table.add_row("events/s", f"{summary['events_per_second']}")
    table.add_row("worker exit codes", " ".join(map(str, summary["worker_exit_codes"])))
    out.print(table)
    out.print(
        shown(f"stored in {args.store}; list them with: arkhon-rheo sessions --store {args.store}")
    )
    return 0
