"""The layering of the package, kept by reading its imports (trio's `_core` is the model).

protocols imports only `_hooks` (below it); actors only protocols; core (the
pure, loop-free core: validation, codec, digest, fold, fingerprint, sealed
values) only protocols; store only protocols; session (the session's one home:
the compiled machine, the supervisor, the journal, host, postman and claims, the
`AgentSystem`, subgraphs) sits above those four; supervision, graphs and system
are the public namespaces of its names, each importing session alone; models
only protocols; rules only protocols (react uses rules, to check each proposal
of a model); testing, cli and the inspector on top. Every
layer may use the leaf modules ``_construct``, ``_errors``, ``_exports``,
``_json``, ``_load``, ``_log``, ``_lru``, ``_redact`` and ``_tracing``. Below protocols
lies ``_hooks`` (the context variables a running stage is seen through: fault
injector, call recorder, partial-output scope, resources): it imports only
leaves, and only the layers whose code runs in or around a stage may import it
(protocols, store, tools, react, session, testing). A subpackage's
private modules are its own: another layer imports its public namespace or its
``_seams`` module (the insides the layers above may use, listed in one place).

Also: no function of the package is over `MAX_FUNCTION_LINES` lines (ruff's
``C90`` keeps their complexity in bounds, see ``pyproject.toml``), and no module
runs past the `MAX_MODULE_LINES` backstop (modules are sized by concept: the
review rule is on the Architecture page).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "arkhon_rheo"
LEAVES = {
    "_construct",
    "_errors",
    "_exports",
    "_json",
    "_load",
    "_log",
    "_lru",
    "_redact",
    "_tracing",
}
ALLOWED: dict[str, set[str]] = {
    # The hooks of a running stage (fault injector, recorder, output scope, resources).
    "_hooks": set(),
    "protocols": {"_hooks"},
    "actors": {"protocols"},
    # The pure core: what a machine compiles to, no event loop (no anyio, no actors).
    "core": {"protocols"},
    "store": {"_hooks", "protocols"},
    # The session's one home: its kernel's session half, its runner (the supervisor),
    # the agent system's insides (journal, host, postman, claims), subgraphs.
    "session": {"_hooks", "protocols", "actors", "core", "store"},
    # The public namespaces of the session's names: facades over `session`.
    "supervision": {"session"},
    "graphs": {"session"},
    "system": {"session"},
    "tools": {"_hooks", "protocols"},
    # The engine checks each proposal with the rules engine (``Checks(rules=...)``).
    "react": {"_hooks", "protocols", "models", "tools", "rules"},
    "models": {"protocols"},
    "testing": {"_hooks", "protocols", "models", "session", "supervision", "store", "system"},
    "rules": {"protocols"},
    # The command line sits on top: it drives AgentSystem (``system``) and reads the store.
    "cli": {
        "system",
        "session",
        "protocols",
        "core",
        "supervision",
        "store",
        "react",
        "tools",
        "testing",
        "models",
        "inspector",
        "serve",
    },
    # Serving agents over A2A: asks of the agent system, served as the inspector is served.
    "serve": {"protocols", "core", "system", "inspector"},
    # The inspector sits on top: the agent system, the store and what they build on.
    "inspector": {"protocols", "core", "session", "supervision", "system"},
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


def _imported_top_levels(path: Path) -> set[str]:
    """The top-level packages ``path`` imports absolutely (``anyio`` for ``anyio.lowlevel``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_core_runs_no_event_loop() -> None:
    # The core is plain functions and objects: no backend, no threads of its own.
    loops = {"anyio", "asyncio", "trio", "sniffio"}
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        assert not _imported_top_levels(path) & loops, path


def _leaf_files(leaf: str) -> list[Path]:
    """A leaf's source: one module, or a package's modules (``_errors`` is one)."""
    package = PACKAGE / leaf
    return sorted(package.rglob("*.py")) if package.is_dir() else [PACKAGE / f"{leaf}.py"]


def test_leaf_modules_import_nothing_of_the_package_but_leaves() -> None:
    for leaf in LEAVES:
        for path in _leaf_files(leaf):
            assert _imported_subpackages(path) <= LEAVES, path


def _private_reaches(path: Path, source: str | None = None) -> list[str]:
    """The private modules of *other* subpackages that ``path`` imports (`_seams` aside).

    A subpackage's private modules are its own: another subpackage imports its
    public namespace, or its ``_seams`` module, which lists the insides the
    layers above may use. Dunder modules (``__main__``) are entry points.
    """
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    own = parts[1] if len(parts) > 2 else None
    found = []
    for node in ast.walk(tree):
        modules: list[list[str]]
        if isinstance(node, ast.Import):
            modules = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(parts[: len(parts) - node.level])
                module = [*base, *(node.module.split(".") if node.module else [])]
            else:
                module = (node.module or "").split(".")
            # ``from ..core import _validate`` names a module as an imported name.
            modules = [module, *([*module, alias.name] for alias in node.names)]
        else:
            continue
        for module in modules:
            if module[0] != "arkhon_rheo" or len(module) < 3 or module[1] in (own, *LEAVES):
                continue
            inside = module[2:]
            first = next(
                (i for i, p in enumerate(inside) if p.startswith("_") and not p.startswith("__")),
                None,
            )
            if first is None or inside[first] == "_seams":
                continue
            reach = ".".join(module[: 2 + first + 1])  # up to the private module itself
            if reach not in found:
                found.append(reach)
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_layer_reaches_into_another_subpackages_private_modules(layer: str) -> None:
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        reaches = _private_reaches(path)
        assert not reaches, f"{path.relative_to(PACKAGE)} imports private {reaches}"


def test_the_private_module_checker_sees_a_reach() -> None:
    # The session imports the store only through its public namespace and seams...
    module = PACKAGE / "session" / "_system.py"
    assert _private_reaches(module) == []
    # ...and the checker would notice a reach past them, relative or absolute.
    reach = "from ..store._sqlite import SQLiteStore\n"
    assert _private_reaches(module, reach) == ["arkhon_rheo.store._sqlite"]
    absolute = "from arkhon_rheo.protocols._io import record_call\n"
    assert _private_reaches(module, absolute) == ["arkhon_rheo.protocols._io"]
    hooks = "from .._hooks._faults import installed\nfrom .._hooks import installed\n"
    assert _private_reaches(module, hooks) == ["arkhon_rheo._hooks._faults"]
    by_name = "from ..core import _validate\n"
    assert _private_reaches(module, by_name) == ["arkhon_rheo.core._validate"]
    plain = "import arkhon_rheo.store._sqlite\n"
    assert _private_reaches(module, plain) == ["arkhon_rheo.store._sqlite"]
    seams = "from ..core._seams import state_label\nfrom ..store import MemoryStore\n"
    assert _private_reaches(module, seams) == []
    own = "from ._persist import Persistence\n"  # its own private modules are its own
    assert _private_reaches(PACKAGE / "session" / "_record.py", own) == []


def test_the_checker_sees_a_violation() -> None:
    # ``actors/_cell.py`` imports the leaf ``_errors``: the checker must notice it.
    assert "_errors" in _imported_subpackages(PACKAGE / "actors" / "_cell.py")
    # ...and the hooks, which are no leaf: a layer not allowed them is told so.
    assert "_hooks" in _imported_subpackages(PACKAGE / "store" / "_base.py")
    assert "_hooks" not in ALLOWED["core"] | ALLOWED["actors"] | ALLOWED["models"]


#: The most names all ``_seams`` modules together may list (issue 40: 108 once, 64 before this cap).
MAX_SEAM_NAMES = 50


def _seam_names(source: str) -> list[str]:
    """The names a ``_seams`` module lists: what it re-exports, and what it defines itself.

    A re-export is a top-level ``from .x import y as y`` (any relative import: the
    package's insides); a definition, a top-level function, class or assignment
    (``__all__`` and other dunders aside). Type-only imports (under ``if
    TYPE_CHECKING:``) are not names another package can import at run time.
    """
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            found += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return [name for name in found if not (name.startswith("__") and name.endswith("__"))]


def test_the_seams_stay_few() -> None:
    # A seam is an inside of one package that another depends on: each couples two
    # packages past their public namespaces, so each is a cost. Move a helper to the
    # package of its only users, merge a concept's helpers into one contract, or
    # make it public (documented) where users want it; do not hide it in another
    # private module (the private-module rule above sees that).
    counts = {
        str(path.relative_to(PACKAGE)): len(_seam_names(path.read_text()))
        for path in sorted(PACKAGE.rglob("_seams.py"))
    }
    total = sum(counts.values())
    assert total <= MAX_SEAM_NAMES, (
        f"the _seams modules list {total} names together, over {MAX_SEAM_NAMES}: {counts}. "
        "Each name couples two packages past their public namespaces: lower the coupling "
        "(move a helper to its users' package, merge a concept's helpers into one "
        "contract, or make it documented API) rather than add a seam"
    )


def test_the_seam_counter_counts_re_exports_and_definitions() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from ._a import one as one\n"
        "from ._b import _two as two, three\n"
        "from ..protocols import four as four\n"
        "if TYPE_CHECKING:\n"
        "    from ._c import Hidden\n"
        "__all__ = ['one']\n"
        "LIMIT = 3\n"
        "size: int = 4\n"
        "def helper() -> None: ...\n"
        "class Thing: ...\n"
    )
    assert _seam_names(source) == [
        "one", "two", "three", "four", "LIMIT", "size", "helper", "Thing",
    ]  # fmt: skip


#: The most lines a function of the package may have, from ``def`` to its last line.
MAX_FUNCTION_LINES = 80


def _long_functions(path: Path, source: str | None = None) -> list[str]:
    """``"<name> (<lines> lines)"`` for each function in ``path`` over the limit, nested too."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{node.name} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines() -> None:
    # Tests, benches and examples are exempt: the package only.
    long = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := _long_functions(path))
    }
    assert not long, f"split these by meaning, into named helpers: {long}"


def test_the_function_length_checker_sees_a_long_one() -> None:
    # A method (nested in a class) of exactly the limit passes; one line more does not.
    lines = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    method = f"class C:\n    async def g(self) -> None:\n{lines}"
    assert _long_functions(PACKAGE / "x.py", method) == []
    too_long = method + "        y = 0\n"
    assert _long_functions(PACKAGE / "x.py", too_long) == [f"g ({MAX_FUNCTION_LINES + 1} lines)"]


#: The hard backstop on a module's length. Modules are sized by concept, not by a cap: a
#: module holds one idea, and past ~500 lines the reviewer asks whether it still is one
#: (see "Code review rules" on the Architecture page). This only keeps a module from
#: growing unnoticed far past that.
MAX_MODULE_LINES = 1000


def _long_modules(root: Path) -> dict[str, int]:
    """``{path: lines}`` for each module under ``root`` over the backstop."""
    return {
        str(path.relative_to(root)): lines
        for path in sorted(root.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }


def test_no_module_runs_past_the_backstop() -> None:
    big = _long_modules(PACKAGE)
    assert not big, f"is each of these still one concept? split it where one ends: {big}"


def test_the_module_length_checker_sees_a_long_one(tmp_path: Path) -> None:
    # A module of exactly the backstop passes; one line more does not.
    (tmp_path / "_at_limit.py").write_text("x = 0\n" * MAX_MODULE_LINES)
    (tmp_path / "_over.py").write_text("x = 0\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path) == {"_over.py": MAX_MODULE_LINES + 1}


def _module_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports relatively, type-only imports included."""
    siblings = {p.stem for p in path.parent.glob("*.py")} - {"__init__", path.stem}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            found.update(name for name in names if name in siblings)
    return found


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == 1:
                return [*path[path.index(other) :], other]
            if other not in state and (found := visit(other)) is not None:
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


@pytest.mark.parametrize(
    "package", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
)
def test_no_import_circle_inside_a_package(package: str) -> None:
    # Among a package's own modules, type-only imports count: they are how the
    # modules know each other, and a circle there is a circle of knowledge.
    modules = {p.stem: p for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__"}
    graph = {name: _module_imports(path) for name, path in modules.items()}
    circle = _circle(graph)
    assert circle is None, f"{package}: {' -> '.join(circle or [])}"


def test_the_circle_finder_finds_one() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def _context_variables(source: str) -> list[int]:
    """The lines of ``source`` that make a context variable (``ContextVar(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "ContextVar":
                found.append(node.lineno)
    return found


def test_protocols_keeps_contracts_not_running_state() -> None:
    # The context variables a running stage is seen through are `_hooks`'s: the
    # contracts hold no context of their own (hubs, recorders, injectors live with their users).
    held = {
        path.name: lines
        for path in sorted((PACKAGE / "protocols").rglob("*.py"))
        if (lines := _context_variables(path.read_text()))
    }
    assert not held, f"running state in protocols/: {held}"
    assert _context_variables("import contextvars\nV = contextvars.ContextVar('v')\n") == [2]
    assert _context_variables((PACKAGE / "_hooks" / "_faults.py").read_text())
