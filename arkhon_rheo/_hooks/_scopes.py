"""Where a running stage's partial output goes, and its machine's resources.

The supervisor opens an `OutputScope` (its `StageScope`) around each attempt
of a stage; `emit` (``arkhon_rheo.protocols``) publishes into it and a tool's
`ToolContext` reads the session and step from it. The agent system makes a
machine's resources current for the tasks of its sessions (`resources_scope`);
a tool's `ToolContext` finds them with `current_resources`.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "NO_RESOURCES",
    "STAGE_SCOPE",
    "OutputScope",
    "current_resources",
    "resources_scope",
]


class OutputScope(Protocol):
    """Where ``emit`` publishes during one attempt of one stage."""

    @property
    def session_id(self) -> str:
        """The session the stage runs in."""
        ...

    @property
    def seq(self) -> int:
        """The number of the event that will record this step's outcome."""
        ...

    def publish(self, data: Any) -> None:
        """Hand ``data`` to the session's subscribers; never waits, never raises."""
        ...


#: The scope of the stage attempt running in this context, if any.
STAGE_SCOPE: ContextVar[OutputScope | None] = ContextVar("arkhon_rheo_stage_scope", default=None)

#: The resources of a machine that declares none (and outside any session).
NO_RESOURCES: Mapping[str, object] = MappingProxyType({})

_RESOURCES: ContextVar[Mapping[str, object]] = ContextVar(
    "arkhon_rheo_resources", default=NO_RESOURCES
)

#: The resources of the machine whose session runs in this task (none outside one).
current_resources = _RESOURCES.get


@contextlib.contextmanager
def resources_scope(resources: Mapping[str, object]) -> Iterator[None]:
    """Make ``resources`` the current ones for the tasks spawned inside the block."""
    token = _RESOURCES.set(resources)
    try:
        yield
    finally:
        _RESOURCES.reset(token)
