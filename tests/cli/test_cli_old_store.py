"""A command that only reads leaves a store of an older schema version as it was.

Opening a store of an older version upgrades it in place; ``sessions``,
``show``, ``graph``, ``check``, ``replay`` and ``inspect`` (without
``--machine``) read an upgraded temporary copy instead, say so in one line on
stderr, and leave the file's bytes and modification time as they were, with
nothing created beside it. The stores are the real ones older versions wrote
(``tests/fixtures/store-v*.db``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.cli import main
from arkhon_rheo.cli._common import read_only_store

if TYPE_CHECKING:
    from pathlib import Path

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")
LEDGER = "tests.fixtures.store_v3:ledger_machine"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def old_store(tmp_path: Path, version: int) -> tuple[Path, bytes, int]:
    """A copy of the fixture store of ``version``: its path, bytes and (past) mtime."""
    path = tmp_path / "old.db"
    shutil.copyfile(os.path.join(FIXTURES, f"store-v{version}.db"), path)
    old = os.stat(path).st_mtime_ns - 10_000_000_000  # well in the past: any write shows
    os.utime(path, ns=(old, old))
    return path, path.read_bytes(), old


def assert_untouched(path: Path, before: bytes, mtime: int) -> None:
    assert path.read_bytes() == before
    assert os.stat(path).st_mtime_ns == mtime
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no -wal, no -shm


def stored_ids(version: int) -> list[str]:
    with open(os.path.join(FIXTURES, f"store-v{version}.json"), encoding="utf-8") as file:
        data = json.load(file)
    if "records" in data:
        return sorted(record["session_id"] for record in data["records"])
    return sorted(data)  # version 3: the histories by session id


def assert_noted(err: str, version: int) -> None:
    [line] = err.splitlines()
    assert f"schema version {version}" in line
    assert "upgraded temporary copy" in line
    assert "AgentSystem" in line  # how to upgrade it for real


@pytest.mark.parametrize("version", [4, 5, 6])
def test_sessions_lists_an_old_store_and_leaves_it_untouched(tmp_path: Path, version: int) -> None:
    path, before, mtime = old_store(tmp_path, version)
    code, out, err = run("sessions", "--json", "--store", str(path))
    assert code == 0, err
    assert sorted(row["session_id"] for row in json.loads(out)) == stored_ids(version)
    assert_noted(err, version)
    assert_untouched(path, before, mtime)


def test_sessions_of_a_version_3_store(tmp_path: Path) -> None:
    path, before, mtime = old_store(tmp_path, 3)
    code, out, err = run("sessions", "--json", "--store", str(path))
    assert code == 0, err
    assert sorted(row["session_id"] for row in json.loads(out)) == stored_ids(3)
    assert_noted(err, 3)
    assert_untouched(path, before, mtime)


def test_show_and_graph_read_an_old_store_untouched(tmp_path: Path) -> None:
    path, before, mtime = old_store(tmp_path, 6)
    code, out, err = run("show", "a", "--store", str(path))
    assert code == 0, err
    assert "a" in out
    assert_noted(err, 6)
    code, out, err = run("graph", "a", "--session", "--store", str(path))
    assert code == 0, err
    assert "Thinking" in out
    assert_untouched(path, before, mtime)


def test_check_and_replay_read_an_old_store_untouched(tmp_path: Path) -> None:
    path, before, mtime = old_store(tmp_path, 3)
    session = "done"
    code, out, err = run("check", "-m", LEDGER, "--json", "--store", str(path))
    assert code == 0, err
    checked = json.loads(out)
    assert session in {row["session_id"] for row in checked["sessions"]}
    assert_noted(err, 3)
    code, out, err = run("replay", session, "-m", LEDGER, "--json", "--store", str(path))
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    assert_untouched(path, before, mtime)


def test_the_temporary_copy_is_upgraded_and_then_gone(tmp_path: Path) -> None:
    path, before, mtime = old_store(tmp_path, 5)
    with contextlib.redirect_stderr(io.StringIO()), read_only_store(str(path)) as copy:
        assert copy != str(path)
        assert os.path.exists(copy)
    assert not os.path.exists(os.path.dirname(copy))
    assert_untouched(path, before, mtime)


def test_a_store_upgraded_for_real_is_read_where_it_is(tmp_path: Path) -> None:
    import anyio

    from arkhon_rheo.store import SQLiteStore

    path, before, _ = old_store(tmp_path, 6)

    async def upgrade() -> None:
        async with SQLiteStore(path):  # opening it upgrades it, as the note says
            pass

    anyio.run(upgrade)
    assert path.read_bytes() != before
    err = io.StringIO()
    with contextlib.redirect_stderr(err), read_only_store(str(path)) as where:
        assert where == str(path)
    assert err.getvalue() == ""
    code, out, errors = run("sessions", "--json", "--store", str(path))
    assert code == 0, errors
    assert errors == ""
    assert sorted(row["session_id"] for row in json.loads(out)) == stored_ids(6)


def test_inspect_serves_an_old_store_from_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inspector is given the upgraded copy (the server itself is tested in
    # tests/inspector); with --machine it may decide, so it opens the store itself.
    import arkhon_rheo.inspector.__main__ as inspector

    path, before, mtime = old_store(tmp_path, 6)
    served: list[list[str]] = []

    def serve(arguments: list[str]) -> int:
        served.append(list(arguments))
        if "--machine" not in arguments:
            assert arguments[-2] == "--store"  # the last --store given wins
            assert os.path.isfile(arguments[-1])
        return 0

    monkeypatch.setattr(inspector, "main", serve)
    code, _, err = run("inspect", "--store", str(path), "--port", "0")
    assert code == 0, err
    assert_noted(err, 6)
    [arguments] = served
    assert arguments[-2:] != ["--store", str(path)]
    assert not os.path.exists(arguments[-1])  # the copy is gone once the inspector stops
    assert_untouched(path, before, mtime)
    code, _, err = run("inspect", "--store", str(path), "--machine", LEDGER)
    assert code == 0, err
    assert served[1][-1] == LEDGER  # the store as given: the inspector opens it
