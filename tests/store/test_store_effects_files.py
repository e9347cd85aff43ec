"""The effect ledger in the SQLite file: the upgrade that adds it, and what a new file holds.

``fixtures/store-v5.db`` was written by the code at ``9348c15`` (schema version 5,
with inboxes, before effect ledgers); ``fixtures/store-v5.json`` is every
session's record, history and inbox as that code read them back. Opened by this
code, the file gains the ``effects`` table in one transaction, and keeps all it
held.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from dataclasses import asdict
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import SessionLocked
from arkhon_rheo.protocols import EffectStatus
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._schema import SCHEMA_VERSION
from tests.fixtures.store_v5 import DB, RECORDS

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 5 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (5,)
    return path


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


async def test_a_version_5_file_keeps_its_sessions_and_inboxes_and_gains_ledgers(
    old_file: Path,
) -> None:
    expected = json.loads(RECORDS.read_text())
    async with SQLiteStore(old_file, clock=lambda: 5000.0) as store:
        assert [asdict(r) for r in await store.sessions()] == expected["records"]
        for sid, events in expected["histories"].items():
            assert _jsonable([asdict(e) for e in await store.history(sid)]) == events
        for sid, messages in expected["inboxes"].items():
            assert _jsonable([asdict(m) for m in await store.messages(sid)]) == messages
        assert [m.message_id for m in await store.pending("a")] == ["m2"]
        loaded = await store.load("a")
        assert (loaded.snapshot_seq, loaded.snapshot, [e.seq for e in loaded.events]) == (
            2,
            {"n": 2},
            [3],
        )
        with pytest.raises(SessionLocked):
            await store.acquire("a", "other", ttl=1)
        # Every session has an effect ledger, empty, and it takes effects.
        assert await store.effects("a") == await store.effects("b") == ()
        _, began = await store.begin_effect("a", "k", tool="send", arguments={"to": "x"})
        assert began
        await store.finish_effect("a", "k", result="sent")
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (8,)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(SCHEMA_VERSION)
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "effects" in names
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    async with SQLiteStore(old_file) as store:
        (effect,) = await store.effects("a")
        assert (effect.status, effect.result) == (EffectStatus.DONE, "sent")
        assert (await store.record("b")).status == "waiting"


async def test_a_new_file_has_the_ledger_and_a_reopened_one_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SQLiteStore(path) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.begin_effect("s", "k", tool="t", arguments={"n": 1})
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        (row,) = db.execute("SELECT key, tool, arguments, status, attempts FROM effects")
        assert row == ("k", "t", '{"n":1}', "started", 1)
    async with SQLiteStore(path) as store:
        (effect,) = await store.effects("s")
        assert (effect.status, effect.arguments) == (EffectStatus.STARTED, {"n": 1})
