"""Resources: the named objects a machine's stages and tools use, opened by whoever drives it.

A machine declares them (``Machine(resources={"model": client})``); the agent
system that drives a session enters each one that is an async context manager
once, shares it across its sessions and leaves it when it stops (see
`AgentSystem`). While a session runs, its machine's resources are in a context
variable its tasks inherit (``arkhon_rheo._hooks``), which is how a tool's
`ToolContext` finds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .._errors import ConfigurationError
from .._hooks import NO_RESOURCES

__all__ = ["checked_resources", "is_async_context_manager"]


def checked_resources(machine: str, resources: Mapping[str, object] | None) -> Mapping[str, object]:
    """``resources`` as a read-only mapping, each name checked to be a non-empty string.

    Raises:
        ConfigurationError: If ``resources`` is not a mapping, or a name is not
            a non-empty string (naming the machine).
    """
    if resources is None:
        return NO_RESOURCES
    if not isinstance(resources, Mapping):
        raise ConfigurationError(
            f"machine {machine!r}: resources must be a mapping of names to objects "
            f"(like {{'model': client}}), got {type(resources).__name__}"
        )
    for name in resources:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"machine {machine!r}: a resource's name must be a non-empty string, got {name!r}"
            )
    return MappingProxyType(dict(resources))


def is_async_context_manager(resource: object) -> bool:
    """Whether ``resource`` is entered with ``async with`` (its type has both methods)."""
    kind = type(resource)
    return hasattr(kind, "__aenter__") and hasattr(kind, "__aexit__")
