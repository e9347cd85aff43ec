"""Partial output: what a stage emits while it runs, as `Partial` items for subscribers.

A stage that produces its result piece by piece (a model reply streamed token
by token) calls ``emit(delta)`` for each piece. Whoever subscribed to the
session (``handle.partials()``, or ``handle.stream()`` for the transition
events and the partial items in one order) receives each piece as a
`Partial` as soon as it is emitted. The stage host (the session supervisor)
sets, for each attempt of each stage, the scope that ``emit`` publishes in;
that scope, the hub of a session's subscribers and the subscriptions are
running code, in ``arkhon_rheo.session``. This module holds the contract.

The contract:

* ``emit`` never waits and never raises. Each subscriber has its own bounded
  buffer; when it is full the new piece is dropped *for that subscriber only*
  (drop-newest: the pieces already buffered stay, in order). The next piece the
  subscriber does get carries ``dropped``, the number it lost just before it,
  and ``statistics().dropped`` counts every loss (those after its last item too).
* A session never waits for its subscribers: not for a slow one, not for one
  that never reads.
* Partial output is advisory: it is not recorded, stored or replayed. The
  stage's patch carries its full result and the committed state is the truth.
* Every piece names its stage attempt. A stage retried after a transient
  failure emits again under the next ``attempt``; the pieces of the failed
  attempt keep theirs, so a consumer discards them when it sees a higher
  ``attempt`` for the same ``seq`` (the event ``seq`` finally commits names the
  attempt that counted).
* Outside a stage run (no session, or after the stage returned) ``emit`` does
  nothing. With no subscriber it costs a context-variable read and two checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from .._hooks import STAGE_SCOPE

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "Partial",
    "SessionStream",
    "SessionStreamStatistics",
    "emit",
]

T_co = TypeVar("T_co", covariant=True)


class Partial(NamedTuple):
    """One piece of a stage's partial output, as a subscriber receives it.

    A named tuple, like `TransitionEvent`: immutable, and several times cheaper
    to build than a frozen dataclass, which matters at one per delta.

    Attributes:
        session_id: The session.
        stage: The stage that emitted it.
        seq: The number of the event that will record this step's outcome (its
            commit, or the failure recorded instead): partials of step ``seq``
            come before event ``seq`` in ``handle.stream()``.
        attempt: The attempt of the stage that emitted it (1-based). Pieces of an
            attempt that failed and was retried are not part of the result:
            discard them when a higher attempt of the same ``seq`` shows up.
        position: Its place among the pieces its attempt emitted, from 0 (counting
            the ones nobody received), so a gap shows.
        data: What the stage emitted (for a model reply, typically a `ReplyDelta`).
        dropped: Pieces this subscriber lost just before this one (its buffer was full).
    """

    session_id: str
    stage: str
    seq: int
    attempt: int
    position: int
    data: Any
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class SessionStreamStatistics:
    """A snapshot of one subscription's counters.

    Attributes:
        received: Partial items handed to the consumer.
        dropped: Partial items lost because the buffer was full (drop-newest).
        buffered: Partial items waiting to be read.
        capacity: The most partial items the buffer holds.
        open: Whether more items may come (the session runs and the stream is open).
    """

    received: int
    dropped: int
    buffered: int
    capacity: int
    open: bool


def emit(data: Any) -> None:
    """Publish ``data`` as partial output of the stage running in this task.

    Never waits and never raises: each subscriber that has no room loses it
    (and is told so on its next item). Does nothing outside a running stage.

    Args:
        data: The piece, as subscribers will receive it in `Partial.data` (for
            a streamed model reply, a `ReplyDelta`).
    """
    scope = STAGE_SCOPE.get()
    if scope is not None:
        scope.publish(data)


class SessionStream(Protocol[T_co]):
    """A live subscription to a session's output: an async iterator that ends with the session.

    ``handle.partials()`` yields `Partial` items; ``handle.stream()`` yields the
    session's transition events (all of them, from the first) and its `Partial`
    items in one order: the partials of step ``seq`` before event ``seq``. Only
    partial items can be lost (see `Partial.dropped`); events never are.

    Close it (``close()``, or use it as a context manager) to unsubscribe before
    the session ends; an abandoned subscription only costs its bounded buffer
    until then.
    """

    def receive_nowait(self) -> T_co:
        """Return the next item if one is ready.

        Raises:
            anyio.WouldBlock: If nothing is ready yet.
            anyio.EndOfStream: If the session ended (or the stream was closed)
                and everything has been read.
        """
        ...

    async def receive(self) -> T_co:
        """Wait for the next item and return it.

        Raises:
            anyio.EndOfStream: Once the session ended and everything has been read.
        """
        ...

    def __aiter__(self) -> SessionStream[T_co]: ...

    async def __anext__(self) -> T_co: ...

    def close(self) -> None:
        """Unsubscribe and drop what is buffered; iteration then ends."""
        ...

    async def aclose(self) -> None:
        """Close it (see `close`)."""
        ...

    def __enter__(self) -> SessionStream[T_co]: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def __aenter__(self) -> SessionStream[T_co]: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def statistics(self) -> SessionStreamStatistics:
        """Return a snapshot of this subscription's counters."""
        ...
