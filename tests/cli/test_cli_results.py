"""``resume`` and ``decide`` print how the session ended and its answer, as ``run`` does.

And ``resume`` of a session paused at a gate says which ``arkhon-rheo decide``
command answers it (not the Python API).
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo.cli import main

if TYPE_CHECKING:
    from pathlib import Path

MACHINE = "arkhon_rheo.cli:demo_agent"
SHOUT = "tests.cli.test_cli:other_machine"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str) -> Any:
    code, out, err = run(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def paused(tmp_path: Path) -> tuple[str, str]:
    """A store whose agents all paused at their gate, and one of them."""
    store = str(tmp_path / "gates.db")
    run_json("demo", "--sessions", "2", "--fault-rate", "0", "--gate-rate", "1", "--store", store)
    rows = run_json("sessions", "--status", "paused", "--store", store)
    return store, rows[0]["session_id"]


def test_decide_approve_prints_the_answer(paused: tuple[str, str]) -> None:
    store, sid = paused
    code, out, err = run("decide", sid, "approve", "-m", MACHINE, "--store", store)
    assert code == 0, err
    assert f"session {sid}: finished" in out
    [answer] = [line for line in out.splitlines() if line.startswith("  answer: ")]
    assert len(answer) > len("  answer: ")


def test_resume_of_a_paused_session_gives_the_decide_command(paused: tuple[str, str]) -> None:
    store, sid = paused
    code, out, err = run("resume", sid, "-m", MACHINE, "--store", store)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert f"arkhon-rheo decide {sid} approve --machine {MACHINE} --store {store}" in err
    assert "system.stored" not in err
    assert "approve()" not in err


def test_resume_prints_the_answer(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    code, out, err = run(
        "run", SHOUT, "--input", '{"user_input": "hello"}', "--session-id", "s1",
        "--store", store,
    )  # fmt: skip
    assert code == 0, err
    assert "answer: HELLO" in out  # run says it too
    run_json("rollback", "s1", "0", "-m", SHOUT, "--store", store)
    code, out, err = run("resume", "s1", "-m", SHOUT, "--store", store)
    assert code == 0, err
    assert "session s1: finished" in out
    assert "answer: HELLO" in out
