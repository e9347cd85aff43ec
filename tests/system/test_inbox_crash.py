"""The inbox across a SIGKILL: a message applied exactly once, a timer that fires after a restart.

A child process (`tests/support/inbox_child.py`) is killed at the worst moments:
after a message is stored and while the step applying it runs (nothing
committed), after a message is stored but before the parked session is woken,
and while a session waits for a timer. A new system on the same file then
finishes the job, and replays it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.testing import VirtualClock
from tests.support.tickets import TICKETS, Hold, Ticket
from tests.system.test_inbox import Applied

if TYPE_CHECKING:
    from anyio.abc import Process

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="the child is killed with SIGKILL"),
]

CHILD = Path(__file__).resolve().parents[1] / "support" / "inbox_child.py"
#: The repository's root: the child imports ``tests.support``.
ROOT = str(Path(__file__).resolve().parents[2])


async def run_child(db: Path, mode: str) -> None:
    """Run the child in ``mode`` until it says it is ready, then SIGKILL it."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    process: Process = await anyio.open_process(
        [sys.executable, str(CHILD), str(db), mode],
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert process.stdout is not None
    seen = b""
    try:
        with anyio.fail_after(60):  # a hung child, not a timing threshold
            while b"ready\n" not in seen:
                try:
                    seen += await process.stdout.receive()
                except anyio.EndOfStream:
                    pytest.fail(f"the child ended before it was ready: {seen.decode()}")
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await process.wait()
        await process.aclose()


async def parked_ticket(db: Path) -> None:
    async with AgentSystem(path=db) as system:
        result = await system.run(TICKETS, Ticket(), session_id="t1")
        assert result.exit_reason is ExitReason.WAITING


async def applied_holds(system: AgentSystem) -> list[int]:
    history = await system.stored(TICKETS, "t1").history()
    return [
        event.seq
        for event in history
        if event.info and event.info.get("message", {}).get("id") == "hold-1"
    ]


@pytest.mark.parametrize("mode", ["apply", "post"])
async def test_a_message_stored_before_a_kill_is_applied_once_after_it(
    tmp_path: Path, mode: str
) -> None:
    db = tmp_path / "tickets.db"
    await parked_ticket(db)
    await run_child(db, mode)
    async with AgentSystem(path=db) as system:
        pending = await system.store.pending("t1")  # type: ignore[union-attr]
        assert [m.message_id for m in pending if m.kind in ("hold", "Hold")] == ["hold-1"]
        handles = await system.recover(TICKETS)  # the orphan ("apply") or the woken one ("post")
        assert [handle.session_id for handle in handles] == ["t1"]
        result = await handles[0].result()
        assert result.exit_reason is ExitReason.WAITING
        assert result.state.notes.count("held: once") == 1
        # A sender that retries after the crash changes nothing: the id is known.
        again = await system.send(TICKETS, "t1", Hold(text="once"), message_id="hold-1")
        assert again.duplicate
        if again.handle is not None:
            await again.handle.result()
        assert len(await applied_holds(system)) == 1
        state = await system.stored(TICKETS, "t1").state()
        assert state.notes.count("held: once") == 1
        report = await system.stored(TICKETS, "t1").replay(reexecute=True)
        assert report.ok, report.divergence


async def test_a_timer_fires_after_a_kill_and_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "tickets.db"
    await run_child(db, "timer")
    async with AgentSystem(path=db) as system:
        record = await system.stored(TICKETS, "t2").record()
        assert record.status == "waiting"
        assert record.wake_at is not None
        assert await system.recover(TICKETS) == []  # not due yet: nothing to do
    clock = VirtualClock(start=record.wake_at - 1)  # the hour has (nearly) passed
    applied = Applied()
    async with AgentSystem(path=db, clock=clock, listeners=[applied]) as system:
        assert await system.recover(TICKETS) == []  # not due: the system now serves its timers
        clock.advance(1)  # due: the system's timer watch wakes it
        await applied.wait_for(1)
        state = await system.stored(TICKETS, "t2").state()
        assert state.notes[-1] == "reminder: check in"
        report = await system.stored(TICKETS, "t2").replay(reexecute=True)
        assert report.ok, report.divergence
