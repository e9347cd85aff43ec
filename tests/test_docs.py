"""The README and the documentation site as a newcomer meets them.

Every ``python`` block of README.md and of every page under docs/ runs as a complete
program (a page's blocks in one process, in order, each in a fresh ``__main__``);
every class the prose names is exported by a public namespace; every dotted path it
names resolves; the README stays short; every page of the site's navigation
exists and says more than its title.

A block whose first line is ``# name.py`` is a module: it must import, and the blocks
after it on the same page may import it (each page's modules are its own).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import os
import re
import subprocess
import sys
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


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


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
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)])},
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
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], PageRun]:
    """Each page's blocks run once, in one process of their own, when a test first asks."""
    runs: dict[Path, PageRun] = {}

    def run(page: Path) -> PageRun:
        if page not in runs:
            runs[page] = PageRun(page, tmp_path_factory.mktemp("page"))
        return runs[page]

    return run


@pytest.mark.parametrize(("page", "index"), list(_snippets()))
def test_each_snippet_imports_what_it_uses_and_runs(
    page: Path, index: int, page_runs: Callable[[Path], PageRun]
) -> None:
    code = _blocks(page)[index]
    tree = ast.parse(code)  # a snippet is complete Python, not a fragment
    assert any(isinstance(node, ast.Import | ast.ImportFrom) for node in tree.body), code
    failure = page_runs(page).failure(index)
    assert failure is None, f"{_name(page)}:\n{failure}"


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
