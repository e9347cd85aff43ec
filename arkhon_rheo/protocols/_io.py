"""Recorded calls: what a stage asked the outside world, and what came back.

A stage that calls a model or a tool through `record_call` (or a function
wrapped with `recorded`) has the call's request and response recorded in the
event that commits its patch. A replay that re-executes the stage answers the
same calls from the record, without the model or the tool, and stops at the
first call that differs (`ReplayDiverged`). Outside a stage both simply call
through.

The record of one call is JSON: ``{"kind", "request", "response"}``, or
``{"kind", "request", "error": {"type", "message"}}`` for a call that raised.
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

from .._errors import RecordedCallFailed, ReplayDiverged, UnrecordableCall

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = ["CallPlayback", "CallRecorder", "record_call", "recorded"]

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Awaitable[Any]]")

_RECORDER: ContextVar[CallRecorder | None] = ContextVar("arkhon_rheo_call_recorder", default=None)


@functools.lru_cache(maxsize=256)
def _adapter(returns: Any) -> TypeAdapter[Any]:
    return TypeAdapter(returns)


class CallRecorder:
    """Records the calls of one stage invocation (the supervisor makes one per run).

    Attributes:
        calls: The records, in call order.
    """

    __slots__ = ("_token", "calls", "session_id")

    def __init__(self, session_id: str = "") -> None:
        self.session_id = session_id
        self.calls: list[dict[str, Any]] = []

    def __enter__(self) -> CallRecorder:
        self._token = _RECORDER.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _RECORDER.reset(self._token)

    async def call(
        self, kind: str, request: Any, call: Callable[[], Awaitable[Any]], returns: Any
    ) -> Any:
        """Make the call and record it (a call that raises is recorded, then re-raised)."""
        try:
            response = await call()
        except Exception as exc:
            cls = type(exc)
            self.calls.append(
                {
                    "kind": kind,
                    "request": request,
                    "error": {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(exc)},
                }
            )
            raise
        try:
            dumped = _adapter(returns).dump_python(response, mode="json")
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            raise UnrecordableCall(kind=kind, what="response", reason=str(exc)) from exc
        self.calls.append({"kind": kind, "request": request, "response": dumped})
        return response


class CallPlayback(CallRecorder):
    """Answers a re-executed stage's calls from a recorded run's records.

    A call whose kind or request differs from the next record, or one more
    call than the record holds, raises `ReplayDiverged` in the stage and is
    remembered in `diverged` (a stage that swallows the error still diverged).

    Args:
        records: The calls the recorded run made, in order.
        session_id: The session, for error messages.
    """

    __slots__ = ("diverged", "position", "records")

    def __init__(self, records: Sequence[dict[str, Any]], session_id: str = "") -> None:
        super().__init__(session_id)
        self.records = records
        self.position = 0
        self.diverged: ReplayDiverged | None = None

    def _diverge(self, kind: str, reason: str) -> ReplayDiverged:
        error = ReplayDiverged(session_id=self.session_id, kind=kind, reason=reason)
        if self.diverged is None:
            self.diverged = error
        return error

    async def call(
        self, kind: str, request: Any, call: Callable[[], Awaitable[Any]], returns: Any
    ) -> Any:
        """Return (or raise) what the recorded call did; never calls out."""
        number = self.position + 1
        if self.position >= len(self.records):
            raise self._diverge(
                kind, f"call #{number} was not made in the recorded run ({len(self.records)} were)"
            )
        record = self.records[self.position]
        if record.get("kind") != kind:
            raise self._diverge(
                kind, f"call #{number} was a {record.get('kind')!r} call in the recorded run"
            )
        if record.get("request") != request:
            raise self._diverge(
                kind,
                f"call #{number} asked {request!r}, the recorded run asked "
                f"{record.get('request')!r}",
            )
        self.position += 1
        if "error" in record:
            raise _rebuild(kind, record["error"])
        return _adapter(returns).validate_python(record.get("response"))

    def unused(self) -> int:
        """How many recorded calls the re-executed stage did not make."""
        return len(self.records) - self.position


def _rebuild(kind: str, error: dict[str, Any]) -> Exception:
    """The recorded exception, as its own class if that is loaded and takes a message."""
    name = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    module_name, _, qualname = name.rpartition(".")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            rebuilt = found(message)
        except Exception:  # a constructor that wants more than a message
            rebuilt = None
        if isinstance(rebuilt, Exception) and str(rebuilt) == message:
            return rebuilt
    return RecordedCallFailed(kind=kind, error_type=name, message=message)


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
        call: Makes the call.
        returns: The response's type: it is dumped to JSON through it, and a
            replay validates the recorded JSON back into it. With the default
            ``Any``, a replay returns the JSON data as it was recorded.

    Returns:
        The response (in a replay, the recorded one).

    Raises:
        UnrecordableCall: The request or the response cannot be kept as JSON.
        ReplayDiverged: In a replay, the call differs from the recorded one.
    """
    recorder = _RECORDER.get()
    if recorder is None:
        return await call()
    try:
        jsonable = to_jsonable_python(request)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise UnrecordableCall(kind=kind, what="request", reason=str(exc)) from exc
    return cast("T", await recorder.call(kind, jsonable, call, returns))


def recorded(kind: str, *, returns: Any = None) -> Callable[[F], F]:
    """Decorate an async function (or method) so that its calls are recorded.

    ::

        @recorded("tool:add")
        async def add(a: int, b: int) -> int: ...

    The request is the bound arguments by name (``self`` and ``cls`` left out),
    the response type the return annotation unless ``returns`` says otherwise.
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        skip = {name for name in list(signature.parameters)[:1] if name in ("self", "cls")}
        response_type: list[Any] = []

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _RECORDER.get() is None:
                return await fn(*args, **kwargs)
            if not response_type:
                hint = typing.get_type_hints(fn).get("return", Any) if returns is None else returns
                response_type.append(hint)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            request = {k: v for k, v in bound.arguments.items() if k not in skip}
            return await record_call(
                kind, request, lambda: fn(*args, **kwargs), returns=response_type[0]
            )

        return cast("F", wrapper)

    return decorate
