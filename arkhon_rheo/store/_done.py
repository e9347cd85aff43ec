"""A batch's "committed" signal, which every caller in the batch waits on.

The backend-specific adapter of the thread writer (`._thread_writer`). On
asyncio, `BatchWait`: one object per batch that every waiting task parks on
itself, as it would on a future, so a waiting commit holds no future, future
iterator or coroutine of its own (each would be created, resumed and, while
hundreds of sessions wait for one transaction, walked by the cyclic GC at every
collection). On trio, `TrioBatchWait`: the waiting tasks in one dict, each
parked by trio's lowest-level wait.

Either way a caller that is cancelled while waiting only stops waiting: the
batch is not cancelled, and the other callers are woken all the same.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextvars import Context

__all__ = ["BatchWait", "Done", "TrioBatchWait", "done_maker", "running_library"]


class Done(Protocol):
    """Set once; ``await done.wait()`` returns once it is set."""

    def set(self) -> None: ...

    def wait(self) -> Awaitable[object]: ...


class BatchWait:
    """`Done` on asyncio: one object per batch, awaited by every waiting task directly.

    It speaks the part of the future protocol an asyncio task uses to park on
    what it awaits (``_asyncio_future_blocking``, ``get_loop``,
    ``add_done_callback``, ``result``, ``cancel``), so each waiting task adds
    only its wake-up callback to the batch's list; `set` schedules one loop
    callback that resumes them all in turn (no handle per task).

    Cancellation: a task cancelled while it waits asks the object it waits on
    to ``cancel``. A batch is everyone's, so it refuses (the task then marks
    itself to be cancelled, as with any future that will not cancel) and
    schedules a sweep that wakes every waiting task so marked, alone: each
    raises `asyncio.CancelledError` at its ``await``, and the others wait on.
    The cancelled caller's write stays in its batch (the store commits it).

    Args:
        loop: The event loop whose tasks wait on it.
    """

    __slots__ = ("_asyncio_future_blocking", "_contexts", "_loop", "_set", "_sweeping", "_waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: The waiting tasks' wake-up callbacks, and each one's context at the same
        #: index (two lists: no tuple per waiting task for the GC to walk).
        self._waiters: list[Callable[[Any], object]] = []
        self._contexts: list[Context | None] = []
        self._set = False
        self._sweeping = False
        #: Read (and reset) by a task when it parks on the object (asyncio's protocol).
        self._asyncio_future_blocking = False

    def set(self) -> None:
        """The batch is resolved: wake every task waiting on it (once)."""
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, []
        contexts, self._contexts = self._contexts, []
        if waiters:
            self._loop.call_soon(self._wake, waiters, contexts)

    def _wake(self, waiters: list[Callable[[Any], object]], contexts: list[Context | None]) -> None:
        """One loop callback: resume each waiting task in turn (no handle per task)."""
        for index, (wakeup, context) in enumerate(zip(waiters, contexts, strict=True)):
            try:
                if context is None:
                    wakeup(self)
                else:
                    context.run(wakeup, self)
            except BaseException:  # a task's step let KeyboardInterrupt or SystemExit out
                rest = zip(waiters[index + 1 :], contexts[index + 1 :], strict=True)
                for later, its_context in rest:
                    self._loop.call_soon(later, self, context=its_context)
                raise

    def is_set(self) -> bool:
        """Whether `set` was called."""
        return self._set

    def wait(self) -> Awaitable[object]:
        """What to await until the batch is resolved (a checkpoint if it is already)."""
        if self._set:
            return anyio.lowlevel.checkpoint()
        # Awaitable through `__await__` (an iterator, as a future's own is).
        return cast("Awaitable[object]", self)

    # -- what an asyncio task calls on what it awaits --------------------------------

    def __await__(self) -> BatchWait:
        return self

    def __iter__(self) -> BatchWait:
        return self

    def __next__(self) -> BatchWait:
        # Each waiting task's await lands here when it starts and when it is woken:
        # it parks (yields this object) until the batch is set, then returns.
        if self._set:
            raise StopIteration
        self._asyncio_future_blocking = True
        return self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop whose tasks wait on it."""
        return self._loop

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: Context | None = None
    ) -> None:
        """A task parks: call ``fn(self)`` (in ``context``) once the batch is set."""
        if self._set:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._waiters.append(fn)
            self._contexts.append(context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        """Forget the callbacks that are ``fn``; return how many there were."""
        pairs = zip(self._waiters, self._contexts, strict=True)
        kept = [(waiter, context) for waiter, context in pairs if waiter != fn]
        removed = len(self._waiters) - len(kept)
        self._waiters = [waiter for waiter, _ in kept]
        self._contexts = [context for _, context in kept]
        return removed

    def result(self) -> None:
        """Nothing: the outcome of each write is on its own ticket."""

    def done(self) -> bool:
        """Whether the batch is resolved."""
        return self._set

    def cancelled(self) -> bool:
        """Never: a batch is not cancelled (see the class's doc)."""
        return False

    def cancel(self, msg: object = None) -> bool:
        """Refuse, and wake the waiting tasks that are to be cancelled (see the class's doc)."""
        if not self._set and not self._sweeping:
            self._sweeping = True
            self._loop.call_soon(self._sweep)
        return False

    def _sweep(self) -> None:
        """Wake, alone, each waiting task that is marked to be cancelled."""
        self._sweeping = False
        waiters: list[Callable[[Any], object]] = []
        contexts: list[Context | None] = []
        call_soon = self._loop.call_soon
        for waiter, context in zip(self._waiters, self._contexts, strict=True):
            task = getattr(waiter, "__self__", None)
            if getattr(task, "_must_cancel", False):
                call_soon(waiter, self, context=context)
            else:
                waiters.append(waiter)
                contexts.append(context)
        self._waiters, self._contexts = waiters, contexts


class TrioBatchWait:
    """`Done` on trio: the waiting tasks of a batch in one dict, each parked by trio's own wait.

    A waiter costs one coroutine and trio's lowest-level wait (``anyio.Event``
    adds its own coroutine, trio's ``Event.wait`` and its parking lot's). A
    cancelled waiter is taken off the dict and raises trio's ``Cancelled``; the
    others wait on, and `set` reschedules each once.

    Args:
        lowlevel: The ``trio.lowlevel`` module.
    """

    __slots__ = ("_lowlevel", "_set", "_tasks")

    def __init__(self, lowlevel: Any) -> None:
        self._lowlevel = lowlevel
        self._tasks: dict[Any, None] = {}
        self._set = False

    def set(self) -> None:
        """The batch is resolved: wake every task waiting on it (once)."""
        if self._set:
            return
        self._set = True
        tasks, self._tasks = self._tasks, {}
        reschedule = self._lowlevel.reschedule
        for task in tasks:
            reschedule(task)

    def wait(self) -> Awaitable[object]:
        """What to await until the batch is resolved (a checkpoint if it is already)."""
        if self._set:
            return anyio.lowlevel.checkpoint()
        return self._park()

    async def _park(self) -> None:
        lowlevel = self._lowlevel
        task = lowlevel.current_task()
        tasks = self._tasks
        tasks[task] = None

        def abort(_: object) -> object:
            del tasks[task]  # cancelled: it stops waiting, the batch goes on
            return lowlevel.Abort.SUCCEEDED

        await lowlevel.wait_task_rescheduled(abort)


def done_maker(library: str) -> Callable[[], Done]:
    """What makes a fresh `Done` on the running loop of ``library`` (call it on that loop)."""
    if library == "asyncio":
        return functools.partial(BatchWait, asyncio.get_running_loop())
    if library == "trio":
        import trio.lowlevel  # only where trio runs the loop (trio is optional)

        return functools.partial(TrioBatchWait, trio.lowlevel)
    return anyio.Event


def running_library() -> str:
    """The async library running this thread's loop (``"asyncio"`` or ``"trio"``)."""
    try:
        import sniffio  # installed with trio; without it we can only be on asyncio
    except ImportError:  # pragma: no cover - trio (which needs sniffio) is not installed
        return "asyncio"
    return sniffio.current_async_library()
