"""Schema version 7 in the SQLite file: the upgrade from version 6, and what it adds.

``fixtures/store-v6.db`` was written by the code at ``904454d`` (schema version
6); ``fixtures/store-v6.json`` is every session's record, history and inbox as
that code read them back. Opened by this code, the file gains the ``accepts``
column and the ``sessions_live`` index in one transaction, keeps all it held,
and serves claims.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from dataclasses import asdict
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.protocols import NewMessage
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._schema import SCHEMA_VERSION
from tests.fixtures.store_v6 import DB, RECORDS

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 6 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (6,)
    return path


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


async def test_a_version_6_file_keeps_everything_and_serves_claims(old_file: Path) -> None:
    expected = json.loads(RECORDS.read_text())
    async with SQLiteStore(old_file, clock=lambda: 5000.0) as store:
        assert [asdict(r) for r in await store.sessions()] == expected["records"]
        for sid, events in expected["histories"].items():
            assert _jsonable([asdict(e) for e in await store.history(sid)]) == events
        for sid, messages in expected["inboxes"].items():
            assert _jsonable([asdict(m) for m in await store.messages(sid)]) == messages
        (effect,) = await store.effects("a")
        assert effect.result == "sent"
        # "a" is leased for good; "d" never was: it is the one to claim.
        claimed = await store.claim("w", machines=["counter"], limit=5, ttl=5, now=5000.0)
        assert [r.session_id for r in claimed] == ["d"]
        # "b" parked before version 7 (no kinds kept): any new message wakes it, as before.
        await store.post("b", NewMessage("x", "Other", {}, 4000.0), capacity=5)
        assert (await store.record("b")).wake_at == 4000.0
        assert [r.session_id for r in await store.claim("w", machines=["counter"], limit=5,
                                                          ttl=5, now=5000.0)] == ["b"]  # fmt: skip
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (8,)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == "8"
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "sessions_live" in names
        columns = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
        assert "accepts" in columns
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def test_a_new_file_keeps_a_parked_session_s_kinds(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SQLiteStore(path) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.park("s", None, status="waiting", waiting=None, accepts=["B", "A"], now=1.0)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT accepts FROM sessions").fetchone() == ('["A","B"]',)
        plan = " ".join(
            str(row)
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE status IN ('running', "
                "'waiting') AND machine IN ('m') ORDER BY n"
            )
        )
        assert "sessions_live" in plan
