"""The insides of the actor runtime that the layers above may use (see tests/test_layering.py)."""

from __future__ import annotations

from ._event import LazyEvent as LazyEvent
from ._inline import ask_here as ask_here
from ._inline import checkpoint_factory as checkpoint_factory
from ._inline import claim_here as claim_here
from ._inline import release_here as release_here
from ._inline import spawn_here as spawn_here
from ._inline import stop_here as stop_here

__all__ = [
    "LazyEvent",
    "ask_here",
    "checkpoint_factory",
    "claim_here",
    "release_here",
    "spawn_here",
    "stop_here",
]
