"""One damaged row names its session; the store's other sessions, and its tools, go on.

A store file of version 1 of the notes machine (`tests.support.versioned`) has
its ``running`` session's fingerprint or snapshot damaged with sqlite3 behind
the store's back: not JSON, nested too deep, or JSON of the wrong shape. Every
read of that session raises `StoreCorrupt` naming it; `Store.sessions` raises
`SessionsDamaged` holding the others; ``arkhon-rheo sessions`` and ``check``
report it and go on with the rest. A store's metadata naming a schema version
that is no number is refused as damaged too (SQLite and PostgreSQL), and a
PostgreSQL server that refuses the connection is one line of the command's.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.cli import main
from arkhon_rheo.errors import SessionsDamaged, StoreCorrupt
from arkhon_rheo.store import PostgresStore, SQLiteStore
from tests.support import versioned as V
from tests.support.tickets import TICKETS, Ticket

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

MODULE = "tests.support.versioned"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
RUNNING = "(SELECT n FROM sessions WHERE id = 'running')"
DEEP = "[" * 100_000 + "]" * 100_000

#: What is done to the ``running`` session's record: the fingerprint column.
RECORD_DAMAGE = {
    "fingerprint not JSON": ("fingerprint", "{not json"),
    "fingerprint nested too deep": ("fingerprint", DEEP),
}
#: Damage a record survives, which the fingerprint's reader refuses.
SHAPE_DAMAGE = {
    "fingerprint an array": "[1, 2]",
    "fingerprint a string": '"notes"',
    "fingerprint fields not a list": "json_set(fingerprint, '$.fields', 5)",
    "fingerprint without form, version 99": (
        "json_set(json_remove(fingerprint, '$.form'), '$.version', 99)"
    ),
}
SNAPSHOT_DAMAGE = {
    "snapshot not JSON": "{not json",
    "snapshot nested too deep": DEEP,
    "snapshot an array": "[1]",
}


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


async def _version_1(path: Path) -> None:
    try:
        async with AgentSystem(path=path) as system:
            await V.store_version_1(system)
            await system.run(TICKETS, Ticket(), session_id="ticket")
    finally:
        V.HOLD["event"] = V.HOLD["inside"] = None


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("damaged") / "v1.db"
    anyio.run(_version_1, path)
    return path


def damage(pristine: Path, tmp_path: Path, name: str) -> str:
    """A copy of the store with the ``running`` session damaged as ``name`` says."""
    path = tmp_path / "damaged.db"
    shutil.copy(pristine, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        if name in RECORD_DAMAGE:
            column, text = RECORD_DAMAGE[name]
            db.execute(f"UPDATE sessions SET {column} = ? WHERE id = 'running'", (text,))
        elif name in SHAPE_DAMAGE:
            value = SHAPE_DAMAGE[name]
            if value.startswith("json_"):
                db.execute(f"UPDATE sessions SET fingerprint = {value} WHERE id = 'running'")
            else:
                db.execute("UPDATE sessions SET fingerprint = ? WHERE id = 'running'", (value,))
        else:
            text = SNAPSHOT_DAMAGE[name]
            db.execute(f"UPDATE snapshots SET state = ? WHERE session = {RUNNING}", (text,))
        db.commit()
    return str(path)


def _names_running(exc: StoreCorrupt) -> None:
    assert exc.session_id == "running"
    assert "session 'running'" in str(exc)
    assert "Restore the store from a backup" in str(exc)


@pytest.mark.anyio
@pytest.mark.parametrize("name", [*RECORD_DAMAGE, *SHAPE_DAMAGE, *SNAPSHOT_DAMAGE])
async def test_every_read_of_a_damaged_session_is_store_corrupt_naming_it(
    pristine: Path, tmp_path: Path, name: str
) -> None:
    path = damage(pristine, tmp_path, name)
    async with AgentSystem(path=path) as system:
        stored = system.stored(V.v1(), "running")
        reads: list[Callable[[], Awaitable[Any]]] = [stored.state, stored.replay]
        if name not in SNAPSHOT_DAMAGE:  # the record and the events are not the snapshot
            reads += [stored.record, stored.history]
        for read in reads:
            with pytest.raises(StoreCorrupt) as info:
                await read()
            _names_running(info.value)
        # The session beside it reads as before.
        assert (await system.stored(V.v1(), "paused").replay()).ok
        store = system.store
        assert store is not None
        if name in RECORD_DAMAGE:
            with pytest.raises(SessionsDamaged) as listed:
                await store.sessions()
            assert [r.session_id for r in listed.value.records] == ["paused", "ticket"]
            assert [(sid, machine) for sid, machine, _ in listed.value.damaged] == [
                ("running", "notes")
            ]
            _names_running(listed.value)
        else:
            assert len(await store.sessions()) == 3


@BACKENDS
@pytest.mark.parametrize("name", [*RECORD_DAMAGE, "fingerprint an array", "snapshot not JSON"])
def test_the_commands_report_a_damaged_session_and_go_on(
    pristine: Path, tmp_path: Path, name: str, backend: str
) -> None:
    path = damage(pristine, tmp_path, name)
    code, out, err = run("sessions", "--store", path, "--json", "--backend", backend)
    rows = {row["session_id"]: row for row in json.loads(out)}
    assert set(rows) == {"paused", "running", "ticket"}
    assert rows["paused"]["status"] == "paused"
    assert rows["ticket"]["damaged"] is None
    if name in RECORD_DAMAGE:
        assert code == 1
        assert rows["running"]["status"] == "damaged"
        assert "session 'running' is damaged in the store" in rows["running"]["damaged"]
        code, out, err = run("sessions", "--store", path, "--backend", backend)
        assert code == 1
        assert "paused" in out
        assert "ticket" in out
        assert err.count("\n") == 1
        assert "session 'running' is damaged in the store" in err
        code, out, err = run("show", "running", "--store", path, "--backend", backend)
        assert code == 1
        assert err.startswith("arkhon-rheo show: error: session 'running' is damaged")
        assert err.count("\n") == 1
    else:
        assert code == 0
        assert rows["running"]["damaged"] is None
    code, _, err = run("show", "paused", "--store", path, "--backend", backend)
    assert (code, err) == (0, "")
    code, out, err = run(
        "check", "-m", f"{MODULE}:v1", "--store", path, "--json", "--backend", backend
    )
    assert code == 1, err
    checked = {row["session_id"]: row for row in json.loads(out)["sessions"]}
    assert checked["paused"]["ok"] is True
    assert checked["running"]["ok"] is False
    assert checked["running"]["reason"].startswith("StoreCorrupt: session 'running'")


@pytest.mark.anyio
async def test_sqlite_metadata_naming_no_schema_version_is_store_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    async with SQLiteStore(path):
        pass
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE meta SET value = 'seven' WHERE key = 'schema_version'")
        db.commit()
    with pytest.raises(StoreCorrupt, match="unexpected store metadata"):
        async with SQLiteStore(path):
            pass


@pytest.mark.anyio
async def test_postgres_metadata_naming_no_schema_version_is_store_corrupt(
    postgres_url: str,
) -> None:
    import psycopg

    async with PostgresStore(postgres_url):
        pass
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "UPDATE arkhon_rheo.meta SET value = 'seven' WHERE key = 'schema_version'"
        )
    with pytest.raises(StoreCorrupt, match="names schema version 'seven', not a number"):
        async with PostgresStore(postgres_url):
            pass


@pytest.mark.anyio
async def test_a_damaged_record_in_postgres_names_its_session(postgres_url: str) -> None:
    import psycopg

    async with PostgresStore(postgres_url) as store:
        await store.create_session("good", machine="m", snapshot={})
        await store.create_session("bad", machine="m", snapshot={}, fingerprint={"name": "m"})
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE arkhon_rheo.sessions SET fingerprint = '{x' WHERE id = 'bad'")
        connection.execute(
            "UPDATE arkhon_rheo.snapshots SET state = %s WHERE session = "
            "(SELECT n FROM arkhon_rheo.sessions WHERE id = 'good')",
            (DEEP[:20_000] + DEEP[-20_000:],),
        )
    async with PostgresStore(postgres_url) as store:
        with pytest.raises(SessionsDamaged) as listed:
            await store.sessions()
        assert [record.session_id for record in listed.value.records] == ["good"]
        with pytest.raises(StoreCorrupt, match="session 'bad' is damaged in the store"):
            await store.record("bad")
        with pytest.raises(StoreCorrupt, match="session 'good' is damaged in the store") as info:
            await store.load("good")
        assert info.value.session_id == "good"


@BACKENDS
def test_a_refused_postgres_connection_is_one_line(backend: str) -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
    url = "postgresql://nobody@127.0.0.1:1/none"
    code, out, err = run("sessions", "--store", url, "--backend", backend)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("arkhon-rheo sessions: error: cannot connect to PostgreSQL")
    assert "Connection refused" in err
