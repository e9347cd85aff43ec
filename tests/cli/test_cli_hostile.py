"""The command line against hostile input: stored text that looks like markup, JSON
Python cannot decode, and store paths that are not files.

Session ids, state values and error messages come from the store or the user:
every command prints them as they are (never as rich markup, emoji codes or
terminal control sequences) and nothing crashes. Commands run in-process
through ``main(argv)``, like the rest of the CLI tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arkhon_rheo import AgentState, Fatal, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L
from arkhon_rheo._json import MAX_DEPTH, JsonSyntaxError, read_json
from arkhon_rheo.cli import main
from arkhon_rheo.protocols import Gate

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
MACHINE = "tests.cli.test_cli_hostile:gated_machine"

#: Session ids and values rich would read as markup (some of which crash it), as an
#: emoji code or a hyperlink.
HOSTILE = (
    "[/]",
    "[bold]x[/bold]",
    "[link=https://evil.example]click[/link]",
    "a:smile:b",
    "[/usr/lib/x]",
    "[red]",
)


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


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as their rows: no cell wrapped across lines."""
    monkeypatch.setenv("COLUMNS", "1000")


def ok(*argv: str) -> str:
    """The standard output of a command that must succeed without a traceback."""
    code, out, err = run(*argv)
    assert "Traceback" not in err
    assert code == 0, err
    return out


# -- a machine that pauses, and fails on request -------------------------------------


class Note(AgentState):
    lifecycle: L = L.INITIALIZED
    text: str = ""
    answer: str = ""


@stage(reads={"text"}, writes={"answer"}, next=L.ACTING)
async def think(view: StateView[Note]) -> Patch:
    if view.text.startswith("fail:"):
        raise Fatal(f"cannot open {view.text[5:]}")
    return Patch(answer=view.text)


@stage(reads={"answer"}, writes={"answer"}, next=L.FINISHED)
async def finish(view: StateView[Note]) -> Patch:
    return Patch(answer=view.answer + "!")


def gated_machine() -> Machine[Note]:
    """A machine that pauses at a gate before its last stage."""
    return Machine(
        name="note",
        state_type=Note,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
        stages={L.INITIALIZED: think, L.ACTING: finish},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        gates=[Gate.before("finish")],
    )


def start(store: str, session_id: str, text: str, backend: str = "asyncio") -> str:
    """Run a session of `gated_machine` to its gate (or its failure); its output."""
    return run(
        "run", MACHINE, "--input", json.dumps({"text": text}), "--session-id", session_id,
        "--backend", backend, "--store", store,
    )[1]  # fmt: skip


# -- 5: stored text is never read as markup ----------------------------------------------


@BACKENDS
def test_hostile_session_ids_and_values_print_literally(tmp_path: Path, backend: str) -> None:
    store = str(tmp_path / "s.db")
    for n, hostile in enumerate(HOSTILE):
        out = start(store, hostile, hostile, backend)
        assert f"session {hostile}: paused" in out
        assert f"arkhon-rheo show {hostile} --store" in out
        assert start(store, f"{hostile}-{n}", hostile, backend)
    listed = ok("sessions", "--store", store)
    for hostile in HOSTILE:
        assert hostile in listed
        shown = ok("show", hostile, "--store", store)
        assert f"session {hostile} of machine 'note'" in shown
    assert "\x1b]8;" not in listed  # no hyperlink escape
    assert "😄" not in listed


@BACKENDS
def test_hostile_failures_print_literally(tmp_path: Path, backend: str) -> None:
    store = str(tmp_path / "s.db")
    for hostile in HOSTILE:
        code, out, err = run(
            "run", MACHINE, "--input", json.dumps({"text": f"fail:{hostile}"}),
            "--session-id", f"f{hostile}", "--backend", backend, "--store", store,
        )  # fmt: skip
        assert code == 1, err
        assert "Traceback" not in err
        assert f"Fatal: cannot open {hostile}" in out
    listed = ok("sessions", "--store", store)
    for hostile in HOSTILE:
        assert f"failed: Fatal: cannot open {hostile}" in listed
        assert "Fatal" in ok("show", f"f{hostile}", "--store", store)


@BACKENDS
def test_hostile_ids_through_decide_fork_rollback_and_replay(tmp_path: Path, backend: str) -> None:
    store = str(tmp_path / "s.db")
    where = ("-m", MACHINE, "--backend", backend, "--store", store)
    for n, hostile in enumerate(HOSTILE):
        start(store, hostile, "hi", backend)
        out = ok("decide", hostile, "edit", "--set", f"answer={json.dumps(hostile)}", *where)
        assert f"session {hostile} edited (answer); still paused" in out
        assert run_json("show", hostile, "--store", store)["events"][-1]["patch"] == {
            "set": {"answer": hostile}
        }
        out = ok("fork", hostile, "--at", "1", "--new-id", f"{hostile}/{n}", *where)
        assert f"forked {hostile}/{n} from {hostile} at event 1" in out
        out = ok("replay", hostile, *where)
        assert f"replay of {hostile}" in out
        out = ok("decide", hostile, "resume", *where)
        assert f"session {hostile}: finished" in out
        out = ok("rollback", hostile, "1", *where)
        assert f"session {hostile} rolled back" in out
        out = ok("resume", hostile, *where)
        assert f"session {hostile}: paused" in out
        out = ok("decide", hostile, "abort", *where)
        assert f"session {hostile} aborted" in out
    listed = ok("sessions", "--store", store)
    for hostile in HOSTILE:
        assert hostile in listed


def test_terminal_control_sequences_are_shown_escaped(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    sneaky = "ok\x1b[2J\x1b]0;pwned\x07"
    start(store, sneaky, sneaky)
    for argv in (["sessions"], ["show", sneaky]):
        out = ok(*argv, "--store", store)
        assert "\x1b" not in out
        assert "\x07" not in out
        assert "ok\\x1b[2J\\x1b]0;pwned\\x07" in out
    code, _, err = run("show", sneaky + "?", "--store", store)
    assert code == 3
    assert "\x1b" not in err


def test_a_store_path_that_looks_like_markup_prints_literally(tmp_path: Path) -> None:
    (tmp_path / "a[b]" / "c[").mkdir(parents=True)
    store = str(tmp_path / "a[b]" / "c[" / "b].db")  # its text holds "[b]/c[/b]"
    out = ok("demo", "--sessions", "3", "--store", store)
    assert f"stored in {store}; inspect it with:" in out
    assert f"arkhon-rheo sessions --store {store}" in out
    assert f"3 sessions in {store}" in ok("sessions", "--store", store)
    sid = run_json("sessions", "--store", store)[0]["session_id"]
    diagram = tmp_path / "[b]graph[red].mmd"
    code, _, err = run("graph", sid, "--store", store, "--output", str(diagram))
    assert code == 0
    assert f"wrote {diagram}" in err


# -- 6: JSON Python cannot decode is a usage error -------------------------------------


UNDECODABLE = {
    "deep": "[" * 100_000,
    "deep object": '{"a":' * 100_000,
    "huge integer": "1" * 5_000,
}


@pytest.mark.parametrize("what", sorted(UNDECODABLE))
def test_undecodable_json_is_a_usage_error(tmp_path: Path, what: str) -> None:
    text = UNDECODABLE[what]
    store = str(tmp_path / "s.db")
    start(store, "g", "hi")
    before = run_json("show", "g", "--store", store)["events"]
    for argv in (
        ["run", MACHINE, "--input", text],
        ["run", MACHINE, "--input", '{"text": ' + text + "}"],
        ["decide", "g", "edit", "--set", f"answer={text}", "-m", MACHINE],
        ["decide", "g", "resume", "--value", text, "-m", MACHINE],
    ):
        code, _, err = run(*argv, "--store", store)
        assert code == 2, (argv[0], err[-300:])
        assert "Traceback" not in err
        assert err.count("\n") == 1, err[:300]  # one line
        assert "not valid JSON" in err
        assert len(err) < 400  # the text is not echoed whole
    assert run_json("show", "g", "--store", store)["events"] == before
    assert [row["session_id"] for row in run_json("sessions", "--store", store)] == ["g"]


def test_undecodable_values_are_usage_errors_before_anything_is_stored(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    start(store, "g", "hi")
    before = run_json("show", "g", "--store", store)
    for text, reason in (
        ('"\\ud800"', "lone surrogate"),  # decodes, but to a string nothing can encode
        ("NaN", "NaN is not JSON"),
        ("-Infinity", "-Infinity is not JSON"),
        ("[" * 101 + "]" * 101, "more than 100 levels deep"),
    ):
        code, _, err = run(
            "decide", "g", "edit", "--set", f"answer={text}", "-m", MACHINE, "--store", store
        )
        assert code == 2, err
        assert reason in err
        assert "Traceback" not in err
    assert run_json("show", "g", "--store", store) == before


def test_read_json_refuses_in_one_line_what_python_cannot_read_back() -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert read_json(deep) == json.loads(deep)  # as deep as allowed
    assert read_json(b'{"a": [1, 2.5, "\\u00e9", null, true]}') == {"a": [1, 2.5, "é", None, True]}
    assert read_json('"\\ud83d\\ude00"') == "😀"  # a pair is one character
    with pytest.raises(JsonSyntaxError, match="Expecting value at line 1 column 1"):
        read_json("hello")
    refused: dict[str | bytes, str] = {
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1): "more than 100 levels deep",
        "[" * 100_000: "more than 100 levels deep",
        "9" * 5_000: "an integer of more than 4300 digits",
        '{"\\udfff": 1}': "lone surrogate",
        "[NaN]": "NaN is not JSON",
        b"\xff": "not UTF-8",
    }
    for text, reason in refused.items():
        with pytest.raises(ValueError, match=reason) as caught:
            read_json(text)
        assert not isinstance(caught.value, JsonSyntaxError)
        assert "\n" not in str(caught.value)
        assert caught.value.__cause__ is None


# -- 8a: a store path that is not a regular file -----------------------------------------


NOT_FILES = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@NOT_FILES
def test_a_fifo_or_a_directory_as_the_store_is_a_usage_error(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO"), (folder, "a directory")):
        for argv in (
            ["sessions"],
            ["show", "s1"],
            ["graph", "s1"],
            ["decide", "s1", "abort", "-m", MACHINE],
            ["replay", "s1", "-m", MACHINE],
        ):
            code, _, err = run(*argv, "--store", str(path))
            assert code == 2, (argv, err)
            assert f"is {kind}, not a regular file" in err
            assert "Traceback" not in err
    for argv in (["run", MACHINE], ["demo", "--sessions", "1"]):
        code, _, err = run(*argv, "--store", str(folder))
        assert code == 2, (argv, err)
        assert "is a directory, not a regular file" in err


@NOT_FILES
@BACKENDS
def test_run_and_demo_on_a_fifo_are_refused_without_reading_it(
    tmp_path: Path, backend: str
) -> None:
    # In a child process (one for both commands): before the fix, reading the FIFO's
    # header blocked forever, and a hung child can be killed where a thread cannot.
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    commands = [
        [*argv, "--backend", backend, "--store", str(fifo)]
        for argv in (["run", MACHINE, "--input", '{"text": "hi"}'], ["demo", "--sessions", "1"])
    ]
    child = (
        "import json, sys\n"
        "from arkhon_rheo.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    print(main(argv), flush=True)\n"
        "    print('--- done', file=sys.stderr, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, json.dumps(commands)],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"], done.stderr
    for err in done.stderr.split("--- done")[:2]:
        assert "is a FIFO, not a regular file" in err
        assert "Traceback" not in err


# -- 8b: an edit may not forge what the supervisor recorded -------------------------------


@BACKENDS
def test_decide_edit_of_a_supervisor_field_is_refused_and_writes_nothing(
    tmp_path: Path, backend: str
) -> None:
    store = str(tmp_path / "s.db")
    start(store, "g", "hi", backend)
    before = run_json("show", "g", "--store", store)
    forged = json.dumps({"error_type": "Fine", "message": "ok", "error_class": "fatal"})
    for pair in (f"last_error={forged}", 'metadata={"exit_reason": "finished"}', "iteration=3"):
        code, _, err = run(
            "decide", "g", "edit", "--set", pair, "--set", 'answer="x"',
            "-m", MACHINE, "--backend", backend, "--store", store,
        )  # fmt: skip
        assert code == 1, err
        assert "the supervisor owns" in err
        assert "Traceback" not in err
    assert run_json("show", "g", "--store", store) == before


def test_a_long_argument_that_is_json_of_the_wrong_shape_is_not_echoed(tmp_path: Path) -> None:
    # 208 KB of valid JSON that is no object (a token pasted in it, say): the error
    # quotes its first characters only, never the whole argument.
    store = str(tmp_path / "s.db")
    start(store, "g", "hi")
    text = "[" + ",".join(["1"] * 104_000) + ',"secret-token-at-the-end"]'
    for argv in (
        ["send", "g", "--machine", MACHINE, "--message", text],
        ["run", MACHINE, "--input", text],
    ):
        code, _, err = run(*argv, "--store", store)
        assert code == 2, (argv[0], err[-300:])
        assert "must be a JSON object" in err
        assert "secret-token-at-the-end" not in err
        assert f"({len(text)} chars)" in err
        assert len(err) < 400, err[:500]
