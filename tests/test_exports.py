"""The public surface: what each namespace exports, and from exactly one home."""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing

import pytest

import arkhon_rheo

PUBLIC_NAMESPACES = [
    "arkhon_rheo",
    "arkhon_rheo.actors",
    "arkhon_rheo.cli",
    "arkhon_rheo.core",
    "arkhon_rheo.errors",
    "arkhon_rheo.graphs",
    "arkhon_rheo.inspector",
    "arkhon_rheo.models",
    "arkhon_rheo.observe",
    "arkhon_rheo.protocols",
    "arkhon_rheo.react",
    "arkhon_rheo.rules",
    "arkhon_rheo.serve",
    "arkhon_rheo.session",
    "arkhon_rheo.store",
    "arkhon_rheo.supervision",
    "arkhon_rheo.system",
    "arkhon_rheo.tools",
    "arkhon_rheo.testing",
    "arkhon_rheo.testing.pytest_plugin",
]


def _public_modules() -> list[str]:
    found = [
        info.name
        for info in pkgutil.walk_packages(arkhon_rheo.__path__, "arkhon_rheo.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]
    return sorted(["arkhon_rheo", *found])


def test_the_public_namespaces_are_the_expected_ones() -> None:
    assert _public_modules() == sorted(PUBLIC_NAMESPACES)


@pytest.mark.parametrize("name", PUBLIC_NAMESPACES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    for attr in module.__all__:  # a name a module imports on first use (a module __getattr__)
        getattr(module, attr)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr != "annotations"
    }
    assert sorted(module.__all__) == sorted(public)


def test_each_public_name_has_one_home() -> None:
    homes: dict[int, str] = {}
    for name in PUBLIC_NAMESPACES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            value = getattr(module, attr)
            home = getattr(value, "__module__", None)
            if typing.get_origin(value) is not None or not callable(value):
                continue  # type aliases and constants have no home module of their own
            # Reported from a public namespace, never from a private file...
            assert home in PUBLIC_NAMESPACES, f"{name}.{attr} reports module {home}"
            # ...and that namespace really exports it.
            assert attr in importlib.import_module(home).__all__
            homes.setdefault(id(value), home)
            assert homes[id(value)] == home


def test_the_exception_tree_has_one_root() -> None:
    for attr in arkhon_rheo.__all__:
        value = getattr(arkhon_rheo, attr)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, arkhon_rheo.ArkhonError)


def test_version_is_a_string() -> None:
    assert isinstance(arkhon_rheo.__version__, str)


#: The top-level names: what most programs need, pinned (the rest is in the subpackages).
TOP_LEVEL = [
    "AgentState",
    "AgentSystem",
    "ArkhonError",
    "Backoff",
    "Classifier",
    "Condition",
    "ConfigurationError",
    "Durability",
    "ErrorClass",
    "ExitReason",
    "FailureRecord",
    "Fatal",
    "FrozenMap",
    "Gate",
    "History",
    "Lifecycle",
    "Machine",
    "MemoryStore",
    "Partial",
    "Patch",
    "Recoverable",
    "ReplayReport",
    "RestartIntensity",
    "RestartStrategy",
    "RestartWindow",
    "SQLiteStore",
    "SessionBusy",
    "SessionError",
    "SessionHandle",
    "SessionLocked",
    "SessionNotFound",
    "SessionResult",
    "SessionStream",
    "Stage",
    "StageMode",
    "StateView",
    "StoreError",
    "StoredSession",
    "SubgraphStage",
    "Transient",
    "TransitionCondition",
    "TransitionEvent",
    "configure_logging",
    "emit",
    "record_call",
    "record_stream",
    "recorded",
    "redact_secrets",
    "stage",
    "subgraph",
]


def test_the_top_level_exports_exactly_the_pinned_names() -> None:
    assert sorted(arkhon_rheo.__all__) == TOP_LEVEL
    assert len(TOP_LEVEL) <= 50


def test_every_error_is_in_the_errors_namespace() -> None:
    errors = importlib.import_module("arkhon_rheo.errors")
    for name in arkhon_rheo.__all__:
        value = getattr(arkhon_rheo, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert getattr(errors, name) is value
            assert value.__module__ == "arkhon_rheo.errors"


def test_the_facades_import_their_names_on_first_use() -> None:
    # arkhon_rheo and arkhon_rheo.tools load the runtime and the toolboxes when one
    # of their names is first used: in a fresh interpreter, nothing of it before.
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    code = (
        "import sys, arkhon_rheo, arkhon_rheo.tools as t;"
        "assert 'arkhon_rheo.system' not in sys.modules;"
        "assert 'arkhon_rheo.tools._toolbox' not in sys.modules;"
        "assert {'AgentSystem', 'MemoryStore'} <= set(dir(arkhon_rheo));"
        "assert arkhon_rheo.AgentSystem.__module__ == 'arkhon_rheo.system';"
        "assert arkhon_rheo.store.MemoryStore is arkhon_rheo.MemoryStore;"
        "assert t.MCPToolbox.__module__ == 'arkhon_rheo.tools';"
        "assert t.Toolbox.__module__ == 'arkhon_rheo.tools';"
        "assert arkhon_rheo.configure_logging.__module__ == 'arkhon_rheo';"
        "assert not hasattr(arkhon_rheo, 'nothing') and not hasattr(t, 'nothing');"
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=root
    )
    assert done.stdout == "ok\n", done.stderr
