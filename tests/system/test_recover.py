"""Recovery after a crash: a dead owner's lease is taken over at once, and the resume is told.

A child process (`tests/support/recover_child.py`) takes sessions and is SIGKILLed
inside a stage; this process then finds them orphaned, resumes or recovers
them without waiting for the lease to run out, and their history records the
resume. A live owner's sessions are left alone, with a readable refusal.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, SessionLocked
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.session._owner import Owner, is_dead
from arkhon_rheo.store import MemoryStore, SQLiteStore
from tests.support.recover_child import job_machine

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from anyio.abc import Process

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="the recovery tests kill their child with SIGKILL"
)

CHILD = Path(__file__).resolve().parents[1] / "support" / "recover_child.py"
HOST = socket.gethostname()


async def spawn(db: Path, *ids: str) -> Process:
    """Start the child on ``db`` with sessions ``ids``; return once they are all in a stage."""
    process = await anyio.open_process(
        [sys.executable, str(CHILD), str(db), *ids], stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    seen = b""
    with anyio.fail_after(60):  # a hung child, not a timing threshold
        while b"ready\n" not in seen:
            try:
                seen += await process.stdout.receive()
            except anyio.EndOfStream:
                pytest.fail(f"the child ended before it was ready: {seen.decode()}")
    return process


async def kill(process: Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGKILL)
    await process.wait()  # reaped: its pid names no process now
    await process.aclose()


@pytest.fixture
async def child(tmp_path: Path) -> AsyncIterator[tuple[Path, Process]]:
    db = tmp_path / "jobs.db"
    process = await spawn(db, "a", "b")
    try:
        yield db, process
    finally:
        await kill(process)


@pytest.mark.anyio
async def test_a_killed_owners_sessions_are_resumed_at_once(
    child: tuple[Path, Process],
) -> None:
    db, process = child
    pid = process.pid
    await kill(process)
    machine = job_machine()
    async with AgentSystem(path=db) as system:  # the dead child's leases have ~30 s left
        orphans = await system.orphans(machine)
        assert [record.session_id for record in orphans] == ["a", "b"]
        assert all(record.status == "running" for record in orphans)
        handle = await system.resume(machine, "a")  # not SessionLocked
        assert [record.session_id for record in await system.orphans()] == ["b"]
        recovered = await system.recover(machine)
        assert [h.session_id for h in recovered] == ["b"]
        assert await system.orphans() == []
        for done in (handle, *recovered):
            result = await done.result()
            assert result.ok
            assert len(result.state.steps) == 1
        history = await system.stored(machine, "a").history()
        report = await system.stored(machine, "a").replay()
    assert [event.kind for event in history] == [
        EventKind.STEP,
        EventKind.RESUME,
        EventKind.STEP,
        EventKind.STEP,
    ]
    resume = history[1]
    assert resume.info is not None
    assert resume.info["resumed_by"]["host"] == HOST
    assert resume.info["resumed_by"]["pid"] == os.getpid()
    assert resume.info["from_seq"] == 1
    assert resume.info["previous_status"] == "running"
    assert resume.info["taken_over"].startswith(f"{HOST}/{pid}/")
    assert resume.info["rerun"] == "act"  # the stage the child was killed in
    assert resume.from_state is resume.to_state
    assert report.ok
    assert report.checked == 4  # the resume event's digest holds too


@pytest.mark.anyio
async def test_a_live_owners_sessions_are_left_alone(child: tuple[Path, Process]) -> None:
    db, process = child
    machine = job_machine()
    async with AgentSystem(path=db) as system:
        assert await system.orphans(machine) == []
        assert await system.recover(machine) == []
        with pytest.raises(SessionLocked) as refused:
            await system.resume(machine, "a")
    message = str(refused.value)
    assert f"process {process.pid} on host {HOST!r}" in message
    assert re.search(r"lease runs until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, in \d+ s", message)
    assert "e+09" not in message
    assert process.returncode is None


def test_an_owner_is_dead_when_its_pid_is_gone_or_reused() -> None:
    me = Owner.current()
    assert not is_dead(str(me))
    assert Owner.parse(str(me)) == me
    assert not is_dead(f"elsewhere.example/{os.getpid()}/1/x")  # another host: cannot tell
    assert not is_dead("a lease of some other form")
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert is_dead(f"{HOST}/{int(done.stdout)}/-/x")
    if me.started != "-":  # /proc: a pid reused by a later process is told apart
        assert is_dead(f"{HOST}/{os.getpid()}/{int(me.started) - 1}/x")


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_lease_is_taken_over_only_from_the_owner_named(tmp_path: Path, kind: str) -> None:
    clock = lambda: 1000.0  # noqa: E731
    store: Any = (
        MemoryStore(clock=clock)
        if kind == "memory"
        else SQLiteStore(tmp_path / "s.db", clock=clock)
    )
    async with store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "dead", ttl=30)
        with pytest.raises(SessionLocked, match=r"until 1970-01-01T00:17:10Z, in 30 s"):
            await store.acquire("s", "me", ttl=30)
        await store.acquire("s", "me", ttl=30, replacing="dead")
        with pytest.raises(SessionLocked, match="'me'"):
            await store.acquire("s", "other", ttl=30, replacing="dead")  # too late
        assert [(lease.session_id, lease.owner) for lease in await store.leases()] == [("s", "me")]
