"""A cheaper way to make ``anyio.Event``s on the hot path.

``anyio.Event()`` dispatches to the running backend in ``__new__`` and returns an
instance that Python then initialises a second time, so every event builds two
backend events (two ``asyncio.Event``s, each with its own deque, on asyncio).
Instantiating the backend's class directly builds one. Mailboxes and asks make
an event per wait, so they take this factory once and call it many times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["event_factory"]


def event_factory() -> Callable[[], anyio.Event]:
    """Return a callable that makes events of the running backend's class."""
    cls: Callable[[], anyio.Event] = type(anyio.Event())
    return cls
