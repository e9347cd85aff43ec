"""The README as a newcomer meets it: every snippet runs, every name it uses is there."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .test_exports import PUBLIC_NAMESPACES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)

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


def test_the_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 3


#: A snippet whose first line is ``# name.py`` is a module the snippets after it import.
MODULES = {
    match.group(1): code for code in SNIPPETS if (match := re.match(r"# ([a-z_]+\.py)\n", code))
}


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_each_snippet_imports_what_it_uses_and_runs(index: int, tmp_path: Path) -> None:
    code = SNIPPETS[index]
    tree = ast.parse(code)  # a snippet is complete Python, not a fragment
    assert any(isinstance(node, ast.Import | ast.ImportFrom) for node in tree.body), code
    for name, module in MODULES.items():
        (tmp_path / name).write_text(module)
    if (match := re.match(r"# ([a-z_]+)\.py\n", code)) is not None:
        code = f"import {match.group(1)}"  # a module: it must import
    result = subprocess.run(
        [sys.executable, "-c", code],
        # The snippet's modules, then the tree under test (not whatever is installed).
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"{code}\n--- stderr:\n{result.stderr}"


def _named_in_prose() -> set[str]:
    """``CamelCase`` names (the head of dotted ones too) in backticks in the README's prose."""
    prose = re.sub(r"```.*?```", "", README, flags=re.DOTALL)
    names = set()
    for quoted in re.findall(r"`([^`\n]+)`", prose):
        match = re.fullmatch(r"([A-Z][a-z][A-Za-z0-9]*)(?:\.[A-Za-z_]+)*(?:\(.*\))?", quoted)
        if match:
            names.add(match.group(1))
    return names - NOT_OURS


def test_every_class_the_prose_names_is_importable_from_a_public_namespace() -> None:
    namespaces = [importlib.import_module(name) for name in PUBLIC_NAMESPACES]
    missing = sorted(
        name
        for name in _named_in_prose()
        if not any(name in getattr(module, "__all__", ()) for module in namespaces)
    )
    assert not missing, f"the README names these, no public namespace exports them: {missing}"


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


def test_every_dotted_path_the_prose_names_resolves() -> None:
    prose = re.sub(r"```.*?```", "", README, flags=re.DOTALL)
    for path in set(re.findall(r"`(arkhon_rheo(?:\.[A-Za-z_]+)+)", prose)):
        module, _, attr = path.rpartition(".")
        try:
            importlib.import_module(path)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), attr), path
