"""What a cell runs: its actor (`Behaviour`), the hook a message goes to, its start.

The bottom of the cell: it imports nothing of the actor runtime but a type of
the reference's, for annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import anyio

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ._ref import Termination

__all__ = ["Behaviour", "Notice", "Starting", "containable", "delivery"]

M_contra = TypeVar("M_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class Behaviour(Protocol[M_contra, R_co]):
    """What a cell needs of the actor it runs (`Actor` is one)."""

    #: Whether `on_stop` bounds its own waits (see `Actor`).
    _on_stop_bounded: ClassVar[bool]

    async def on_start(self) -> None:
        """Run once before the first message."""

    async def receive(self, message: M_contra) -> R_co:
        """Handle one message."""

    async def on_terminated(self, notice: Termination) -> None:
        """Handle the end of a watched actor."""

    async def on_restart(self, error: Exception) -> None:
        """Run on a fresh instance replacing a crashed one."""

    async def on_stop(self, termination: Termination) -> None:
        """Run once when the actor ends."""


class Starting:
    """A spawner's wait for its actor to start: set once it runs, or ended without running.

    Attributes:
        event: Set when the actor runs (its ``on_start`` has returned) or has ended.
        started: Whether it runs.
        error: What its ``on_start`` raised, for the spawner to raise.
    """

    __slots__ = ("error", "event", "started")

    def __init__(self, event: anyio.Event) -> None:
        self.event = event
        self.started = False
        self.error: Exception | None = None


class Notice:
    """A system message carrying a watched actor's termination."""

    __slots__ = ("termination",)

    def __init__(self, termination: Termination) -> None:
        self.termination = termination


def delivery(actor: Behaviour[Any, Any], item: object) -> Awaitable[object]:
    """The hook that handles ``item`` (a told message or a notice), called.

    A plain function: no frame of its own stays alive while the actor waits in the hook.
    """
    if type(item) is Notice:
        return actor.on_terminated(item.termination)
    return actor.receive(item)


def containable(exc: BaseException) -> bool:
    """Whether a non-``Exception`` may end just one actor instead of propagating.

    Cancellation, interrupts, exit requests and exception groups (which may
    hold a cancellation) always propagate.
    """
    return not isinstance(
        exc,
        anyio.get_cancelled_exc_class()
        | KeyboardInterrupt
        | SystemExit
        | GeneratorExit
        | BaseExceptionGroup,
    )
