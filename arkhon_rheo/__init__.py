"""arkhon-rheo: a supervised actor runtime for LLM agents, on anyio.

This module is the facade: it re-exports what most programs need (the machine
and its stages, the agent system, the stores, the supervision policy, the
common errors) and has no side effects (no logging set-up, no event loop, no
threads). It imports the runtime on first use of one of its names: a program
that needs one corner of the package (a sandboxed tool call's runner imports
`arkhon_rheo.tools`) does not load the rest. The rest lives in its subpackage:
the whole error tree in `arkhon_rheo.errors`, actors in `arkhon_rheo.actors`,
the agent engine in `arkhon_rheo.react`, model clients in `arkhon_rheo.models`,
tools in `arkhon_rheo.tools`, test doubles in `arkhon_rheo.testing`.
"""

from __future__ import annotations

import typing as _typing

from ._exports import publish
from ._log import configure_logging as configure_logging
from ._redact import redact_secrets as redact_secrets
from .errors import ArkhonError as ArkhonError
from .errors import ConfigurationError as ConfigurationError
from .errors import Fatal as Fatal
from .errors import Recoverable as Recoverable
from .errors import SessionBusy as SessionBusy
from .errors import SessionError as SessionError
from .errors import SessionLocked as SessionLocked
from .errors import SessionNotFound as SessionNotFound
from .errors import StoreError as StoreError
from .errors import Transient as Transient

if _typing.TYPE_CHECKING:
    from .graphs import SubgraphStage as SubgraphStage
    from .graphs import subgraph as subgraph
    from .protocols import AgentState as AgentState
    from .protocols import Condition as Condition
    from .protocols import Durability as Durability
    from .protocols import ErrorClass as ErrorClass
    from .protocols import FailureRecord as FailureRecord
    from .protocols import FrozenMap as FrozenMap
    from .protocols import Gate as Gate
    from .protocols import History as History
    from .protocols import Lifecycle as Lifecycle
    from .protocols import Machine as Machine
    from .protocols import Partial as Partial
    from .protocols import Patch as Patch
    from .protocols import SessionStream as SessionStream
    from .protocols import Stage as Stage
    from .protocols import StateView as StateView
    from .protocols import TransitionCondition as TransitionCondition
    from .protocols import TransitionEvent as TransitionEvent
    from .protocols import emit as emit
    from .protocols import record_call as record_call
    from .protocols import record_stream as record_stream
    from .protocols import recorded as recorded
    from .protocols import stage as stage
    from .store import MemoryStore as MemoryStore
    from .store import SQLiteStore as SQLiteStore
    from .supervision import Backoff as Backoff
    from .supervision import Classifier as Classifier
    from .supervision import ExitReason as ExitReason
    from .supervision import RestartIntensity as RestartIntensity
    from .supervision import RestartStrategy as RestartStrategy
    from .supervision import RestartWindow as RestartWindow
    from .supervision import StageMode as StageMode
    from .system import AgentSystem as AgentSystem
    from .system import ReplayReport as ReplayReport
    from .system import SessionHandle as SessionHandle
    from .system import SessionResult as SessionResult
    from .system import StoredSession as StoredSession

__version__ = "0.1.0"

__all__ = [
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


#: The names imported on first use, by the module they come from: importing the
#: package (or any module of it, such as a sandboxed tool call's runner) does not
#: load the whole runtime.
_LAZY = {
    ".graphs": (
        "SubgraphStage",
        "subgraph",
    ),
    ".protocols": (
        "AgentState",
        "Condition",
        "Durability",
        "ErrorClass",
        "FailureRecord",
        "FrozenMap",
        "Gate",
        "History",
        "Lifecycle",
        "Machine",
        "Partial",
        "Patch",
        "SessionStream",
        "Stage",
        "StateView",
        "TransitionCondition",
        "TransitionEvent",
        "emit",
        "record_call",
        "record_stream",
        "recorded",
        "stage",
    ),
    ".store": (
        "MemoryStore",
        "SQLiteStore",
    ),
    ".supervision": (
        "Backoff",
        "Classifier",
        "ExitReason",
        "RestartIntensity",
        "RestartStrategy",
        "RestartWindow",
        "StageMode",
    ),
    ".system": (
        "AgentSystem",
        "ReplayReport",
        "SessionHandle",
        "SessionResult",
        "StoredSession",
    ),
}

publish(__name__, [name for name in __all__ if name in globals()], globals())
del publish


def __getattr__(name: str) -> object:
    """Import the runtime's facade names (and its subpackages) on first use."""
    if name.startswith("_"):  # a probe (``__wrapped__``) or a private module: nothing to load
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "_loaded" not in globals():
        import importlib

        for module_name, names in _LAZY.items():
            module = importlib.import_module(module_name, __name__)
            for each in names:
                globals()[each] = getattr(module, each)
        globals()["_loaded"] = True
    if name in globals():
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, those not imported yet included."""
    return sorted({*globals(), *__all__})
