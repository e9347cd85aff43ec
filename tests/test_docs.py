"""The README and the documentation site as a newcomer meets them.

Every ``python`` block of README.md and of every page under docs/ runs as a complete
program (a page's blocks in one process, in order, each in a fresh ``__main__``);
every class the prose names is exported by a public namespace; every dotted path it
names resolves; the README stays short; every page of the site's navigation
exists and says more than its title.

A block whose first line is ``# name.py`` is a module: it must import, and the blocks
after it on the same page may import it (each page's modules are its own).

What a page shows a block printing is what the block prints when it runs. The
output is a fenced block right after the code (blank lines between them only),
opened with ``text title="Output"``::

    ```python
    print(6 * 7)
    ```

    ```text title="Output"
    42
    ```

The block's standard output must be those lines (trailing spaces and blank lines
at the end aside). ``...`` stands for what changes from run to run: within a
line, any text on that line (an id, a timing); as a line of its own, any number
of lines (none too). A block that prints something must show it (elided with
``...`` where it is long), so no page quotes output that no run checks. A shell
block (``sh``, ``bash``) followed by an output block is run too: each command
line (``arkhon-rheo`` or ``python``, run on the tree under test, in a fresh
folder, the terminal 100 columns wide) in order, their standard outputs one
after the other compared the same way.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .test_exports import PUBLIC_NAMESPACES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

#: The longest the README may grow: the manual is the site, the README its front door.
README_MAX_LINES = 220

#: Names in backticks that are not ours (Python's, the standard library's, other packages').
NOT_OURS = {
    "BaseException",
    "BaseExceptionGroup",
    "Exception",
    "ExceptionGroup",
    "KeyboardInterrupt",
    "SystemExit",
    "Any",
    "Bearer",
    "ConfigDict",
    "Optional",
    "ProcessorFormatter",
    "TypeAdapter",
    "TypedDict",
}

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_MODULE = re.compile(r"# ([a-z_]+)\.py\n")
#: Any fenced block at the start of a line: its info string and its text.
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
#: The info string of a block that is the output of the code block before it.
OUTPUT = 'text title="Output"'
_SHELLS = ("sh", "bash")


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


def _shown(page: Path) -> list[tuple[str, str, str | None]]:
    """Each code block of a page (not an output block): its language, its text, its output.

    The output is the text of an `OUTPUT` block right after it, or None.
    """
    text = page.read_text()
    fences = list(_FENCE.finditer(text))
    blocks: list[tuple[str, str, str | None]] = []
    for index, fence in enumerate(fences):
        if fence.group(1).strip() == OUTPUT:
            continue
        after = fences[index + 1] if index + 1 < len(fences) else None
        shown = None
        if (
            after is not None
            and after.group(1).strip() == OUTPUT
            and not text[fence.end() : after.start()].strip()
        ):
            shown = after.group(2)
        blocks.append((fence.group(1).strip(), fence.group(2), shown))
    return blocks


def _outputs(page: Path) -> list[str | None]:
    """The output each ``python`` block of a page shows, in `_blocks`' order (None: none)."""
    return [shown for language, _, shown in _shown(page) if language == "python"]


def _shown_commands(page: Path) -> list[tuple[str, str]]:
    """Each shell block of a page that shows its output: its text, and the output."""
    return [
        (code, shown)
        for language, code, shown in _shown(page)
        if language in _SHELLS and shown is not None
    ]


def _pattern(shown: str) -> re.Pattern[str]:
    """The output shown, as a pattern: ``...`` any text in a line, or (alone) any lines."""
    parts = []
    for line in _lines(shown):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(re.escape(piece) for piece in line.split("...")) + "\n")
    return re.compile("".join(parts))


def _lines(text: str) -> list[str]:
    """``text``'s lines, each without its trailing spaces, and no blank lines at the end."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _output_mismatch(shown: str, printed: str) -> str | None:
    """None when ``printed`` is what ``shown`` shows; else a diff of the two."""
    actual = "".join(line + "\n" for line in _lines(printed))
    if _pattern(shown).fullmatch(actual):
        return None
    diff = difflib.unified_diff(
        _lines(shown), _lines(printed), "shown on the page", "printed", lineterm=""
    )
    return "\n".join(diff)


def _snippets() -> Iterator[object]:
    for page in PAGES:
        for index, _ in enumerate(_blocks(page)):
            yield pytest.param(page, index, id=f"{_name(page)}#{index}")


def _prose(page: Path) -> str:
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_readme_and_the_site_have_snippets() -> None:
    assert len(_blocks(ROOT / "README.md")) >= 1
    assert sum(len(_blocks(page)) for page in PAGES) >= 30


#: Runs a page's blocks in one process (`tests.support.snippet_runner`), fed to ``python -c``.
RUNNER = (ROOT / "tests" / "support" / "snippet_runner.py").read_text()


class PageRun:
    """What one process running all of a page's blocks in order made of each."""

    def __init__(self, page: Path, directory: Path) -> None:
        blocks = _blocks(page)
        programs = []
        for index, block in enumerate(blocks):
            if (match := _MODULE.match(block)) is not None:
                # A module: the blocks after it may import it, and it must import.
                (directory / f"{match.group(1)}.py").write_text(block)
                block = f"import {match.group(1)}"
            programs.append({"name": f"{_name(page)}#{index}", "code": block})
        self.programs = programs
        (directory / "programs.json").write_text(json.dumps(programs))
        results_path = directory / "results.json"
        self.process = subprocess.run(
            [sys.executable, "-c", RUNNER, "programs.json", str(results_path)],
            # The page's modules, then the tree under test (not whatever is installed).
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
                "COLUMNS": "100",  # what a rich table prints does not hang on the terminal
            },
            capture_output=True,
            text=True,
            timeout=120 * len(blocks),
            check=False,
            cwd=directory,
        )
        self.results: list[dict[str, Any]] = (
            json.loads(results_path.read_text()) if results_path.exists() else []
        )

    def failure(self, index: int) -> str | None:
        """Why block ``index`` did not run to its end, or None if it did."""
        code = self.programs[index]["code"]
        if index >= len(self.results):
            return (
                f"{self.programs[index]['name']} never ran: the page's process ended with "
                f"{self.process.returncode}:\n{code}\n--- stderr:\n{self.process.stderr}"
            )
        result = self.results[index]
        if result["ok"]:
            return None
        return f"{code}\n--- error:\n{result['error']}\n--- stderr:\n{self.process.stderr}"


@pytest.fixture(scope="module")
def page_runs() -> Iterator[Callable[[Path], PageRun]]:
    """Each page's blocks run once, in one process of their own, when a test first asks.

    Each page's folder (its modules) is readable by all, as a user's project
    folder is: a sandboxed tool run by root drops to another user, who must
    import the tool's module (pytest's own temporary folders are private).
    """
    runs: dict[Path, PageRun] = {}
    base = Path(tempfile.mkdtemp(prefix="arkhon-rheo-docs-"))

    def run(page: Path) -> PageRun:
        if page not in runs:
            directory = Path(tempfile.mkdtemp(dir=base))
            for folder in (base, directory):
                folder.chmod(0o755)
            runs[page] = PageRun(page, directory)
        return runs[page]

    try:
        yield run
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(("page", "index"), list(_snippets()))
def test_each_snippet_imports_what_it_uses_and_runs(
    page: Path, index: int, page_runs: Callable[[Path], PageRun]
) -> None:
    code = _blocks(page)[index]
    tree = ast.parse(code)  # a snippet is complete Python, not a fragment
    assert any(isinstance(node, ast.Import | ast.ImportFrom) for node in tree.body), code
    failure = page_runs(page).failure(index)
    assert failure is None, f"{_name(page)}:\n{failure}"


@pytest.mark.parametrize(("page", "index"), list(_snippets()))
def test_each_snippet_prints_what_its_page_shows(
    page: Path, index: int, page_runs: Callable[[Path], PageRun]
) -> None:
    outputs = _outputs(page)
    assert len(outputs) == len(_blocks(page)), f"{_name(page)}: a python block is fenced oddly"
    run = page_runs(page)
    if run.failure(index) is not None:
        pytest.skip("it did not run (test_each_snippet_imports_what_it_uses_and_runs says why)")
    printed = str(run.results[index]["stdout"])
    shown, where = outputs[index], f"{_name(page)}#{index}"
    if shown is None:
        assert not printed.strip(), (
            f"{where} prints this, which its page does not show: put it in a ```{OUTPUT} "
            f"block right after the code (``...`` for what changes between runs):\n{printed}"
        )
        return
    mismatch = _output_mismatch(shown, printed)
    assert mismatch is None, f"{where} prints what its page does not show:\n{mismatch}"


def _command_snippets() -> Iterator[object]:
    for page in PAGES:
        for index, _ in enumerate(_shown_commands(page)):
            yield pytest.param(page, index, id=f"{_name(page)}$sh{index}")


def _command_lines(code: str) -> list[list[str]]:
    """The commands of a shell block, each as its arguments (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


@pytest.mark.parametrize(("page", "index"), list(_command_snippets()))
def test_each_shown_command_prints_what_its_page_shows(
    page: Path, index: int, tmp_path: Path
) -> None:
    code, shown = _shown_commands(page)[index]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="100", NO_COLOR="1")
    printed = []
    for argv in _command_lines(code):
        programs = {"arkhon-rheo": [sys.executable, "-m", "arkhon_rheo"]}
        programs.update(python=[sys.executable], python3=[sys.executable])
        assert argv[0] in programs, f"{_name(page)}: cannot run {argv[0]!r} in a test"
        done = subprocess.run(
            [*programs[argv[0]], *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr}"
        printed.append(done.stdout)
    mismatch = _output_mismatch(shown, "".join(printed))
    where = f"{_name(page)} (shell block {index})"
    assert mismatch is None, f"{where} prints what its page does not show:\n{mismatch}"


def test_the_output_pattern_elides_only_what_it_says() -> None:
    assert _output_mismatch("42\n", "42\n\n") is None
    assert _output_mismatch("a ... c\n", "a b b c  \n") is None
    assert _output_mismatch("first\n...\nlast\n", "first\nlast\n") is None
    assert _output_mismatch("first\n...\nlast\n", "first\n1\n2\nlast\n") is None
    assert _output_mismatch("a ... c\n", "a b\nc\n") is not None  # not across lines
    assert _output_mismatch("42\n", "43\n") is not None
    assert _output_mismatch("42\n", "42\nmore\n") is not None
    assert _output_mismatch("a(b)\n", "a(b)\n") is None  # the rest is literal


def _named_in_prose(page: Path) -> set[str]:
    """``CamelCase`` names (the head of dotted ones too) in backticks in a page's prose."""
    names = set()
    for quoted in re.findall(r"`([^`\n]+)`", _prose(page)):
        match = re.fullmatch(r"([A-Z][a-z][A-Za-z0-9]*)(?:\.[A-Za-z_]+)*(?:\(.*\))?", quoted)
        if match:
            names.add(match.group(1))
    return names - NOT_OURS - set(dir(builtins))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_class_the_prose_names_is_importable_from_a_public_namespace(page: Path) -> None:
    namespaces = [importlib.import_module(name) for name in PUBLIC_NAMESPACES]
    missing = sorted(
        name
        for name in _named_in_prose(page)
        if not any(name in getattr(module, "__all__", ()) for module in namespaces)
    )
    assert not missing, f"{_name(page)} names these, no public namespace exports them: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_dotted_path_the_prose_names_resolves(page: Path) -> None:
    for path in set(re.findall(r"`(arkhon_rheo(?:\.[A-Za-z_]+)+)", _prose(page))):
        module, _, attr = path.rpartition(".")
        try:
            importlib.import_module(path)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), attr), f"{_name(page)}: {path}"


@pytest.mark.parametrize(
    "name",
    [
        "Gate",
        "Durability",
        "StageMode",
        "MemoryStore",
        "SQLiteStore",
        "Classifier",
        "Backoff",
        "RestartIntensity",
        "ErrorClass",
        "FailureRecord",
    ],
)
def test_what_a_user_configures_is_at_the_top_level(name: str) -> None:
    assert name in importlib.import_module("arkhon_rheo").__all__


def test_the_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to docs/"


def _nav() -> list[str]:
    """The pages mkdocs.yml's nav names, in order (each nav entry is ``- Title: page.md``)."""
    config = (ROOT / "mkdocs.yml").read_text()
    nav = config[config.index("\nnav:") :]
    return re.findall(r"^\s*- [^:\n]+: ([\w./-]+\.md)\s*$", nav, re.MULTILINE)


def test_the_nav_lists_each_page_once() -> None:
    nav = _nav()
    assert len(nav) > 20, nav
    assert len(nav) == len(set(nav)), nav


@pytest.mark.parametrize("entry", _nav())
def test_each_nav_page_exists_and_says_more_than_its_title(entry: str) -> None:
    page = DOCS / entry
    assert page.is_file(), f"mkdocs.yml's nav names {entry}, which docs/ does not have"
    text = page.read_text()
    # A page that only includes another file (pymdownx.snippets) is that file's text.
    text = re.sub(
        r'^--8<-- "([^"]+)"$', lambda m: (ROOT / m.group(1)).read_text(), text, flags=re.M
    )
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, f"{entry} is empty"
    assert lines[0].startswith("# "), f"{entry} does not open with its title"
    assert len(lines) > 1, f"{entry} is a bare title: write the page"


def test_the_readme_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\((docs/[^)#\s]+)", readme):
        assert (ROOT / target).is_file(), target
