"""A store file of an older schema is upgraded in place, and nothing it held is lost.

``fixtures/store-v3.db`` was written by the code at ``6306053`` (schema version
3, rows as JSON text); ``fixtures/store-v3.json`` is every session's history as
that code read it back. Opened by this code, the file is upgraded to compact
rows in one transaction: the histories read back the same, the stored digests
still verify, and its sessions resume, decide and fork as before.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._schema import SCHEMA_VERSION
from tests.fixtures.store_v3 import DB, HISTORY, Ledger, ledger_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False))


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 3 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
    return path


async def test_the_histories_read_back_as_the_old_code_read_them(old_file: Path) -> None:
    expected = json.loads(HISTORY.read_text())
    async with SQLiteStore(old_file) as store:
        for sid, events in expected.items():
            assert [_plain(asdict(e)) for e in await store.history(sid)] == events
        loaded = await store.load("done")
        assert loaded.snapshot_seq == 8
        assert [e.seq for e in loaded.events] == [9]
        assert [r.session_id for r in await store.sessions()] == ["done", "paused", "forked"]
        assert (await store.record("forked")).parent == "done"
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert dict(db.execute("SELECT key, value FROM meta"))["schema_version"] == str(
            SCHEMA_VERSION
        )
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert not any(name.startswith("old_") for name in tables)
        # The old patches were rewritten compact: values only, names in the shape.
        (patch,) = db.execute("SELECT patch FROM events WHERE seq = 2 AND session = 1").fetchone()
        assert json.loads(patch) == [1, ["t0"], [[0, "note 0"]]]


async def test_old_digests_verify_and_the_sessions_go_on(old_file: Path) -> None:
    machine, gated = ledger_machine(), ledger_machine(gated=True)
    async with AgentSystem(path=old_file) as system:
        report = await system.stored(machine, "done").replay()
        assert report.ok, report.divergence
        assert report.checked == report.events == 9
        assert report.state.total == 1 + 2 + 3
        assert (await system.stored(gated, "paused").replay()).ok
        handle = await system.stored(gated, "paused").approve()
        assert handle is not None
        assert (await handle.result()).exit_reason is ExitReason.FINISHED
        forked = await system.resume(machine, "forked")
        result = await forked.result()
        assert result.exit_reason is ExitReason.FINISHED
        assert [n.cycle for n in result.state.notes] == [0, 1, 2]
        await system.run(machine, Ledger(cycles=2), session_id="new")
        for sid in ("paused", "forked", "new"):
            report = await system.stored(gated if sid == "paused" else machine, sid).replay()
            assert report.ok, (sid, report.divergence)
            assert report.checked == report.events
