"""The SQLite store's file: what it refuses (untouched), and sharing it between processes."""

from __future__ import annotations

import os
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from arkhon_rheo import SessionLocked, StoreError
from arkhon_rheo.errors import StoreCorrupt
from arkhon_rheo.protocols import StoredEvent
from arkhon_rheo.store import SQLiteStore, StoreState
from arkhon_rheo.store._schema import APPLICATION_ID, SCHEMA_VERSION
from tests.support.store_rows import insert_event

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import Process

pytestmark = pytest.mark.anyio


def event(session_id: str, seq: int, size: int = 10) -> StoredEvent:
    return StoredEvent(
        session_id, seq, "step", "act", "A", "B", (), ("x",), {"set": {"x": "y" * size}}, 1, 0, 0
    )


def fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    """The file's bytes, its mtime and what lies beside it."""
    siblings = sorted(p.name for p in path.parent.iterdir())
    return path.read_bytes(), path.stat().st_mtime_ns, siblings


def garbage(path: Path) -> None:
    path.write_bytes(b"this is my thesis, not a database\n" * 200)


def foreign_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('ada')")
    db.close()


def other_application(path: Path) -> None:
    foreign_sqlite(path)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 1234")
    db.close()


def our_id_but_unrelated_tables(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("CREATE TABLE notes (body TEXT)")
    db.close()


def truncated_header(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20)


async def make_store_file(path: Path) -> None:
    async with SQLiteStore(path) as store:
        await store.create_session("s", machine="m", snapshot={"v": 0})
        for seq in range(1, 201):
            await store.append("s", [event("s", seq, size=300)])


def set_user_version(path: Path, version: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {version}")
    db.close()


def damage_schema_page(path: Path) -> None:
    with path.open("r+b") as file:
        file.seek(100)
        file.write(b"\xde\xad\xbe\xef" * 900)


def damage_data_pages(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as file:
        for offset in range(4096 * 2, size, 4096):
            file.seek(offset)
            file.write(b"\xff" * 64)


@pytest.mark.parametrize(
    ("craft", "message"),
    [
        (garbage, "not an SQLite database"),
        (truncated_header, "not an SQLite database"),
        (foreign_sqlite, "application_id is 0x0"),
        (other_application, "application_id is 0x4d2"),
        (our_id_but_unrelated_tables, "lacks the tables"),
    ],
)
async def test_a_file_that_is_not_ours_is_refused_untouched(
    tmp_path: Path, craft: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "victim.db"
    craft(path)
    before = fingerprint(path)
    store = SQLiteStore(path)
    with pytest.raises(StoreCorrupt, match=message) as caught:
        await store.__aenter__()
    assert str(path) in str(caught.value)
    assert caught.value.location == str(path)
    assert store.state is StoreState.CLOSED
    assert fingerprint(path) == before


async def test_another_schema_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    await make_store_file(path)
    set_user_version(path, SCHEMA_VERSION + 1)
    before = fingerprint(path)
    with pytest.raises(StoreCorrupt, match=f"schema version {SCHEMA_VERSION + 1}"):
        async with SQLiteStore(path):
            pass
    assert fingerprint(path) == before


async def test_a_damaged_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    await make_store_file(path)
    damage_schema_page(path)
    before = fingerprint(path)
    with pytest.raises(StoreCorrupt, match="damaged"):
        async with SQLiteStore(path):
            pass
    assert fingerprint(path)[:2] == before[:2]


async def test_damaged_data_is_reported_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    await make_store_file(path)
    damage_data_pages(path)
    before = fingerprint(path)
    with pytest.raises(StoreCorrupt, match="damaged"):
        async with SQLiteStore(path) as store:
            await store.history("s")
    assert fingerprint(path)[:2] == before[:2]


async def test_an_empty_file_gets_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    async with SQLiteStore(path) as store:
        await store.create_session("s", machine="m", snapshot={})
    header = path.read_bytes()[:100]
    assert int.from_bytes(header[68:72], "big") == APPLICATION_ID
    assert int.from_bytes(header[60:64], "big") == SCHEMA_VERSION
    assert header[18:20] == b"\x02\x02"  # WAL
    async with SQLiteStore(path) as store:
        assert [r.session_id for r in await store.sessions()] == ["s"]


NOT_FILES = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@NOT_FILES
async def test_a_path_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path) -> None:
    folder = tmp_path / "folder.db"
    folder.mkdir()
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    # Something waits in the pipe, so reading it would not block: the store must not read it.
    held = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(held, b"SQLite format 3\x00" + b"\x00" * 200)
        cases = [(folder, "a directory"), (fifo, "a FIFO")]
        if os.name == "posix":
            cases.append((Path(os.devnull), "a character device"))
        for path, kind in cases:
            store = SQLiteStore(path)
            with pytest.raises(StoreCorrupt, match=f"it is {kind}, not a regular file") as caught:
                await store.__aenter__()
            assert caught.value.location == str(path)
            assert store.state is StoreState.CLOSED
        assert len(os.read(held, 1000)) == 216  # all still there: nothing read
    finally:
        os.close(held)
    assert sorted(os.listdir(tmp_path)) == ["folder.db", "pipe.db"]


FIFO_CHILD = textwrap.dedent(
    """
    import sys, anyio
    from arkhon_rheo.errors import StoreCorrupt
    from arkhon_rheo.store import SQLiteStore

    async def main(path: str) -> None:
        try:
            async with SQLiteStore(path):
                print("opened")
        except StoreCorrupt as exc:
            print(exc)

    anyio.run(main, sys.argv[1], backend=sys.argv[2])
    """
)


@NOT_FILES
async def test_a_fifo_nobody_writes_is_refused_not_waited_on(
    tmp_path: Path, anyio_backend: str
) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    # In a child process: before the fix, opening the FIFO to read its header blocked
    # forever (the limit only keeps a regression from hanging the suite).
    with anyio.fail_after(60):
        result = await anyio.run_process(
            [sys.executable, "-c", FIFO_CHILD, str(fifo), anyio_backend], check=False
        )
    assert result.returncode == 0, result.stderr.decode()
    assert "it is a FIFO, not a regular file" in result.stdout.decode()


CHILD = textwrap.dedent(
    """
    import sys, anyio
    from arkhon_rheo import SessionLocked
    from arkhon_rheo.store import SQLiteStore

    async def main(path: str, owner: str, action: str) -> None:
        async with SQLiteStore(path, driver="thread") as store:
            if action == "release":
                await store.release("s", owner)
                print("released")
                return
            try:
                await store.acquire("s", owner, ttl=60)
            except SessionLocked as exc:
                print("locked by", exc.owner)
            else:
                print("acquired")

    for line in sys.stdin:  # "OWNER ACTION": each on a store opened for it
        anyio.run(main, sys.argv[1], *line.split())
        sys.stdout.flush()
    """
)


class Child:
    """Another process, opening its own store on ``path`` for each action it is told."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.stdin = process.stdin
        self.stdout = BufferedByteReceiveStream(process.stdout)

    async def run(self, owner: str, action: str = "acquire") -> str:
        await self.stdin.send(f"{owner} {action}\n".encode())
        with anyio.fail_after(120):  # a hung child, not a timing threshold
            return (await self.stdout.receive_until(b"\n", 1000)).decode().strip()


async def test_a_lease_holds_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with (
        SQLiteStore(path) as store,
        await anyio.open_process([sys.executable, "-c", CHILD, str(path)]) as process,
    ):
        child = Child(process)  # one process for the three actions: it starts once
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "parent", ttl=60)
        assert await child.run("child") == "locked by parent"
        await store.release("s", "parent")
        assert await child.run("child") == "acquired"
        with pytest.raises(SessionLocked, match="'child'"):
            await store.acquire("s", "parent", ttl=60)
        assert await child.run("child", "release") == "released"
        await store.acquire("s", "parent", ttl=60)
        await child.stdin.aclose()
        assert await process.wait() == 0


def insert_rogue_event(path: Path, session_id: str) -> None:
    """Write an event behind the store's back, without moving the session's last_seq."""
    with sqlite3.connect(path, timeout=5) as db:
        insert_event(db, session_id, 1)
    db.close()


async def test_an_unforeseen_failure_fails_its_own_caller_only(tmp_path: Path) -> None:
    path = tmp_path / "rogue.db"
    outcomes: dict[str, str] = {}

    async def write(sid: str) -> None:
        try:
            await store.append(sid, [event(sid, 1)])
        except StoreError as exc:
            outcomes[sid] = str(exc)
        else:
            outcomes[sid] = "ok"

    async with SQLiteStore(path) as store:
        for i in range(20):
            await store.create_session(f"s{i}", machine="m", snapshot={})
        insert_rogue_event(path, "s7")
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(write, f"s{i}")
        # s7 shared a batch with others: that transaction failed whole, and its
        # requests were retried one by one (so no batch of more than one committed).
        assert "UNIQUE constraint failed" in outcomes.pop("s7")
        assert store.statistics().appended == 19
        assert set(outcomes.values()) == {"ok"}
        for i in range(20):
            if i != 7:
                assert len(await store.history(f"s{i}")) == 1
