"""Recorded calls: what a stage asked the outside world, and what came back.

A stage that calls a model or a tool through `record_call` (or a function
wrapped with `recorded`) has the call's request and response recorded in the
event that commits its patch. A replay that re-executes the stage answers the
same calls from the record, without the model or the tool, and stops at the
first call that differs (`ReplayDiverged`). Outside a stage both simply call
through.

What the stage gets back is, in the recorded run too, the response as a
replay will give it: dumped to JSON through ``returns`` and validated back.
So a stage cannot depend on something the record does not keep.

The record of one call is JSON: ``{"kind", "request", "response"}``; a call
that raised keeps ``"error": {"type", "message", "args"}`` instead, one that
was cancelled (by the stage's own timeout) ``"cancelled": true``. A streamed
call (`record_stream`) is kept as ``{"kind", "request", "stream": true,
"chunks"}``: every chunk the stage got, in order (for a model, the deltas and
the full reply last), with ``"error"`` or ``"cancelled"`` after the chunks
that came before it; a replay streams the chunks back. Records are
in the order the calls started. A call made while another recorded call runs
(a recorded tool that uses a recorded model) belongs to the outer call and is
not recorded on its own.

This module holds the entry points and the contract of what answers them
(`Recorder`, found through the `RECORDER` context variable); the recorder and
the playback that the supervisor installs around a stage live in
``arkhon_rheo.session`` (`CallRecorder`, `CallPlayback`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pydantic_core import PydanticSerializationError

from .._errors import ConfigurationError, UnrecordableCall
from ._canonical import check_json, json_data

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

    from ._store import Store

__all__ = [
    "RECORDER",
    "Recorder",
    "aclose_iterator",
    "call_site",
    "check_json",
    "current_step",
    "record_call",
    "record_plain_call",
    "record_stream",
    "recorded",
]

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Awaitable[Any]]")


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


def _jsonable(kind: str, what: str, value: Any) -> Any:
    """``value`` as plain JSON data (sets sorted), or `UnrecordableCall`.

    NaN and infinities are refused here, not at the store.
    """
    try:
        return json_data(value, finite=True)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise UnrecordableCall(kind=kind, what=what, reason=str(exc)) from exc


def current_step() -> int | None:
    """The number of the step the running stage will be recorded as.

    ``None`` outside a stage run by a supervisor (or a replay), and inside a
    recorded call (a call it makes is part of that call).
    """
    recorder = RECORDER.get()
    return None if recorder is None else getattr(recorder, "step", None)


def call_site() -> tuple[str, int | None, Store | None]:
    """Where a call made now is made: the session, the step, and the store of its effects.

    The running stage's session id, the number its step will be recorded as,
    and the store that keeps its session's effect ledger. Outside a stage run
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


async def record_call(
    kind: str, request: Any, call: Callable[[], Awaitable[T]], *, returns: Any = Any
) -> T:
    """Make a call to a model or a tool, recorded in the step's event for replay.

    ::

        reply = await record_call(
            "model", messages, lambda: client.complete(messages), returns=Reply
        )

    Args:
        kind: What is called (``"model"``, ``"tool:search"``); a replay checks it.
        request: What is asked, as JSON-friendly data; a replay checks it too.
            It is stored in the event: pass what identifies the call (the new
            messages, say) rather than a whole conversation each step.
        call: Makes the call.
        returns: The response's type: it is dumped to JSON through it and
            validated back, in the recorded run as in a replay. With the
            default ``Any`` the stage gets the response as JSON data.

    Returns:
        The response, as the record keeps it.

    Raises:
        UnrecordableCall: The request or the response cannot be kept as JSON.
        ReplayDiverged: In a replay, no recorded call matches this one.
    """
    recorder = RECORDER.get()
    if recorder is None or recorder.closed:
        return await call()
    jsonable = _jsonable(kind, "request", request)
    return cast("T", await recorder.call(kind, jsonable, call, returns))


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


async def record_stream(
    kind: str, request: Any, call: Callable[[], AsyncIterator[T]], *, returns: Any = Any
) -> AsyncGenerator[T, None]:
    """Make a streamed call to a model or a tool, its chunks recorded in the step's event.

    ::

        async for chunk in record_stream(
            "model", messages, lambda: client.stream(messages), returns=ReplyDelta | ModelReply
        ):
            ...

    The chunks reach the stage as they arrive; each is recorded as it passes.
    A replay streams the recorded chunks back, without calling out, and ends
    (or raises) where the recorded stream did. A stage that stops reading
    early records the chunks it read. Outside a stage it simply streams through.

    Args:
        kind: What is called (``"model"``); a replay checks it.
        request: What is asked, as JSON-friendly data; a replay checks it too.
        call: Starts the stream (returns an async iterator, such as an async
            generator); it is not called in a replay.
        returns: The type of one chunk: each is dumped to JSON through it and
            validated back, in the recorded run as in a replay.

    Yields:
        The chunks, as the record keeps them.

    Raises:
        UnrecordableCall: The request or a chunk cannot be kept as JSON.
        ReplayDiverged: In a replay, no recorded streamed call matches this one.
    """
    recorder = RECORDER.get()
    if recorder is None or recorder.closed:
        iterator = aiter(call())
        try:
            async for chunk in iterator:
                yield chunk
        finally:
            await aclose_iterator(iterator)
        return
    jsonable = _jsonable(kind, "request", request)
    chunks = recorder.stream(kind, jsonable, call, returns)
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            yield chunk


def recorded(kind: str, *, returns: Any = None) -> Callable[[F], F]:
    """Decorate an async function (or method) so that its calls are recorded.

    ::

        @recorded("tool:add")
        async def add(a: int, b: int) -> int: ...

    The request is the bound arguments by name (``self`` and ``cls`` left out),
    the response type the return annotation unless ``returns`` says otherwise;
    the annotation is resolved on the first call, in or out of a stage.

    Raises:
        ConfigurationError: On the first call, if the return annotation cannot
            be resolved (pass ``returns=``).
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        skip = {name for name in list(signature.parameters)[:1] if name in ("self", "cls")}
        response_type: list[Any] = []

        def resolve() -> Any:
            if not response_type:
                if returns is not None:
                    response_type.append(returns)
                else:
                    try:
                        hint = typing.get_type_hints(fn).get("return", Any)
                    except Exception as exc:
                        raise ConfigurationError(
                            f"@recorded({kind!r}) cannot resolve the return annotation of "
                            f"{fn.__qualname__}: {exc!r}; pass returns= the response's type"
                        ) from exc
                    response_type.append(hint)
            return response_type[0]

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            response = resolve()
            if RECORDER.get() is None:
                return await fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            request = {k: v for k, v in bound.arguments.items() if k not in skip}
            return await record_call(kind, request, lambda: fn(*args, **kwargs), returns=response)

        return cast("F", wrapper)

    return decorate
