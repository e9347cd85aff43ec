"""The recorder of a stage's calls, as the calls find it: one context variable.

The supervisor puts a recorder (or, in a replay, a playback) in `RECORDER`
around each stage it runs (``arkhon_rheo.session``'s `CallRecorder` and
`CallPlayback`); `record_call`, `record_stream`, `recorded` and `schedule`
(the public entry points, in ``arkhon_rheo.protocols``) hand it their calls,
and a `Toolbox` asks it where a call is made (`call_site`).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

__all__ = [
    "RECORDER",
    "Recorder",
    "aclose_iterator",
    "call_site",
    "current_step",
    "record_plain_call",
]

T = TypeVar("T")


class Recorder(Protocol):
    """What answers the recorded calls of one stage invocation.

    Attributes:
        closed: Whether it records nothing more (the stage returned): calls
            made then go straight through.
    """

    closed: bool

    async def call(
        self, kind: str, request: Any, call: Callable[[], Awaitable[Any]], returns: Any
    ) -> Any:
        """Answer one call of ``kind`` asking ``request`` (``request`` is JSON data)."""
        ...

    def stream(
        self, kind: str, request: Any, call: Callable[[], AsyncIterator[Any]], returns: Any
    ) -> AsyncGenerator[Any, None]:
        """Answer one streamed call of ``kind`` asking ``request``, chunk by chunk."""
        ...


#: The recorder of the stage invocation running in this context, if any.
RECORDER: ContextVar[Recorder | None] = ContextVar("arkhon_rheo_call_recorder", default=None)


def current_step() -> int | None:
    """The number of the step the running stage will be recorded as.

    ``None`` outside a stage run by a supervisor (or a replay), and inside a
    recorded call (a call it makes is part of that call).
    """
    recorder = RECORDER.get()
    return None if recorder is None else getattr(recorder, "step", None)


def call_site() -> tuple[str, int | None, Any]:
    """Where a call made now is made: the session, the step, and the store of its effects.

    The running stage's session id, the number its step will be recorded as,
    and the `Store` that keeps its session's effect ledger. Outside a stage run
    by a supervisor, and inside a recorded call: ``("", None, None)``; in a
    replay, and without a store, the store is ``None``.
    """
    recorder = RECORDER.get()
    if recorder is None:
        return "", None, None
    return (
        getattr(recorder, "session_id", ""),
        getattr(recorder, "step", None),
        getattr(recorder, "effects", None),
    )


async def aclose_iterator(iterator: AsyncIterator[Any]) -> None:
    """Close ``iterator`` if it can be closed (an async generator can)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


async def record_plain_call(
    kind: str, request: Any, call: Callable[[], Awaitable[T]], *, returns: Any = Any
) -> T:
    """`record_call` for a request its caller made as plain JSON data, for this call only.

    Plain as `plain_copy` takes it (dicts with string keys, lists, strings,
    ints, bools, ``None``, finite floats), new, and never changed after: it is
    recorded as it is, not copied. The library's own callers use it (the
    ReAct engine's model turns); a request from elsewhere goes through
    `record_call`.
    """
    recorder = RECORDER.get()
    if recorder is None or recorder.closed:
        return await call()
    return cast("T", await recorder.call(kind, request, call, returns))
