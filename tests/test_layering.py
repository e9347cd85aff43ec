"""The layering of the package, kept by reading its imports (trio's `_core` is the model).

protocols imports nothing of the package; actors only protocols; supervision
only those two; models only protocols; graphs (subgraphs) protocols and
supervision; rules only protocols; testing sits on top (its crash harness runs
`AgentSystem` on the store). Every layer may use the leaf modules ``_errors``,
``_exports``, ``_log``, ``_redact`` and ``_tracing``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "arkhon_rheo"
LEAVES = {"_errors", "_exports", "_log", "_redact", "_tracing"}
ALLOWED: dict[str, set[str]] = {
    "protocols": set(),
    "actors": {"protocols"},
    "supervision": {"protocols", "actors"},
    "store": {"protocols"},
    "tools": {"protocols"},
    "react": {"protocols", "models", "tools"},
    "models": {"protocols"},
    "testing": {"protocols", "models", "supervision", "store", "system"},
    "graphs": {"protocols", "supervision"},
    "rules": {"protocols"},
    # The agent system: sessions under supervision, kept in a store, subgraphs run.
    "system": {"protocols", "actors", "supervision", "store", "graphs"},
    # The command line sits on top: it drives AgentSystem (``system``) and reads the store.
    "cli": {
        "system",
        "protocols",
        "supervision",
        "store",
        "react",
        "tools",
        "testing",
        "models",
        "inspector",
    },
    # The inspector sits on top: the agent system, the store and what they build on.
    "inspector": {"protocols", "supervision", "system"},
    # Metrics read the AgentSystem's statistics (its type only, for annotations).
    "observe": {"protocols", "system"},
}


def _imported_subpackages(path: Path) -> set[str]:
    """The first component below ``arkhon_rheo`` of everything ``path`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package_parts[: len(package_parts) - node.level + 1])
                module = [*base, *(node.module.split(".") if node.module else [])]
                names = (
                    [".".join(module)]
                    if node.module
                    else [".".join([*base, alias.name]) for alias in node.names]
                )
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "arkhon_rheo" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_lies_below(layer: str) -> None:
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        imported = _imported_subpackages(path) - {layer} - LEAVES
        forbidden = imported - ALLOWED[layer]
        assert not forbidden, f"{path.name} in {layer}/ imports {sorted(forbidden)}"


def test_leaf_modules_import_nothing_of_the_package_but_leaves() -> None:
    for leaf in LEAVES:
        assert _imported_subpackages(PACKAGE / f"{leaf}.py") <= LEAVES - {leaf}


def test_the_checker_sees_a_violation() -> None:
    # ``actors/_cell.py`` imports the leaf ``_errors``: the checker must notice it.
    assert "_errors" in _imported_subpackages(PACKAGE / "actors" / "_cell.py")
