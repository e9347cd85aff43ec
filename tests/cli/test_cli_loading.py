"""Loading ``MODULE:ATTR``: the user's own module, its errors, and what it must name.

Errors in the user's module (a syntax error, an import inside it that fails, a
factory that raises) are one line on stderr, naming the module and what to do;
``--debug`` adds the traceback. A module in a folder of scripts (no
``__init__.py``, like ``examples/``) imports its siblings as ``python
folder/module.py`` would, and ``folder/module.py:ATTR`` names one by its path.
"""

from __future__ import annotations

import contextlib
import io
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.cli import main

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: A module defining ``agent``, a factory of a one-stage machine.
MACHINE_MODULE = """
from arkhon_rheo import AgentState, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L

class Echo(AgentState):
    lifecycle: L = L.INITIALIZED
    answer: str = ""

@stage(reads=set(), writes={"answer"}, next=L.FINISHED)
async def echo(view: StateView[Echo]) -> Patch:
    return Patch(answer=GREETING)

def agent() -> Machine[Echo]:
    return Machine(
        name="echo", state_type=Echo, initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.FINISHED}}, stages={L.INITIALIZED: echo},
        terminal={L.FINISHED, L.FAILED}, failed=L.FAILED,
    )
"""


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``sys.path`` and ``sys.modules`` as they were, after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored: None) -> Path:
    """The working directory: the test's own folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


BROKEN = {
    "raises": ("def agent():\n    raise RuntimeError('no model configured')\n", "RuntimeError"),
    "syntax": ("def agent(:\n    pass\n", "SyntaxError"),
    "imports": ("import not_installed_anywhere_xyz\n", "ModuleNotFoundError"),
    "fails_at_import": ("raise ValueError('bad setting\\nsecond line')\n", "ValueError"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_error_in_the_users_module_is_one_line(folder: Path, case: str) -> None:
    text, kind = BROKEN[case]
    write(folder / f"broken_{case}.py", text)
    target = f"broken_{case}:agent"
    code, out, err = run("run", target, "--store", str(folder / "s.db"))
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err  # one line
    assert "Traceback" not in err
    assert f"broken_{case}" in err
    assert kind in err
    assert "--debug" in err  # what to do to see more
    assert not (folder / "s.db").exists()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_debug_shows_the_traceback(folder: Path, case: str) -> None:
    text, kind = BROKEN[case]
    write(folder / f"debugged_{case}.py", text)
    code, _, err = run("run", f"debugged_{case}:agent", "--debug", "--store", "s.db")
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert kind in err
    assert err.rstrip().splitlines()[-1].startswith("arkhon-rheo run: error:")


def test_every_command_takes_debug() -> None:
    import argparse

    from arkhon_rheo.cli._app import build_parser

    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        if name == "inspect":
            continue
        assert "--debug" in sub.format_help(), name


def test_a_missing_module_is_still_not_found(folder: Path) -> None:
    code, _, err = run("run", "no_such_module_here:agent", "--store", "s.db")
    assert code == 3
    assert "no module 'no_such_module_here'" in err


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("arkhon_rheo.cli:main", "a function returning int"),
        ("arkhon_rheo.cli._common:ExitStatus", "the class ExitStatus"),
        ("arkhon_rheo:__version__", "a str"),
    ],
)
def test_an_attribute_that_is_not_a_machine_factory_is_a_typed_one_line_error(
    folder: Path, target: str, found: str
) -> None:
    from arkhon_rheo._errors import CommandError
    from arkhon_rheo.cli._load import load_machine

    code, _, err = run("run", target, "--store", "s.db")
    assert code == 2
    assert err.count("\n") == 1, err[:2000]
    assert found in err
    assert "expected a Machine" in err
    with pytest.raises(CommandError, match="expected a Machine"):
        load_machine(target)


def test_a_module_in_a_folder_of_scripts_imports_its_siblings(folder: Path) -> None:
    # Like examples/react_agent.py, which imports agent_tools beside it.
    write(folder / "scripts" / "helper.py", "GREETING = 'hello from a sibling'\n")
    write(folder / "scripts" / "echo_agent.py", "from helper import GREETING\n" + MACHINE_MODULE)
    code, out, err = run("run", "scripts.echo_agent:agent", "--json", "--store", "s.db")
    assert code == 0, err
    assert "hello from a sibling" in out


def test_a_module_given_by_its_path(folder: Path) -> None:
    write(folder / "elsewhere" / "sibling.py", "GREETING = 'by path'\n")
    write(folder / "elsewhere" / "by_path.py", "from sibling import GREETING\n" + MACHINE_MODULE)
    code, out, err = run("run", "elsewhere/by_path.py:agent", "--json", "--store", "s.db")
    assert code == 0, err
    assert "by path" in out
    code, _, err = run("run", "elsewhere/none.py:agent", "--store", "s.db")
    assert code == 3
    assert "no file" in err


def test_a_module_of_a_package_does_not_get_its_folder_on_the_path(folder: Path) -> None:
    # In a package, modules import each other through it: its folder is not a script folder.
    write(folder / "pkg" / "__init__.py", "")
    write(folder / "pkg" / "helper.py", "GREETING = 'x'\n")
    write(folder / "pkg" / "agents.py", "from helper import GREETING\n" + MACHINE_MODULE)
    code, _, err = run("run", "pkg.agents:agent", "--store", "s.db")
    assert code == 1
    assert "No module named 'helper'" in err
    assert str(folder / "pkg") not in sys.path


def test_the_react_example_loads_by_module_name(
    monkeypatch: pytest.MonkeyPatch, restored: None
) -> None:
    from pathlib import Path

    from arkhon_rheo.cli._load import load_machine

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    machine = load_machine("examples.react_agent:agent")
    assert machine.name


def test_inspect_reports_an_error_in_the_users_module_in_one_line(folder: Path) -> None:
    # `inspect --machine` loads with the command line's loader, not a loader of its own.
    write(folder / "broken_inspected.py", BROKEN["syntax"][0])
    code, out, err = run("inspect", "--machine", "broken_inspected:agent", "--store", "s.db")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "broken_inspected" in err
    assert "SyntaxError" in err
    assert "--debug" in err
    assert not (folder / "s.db").exists()


def test_inspect_loads_a_module_that_imports_its_siblings(folder: Path) -> None:
    write(folder / "scripts" / "helper.py", "GREETING = 'hi'\n")
    module = "from helper import GREETING\n" + MACHINE_MODULE
    write(folder / "scripts" / "inspected_agent.py", module)
    # The machine loads; then (no store file there) the inspector says so: not found.
    for target in ("scripts.inspected_agent:agent", "scripts/inspected_agent.py:agent"):
        code, _, err = run("inspect", "--machine", target, "--store", "none.db")
        assert code == 3, err
        assert "no store file" in err


def test_inspect_refuses_what_is_no_machine_factory_without_calling_it(folder: Path) -> None:
    code, _, err = run("inspect", "--machine", "arkhon_rheo.cli:main", "--store", "none.db")
    assert code == 2
    assert "a function returning int" in err
    assert err.count("\n") == 1, err[:2000]
