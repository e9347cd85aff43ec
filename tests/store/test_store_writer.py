"""The thread writer of `SQLiteStore`: its own cache of sessions, two stores on one file,
and what happens to a write whose caller stopped waiting."""

from __future__ import annotations

import functools
import sqlite3
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from structlog.testing import capture_logs

from arkhon_rheo.errors import DuplicateEvent
from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import SQLiteStore
from tests.store.test_store import event, events
from tests.store.test_store_batch_wait import WriterGate
from tests.support.store_rows import WriterBegins

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def test_a_session_written_by_another_store_is_read_back_not_overwritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    async with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        await mine.create_session("s", machine="m", snapshot={})
        await mine.append("s", events("s", 1, 2))  # mine now remembers last_seq 2
        await theirs.append("s", [event("s", 3)], status="paused")
        with pytest.raises(DuplicateEvent) as caught:
            await mine.append("s", [event("s", 3)])  # its memory says 3 is next: it is not
        assert caught.value.seq == 3
        assert "#4" in str(caught.value)  # the next number, read from the file
        await mine.append("s", [event("s", 4)])  # the status it keeps is the file's
        record = await mine.record("s")
        assert (record.last_seq, record.status) == (4, "paused")
        assert [e.seq for e in await theirs.history("s")] == [1, 2, 3, 4]
        await mine.set_status("s", "finished")
        await theirs.append("s", [event("s", 5)])
        assert (await mine.record("s")).status == "finished"


async def test_a_released_lease_lets_the_writer_forget_the_session(tmp_path: Path) -> None:
    path = tmp_path / "lease.db"
    async with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        await mine.create_session("s", machine="m", snapshot={})
        await mine.acquire("s", "me", ttl=60)
        await mine.append("s", [event("s", 1)])
        await mine.release("s", "me")
        await theirs.acquire("s", "them", ttl=60)
        await theirs.append("s", [event("s", 2)])
        await theirs.release("s", "them")
        await mine.acquire("s", "me", ttl=60)
        await mine.append("s", [event("s", 3)])
        assert [e.seq for e in await mine.history("s")] == [1, 2, 3]
        assert mine.statistics().pending == 0


async def test_a_refused_write_whose_caller_was_cancelled_is_logged(tmp_path: Path) -> None:
    path = tmp_path / "cancelled.db"
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
        begins = WriterBegins(store)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the writer's thread waits for this lock
        try:
            with capture_logs() as logs:
                with anyio.CancelScope() as scope:

                    async def cancel_once_queued() -> None:
                        while store.statistics().pending == 0:
                            await anyio.lowlevel.checkpoint()
                        scope.cancel()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cancel_once_queued)
                        await store.append("s", [event("s", 2)])  # not the next number
                assert scope.cancelled_caught
                await begins.wait()  # the writer took the abandoned write; it waits for the lock
                blocker.execute("COMMIT")
                await store.append("s", [event("s", 1)])  # behind the refused one
        finally:
            blocker.close()
        refused = [entry for entry in logs if entry["event"] == "store.write_refused"]
        assert [entry["session_id"] for entry in refused] == ["s"]
        assert [e.seq for e in await store.history("s")] == [1]
        assert store.statistics().pending == 0


async def test_reads_run_behind_the_writes_queued_before_them(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "order.db", durability=Durability.ASYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
        for seq in range(1, 51):
            await store.append("s", [event("s", seq)])  # acknowledged once queued
        assert [e.seq for e in await store.history("s")] == list(range(1, 51))


async def test_a_batch_updates_a_status_that_changes_and_one_that_does_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "statuses.db"
    async with SQLiteStore(path, durability=Durability.BATCHED) as store:
        for sid in "abc":
            await store.create_session(sid, machine="m", snapshot={})
            await store.append(sid, [event(sid, 1)])  # the writer now caches each session
        gate = WriterGate(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.append, "c", [event("c", 2)])
            await gate.held()  # the next three writes form one batch
            tg.start_soon(functools.partial(store.append, "a", [event("a", 2)], status="paused"))
            tg.start_soon(store.append, "b", [event("b", 2)])
            tg.start_soon(store.set_status, "c", "finished")
            while store._writer.queued < 4:  # type: ignore[union-attr]  # tickets, not events
                await anyio.lowlevel.checkpoint()
            gate.open()
        records = {sid: await store.record(sid) for sid in "abc"}
        assert {sid: (r.last_seq, r.status) for sid, r in records.items()} == {
            "a": (2, "paused"),
            "b": (2, "running"),
            "c": (2, "finished"),
        }
    with sqlite3.connect(path) as db:  # the file's rows, not the writer's cache
        rows = db.execute("SELECT id, last_seq, status FROM sessions ORDER BY id").fetchall()
    assert rows == [("a", 2, "paused"), ("b", 2, "running"), ("c", 2, "finished")]
