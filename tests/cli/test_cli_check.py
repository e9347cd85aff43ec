"""``arkhon-rheo check``: before a deploy, every stored session of a machine read by the new code.

The store is made by running version 1 of the notes machine
(`tests.support.versioned`): a session paused at its gate, one left running
mid-stage, and a session of another machine, which ``check`` leaves alone.
Commands run in-process through ``main(argv)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.cli import main
from arkhon_rheo.store import SQLiteStore
from tests.support import versioned as V
from tests.support.store_rows import set_event
from tests.support.tickets import TICKETS, Ticket

if TYPE_CHECKING:
    from pathlib import Path

MODULE = "tests.support.versioned"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


def run(*argv: str) -> tuple[int, str, str]:
    """``main(argv)`` with its stdout and stderr captured."""
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
    async with SQLiteStore(path) as store:
        await store.set_status("running", "running")  # as a process killed mid-stage leaves it


@pytest.fixture
def old_store(tmp_path: Path) -> str:
    """A store of version 1's ``paused`` and ``running`` sessions, and a ticket."""
    path = tmp_path / "v1.db"
    anyio.run(_version_1, path)
    return str(path)


def rows(path: str) -> dict[str, list[Any]]:
    with sqlite3.connect(path) as db:
        found = {
            "events": db.execute("SELECT * FROM events ORDER BY session, seq").fetchall(),
            "snapshots": db.execute("SELECT * FROM snapshots").fetchall(),
            "sessions": db.execute("SELECT id, status, last_seq FROM sessions").fetchall(),
        }
    db.close()
    return found


@BACKENDS
def test_check_passes_when_every_session_loads_and_verifies(old_store: str, backend: str) -> None:
    before = rows(old_store)
    for target in ("renamed", "removed", "added", "v1"):
        code, out, err = run(
            "check", "--machine", f"{MODULE}:{target}", "--store", old_store, "--backend", backend
        )
        assert (code, err) == (0, ""), out
        assert "all 2 session(s) load and verify" in out
        assert "ticket" not in out  # another machine's session is left alone
    assert rows(old_store) == before  # nothing was written


def test_check_json_says_how_each_session_is_read(old_store: str) -> None:
    code, out, _ = run("check", "-m", f"{MODULE}:renamed", "--store", old_store, "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["machine"], data["version"], data["ok"], data["failed"]) == ("notes", 2, True, 0)
    sessions = {row["session_id"]: row for row in data["sessions"]}
    assert set(sessions) == {"paused", "running"}
    for row in sessions.values():
        assert row["ok"] is True
        assert row["reason"] is None
        assert row["version"] == 1
        assert row["reading"] == "upgraded from version 1"
        assert row["checked"] == row["events"] > 0
    code, out, _ = run("check", "-m", f"{MODULE}:added", "--store", old_store, "--json")
    assert {row["reading"] for row in json.loads(out)["sessions"]} == {"compatible change"}
    code, out, _ = run("check", "-m", f"{MODULE}:v1", "--store", old_store, "--json")
    assert {row["reading"] for row in json.loads(out)["sessions"]} == {"as stored"}


@BACKENDS
def test_check_reports_a_session_no_upgrade_covers_and_fails(old_store: str, backend: str) -> None:
    before = rows(old_store)
    code, out, err = run(
        "check",
        "--machine",
        f"{MODULE}:renamed_undeclared",
        "--store",
        old_store,
        "--backend",
        backend,
    )
    assert code == 1, (out, err)
    assert err == ""
    assert "field 'score' is gone from NotesRenamed" in out
    assert "2 of 2 session(s) would not load under this code" in out
    code, out, _ = run("check", "-m", f"{MODULE}:retyped", "--store", old_store, "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False
    assert data["failed"] == 2
    for row in data["sessions"]:
        assert row["ok"] is False
        assert row["reading"] == "changed, not declared"
        assert row["reason"].startswith("ConfigurationError: ")
        assert "field 'score' changed type from int to str" in row["reason"]
        assert "upgrades={1: Upgrade(" in row["reason"]
    assert rows(old_store) == before


def test_check_reports_a_damaged_log(old_store: str) -> None:
    with sqlite3.connect(old_store) as db:
        set_event(db, "running", 1, patch={"set": {"score": 9}, "append": {"notes": ["note 0"]}})
    db.close()
    code, out, _ = run("check", "-m", f"{MODULE}:renamed", "--store", old_store, "--json")
    assert code == 1
    sessions = {row["session_id"]: row for row in json.loads(out)["sessions"]}
    assert sessions["paused"]["ok"] is True
    assert sessions["running"]["reason"].startswith("diverges at event 1: ")


async def _empty(path: Path) -> None:
    async with SQLiteStore(path):
        pass


def test_check_with_no_session_of_the_machine(old_store: str, tmp_path: Path) -> None:
    code, out, _ = run("check", "-m", "tests.support.tickets:TICKETS", "--store", old_store)
    assert code == 0
    assert "all 1 session(s) load and verify" in out
    empty = tmp_path / "empty.db"
    anyio.run(_empty, empty)
    code, out, _ = run("check", "-m", f"{MODULE}:v1", "--store", str(empty))
    assert code == 0
    assert "no stored session of machine 'notes'" in out


def test_check_needs_a_store_and_a_machine(tmp_path: Path) -> None:
    code, _, err = run("check", "-m", f"{MODULE}:renamed", "--store", str(tmp_path / "none.db"))
    assert code == 3
    assert "no store file" in err
    code, _, err = run("check", "--store", str(tmp_path / "none.db"))
    assert code == 2
