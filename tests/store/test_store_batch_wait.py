"""The thread writer's shared wait (`BatchWait` on asyncio, ``anyio.Event`` on trio).

Every caller of a batch waits on one object; a cancelled caller only stops waiting
(its write is committed, once), and a batch that fails fails each of its callers with
its own error.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
import trio
import trio.lowlevel
import trio.testing

from arkhon_rheo.errors import StoreError
from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._done import BatchWait, TrioBatchWait
from tests.store.test_store import event

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


class WriterGate:
    """Holds the writer's thread at the start of its first write transaction until opened.

    The writer's connection traces each statement as it starts; the first
    ``BEGIN IMMEDIATE`` blocks the thread there, so the tickets queued meanwhile
    form the next batch, which is queued (not yet taken) while the test acts.
    """

    def __init__(self, store: SQLiteStore) -> None:
        self._open = threading.Event()
        self._held = threading.Event()
        connection = store._writer._driver._connection  # type: ignore[union-attr]
        assert connection is not None
        connection.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE") and not self._held.is_set():
            self._held.set()
            # A bound only so that a broken store fails the test instead of hanging it.
            assert self._open.wait(timeout=60)

    async def held(self) -> None:
        """Return once the writer's thread is held."""
        await anyio.to_thread.run_sync(self._held.wait, 60)

    def open(self) -> None:
        self._open.set()


async def queued(store: SQLiteStore, tickets: int) -> None:
    """Return once ``tickets`` writes are queued or in flight."""
    while store.statistics().pending < tickets:
        await anyio.lowlevel.checkpoint()


async def test_a_cancelled_waiter_stops_waiting_and_its_write_lands_once(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "cancel.db", durability=Durability.BATCHED) as store:
        for sid in "abcd":
            await store.create_session(sid, machine="m", snapshot={})
        gate = WriterGate(store)
        outcomes: dict[str, str] = {}

        async def append(sid: str, scope: anyio.CancelScope) -> None:
            with scope:
                await store.append(sid, [event(sid, 1)])
                outcomes[sid] = "stored"
            if scope.cancelled_caught:
                outcomes[sid] = "cancelled"

        scopes = {sid: anyio.CancelScope() for sid in "abcd"}
        async with anyio.create_task_group() as tg:
            tg.start_soon(append, "a", scopes["a"])
            await gate.held()  # a's batch is in flight: the thread holds it
            for sid in "bcd":
                tg.start_soon(append, sid, scopes[sid])
            await queued(store, 4)  # b, c and d wait on the next batch, together
            scopes["a"].cancel()  # one waiter of the batch in flight
            scopes["c"].cancel()  # one of the three waiters of the queued batch
            while len(outcomes) < 2:
                await anyio.lowlevel.checkpoint()
            assert outcomes == {"a": "cancelled", "c": "cancelled"}  # before either landed
            gate.open()
        assert outcomes == {"a": "cancelled", "b": "stored", "c": "cancelled", "d": "stored"}
        for sid in "abcd":  # every write landed, once, cancelled or not
            assert [e.seq for e in await store.history(sid)] == [1]
            assert (await store.record(sid)).last_seq == 1
        assert store.statistics().pending == 0


async def test_a_failed_batch_fails_each_waiter_with_its_own_error(tmp_path: Path) -> None:
    path = tmp_path / "failed.db"
    async with SQLiteStore(path, durability=Durability.BATCHED, busy_timeout=0) as store:
        for sid in "abcd":
            await store.create_session(sid, machine="m", snapshot={})
        gate = WriterGate(store)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # every write transaction fails: the file is locked
        errors: dict[str, BaseException] = {}
        try:

            async def append(sid: str) -> None:
                try:
                    await store.append(sid, [event(sid, 1)])
                except StoreError as exc:
                    errors[sid] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(append, "a")
                await gate.held()
                for sid in "bcd":
                    tg.start_soon(append, sid)
                await queued(store, 4)
                gate.open()
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert sorted(errors) == ["a", "b", "c", "d"]
        assert len({id(error) for error in errors.values()}) == 4  # each its own
        assert all("locked" in str(error) for error in errors.values())
        for sid in "abcd":  # nothing of a failed batch was written
            assert await store.history(sid) == ()
        await store.append("b", [event("b", 1)])  # the writer goes on
        assert [e.seq for e in await store.history("b")] == [1]
        assert store.statistics().pending == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_batch_wait_wakes_every_waiter_once_and_a_cancelled_one_alone(
    anyio_backend: Any,
) -> None:
    batch = BatchWait(asyncio.get_running_loop())
    woken: list[int] = []
    cancelled: list[int] = []

    async def waiter(index: int) -> None:
        try:
            await batch.wait()
        except asyncio.CancelledError:
            cancelled.append(index)
            raise
        woken.append(index)

    tasks = [asyncio.ensure_future(waiter(index)) for index in range(4)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.gather(tasks[1], return_exceptions=True)
    assert (woken, cancelled) == ([], [1])  # the others still wait
    assert not batch.done()
    assert not batch.cancelled()
    batch.set()
    batch.set()  # once
    await asyncio.gather(*tasks, return_exceptions=True)
    assert sorted(woken) == [0, 2, 3]
    assert [task.cancelled() for task in tasks] == [False, True, False, False]
    await batch.wait()  # set already: a checkpoint


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_batch_wait_wakes_every_waiter_once_and_a_cancelled_one_alone(
    anyio_backend: Any,
) -> None:
    batch = TrioBatchWait(trio.lowlevel)
    woken: list[int] = []
    cancelled: list[int] = []

    async def waiter(index: int, scope: trio.CancelScope) -> None:
        with scope:
            await batch.wait()
            woken.append(index)
        if scope.cancelled_caught:
            cancelled.append(index)

    scopes = [trio.CancelScope() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        for index, scope in enumerate(scopes):
            nursery.start_soon(waiter, index, scope)
        await trio.testing.wait_all_tasks_blocked()
        scopes[1].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert (woken, cancelled) == ([], [1])  # the others still wait
        batch.set()
        batch.set()  # once
    assert sorted(woken) == [0, 2, 3]
    assert cancelled == [1]
    await batch.wait()  # set already: a checkpoint
