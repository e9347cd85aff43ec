"""The inbox in the SQLite file: the upgrade that adds it, and two stores sharing a file.

``fixtures/store-v4.db`` was written by the code at ``938db88`` (schema version 4,
before inboxes); ``fixtures/store-v4.json`` is every session's record and history
as that code read them back. Opened by this code, the file gains the inbox table
and the sessions' ``waiting`` and ``wake_at`` in one transaction, and keeps all
it held.

Two `SQLiteStore` on one file are two processes as far as SQLite knows (a
connection and a writer thread each): a post from one racing a park from the
other never leaves a message the session accepts behind a parked session that
nobody is told to wake.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import sqlite3
from dataclasses import asdict
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import SessionLocked
from arkhon_rheo.protocols import Durability, NewMessage
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._schema import SCHEMA_VERSION
from tests.fixtures.store_v4 import DB, RECORDS

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 4 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (4,)
    return path


async def test_a_version_4_file_keeps_its_sessions_and_gains_inboxes(old_file: Path) -> None:
    expected = json.loads(RECORDS.read_text())
    async with SQLiteStore(old_file, clock=lambda: 5000.0) as store:
        records = [asdict(r) for r in await store.sessions()]
        assert records == [{**r, "waiting": None, "wake_at": None} for r in expected["records"]]
        for sid, events in expected["histories"].items():
            assert json.loads(json.dumps([asdict(e) for e in await store.history(sid)])) == events
        loaded = await store.load("a")
        assert (loaded.snapshot_seq, loaded.snapshot, [e.seq for e in loaded.events]) == (
            2,
            {"n": 2},
            [3],
        )
        assert [(lease.session_id, lease.owner) for lease in await store.leases()] == [
            ("a", "owner")
        ]
        with pytest.raises(SessionLocked):
            await store.acquire("a", "other", ttl=1)
        # Every session has an inbox, empty.
        assert await store.messages("a") == await store.pending("b") == ()
        stored, new = await store.post("b", NewMessage("m", "Ask", {"q": 1}, 5000.0), capacity=3)
        assert (stored.position, new) == (1, True)
        assert await store.park("a", "owner", status="waiting", waiting={}, accepts=(), now=5000)
        assert await store.leases() == ()
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(SCHEMA_VERSION)
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert {"inbox", "inbox_pending", "sessions_waking"} <= names
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE status = 'waiting' "
            "AND wake_at <= 1 ORDER BY wake_at"
        ).fetchall()
        assert "sessions_waking" in str(plan)
    async with SQLiteStore(old_file) as store:
        assert [m.message_id for m in await store.pending("b")] == ["m"]
        assert (await store.record("a")).status == "waiting"


@pytest.mark.parametrize("durability", [Durability.BATCHED, Durability.ASYNC])
async def test_a_post_racing_a_park_from_another_process_never_strands_a_message(
    tmp_path: Path, durability: Durability
) -> None:
    path = tmp_path / "shared.db"
    now = 1000.0
    rounds = 40
    rng = random.Random(7)
    async with (
        SQLiteStore(path, durability=durability, clock=lambda: now) as driver,
        SQLiteStore(path, durability=durability, clock=lambda: now) as sender,
    ):
        for i in range(rounds):
            await driver.create_session(f"s{i}", machine="m", snapshot={})
            await driver.acquire(f"s{i}", "driver", ttl=60)
        outcomes: dict[str, tuple[bool, str]] = {}

        async def park(sid: str, pause: float) -> None:
            await anyio.sleep(pause)
            parked = await driver.park(
                sid, "driver", status="waiting", waiting={"for": "Ask"}, accepts={"Ask"}, now=now
            )
            outcomes[sid] = (parked, outcomes.get(sid, (False, ""))[1])

        async def send(sid: str, pause: float) -> None:
            await anyio.sleep(pause)
            await sender.post(sid, NewMessage("hello", "Ask", {"text": "hi"}, now), capacity=10)
            # Having posted, the sender wakes the session if it is parked.
            seen = (await sender.record(sid)).status
            outcomes[sid] = (outcomes.get(sid, (False, ""))[0], seen)

        for i in range(rounds):
            async with anyio.create_task_group() as tg:
                tg.start_soon(park, f"s{i}", rng.random() * 0.004)
                tg.start_soon(send, f"s{i}", rng.random() * 0.004)

        seen_both = set()
        for i in range(rounds):
            sid = f"s{i}"
            parked, seen = outcomes[sid]
            record = await sender.record(sid)
            assert [m.message_id for m in await sender.pending(sid)] == ["hello"]
            if parked:
                # The post came after the park: the sender saw the session parked,
                # and the store wakes it even if the sender dies now.
                assert (seen, record.status, record.wake_at) == ("waiting", "waiting", now)
                assert sid in {r.session_id for r in (await sender.waking(now))[0]}
            else:
                # The post came first: the park saw it and left the session to its driver.
                assert (record.status, record.waiting, record.wake_at) == ("running", None, None)
                assert [lease.owner for lease in await driver.leases() if lease.session_id == sid]
            seen_both.add(parked)
        # Both orders happen over the rounds (or the race was not raced).
        assert seen_both == {True, False}


async def test_a_post_wakes_a_session_another_process_parked(tmp_path: Path) -> None:
    # The sender's store made the session (its writer remembers it as running):
    # the wake a post brings forward follows the file, not that memory.
    path = tmp_path / "shared.db"
    async with SQLiteStore(path) as sender, SQLiteStore(path) as driver:
        await sender.create_session("s", machine="m", snapshot={})
        assert await driver.park(
            "s", None, status="waiting", waiting=None, accepts=("Ask",), now=1.0
        )
        await sender.post("s", NewMessage("m", "Ask", {}, 50.0), capacity=5)
        assert (await driver.record("s")).wake_at == 50.0
        # And a park through the stale writer reads the file back before it writes.
        await driver.set_status("s", "running")
        assert await sender.park("s", None, status="paused", waiting=1, accepts=(), now=1.0)
        record = await driver.record("s")
        assert (record.status, record.waiting, record.wake_at) == ("paused", 1, None)
