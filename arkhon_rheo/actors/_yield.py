"""A checkpoint with no frames of anyio's own: the backend-specific adapter of a yield.

``anyio.lowlevel.checkpoint()`` is a coroutine that awaits the backend's
checkpoint, itself a coroutine: on asyncio ``asyncio.sleep(0)`` (two more
objects), on trio ``trio.lowlevel.checkpoint()``. A task parked in a
checkpoint keeps that whole chain alive (about 0.8 KB on asyncio) while the
other tasks run, and a session's supervisor yields so every few steps, in
turn with every other session. `checkpoint_factory` returns the backend's own
checkpoint instead: on asyncio a bare yield (what ``asyncio.sleep(0)`` does:
the task goes to the back of the ready queue, and a cancellation is thrown in
when it resumes, as anyio's cancel scopes deliver one), on trio trio's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator

__all__ = ["checkpoint_factory"]

_BARE = (None,)


class _BareYield:
    """Awaited, yields ``None`` to asyncio's task once: the task is stepped again next turn."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return iter(_BARE)  # type: ignore[return-value]


_BARE_YIELD = _BareYield()


def _asyncio_checkpoint() -> Awaitable[None]:
    return _BARE_YIELD


def checkpoint_factory() -> Callable[[], Awaitable[None]]:
    """What makes a checkpoint on the running backend (call it on that loop, then at will).

    The same as ``anyio.lowlevel.checkpoint``: it lets the other tasks run, and
    a cancellation of the caller's scopes is raised at it.
    """
    try:
        import sniffio  # installed with trio; without it we can only be on asyncio
    except ImportError:  # pragma: no cover - trio (which needs sniffio) is not installed
        return _asyncio_checkpoint
    library = sniffio.current_async_library()
    if library == "asyncio":
        return _asyncio_checkpoint
    if library == "trio":
        import trio.lowlevel  # only where trio runs the loop (trio is optional)

        checkpoint: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint
        return checkpoint
    return anyio.lowlevel.checkpoint  # pragma: no cover - anyio runs only these two
