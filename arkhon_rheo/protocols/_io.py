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

This module holds the entry points. What answers them (a `Recorder`, found
through the `RECORDER` context variable) is running code: the variable lives
in ``arkhon_rheo._hooks``, and the recorder and the playback that the
supervisor puts there around a stage in ``arkhon_rheo.session``
(`CallRecorder`, `CallPlayback`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic_core import PydanticSerializationError

from .._errors import ConfigurationError, UnrecordableCall
from .._hooks import RECORDER, aclose_iterator
from ._canonical import json_data

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

__all__ = ["record_call", "record_stream", "recorded"]

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Awaitable[Any]]")


def _jsonable(kind: str, what: str, value: Any) -> Any:
    """``value`` as plain JSON data (sets sorted), or `UnrecordableCall`.

    NaN and infinities are refused here, not at the store.
    """
    try:
        return json_data(value, finite=True)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise UnrecordableCall(kind=kind, what=what, reason=str(exc)) from exc


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
