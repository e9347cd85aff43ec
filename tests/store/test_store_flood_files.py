"""Schema version 8 in the SQLite file: a post costs the same whatever its inbox holds.

Issue 41 item 11: in the version 5 to 7 inbox (a ``WITHOUT ROWID`` table keyed by
``(session, position)``, its payloads in the key's b-tree) a post's capacity
count read every pending message's payload to reach its ``applied_seq``, and its
seeks compared whole rows: 250 posts of 100 KB to one session, the last 40 took
several times the first 40. Version 8 keeps the inbox in a rowid table, its
payload last, with ``applied_seq`` in the ``inbox_pending`` index.

The cost is measured structurally, not by the clock: the bytes SQLite reads
(``rchar`` of ``/proc/self/io``: every ``pread`` of a page, cache hits of the
operating system included) while a fresh connection runs a post's batch script,
the same script the store's writer runs, with 10 and with 200 messages pending.
On PostgreSQL (whose post counts since ``8b7ceaa``), the same post's batch script:
the shared buffers its reads touch, and the bytes of the rows they return.

``fixtures/store-v7.db`` was written by the code at ``7d15dff`` (schema version 7);
``fixtures/store-v7.json`` is every session's record, history and inbox as that
code read them back. Opened by this code, the file's inbox is rebuilt in one
transaction and keeps all it held.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo.protocols import NewMessage
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.store._driver import step
from arkhon_rheo.store._plan import Post
from arkhon_rheo.store._schema import SCHEMA_VERSION
from arkhon_rheo.store._sql import write_batch
from tests.fixtures.store_v7 import DB, RECORDS

if TYPE_CHECKING:
    from arkhon_rheo.store._driver import Rows, Statement

pytestmark = pytest.mark.anyio

_IO = Path("/proc/self/io")
PAYLOAD = "x" * 20_000  # spills over several overflow pages, as any large message does


def _bytes_read() -> int:
    for line in _IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _post_script_reads(path: Path, message_id: str) -> tuple[int, list[str]]:
    """Bytes a fresh connection reads running one post's batch script, and its SQL.

    The script runs in a transaction rolled back after it: nothing is kept, and no
    checkpoint runs (a commit's checkpoint would read the log, whatever the post).
    """
    request = Post("s", (message_id, "Ask", json.dumps({"text": PAYLOAD}), 1.0, 1.0), 10_000)
    texts: list[str] = []
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("SELECT count(*) FROM sqlite_master").fetchall()  # the schema, read once

        def execute(statement: Statement) -> Rows:
            text, params, many = statement
            texts.append(text)
            if many:
                db.executemany(text, params)
                return []
            return db.execute(text, params).fetchall()  # type: ignore[arg-type]

        db.execute("BEGIN IMMEDIATE")
        before = _bytes_read()
        script = write_batch([request], now=1.0, location=str(path))
        result = step(script, next(script), execute)
        read = _bytes_read() - before
        db.execute("ROLLBACK")
    assert result.errors == [None]
    return read, texts


async def _fill(path: Path, start: int, stop: int) -> None:
    async with SQLiteStore(path) as store:
        if start == 0:
            await store.create_session("s", machine="m", snapshot={})
        for index in range(start, stop):
            message = NewMessage(f"m{index}", "Ask", {"text": PAYLOAD}, 1.0)
            await store.post("s", message, capacity=10_000)


@pytest.mark.skipif(not _IO.exists(), reason="needs Linux's /proc/self/io")
async def test_a_post_reads_the_same_whatever_its_inbox_holds(tmp_path: Path) -> None:
    path = tmp_path / "flood.db"
    await _fill(path, 0, 10)
    early, texts = _post_script_reads(path, "early")
    await _fill(path, 10, 200)  # 190 more pending, 20 KB each: 3.8 MB the post must not read
    late, _ = _post_script_reads(path, "late")
    assert any("count(*)" in text for text in texts)  # the capacity check ran
    # A few index pages more at most (one more level of a b-tree), not the payloads.
    assert late <= early + 4 * 4096, (early, late)
    assert late < 64 * 1024, late


async def test_a_post_s_statements_search_indexes_covering_what_they_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plans.db"
    await _fill(path, 0, 3)
    _, texts = _post_script_reads(path, "plan")
    with contextlib.closing(sqlite3.connect(path)) as db:
        for text in {t for t in texts if t.lstrip().upper().startswith("SELECT")}:
            params = (1,) * text.count("?")
            plan = " | ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {text}", params))
            assert "SCAN" not in plan, (text, plan)
            if "FROM inbox" in text and "payload" not in text:
                assert "COVERING INDEX" in plan, (text, plan)


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the version 7 file, to be upgraded."""
    path = tmp_path / "old.db"
    shutil.copyfile(DB, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (7,)
    return path


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


async def test_a_version_7_file_keeps_its_inboxes(old_file: Path) -> None:
    expected = json.loads(RECORDS.read_text())
    async with SQLiteStore(old_file, clock=lambda: 5000.0) as store:
        assert [asdict(r) for r in await store.sessions()] == expected["records"]
        for sid, events in expected["histories"].items():
            assert _jsonable([asdict(e) for e in await store.history(sid)]) == events
        for sid, messages in expected["inboxes"].items():
            assert _jsonable([asdict(m) for m in await store.messages(sid)]) == messages
        assert [m.message_id for m in await store.pending("a")] == ["m2"]
        # Positions go on from the last one; a known id is not posted twice.
        await store.post("a", NewMessage("m3", "Ask", {"q": 3}, 1700.0), capacity=5)
        await store.post("a", NewMessage("m2", "Ask", {"q": 9}, 1700.0), capacity=5)
        assert [(m.message_id, m.position) for m in await store.pending("a")] == [
            ("m2", 2),
            ("m3", 3),
        ]
    with contextlib.closing(sqlite3.connect(old_file)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (8,)
        assert dict(db.execute("SELECT key, value FROM meta"))["schema_version"] == "8"
        (table,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'inbox'").fetchone()
        assert "WITHOUT ROWID" not in table
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert {"inbox_pending", "sessions_waking", "sessions_live"} <= names
        assert "old_inbox" not in names
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _pg_post_reads(url: str, message_id: str) -> tuple[int, int]:
    """What one post's batch (rolled back) reads on PostgreSQL: shared buffers, and bytes back.

    Each ``SELECT`` the post's batch script runs is run once more under
    ``EXPLAIN (ANALYZE, BUFFERS)``: its shared blocks hit and read, summed; and
    the rows every statement returns, as text, summed (a payload read is sent
    whole: ``EXPLAIN`` alone would not show it, its TOAST is only read to send it).
    """
    import psycopg

    from arkhon_rheo.store._postgres_conn import PIPELINE, PIPELINE_EVERY, _execute
    from arkhon_rheo.store._postgres_sql import write_batch as pg_write_batch

    request = Post("s", (message_id, "Ask", json.dumps({"text": PAYLOAD}), 1.0, 1.0), 10_000)
    touched = returned = 0
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SET search_path = arkhon_rheo")

        def execute(statement: Statement) -> Rows:
            nonlocal touched, returned
            _, params, mode = statement
            subs: Any = params if mode in (PIPELINE, PIPELINE_EVERY) else [statement]
            for sub_text, sub_params, sub_mode in subs:
                if not sub_mode and sub_text.lstrip().upper().startswith("SELECT"):
                    ((plan,),) = connection.execute(
                        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sub_text}", sub_params
                    ).fetchall()
                    node = plan[0]["Plan"]
                    touched += node["Shared Hit Blocks"] + node["Shared Read Blocks"]
            rows = _execute(connection, statement, url)
            returned += sum(len(str(row)) for row in rows)
            return rows

        connection.execute("BEGIN")
        script = pg_write_batch([request], now=1.0, location=url, channel="flood")
        result = step(script, next(script), execute)
        connection.execute("ROLLBACK")
    assert result.errors == [None]
    return touched, returned


async def test_a_post_on_postgresql_reads_the_same_whatever_its_inbox_holds(
    postgres_url: str,
) -> None:
    import anyio.to_thread

    from arkhon_rheo.store import PostgresStore

    async def fill(start: int, stop: int) -> None:
        async with PostgresStore(postgres_url) as store:
            if start == 0:
                await store.create_session("s", machine="m", snapshot={})
            for index in range(start, stop):
                message = NewMessage(f"m{index}", "Ask", {"text": PAYLOAD}, 1.0)
                await store.post("s", message, capacity=10_000)

    await fill(0, 10)
    early = await anyio.to_thread.run_sync(_pg_post_reads, postgres_url, "early")
    await fill(10, 200)
    late = await anyio.to_thread.run_sync(_pg_post_reads, postgres_url, "late")
    # The count walks the pending rows' index entries and small heap tuples (their
    # payloads are TOASTed apart): a few pages more, and none of the 3.8 MB of payloads.
    assert late[0] <= early[0] + 16, (early, late)
    assert late[1] <= early[1] + 64, (early, late)
