"""Events made cheaply on the hot path, or only when somebody waits.

``anyio.Event()`` dispatches to the running backend in ``__new__`` and returns an
instance that Python then initialises a second time, so every event builds two
backend events (two ``asyncio.Event``s, each with its own deque, on asyncio).
Instantiating the backend's class directly builds one. Mailboxes and asks make
an event per wait, so they take this factory once and call it many times.

`LazyEvent` is a one-shot flag for what many objects have and few wait on (an
actor's end, a session's end): it makes its event at the first wait only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LazyEvent", "event_factory"]


def event_factory() -> Callable[[], anyio.Event]:
    """Return a callable that makes events of the running backend's class."""
    cls: Callable[[], anyio.Event] = type(anyio.Event())
    return cls


class LazyEvent:
    """A one-shot flag whose event is made only when somebody waits on it.

    Most of the objects that keep one end without anybody awaiting them (they
    read the flag), so the ~0.3-0.9 KB of an `anyio.Event` is not kept for each.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        """Whether it is set."""
        return self._set

    def set(self) -> None:
        """Set it and wake whoever waits (setting it again does nothing more)."""
        self._set = True
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self, new_event: Callable[[], anyio.Event] = anyio.Event) -> None:
        """Wait until it is set; a checkpoint either way, as `anyio.Event.wait`.

        Args:
            new_event: Makes the event at the first wait (a caller holding an
                `event_factory` passes it: a cheaper event on asyncio).
        """
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        event = self._event
        if event is None:
            event = self._event = new_event()
        await event.wait()
