"""A batch's "committed" signal, which every caller in the batch waits on.

The backend-specific adapter of the thread writer (`._thread_writer`): on
asyncio, waiting is one future per caller, awaited by the caller itself, with
no coroutine of its own; ``anyio.Event`` would add two (its own ``wait`` and
asyncio's), each created, resumed and, while hundreds of sessions wait for one
transaction, walked by the cyclic GC at every collection. Elsewhere (trio),
``anyio.Event``.

Either way a caller that is cancelled while waiting only stops waiting: the
other callers are woken all the same.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["Done", "done_maker", "running_library"]


class Done(Protocol):
    """Set once; ``await done.wait()`` returns once it is set."""

    def set(self) -> None: ...

    def wait(self) -> Awaitable[object]: ...


class _FutureDone:
    """`Done` on asyncio: a future per waiter, resolved by `set`."""

    __slots__ = ("_loop", "_set", "_waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: list[asyncio.Future[None]] = []
        self._set = False

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # a cancelled caller's
                waiter.set_result(None)

    def wait(self) -> Awaitable[object]:
        if self._set:
            return anyio.lowlevel.checkpoint()
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        return waiter


def done_maker(library: str) -> Callable[[], Done]:
    """What makes a fresh `Done` on the running loop of ``library`` (call it on that loop)."""
    if library == "asyncio":
        return functools.partial(_FutureDone, asyncio.get_running_loop())
    return anyio.Event


def running_library() -> str:
    """The async library running this thread's loop (``"asyncio"`` or ``"trio"``)."""
    try:
        import sniffio  # installed with trio; without it we can only be on asyncio
    except ImportError:  # pragma: no cover - trio (which needs sniffio) is not installed
        return "asyncio"
    return sniffio.current_async_library()
