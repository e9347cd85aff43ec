"""Tools an agent may call: typed functions with validated arguments, run under limits.

``@tool`` makes a typed function (async or sync) into a `Tool`: a pydantic
model of its arguments and a `ToolSpec` for the model. A `Toolbox` of tools
answers the model's `ToolCall` with a `ToolMessage` (it implements
`arkhon_rheo.protocols.ToolRunner`), bounds concurrent calls per tool and in
all, and records every call for replay. A tool that declares a parameter
annotated `ToolContext` gets the call's session, step, call id, idempotency
key and the machine's resources there, out of the model's sight. A tool
declares its effect on the world (`Effect`: read-only by default; with side
effects, a call runs at most once through the session's effect ledger) and a
run policy (`RunPolicy`: allow, approve, block). A call that keeps failing
transiently is retried, then answered ``"Error after N attempts: ..."`` for the
model to decide, or escalated to the supervisor (`OnExhausted`, ``@tool(on_exhausted=...)``).
``@tool(sandbox=Sandbox(...))`` runs
each call in a confined subprocess (with bubblewrap on Linux: no network, no
file system but its own directory and read-only system paths, its own PID
namespace); `Sandbox.enforcement` says what holds on this machine.
`MCPToolbox` is a toolbox of an MCP server's tools (over stdio or streamable
HTTP, through the official ``mcp`` SDK: ``pip install "arkhon-rheo[mcp]"``),
with Python tools beside them.
"""

from __future__ import annotations

import typing as _typing

from .._errors import AmbiguousEffect as AmbiguousEffect
from .._errors import IsolationUnavailable as IsolationUnavailable
from .._errors import ToolCallHeld as ToolCallHeld
from .._errors import ToolError as ToolError
from .._errors import ToolTimeout as ToolTimeout
from .._exports import publish as _publish
from ._config import Sandbox as Sandbox
from ._context import ToolContext as ToolContext
from ._effects import Effect as Effect
from ._effects import RunPolicy as RunPolicy
from ._effects import idempotency_key as idempotency_key
from ._isolation import Enforcement as Enforcement
from ._retry import OnExhausted as OnExhausted
from ._tool import SANDBOX_TIMEOUT as SANDBOX_TIMEOUT
from ._tool import Tool as Tool
from ._tool import tool as tool

if _typing.TYPE_CHECKING:
    from ._mcp import MCPToolbox as MCPToolbox
    from ._toolbox import Toolbox as Toolbox
    from ._toolbox import ToolboxStatistics as ToolboxStatistics

__all__ = [
    "SANDBOX_TIMEOUT",
    "AmbiguousEffect",
    "Effect",
    "Enforcement",
    "IsolationUnavailable",
    "MCPToolbox",
    "OnExhausted",
    "RunPolicy",
    "Sandbox",
    "Tool",
    "ToolCallHeld",
    "ToolContext",
    "ToolError",
    "ToolTimeout",
    "Toolbox",
    "ToolboxStatistics",
    "idempotency_key",
    "tool",
]

#: The names imported on first use, by their module: a sandboxed call's runner
#: (which imports this package to reach `Tool`) does not load the toolboxes and
#: the runtime they reach.
_LAZY = {"._toolbox": ("Toolbox", "ToolboxStatistics"), "._mcp": ("MCPToolbox",)}

_publish(__name__, [name for name in __all__ if name in globals()], globals())


def __getattr__(name: str) -> object:
    """Import the toolboxes on first use of one of their names."""
    if not any(name in names for names in _LAZY.values()):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    loaded = {
        each: getattr(importlib.import_module(module_name, __name__), each)
        for module_name, names in _LAZY.items()
        for each in names
    }
    _publish(__name__, loaded, loaded)
    globals().update(loaded)
    return loaded[name]
