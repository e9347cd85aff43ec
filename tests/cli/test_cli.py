"""The ``arkhon-rheo`` command line, each command on the file a demo run leaves.

One demo run per module (20 agents, faults and gates turned up, and a seed
whose fault plan fails one of them, so the file holds finished, failed and
paused sessions); a test that changes sessions works
on its own copy of the file. Commands run in-process through ``main(argv)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.cli import demo_agent, main
from arkhon_rheo.session._owner import Owner
from arkhon_rheo.store import SQLiteStore

MACHINE = "arkhon_rheo.cli:demo_agent"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


def run(*argv: str) -> tuple[int, str, str]:
    """``main(argv)`` with its stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str) -> Any:
    code, out, err = run(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    summary = run_json(
        "demo",
        "--sessions",
        "20",
        "--seed",
        "3",
        "--fault-rate",
        "0.4",
        "--gate-rate",
        "0.2",
        "--store",
        str(path),
    )
    assert summary["sessions"] == 20
    assert {"finished", "failed", "paused"} <= set(summary["outcomes"])
    return path


@pytest.fixture
def store(demo_file: Path, tmp_path: Path) -> str:
    """A copy of the demo's file, for a test that changes it."""
    copy = tmp_path / "copy.db"
    shutil.copy(demo_file, copy)
    return str(copy)


def sessions(store: str, status: str) -> list[str]:
    return [row["session_id"] for row in run_json("sessions", "--status", status, "--store", store)]


# -- demo ---------------------------------------------------------------------------


def test_demo_prints_a_summary_and_the_commands_to_inspect_it(tmp_path: Path) -> None:
    code, out, _ = run("demo", "--sessions", "12", "--store", str(tmp_path / "d.db"))
    assert code == 0
    assert "12 supervised ReAct agents, fault plan seed 0" in out
    for measure in (
        "sessions finished",
        "transient retries",
        "stage restarts",
        "faults injected: model",
        "rate_limited",
        "commits/s",
    ):
        assert measure in out
    assert f"arkhon-rheo sessions --store {tmp_path / 'd.db'}" in out
    listed = run_json("sessions", "--store", str(tmp_path / "d.db"))
    assert len(listed) == 12


def demo_summary(path: Path, backend: str, *extra: str) -> dict[str, Any]:
    summary: dict[str, Any] = run_json(
        "demo", "--sessions", "60", "--seed", "5", "--fault-rate", "0.4", "--gate-rate", "0.1",
        "--backend", backend, "--store", str(path), *extra,
    )  # fmt: skip
    return summary


def test_demo_outcomes_are_reproducible_by_seed_on_asyncio_and_trio(tmp_path: Path) -> None:
    on_asyncio = demo_summary(tmp_path / "a.db", "asyncio")
    on_trio = demo_summary(tmp_path / "t.db", "trio")
    measures = ("outcomes", "agent_exits", "retries", "restarts", "faults", "commits")
    assert {k: on_asyncio[k] for k in measures} == {k: on_trio[k] for k in measures}
    assert sum(on_asyncio["outcomes"].values()) == 60
    # the plan reached every target with every kind of fault it holds
    faults = on_asyncio["faults"]
    assert set(faults["model"]) == {"rate_limited", "malformed_reply"}
    assert "tool_timeout" in faults["tool:population"]
    assert any("transient" in faults[t] for t in ("tool:population", "tool:add") if t in faults)
    stage_kinds = {kind for t, kinds in faults.items() if t.startswith("stage:") for kind in kinds}
    assert stage_kinds == {"recoverable", "fatal"}
    # every fatal fault failed its session; the gates paused the others that ran to them
    fatal = sum(kinds.get("fatal", 0) for kinds in faults.values())
    assert on_asyncio["outcomes"]["failed"] >= fatal > 0
    assert on_asyncio["outcomes"]["paused"] > 0
    assert on_asyncio["faults_injected"] == sum(sum(k.values()) for k in faults.values())
    # a second run in the same file (new session ids) injects the same faults
    again = demo_summary(tmp_path / "a.db", "asyncio")
    assert {k: again[k] for k in measures} == {k: on_asyncio[k] for k in measures}
    assert len(run_json("sessions", "--store", str(tmp_path / "a.db"))) == 120


def test_demo_with_no_faults_and_no_gates_finishes_every_agent(tmp_path: Path) -> None:
    summary = run_json(
        "demo", "--sessions", "8", "--fault-rate", "0", "--gate-rate", "0",
        "--store", str(tmp_path / "d.db"),
    )  # fmt: skip
    assert summary["outcomes"] == {"finished": 8}
    assert summary["faults"] == {}
    assert summary["retries"] == summary["restarts"] == 0
    assert summary["commits"] == 8 * 6  # start, think, act, think, act, think


def test_demo_counts_retries_and_restarts_it_injected(demo_file: Path) -> None:
    rows = run_json("sessions", "--store", str(demo_file))
    failed = [row for row in rows if row["status"] == "failed"]
    assert failed
    assert all("(injected)" in row["exit_reason"] for row in failed)


# -- sessions ------------------------------------------------------------------------


def test_sessions_lists_status_machine_steps_and_exit_reason(demo_file: Path) -> None:
    rows = run_json("sessions", "--store", str(demo_file))
    assert len(rows) == 20
    assert {row["machine"] for row in rows} == {"demo-react-agent"}
    finished = next(row for row in rows if row["status"] == "finished")
    assert finished["steps"] >= 6
    assert finished["exit_reason"] == "finished"
    code, out, _ = run("sessions", "--store", str(demo_file))
    assert code == 0
    assert "20 sessions" in out
    assert "exit reason" in out
    assert finished["session_id"] in out


def test_sessions_filters_by_status(demo_file: Path) -> None:
    paused = run_json("sessions", "--status", "paused", "--store", str(demo_file))
    assert paused
    assert {row["status"] for row in paused} == {"paused"}
    both = run_json(
        "sessions", "--status", "paused", "--status", "failed", "--store", str(demo_file)
    )
    assert {row["status"] for row in both} == {"paused", "failed"}
    assert len(run_json("sessions", "--limit", "3", "--store", str(demo_file))) == 3


def test_a_missing_store_file_is_not_found_and_not_created(tmp_path: Path) -> None:
    for argv in (
        ["sessions"],
        ["show", "s1"],
        ["graph", "s1"],
        ["replay", "s1", "-m", MACHINE],
        ["resume", "s1", "-m", MACHINE],
        ["rollback", "s1", "1", "-m", MACHINE],
        ["fork", "s1", "-m", MACHINE],
        ["decide", "s1", "abort", "-m", MACHINE],
    ):
        code, _, err = run(*argv, "--store", str(tmp_path / "none.db"))
        assert code == 3, argv
        assert "no store file" in err
        assert "Traceback" not in err
    assert not (tmp_path / "none.db").exists()


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_text("not sqlite at all " * 100)
    code, _, err = run("sessions", "--store", str(tmp_path / "junk.db"))
    assert code == 1
    assert "error:" in err
    assert "Traceback" not in err


# -- show ----------------------------------------------------------------------------


def test_show_prints_the_event_history(demo_file: Path) -> None:
    sid = sessions(str(demo_file), "finished")[0]
    data = run_json("show", sid, "--store", str(demo_file))
    events = data["events"]
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert events[0]["stage"] == "start"
    assert events[-1]["to_state"] == "FINISHED"
    thought = next(e for e in events if e["kind"] == "step" and e["stage"] == "think")
    assert any(call["kind"] == "model" for call in thought["io"]["io"])
    code, out, _ = run("show", sid, "--store", str(demo_file))
    assert code == 0
    for text in ("INITIALIZED → THINKING", "tool:population", "messages", "attempt"):
        assert text in out


def test_show_marks_the_failure_of_a_failed_session(demo_file: Path) -> None:
    sid = sessions(str(demo_file), "failed")[0]
    events = run_json("show", sid, "--store", str(demo_file))["events"]
    assert events[-1]["kind"] == "failure"
    assert events[-1]["to_state"] == "FAILED"
    assert events[-1]["error"]["error_type"] == "Fatal"
    _, out, _ = run("show", sid, "--store", str(demo_file))
    assert "failure Fatal" in out


def test_show_an_unknown_session_is_not_found(demo_file: Path) -> None:
    code, out, err = run("show", "no-such-session", "--store", str(demo_file))
    assert (code, out) == (3, "")
    assert "no session 'no-such-session'" in err


# -- graph ---------------------------------------------------------------------------


def test_graph_of_the_machine_is_mermaid() -> None:
    code, out, _ = run("graph", MACHINE)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert "    [*] --> INITIALIZED" in lines
    assert "    THINKING --> ACTING: think" in lines
    assert "    ACTING --> THINKING: act" in lines
    assert "    FINISHED --> [*]" in lines
    data = run_json("graph", MACHINE)
    assert data["mermaid"] == out
    assert data["visits"] == {}
    assert {"from": "THINKING", "to": "ACTING", "stages": ["think"], "taken": 0,
            "declared": True} in data["edges"]  # fmt: skip


def test_graph_of_a_session_counts_the_visits(demo_file: Path) -> None:
    sid = sessions(str(demo_file), "finished")[0]
    data = run_json("graph", sid, "--store", str(demo_file))
    taken = {(edge["from"], edge["to"]): edge["taken"] for edge in data["edges"]}
    assert taken[("INITIALIZED", "THINKING")] == 1
    assert taken[("THINKING", "ACTING")] == taken[("ACTING", "THINKING")] == 2
    assert data["initial"] == "INITIALIZED"
    for state, visits in data["visits"].items():  # the start, then each move into it
        into = sum(edge["taken"] for edge in data["edges"] if edge["to"] == state)
        assert visits == into + (state == "INITIALIZED")
    assert "    THINKING --> ACTING: think x2" in data["mermaid"].splitlines()
    overlay = run("graph", sid, "--machine", MACHINE, "--store", str(demo_file))[1]
    lines = overlay.splitlines()
    assert "    ACTING --> THINKING: act x2" in lines  # visited, on the machine's graph
    assert "    ACTING --> FAILED: act" in lines  # declared, not taken
    assert "    FINISHED --> [*]" in lines
    edges = run_json("graph", sid, "-m", MACHINE, "--store", str(demo_file))["edges"]
    failed = next(edge for edge in edges if (edge["from"], edge["to"]) == ("ACTING", "FAILED"))
    assert failed == {
        "from": "ACTING", "to": "FAILED", "stages": ["act"], "taken": 0, "declared": True
    }  # fmt: skip


def test_graph_writes_a_file(demo_file: Path, tmp_path: Path) -> None:
    sid = sessions(str(demo_file), "failed")[0]
    target = tmp_path / "path.mmd"
    assert run("graph", sid, "-o", str(target), "--store", str(demo_file))[0] == 0
    assert target.read_text().startswith("stateDiagram-v2\n")
    assert "FAILED" in target.read_text()


def test_graph_bad_targets(demo_file: Path) -> None:
    assert run("graph", "no_such_module_xyz:machine")[0] == 3
    assert run("graph", "arkhon_rheo.cli:nothing_here")[0] == 3
    code, _, err = run("graph", "arkhon_rheo:__version__")
    assert code == 2
    assert "expected a Machine" in err
    assert run("graph", "unknown-id", "--store", str(demo_file))[0] == 3
    sid = sessions(str(demo_file), "finished")[0]
    code, _, err = run(
        "graph", sid, "-m", "tests.cli.test_cli:other_machine", "--store", str(demo_file)
    )
    assert code == 2
    assert "runs machine 'demo-react-agent'" in err


# -- replay --------------------------------------------------------------------------


@BACKENDS
def test_replay_verifies_and_reexecutes(demo_file: Path, backend: str) -> None:
    sid = sessions(str(demo_file), "finished")[0]
    report = run_json("replay", sid, "-m", MACHINE, "--backend", backend, "--store", str(demo_file))
    assert report["ok"]
    assert report["checked"] == report["events"] > 0
    again = run_json(
        "replay", sid, "--reexecute", "-m", MACHINE, "--backend", backend,
        "--store", str(demo_file),
    )  # fmt: skip
    assert again["ok"]
    assert again["reexecuted"] > 0
    code, out, _ = run("replay", sid, "-m", MACHINE, "--store", str(demo_file))
    assert code == 0
    assert "ok: the log folds" in out


def test_replay_reports_a_divergence_with_status_1(store: str) -> None:
    import sqlite3

    sid = sessions(store, "finished")[0]
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute(
            "UPDATE events SET patch = ? "
            "WHERE session = (SELECT n FROM sessions WHERE id = ?) AND seq = 6",
            ('{"set": {"answer": "tampered"}}', sid),
        )
    code, out, _ = run("replay", sid, "-m", MACHINE, "--store", store)
    assert code == 1
    assert "diverged at event 6" in out


def test_replay_with_the_wrong_machine_is_a_usage_error(demo_file: Path) -> None:
    sid = sessions(str(demo_file), "finished")[0]
    code, _, err = run(
        "replay", sid, "-m", "tests.cli.test_cli:other_machine", "--store", str(demo_file)
    )
    assert code == 2
    assert "Pass the machine it was started with" in err
    assert run("replay", sid, "-m", "nocolon", "--store", str(demo_file))[0] == 2
    assert run("replay", "nope", "-m", MACHINE, "--store", str(demo_file))[0] == 3
    code, _, err = run("replay", sid, "--store", str(demo_file))  # --machine is required
    assert code == 2


# -- decide --------------------------------------------------------------------------


@BACKENDS
def test_decide_resume_runs_the_paused_session_to_its_end(store: str, backend: str) -> None:
    sid = sessions(store, "paused")[0]
    result = run_json(
        "decide", sid, "resume", "-m", MACHINE, "--backend", backend, "--store", store
    )
    assert result["exit_reason"] == "finished"
    assert result["state"]["answer"]
    assert sid in sessions(store, "finished")


def test_decide_edit_is_validated_like_the_api_and_refusals_write_nothing(store: str) -> None:
    sid = sessions(store, "paused")[0]
    before = run_json("show", sid, "--store", store)["events"]
    code, _, err = run("decide", sid, "edit", "--set", "turns=-1", "-m", MACHINE, "--store", store)
    assert code == 1
    assert "invalid value for 'turns'" in err
    code, _, err = run(
        "decide", sid, "edit", "--set", 'lifecycle="FINISHED"', "-m", MACHINE, "--store", store
    )
    assert code == 1
    assert "outside its write set" in err
    code, _, err = run(
        "decide", sid, "edit", "--set", "turns={oops", "-m", MACHINE, "--store", store
    )
    assert code == 2
    assert "not valid JSON" in err
    assert run("decide", sid, "edit", "--set", "noequals", "-m", MACHINE, "--store", store)[0] == 2
    assert run_json("show", sid, "--store", store)["events"] == before  # nothing written
    edited = run_json("decide", sid, "edit", "--set", "stop=true", "-m", MACHINE, "--store", store)
    assert edited == {"session_id": sid, "decision": "edit", "status": "paused"}
    after = run_json("show", sid, "--store", store)["events"]
    assert after[-1]["kind"] == "decision"
    assert after[-1]["patch"] == {"set": {"stop": True}}
    result = run_json("decide", sid, "resume", "-m", MACHINE, "--store", store)
    assert result["state"]["exit"] == "stopped"


def test_decide_abort_and_its_bad_inputs(store: str) -> None:
    paused = sessions(store, "paused")
    sid = paused[0]
    assert run("decide", sid, "edit", "-m", MACHINE, "--store", store)[0] == 2  # no --set
    assert run("decide", sid, "abort", "--value", "1", "-m", MACHINE, "--store", store)[0] == 2
    assert run("decide", sid, "resume", "--set", "a=1", "-m", MACHINE, "--store", store)[0] == 2
    assert run("decide", sid, "maybe", "-m", MACHINE, "--store", store)[0] == 2
    code, _, err = run("decide", sid, "resume", "--value", "1", "-m", MACHINE, "--store", store)
    assert code == 2
    assert "takes no resume value" in err
    code, out, _ = run("decide", sid, "abort", "-m", MACHINE, "--store", store)
    assert code == 0
    assert "aborted" in out
    assert sid in sessions(store, "aborted")
    code, _, err = run("decide", sid, "abort", "-m", MACHINE, "--store", store)
    assert code == 1
    assert "not paused" in err
    assert run("decide", "nope", "abort", "-m", MACHINE, "--store", store)[0] == 3


def hold_lease(store: str, session_id: str) -> None:
    """Lease ``session_id`` to another live owner (this process, another system)."""

    async def take() -> None:
        async with SQLiteStore(store) as db:
            await db.acquire(session_id, str(Owner.current()), ttl=600)

    anyio.run(take)


def test_a_locked_session_exits_4(store: str) -> None:
    sid = sessions(store, "paused")[0]
    hold_lease(store, sid)
    for argv in (
        ["decide", sid, "resume"],
        ["resume", sid],
        ["rollback", sid, "1"],
    ):
        code, _, err = run(*argv, "-m", MACHINE, "--store", store)
        assert code == 4, argv
        assert "is driven by process" in err
        assert "Traceback" not in err
    assert run_json("sessions", "--status", "paused", "--store", store)  # still readable


# -- rollback, resume, fork ------------------------------------------------------------


@BACKENDS
def test_rollback_then_resume(store: str, backend: str) -> None:
    sid = sessions(store, "finished")[0]
    events = run_json("show", sid, "--store", store)["events"]
    acted = next(e["seq"] for e in events if e["kind"] == "step" and e["stage"] == "act")
    event = run_json(
        "rollback", sid, str(acted), "-m", MACHINE, "--backend", backend, "--store", store
    )
    assert event["kind"] == "rollback"
    assert event["info"]["rolled_back_to"] == acted
    assert event["to"] == "THINKING"  # the state after the first tool round
    assert sid in sessions(store, "rolled_back")
    result = run_json("resume", sid, "-m", MACHINE, "--backend", backend, "--store", store)
    assert result["exit_reason"] == "finished"
    assert result["state"]["answer"]
    code, out, _ = run("rollback", sid, str(acted), "-m", MACHINE, "--store", store)
    assert code == 0
    assert f"rolled back to its state after event {acted}" in out


def test_rollback_and_resume_bad_inputs(store: str) -> None:
    sid = sessions(store, "finished")[0]
    code, _, err = run("rollback", sid, "999", "-m", MACHINE, "--store", store)
    assert code == 2
    assert "between 0 (the start)" in err
    assert run("rollback", sid, "minus", "-m", MACHINE, "--store", store)[0] == 2
    assert run("rollback", sid, "-1", "-m", MACHINE, "--store", store)[0] == 2
    assert run("rollback", "nope", "1", "-m", MACHINE, "--store", store)[0] == 3
    code, _, err = run("resume", sid, "-m", MACHINE, "--store", store)
    assert code == 1
    assert "error:" in err
    assert run("resume", "nope", "-m", MACHINE, "--store", store)[0] == 3
    code, _, err = run("resume", sid, "-m", "tests.cli.test_cli:other_machine", "--store", store)
    assert code == 2


def test_fork_at_an_event_then_resume_the_fork(store: str) -> None:
    sid = sessions(store, "finished")[0]
    fork = run_json("fork", sid, "--at", "2", "--new-id", "f1", "-m", MACHINE, "--store", store)
    assert fork == {"session_id": "f1", "parent": sid, "at_seq": 2}
    rows = {row["session_id"]: row for row in run_json("sessions", "--store", store)}
    assert rows["f1"]["status"] == "forked"
    assert rows["f1"]["parent"] == sid
    result = run_json("resume", "f1", "-m", MACHINE, "--store", store)
    assert result["exit_reason"] == "finished"
    code, _, err = run("fork", sid, "--new-id", "f1", "-m", MACHINE, "--store", store)
    assert code == 1
    assert "f1" in err
    assert run("fork", sid, "--at", "99", "-m", MACHINE, "--store", store)[0] == 2
    assert run("fork", "nope", "-m", MACHINE, "--store", store)[0] == 3


# -- run -----------------------------------------------------------------------------


@BACKENDS
def test_run_a_machine_with_input(tmp_path: Path, backend: str) -> None:
    path = str(tmp_path / "run.db")
    result = run_json(
        "run", "tests.cli.test_cli:other_machine", "--input", '{"user_input": "hi"}',
        "--session-id", "r1", "--backend", backend, "--store", path,
    )  # fmt: skip
    assert result["exit_reason"] == "finished"
    assert result["state"]["answer"] == "HI"
    assert [row["session_id"] for row in run_json("sessions", "--store", path)] == ["r1"]


def test_run_a_factory_and_its_bad_inputs(tmp_path: Path) -> None:
    path = str(tmp_path / "run.db")
    code, out, _ = run("run", MACHINE, "--input", '{"task": "[agent 3] go"}', "--store", path)
    assert code == 0
    assert "finished" in out
    code, _, err = run("run", MACHINE, "--input", '{"turns": -5}', "--store", path)
    assert code == 2
    assert "turns" in err
    code, _, err = run("run", MACHINE, "--input", "{bad", "--store", path)
    assert code == 2
    assert "not valid JSON" in err
    assert run("run", MACHINE, "--input", "[1]", "--store", path)[0] == 2
    code, out, _ = run("run", MACHINE, "--store", path)  # no task: the start stage refuses
    assert code == 1
    assert "failed" in out
    assert "Fatal: nothing to do" in out
    assert run("run", "tests.cli.test_cli:needs_an_argument", "--store", path)[0] == 2


# -- the program itself ----------------------------------------------------------------


def test_usage_errors_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["nonsense"]) == 2
    assert main(["--version"]) == 0
    assert "arkhon-rheo 0.1.0" in capsys.readouterr().out
    assert main(["demo", "--sessions", "0"]) == 2


#: Runs the command line, or the inspector's, in a process where trio cannot be imported.
WITHOUT_TRIO = """
import sys
sys.modules["trio"] = None  # not installed, as far as imports go
from arkhon_rheo.cli import main
from arkhon_rheo.inspector.__main__ import main as inspector
sys.exit((inspector if sys.argv[1] == "inspect" else main)(sys.argv[2:]))
"""


def test_a_backend_that_is_not_installed_names_the_extra_to_install(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for argv in (
        ["cli", "demo", "--backend", "trio", "--store", str(store)],
        ["inspect", "--store", str(store.parent / "inspected.db"), "--backend", "trio"],
    ):
        (store.parent / "inspected.db").touch()  # the inspector looks for it before its loop
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_TRIO, *argv],
            capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "--backend trio needs trio, which is not installed" in done.stderr
        assert "pip install 'arkhon-rheo[trio]'" in done.stderr
        assert "anyio[trio]" not in done.stderr
        assert "Traceback" not in done.stderr
    assert not store.exists()  # refused before anything was stored


def test_the_console_script_runs_in_a_subprocess(demo_file: Path) -> None:
    script = Path(sys.executable).parent / "arkhon-rheo"
    if not script.exists():
        pytest.skip("the arkhon-rheo console script is not installed (pip install -e .)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [str(script), "sessions", "--json", "--store", str(demo_file)],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 20
    missing = subprocess.run(
        [str(script), "show", "x", "--store", str(demo_file.parent / "none.db")],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 3
    assert "no store file" in missing.stderr
    assert "Traceback" not in missing.stderr


# -- targets the tests load by MODULE:ATTR ---------------------------------------------


class ShoutState(AgentState):
    lifecycle: L = L.INITIALIZED
    user_input: str = ""
    answer: str = ""


@stage(reads={"user_input"}, writes={"answer"}, next=L.FINISHED)
async def shout(view: StateView[ShoutState]) -> Patch:
    return Patch(answer=view.user_input.upper())


#: A machine other than the demo's (``run`` targets it; so do the wrong-machine checks).
other_machine = Machine(
    name="shout",
    state_type=ShoutState,
    initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.FINISHED}},
    stages={L.INITIALIZED: shout},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
)


def needs_an_argument(x: int) -> Any:
    return demo_agent()


def test_inspect_is_a_command_with_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--help"]) == 0
    assert "--store" in capsys.readouterr().out
    assert main(["inspect", "--store", "no-such-file.db"]) == 3
    assert "no store file" in capsys.readouterr().err


def test_exit_codes_follow_the_error_type_never_its_words() -> None:
    from arkhon_rheo import SessionBusy, SessionError, SessionLocked
    from arkhon_rheo._errors import CommandError
    from arkhon_rheo.cli._app import _exit_code
    from arkhon_rheo.cli._common import ExitStatus

    busy = SessionBusy("session 's' is in use", session_id="s")
    assert _exit_code(busy) is ExitStatus.LOCKED
    assert (
        _exit_code(SessionLocked(session_id="s", owner="h/1/x", expires_at=0.0))
        is ExitStatus.LOCKED
    )
    # A message that only mentions being busy is not a busy session.
    assert (
        _exit_code(SessionError("upstream busy, running here", session_id="s")) is ExitStatus.FAILED
    )
    assert _exit_code(CommandError("bad", code=ExitStatus.USAGE)) is ExitStatus.USAGE
