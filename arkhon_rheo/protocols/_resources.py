"""Resources: the named objects a machine's stages and tools use, opened by whoever drives it.

A machine declares them (``Machine(resources={"model": client})``); the agent
system that drives a session enters each one that is an async context manager
once, shares it across its sessions and leaves it when it stops (see
`AgentSystem`). While a session runs, its machine's resources are in a context
variable its tasks inherit, which is how a tool's `ToolContext` finds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "NO_RESOURCES",
    "checked_resources",
    "counts_opens",
    "current_resources",
    "is_async_context_manager",
    "reports_open",
    "resources_scope",
]

#: The resources of a machine that declares none (and outside any session).
NO_RESOURCES: Mapping[str, object] = MappingProxyType({})

_RESOURCES: ContextVar[Mapping[str, object]] = ContextVar(
    "arkhon_rheo_resources", default=NO_RESOURCES
)

#: The resources of the machine whose session runs in this task (none outside one).
current_resources = _RESOURCES.get


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


def reports_open(resource: object) -> bool:
    """Whether ``resource`` says it is open already (its ``is_open`` is ``True``).

    A resource that may be entered by its user (like `OpenAIChatClient`) tells
    the system so with an ``is_open`` attribute; the system enters only the
    resources that do not report themselves open.
    """
    return getattr(resource, "is_open", False) is True


def counts_opens(resource: object) -> bool:
    """Whether ``resource`` counts its opens (its ``counts_opens`` is ``True``).

    Such a resource (like `OpenAIChatClient`) may be entered by any number of
    users at once and stays open until the last of them leaves it, so the
    system enters it even when it reports itself open: a client opened by its
    user or by another system stays open while this system needs it.
    """
    return getattr(resource, "counts_opens", False) is True


@contextlib.contextmanager
def resources_scope(resources: Mapping[str, object]) -> Iterator[None]:
    """Make ``resources`` the current ones for the tasks spawned inside the block."""
    token = _RESOURCES.set(resources)
    try:
        yield
    finally:
        _RESOURCES.reset(token)
