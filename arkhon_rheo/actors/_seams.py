"""The insides of the actor runtime that the layers above may use (see tests/test_layering.py)."""

from __future__ import annotations

from ._event import LazyEvent as LazyEvent

__all__ = ["LazyEvent"]
