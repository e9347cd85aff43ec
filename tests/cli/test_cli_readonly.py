"""A command that needs a store never creates or changes a file that is not one.

A 0-byte file, a text file or another application's SQLite database given to
``sessions`` (or any command that reads a store: ``show``, ``graph``,
``replay``, ``check``, ``inspect``, and the ones that steer a stored session)
is refused in one line, its bytes and its modification time as they were, and
nothing created beside it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.cli import main

if TYPE_CHECKING:
    from pathlib import Path

MACHINE = "arkhon_rheo.cli:demo_agent"

COMMANDS = [
    ["sessions"],
    ["sessions", "--json"],
    ["show", "s1"],
    ["graph", "s1", "--session"],
    ["replay", "s1", "-m", MACHINE],
    ["check", "-m", MACHINE],
    ["resume", "s1", "-m", MACHINE],
    ["decide", "s1", "abort", "-m", MACHINE],
    ["rollback", "s1", "1", "-m", MACHINE],
    ["fork", "s1", "-m", MACHINE],
    ["send", "s1", "-m", MACHINE, "--text", "hi"],
    ["inspect"],
]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _text(path: Path) -> None:
    path.write_text("my notes, not a database\n" * 40)


def _other_sqlite(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.commit()


FILES = {"empty": _empty, "text": _text, "other-sqlite": _other_sqlite}


@pytest.mark.parametrize("kind", sorted(FILES))
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: "-".join(argv[:2]))
def test_a_file_that_is_not_a_store_is_refused_untouched(
    tmp_path: Path, kind: str, argv: list[str]
) -> None:
    path = tmp_path / "file.db"
    FILES[kind](path)
    old = os.stat(path).st_mtime_ns - 10_000_000_000  # well in the past: any write shows
    os.utime(path, ns=(old, old))
    before = path.read_bytes()
    code, out, err = run(*argv, "--store", str(path))
    assert code != 0, (out, err)
    assert err.count("\n") == 1, err
    assert "file.db" in err
    assert "Traceback" not in err
    assert "not an arkhon-rheo store" in err
    assert path.read_bytes() == before
    assert os.stat(path).st_mtime_ns == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.db"]


def test_an_empty_file_says_how_to_make_a_store(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.write_bytes(b"")
    code, _, err = run("sessions", "--store", str(path))
    assert code == 1
    assert "is empty" in err
    assert "arkhon-rheo run" in err


def test_inspect_of_a_missing_store_is_not_found_and_not_created(tmp_path: Path) -> None:
    code, _, err = run("inspect", "--store", str(tmp_path / "none.db"))
    assert code == 3
    assert "no store file" in err
    assert list(tmp_path.iterdir()) == []


def test_reading_a_store_leaves_its_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    code, _, err = run(
        "run", "tests.cli.test_cli:other_machine", "--input", '{"user_input": "hi"}',
        "--session-id", "r1", "--store", str(path),
    )  # fmt: skip
    assert code == 0, err
    old = os.stat(path).st_mtime_ns - 10_000_000_000
    os.utime(path, ns=(old, old))
    before = path.read_bytes()
    machine = "tests.cli.test_cli:other_machine"
    for argv in (
        ["sessions"],
        ["show", "r1"],
        ["graph", "r1", "--session"],
        ["replay", "r1", "-m", machine, "--reexecute"],
        ["check", "-m", machine],
    ):
        code, _, err = run(*argv, "--store", str(path))
        assert code == 0, (argv, err)
        assert path.read_bytes() == before, argv
        assert os.stat(path).st_mtime_ns == old, argv
