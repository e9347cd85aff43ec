"""Two processes open one store file of an older schema: one upgrades it, the other waits.

Workers restarted together after a package upgrade all open the same file of
schema version 7; the first to take its write lock rebuilds its inbox, in one
transaction (a large file: many seconds). The others wait for that upgrade, up
to their ``upgrade_timeout``, then open the upgraded file; past it they raise
`StoreUpgrading`, which says so and what to do (not SQLite's bare "database is
locked" after ``busy_timeout``).

The upgrading process is a real second process on a copy of
``fixtures/store-v7.db``; a hook (`_schema._UPGRADES` replaced in that process
alone) holds its upgrade transaction open, its rows rewritten, until the test
lets it commit, so nothing here depends on how long an upgrade takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from structlog.testing import capture_logs

from arkhon_rheo.errors import ConfigurationError, StoreError, StoreUpgrading
from arkhon_rheo.store import SQLiteStore
from tests.fixtures.store_v7 import DB, RECORDS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from anyio.abc import Process

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

#: Process A: opens the file, its upgrade held (write lock taken, inbox rebuilt,
#: uncommitted) until ``release`` exists; then reads every session's inbox back.
_UPGRADER = r"""
import sys, time
from pathlib import Path
import anyio
from arkhon_rheo.store import SQLiteStore, _schema

path, held, release = sys.argv[1:4]
upgrade = _schema._UPGRADES[7]

def holding():
    yield from upgrade()
    Path(held).touch()
    while not Path(release).exists():
        time.sleep(0.01)

_schema._UPGRADES[7] = holding

async def main():
    async with SQLiteStore(path) as store:
        print(sum([len(await store.messages(r.session_id)) for r in await store.sessions()]))

anyio.run(main)
"""


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 7 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    return path


def _version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
    return int(version)


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(60):
        while not condition():  # noqa: ASYNC110 - another process's doing, or a log line
            await anyio.sleep(0.01)


@contextlib.asynccontextmanager
async def _upgrading(path: Path) -> AsyncIterator[tuple[Process, Path]]:
    """Process A upgrading ``path``, its transaction held open; yields it and its release file."""
    held, release = path.with_suffix(".held"), path.with_suffix(".release")
    command = [sys.executable, "-c", _UPGRADER, str(path), str(held), str(release)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the tree under test
    async with await anyio.open_process(command, env=env, stderr=subprocess.STDOUT) as process:
        try:
            await _until(lambda: held.exists() or process.returncode is not None)
            assert process.returncode is None, "the upgrading process ended early"
            yield process, release
        finally:
            release.touch()
            with anyio.fail_after(60):
                await process.wait()


async def _read_back(process: Process) -> str:
    assert process.stdout is not None
    chunks = [chunk async for chunk in process.stdout]
    return b"".join(chunks).decode()


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


async def _assert_unchanged(store: SQLiteStore) -> None:
    """The store holds what the version 7 file held, read back by the code that wrote it."""
    expected = json.loads(RECORDS.read_text())
    assert [asdict(r) for r in await store.sessions()] == expected["records"]
    for sid, events in expected["histories"].items():
        assert _jsonable([asdict(e) for e in await store.history(sid)]) == events
    for sid, messages in expected["inboxes"].items():
        assert _jsonable([asdict(m) for m in await store.messages(sid)]) == messages


async def test_a_process_opening_a_file_another_upgrades_waits_then_opens_it(
    old_file: Path,
) -> None:
    async with _upgrading(old_file) as (upgrader, release):
        with capture_logs() as logs:
            async with anyio.create_task_group() as group:
                opened = anyio.Event()

                async def open_it() -> None:
                    async with SQLiteStore(old_file, upgrade_timeout=120) as store:
                        opened.set()
                        await _assert_unchanged(store)

                group.start_soon(open_it)
                # It found the upgrade under way and waits (well past its busy_timeout).
                await _until(lambda: any(e["event"] == "store.upgrade_wait" for e in logs))
                assert not opened.is_set()
                assert _version(old_file) == 7  # nothing committed yet
                release.touch()
        (wait,) = [e for e in logs if e["event"] == "store.upgrade_wait"]
        assert (wait["version"], wait["upgrade_timeout"]) == (7, 120)
        output = await _read_back(upgrader)
    assert upgrader.returncode == 0, output
    inboxes = json.loads(RECORDS.read_text())["inboxes"]
    assert output.split() == [str(sum(map(len, inboxes.values())))]
    assert _version(old_file) == 8


@pytest.mark.parametrize("bound", [0, 0.2])
async def test_past_its_upgrade_timeout_it_raises_store_upgrading(
    old_file: Path, bound: float
) -> None:
    async with _upgrading(old_file) as (upgrader, _):
        with capture_logs() as logs, pytest.raises(StoreUpgrading) as caught:
            async with SQLiteStore(old_file, upgrade_timeout=bound, busy_timeout=0.05):
                pytest.fail("opened a file another process was upgrading")
        error = caught.value
        assert (error.location, error.version, error.waited) == (str(old_file), 7, bound)
        text = str(error)
        assert "another process is upgrading the schema of the store" in text
        assert "upgrade_timeout" in text
        assert "database is locked" not in text
        assert isinstance(error.__cause__, sqlite3.OperationalError)  # SQLite's own, kept
        # Waited (and said so) only when it had time to.
        assert any(e["event"] == "store.upgrade_wait" for e in logs) == (bound > 0)
    assert upgrader.returncode == 0
    # The upgrade went through untouched by the process that gave up.
    async with SQLiteStore(old_file) as store:
        await _assert_unchanged(store)


async def test_the_wait_for_another_process_s_upgrade_can_be_cancelled(old_file: Path) -> None:
    async with _upgrading(old_file):
        with capture_logs() as logs:
            async with anyio.create_task_group() as group:
                store = SQLiteStore(old_file, upgrade_timeout=600)
                scope = anyio.CancelScope()

                async def open_it() -> None:
                    with scope:
                        async with store:
                            pytest.fail("opened a file another process was upgrading")

                group.start_soon(open_it)
                await _until(lambda: any(e["event"] == "store.upgrade_wait" for e in logs))
                scope.cancel()
        assert scope.cancelled_caught
        with pytest.raises(StoreError, match="cannot reopen a store once it has been closed"):
            await store.__aenter__()


@pytest.mark.parametrize("bound", [-1.0, float("nan")])
async def test_a_bad_upgrade_timeout_is_refused(bound: float) -> None:
    with pytest.raises(ConfigurationError, match="upgrade_timeout must be >= 0 seconds"):
        SQLiteStore("never.db", upgrade_timeout=bound)


async def test_the_upgrade_writes_the_new_inbox_not_the_old_one_zeroed(old_file: Path) -> None:
    # 2,000 applied messages of 1.5 KB: in the version 7 table each spills to an
    # overflow page, about 2.6 times the pages the rowid table gives them.
    payload = json.dumps({"q": "x" * 1500})
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        (n,) = db.execute("SELECT n FROM sessions WHERE id = 'a'").fetchone()
        db.executemany(
            "INSERT INTO inbox (session, position, message_id, kind, payload, posted_at, "
            "due_at, applied_seq) VALUES (?, ?, ?, 'Ask', ?, 1.0, 1.0, 1)",
            ((n, 1000 + i, f"bulk{i}", payload) for i in range(2000)),
        )
        db.commit()
        (secure,) = db.execute("PRAGMA secure_delete").fetchone()
    async with SQLiteStore(old_file) as store:
        # The upgrade's log, checkpointed at its commit, is still its full size here.
        log = (old_file.parent / (old_file.name + "-wal")).stat().st_size
        with contextlib.closing(sqlite3.connect(old_file)) as db:
            (freed,) = db.execute("PRAGMA freelist_count").fetchone()
            (page,) = db.execute("PRAGMA page_size").fetchone()
        assert len(await store.messages("a")) == 2002
    # The old table's pages were freed, not each written again as zeros (an SQLite
    # built with SECURE_DELETE, as Debian's is, zeroes them: then the log held them too).
    assert freed > 2000
    assert log < freed * page, (secure, log, freed)


def test_the_inbox_rebuild_leaves_the_connection_s_secure_delete_as_it_was(
    old_file: Path,
) -> None:
    from arkhon_rheo.store._driver import step
    from arkhon_rheo.store._schema import _UPGRADES

    with contextlib.closing(sqlite3.connect(old_file, isolation_level=None)) as db:
        for setting, reads in (("ON", 1), ("OFF", 0), ("FAST", 2)):
            db.execute(f"PRAGMA secure_delete = {setting}")
            db.execute("BEGIN IMMEDIATE")
            script = _UPGRADES[7]()
            step(script, next(script), lambda s: db.execute(s[0], tuple(s[1])).fetchall())
            db.execute("ROLLBACK")
            assert db.execute("PRAGMA secure_delete").fetchone() == (reads,)
