"""`Served`: an agent to serve over A2A, with what its card says of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocols import Machine

__all__ = ["Served"]


@dataclass(frozen=True, slots=True)
class Served:
    """An agent to serve, with what its card says of it.

    Attributes:
        machine: The agent's machine (a ``react_agent``, or any machine that
            takes messages).
        description: The card's description (by default, one naming the machine).
        path: Where it is served: ``""`` (the root) when it is the only agent,
            ``"/<machine name>"`` by default when there are several.
    """

    machine: Machine[Any]
    description: str | None = None
    path: str | None = None
