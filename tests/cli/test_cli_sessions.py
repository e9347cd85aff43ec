"""``arkhon-rheo sessions``: ids whole at any width, counts that say what was left out.

And a session whose driver was killed (SIGKILL) shows as orphaned at once,
its dead owner named, not as ``running`` until its lease runs out.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from arkhon_rheo.cli import main
from arkhon_rheo.store import SQLiteStore

#: The repository's root: the child imports the package from this worktree.
ROOT = str(Path(__file__).resolve().parents[2])


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def ids(count: int) -> list[str]:
    return [f"demo-43f95f0a1b2c-{n:04d}" for n in range(count)]


def make_store(path: Path, count: int) -> None:
    async def make() -> None:
        async with SQLiteStore(path) as store:
            for n, session_id in enumerate(ids(count)):
                await store.create_session(
                    session_id,
                    machine="a-machine-with-a-rather-long-name",
                    snapshot={},
                    status="finished" if n % 2 else "paused",
                )

    anyio.run(make)


@pytest.mark.parametrize("columns", ["60", "80", "120"])
def test_session_ids_are_never_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    path = tmp_path / "s.db"
    make_store(path, 4)
    code, out, _ = run("sessions", "--store", str(path))
    assert code == 0
    for session_id in ids(4):
        assert session_id in out, out
    assert "…" not in out  # nothing cut: long values wrap


def test_limit_and_status_say_how_many_of_how_many(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    make_store(path, 50)
    store = str(path)
    code, out, _ = run("sessions", "--limit", "2", "--store", store)
    assert code == 0
    assert f"2 of 50 sessions in {store}" in out
    code, out, _ = run("sessions", "--status", "paused", "--store", store)
    assert f"25 of 50 sessions in {store}" in out
    code, out, _ = run("sessions", "--store", store)
    assert f"50 sessions in {store}" in out
    assert " of 50" not in out


# -- a driver killed with SIGKILL ---------------------------------------------------------

CHILD = """
import sys

import anyio

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L


class Waits(AgentState):
    lifecycle: L = L.INITIALIZED
    done: bool = False


@stage(reads=set(), writes={"done"}, next=L.FINISHED)
async def forever(view: StateView[Waits]) -> Patch:
    print("ready", flush=True)
    await anyio.sleep_forever()
    return Patch(done=True)


machine = Machine(
    name="waits", state_type=Waits, initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.FINISHED}}, stages={L.INITIALIZED: forever},
    terminal={L.FINISHED, L.FAILED}, failed=L.FAILED,
)


async def main() -> None:
    async with AgentSystem(path=sys.argv[1], lease_ttl=3600) as system:
        await system.run(machine, Waits(), session_id="killed")


anyio.run(main)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="the child is killed with SIGKILL")
def test_a_session_whose_driver_was_killed_shows_orphaned_at_once(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    path = tmp_path / "s.db"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH")))),
    }
    with subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    ) as child:
        assert child.stdout is not None
        line = child.stdout.readline()  # the stage runs: the session is leased to the child
        assert line == b"ready\n", line + child.stdout.read()
        rows: Any = json.loads(run("sessions", "--json", "--store", str(path))[1])
        assert (rows[0]["status"], rows[0]["orphaned"]) == ("running", False)
        child.send_signal(signal.SIGKILL)
        child.wait()
    code, out, _ = run("sessions", "--json", "--store", str(path))
    [row] = json.loads(out)
    assert (row["status"], row["orphaned"]) == ("running", True)
    assert row["owner_dead"] == {"pid": child.pid, "host": row["owner_dead"]["host"]}
    code, out, _ = run("sessions", "--store", str(path))
    assert code == 0
    assert f"running (orphaned: owner pid {child.pid} dead)" in out
    code, out, _ = run("show", "killed", "--store", str(path))
    assert f"orphaned: owner pid {child.pid} dead" in out
