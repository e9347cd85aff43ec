"""The command line's error: what it prints, and the exit status it ends with (`ExitStatus`).

And the command line's way of running a command on the event loop its
``--backend`` names (`run_on`), which says what to install when that loop's
library is missing (the ``arkhon-rheo`` command and the inspector's).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, TypeVar

import anyio

from ._base import ArkhonError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["CommandError", "ExitStatus", "run_on"]

T = TypeVar("T")


class ExitStatus(enum.IntEnum):
    """The exit status of ``arkhon-rheo`` (and of the inspector's command)."""

    #: Done.
    OK = 0
    #: The operation was refused or failed.
    FAILED = 1
    #: A bad argument: usage, JSON, a machine that does not fit the session.
    USAGE = 2
    #: No such store file, session, module or attribute.
    NOT_FOUND = 3
    #: Another process (or another call) drives the session.
    LOCKED = 4


class CommandError(ArkhonError):
    """A command of ``arkhon-rheo`` cannot go on; its message says why and what to do.

    Attributes:
        code: The exit status the command ends with (an `ExitStatus`).
    """

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_on(backend: str, fn: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(fn, backend=backend)``; a backend whose library is missing said plainly.

    Raises:
        CommandError: The event loop ``backend`` names is not installed (exit
            status 2), with the extra that brings it: ``arkhon-rheo[trio]``
            (anyio's own message names ``anyio[trio]``, which is not how this
            package is installed).
    """
    started = False

    async def command() -> T:
        nonlocal started
        started = True
        return await fn()

    try:
        return anyio.run(command, backend=backend)
    except LookupError as exc:
        if started or not isinstance(exc.__cause__, ImportError):
            raise  # the command's own, or not a missing library
        raise CommandError(
            f"--backend {backend} needs {backend}, which is not installed: "
            f"pip install 'arkhon-rheo[{backend}]' (or choose --backend asyncio)",
            code=ExitStatus.USAGE,
        ) from exc
