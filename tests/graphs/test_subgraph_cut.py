"""A child whose run is cut before it ends: `recover` and a parent's `Worker` get the pair going.

The child is approved in a system that does not serve its parent's machine,
and that run is cut while the child's stage runs: its process is SIGKILLed
(`tests/support/cut_child.py`; the child stays ``"running"``, its lease held by
a dead process) or the system leaves its ``async with`` (the child ends
``"cancelled"``). Nothing posts the child's end, as it has none: the parent,
parked on it, is woken instead, its step resumes the child, which meets its
gate again and pauses; its next answer ends both, the parent told once.
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

from arkhon_rheo import AgentSystem, ExitReason, MemoryStore
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.system import Worker
from tests.support.cut_child import CHILD, Counts, Main, open_store, pair

if TYPE_CHECKING:
    from arkhon_rheo import Machine
    from arkhon_rheo.protocols import Store
    from tests.support.cut_child import Auth

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="a cut child is SIGKILLed"),
]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "cut_child.py"
ENDED = f"child-ended:{CHILD}"


def where_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the store is: a SQLite file, or the test run's PostgreSQL database."""
    if kind == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "s.db")


async def park(store: Store, parent: Machine[Main]) -> ExitReason:
    """Start parent ``m1``: its child pauses at its gate, and it parks."""
    async with AgentSystem(store=store) as system:
        result = await system.run(parent, Main(user="alice"), session_id="m1")
    return result.exit_reason


async def kill_after_approval(where: str) -> None:
    """Approve the child in another process, and SIGKILL it inside the child's next stage."""
    process = await anyio.open_process(
        [sys.executable, str(SCRIPT), where],
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(60):  # a hung child, not a timing threshold
            while b"ready\n" not in seen:
                try:
                    seen += await process.stdout.receive()
                except anyio.EndOfStream:
                    pytest.fail(f"the child ended before it was ready: {seen.decode()}")
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await process.wait()  # reaped: its pid names no process now
        await process.aclose()


async def leave_after_approval(store: Store, child: Machine[Auth], counts: Counts) -> None:
    """Approve the child in a system that leaves its block inside the child's next stage."""
    counts.hang, counts.inside = True, anyio.Event()
    async with AgentSystem(store=store) as system:  # it does not serve the parent's machine
        await system.stored(child, CHILD).approve(True)
        await counts.inside.wait()
    counts.hang = False


async def cut(how: str, store: Store, where: str, child: Machine[Auth], counts: Counts) -> str:
    """Cut the child's run after its approval (``how``); return the child's status after it."""
    if how == "killed":
        await kill_after_approval(where)
    else:
        await leave_after_approval(store, child, counts)
    return (await store.record(CHILD)).status


@pytest.mark.parametrize(
    ("how", "kind"),
    [("killed", "sqlite"), ("killed", "postgres"), ("left", "sqlite"), ("left", "postgres")],
)
async def test_recover_of_the_parents_machine_gets_a_cut_child_going(
    how: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    counts = Counts()
    parent, child = pair(counts)
    where = where_of(kind, tmp_path, request)
    async with open_store(where) as store:
        parked = await park(store, parent)
        status = await cut(how, store, where, child, counts)
        async with AgentSystem(store=store, machines=[parent]) as system:
            (woken,) = await system.recover(parent)
            again = await woken.result()
            paused = await store.record(CHILD)
            assert await system.recover(parent) == []  # it waits on a paused child now
            handle = await system.stored(child, CHILD).approve(True)
            assert (await handle.result()).ok
            result = await system.session("m1").result()
            pending = await store.pending("m1")
            history = await system.stored(child, CHILD).history()
    assert parked is ExitReason.WAITING
    assert status == ("running" if how == "killed" else "cancelled")
    assert (woken.session_id, again.exit_reason) == ("m1", ExitReason.WAITING)
    assert paused.status == "paused"  # the child met its gate again
    assert result.ok
    assert result.state.token == "token-for-alice-True"
    assert pending == ()
    assert counts.issued == 1
    resumes = [event for event in history if event.kind is EventKind.RESUME]
    assert len(resumes) == 1  # the parent's step resumed the cut child
    assert resumes[0].info is not None
    assert resumes[0].info["previous_status"] == status


async def test_a_child_cut_twice_still_tells_its_parent_once(tmp_path: Path) -> None:
    counts = Counts()
    parent, child = pair(counts)
    store = MemoryStore()
    async with store:
        await park(store, parent)
        for _ in range(2):  # cut, restarted (it pauses again), cut again
            assert await cut("left", store, "", child, counts) == "cancelled"
            async with AgentSystem(store=store, machines=[parent]) as system:
                (woken,) = await system.recover(parent)
                assert (await woken.result()).exit_reason is ExitReason.WAITING
        async with AgentSystem(store=store) as system:  # the last answer, elsewhere
            assert (await (await system.stored(child, CHILD).approve(True)).result()).ok
        async with AgentSystem(store=store, machines=[parent]) as system:
            await until(store, {"m1": "finished"})
            state = await system.stored(parent, "m1").state()
        messages = await store.messages("m1")
    assert state.token == "token-for-alice-True"
    assert [message.message_id for message in messages] == [ENDED]
    assert (counts.entered, counts.issued) == (3, 1)


async def test_recover_leaves_a_child_a_live_system_runs(tmp_path: Path) -> None:
    counts = Counts()
    parent, child = pair(counts)
    store = MemoryStore()
    async with store:
        await park(store, parent)
        counts.hang, counts.inside = True, anyio.Event()
        async with AgentSystem(store=store) as runner:
            await runner.stored(child, CHILD).approve(True)
            await counts.inside.wait()
            async with AgentSystem(store=store, machines=[parent]) as system:
                assert await system.recover(parent) == []
                record = await store.record("m1")
            runner.session(CHILD).cancel()
    assert (record.status, record.waiting["child"]) == ("waiting", CHILD)


@pytest.mark.parametrize(
    ("how", "kind"), [("killed", "sqlite"), ("left", "sqlite"), ("left", "postgres")]
)
async def test_a_worker_of_the_parents_machine_gets_a_cut_child_going(
    how: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    counts = Counts()
    parent, child = pair(counts)
    where = where_of(kind, tmp_path, request)
    async with open_store(where) as store:
        await park(store, parent)
        await cut(how, store, where, child, counts)
        worker = Worker(store, [parent], poll_interval=0.05)
        async with AgentSystem(store=store) as client, anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await until(store, {"m1": "waiting", CHILD: "paused"})  # the worker restarted both
            handle = await client.stored(child, CHILD).approve(True)  # here, not the worker
            assert (await handle.result()).ok
            await until(store, {"m1": "finished"})
            worker.drain()
        state = await client.stored(parent, "m1").state()
        messages = await store.messages("m1")
    assert state.token == "token-for-alice-True"
    assert [message.message_id for message in messages] == [ENDED]
    assert counts.issued == 1


async def until(store: Store, statuses: dict[str, str]) -> None:
    """Wait until each session has its status in ``statuses`` (read from the store)."""
    with anyio.fail_after(30):
        while True:
            records = {r.session_id: r.status for r in await store.sessions()}
            if all(records.get(sid) == status for sid, status in statuses.items()):
                return
            await anyio.sleep(0.01)
