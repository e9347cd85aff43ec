"""The recorder and the playback a supervisor installs around a stage.

`CallRecorder` records the calls a stage makes through `record_call` and
`record_stream` (the form of a record is described in ``protocols/_io.py``,
with the entry points); `CallPlayback` answers a re-executed stage's calls from
those records, in the order the recorded run finished them, and says where the
stage asked something else (`ReplayDiverged`).

Nothing is recorded with a registered secret in it (``_redact``): requests,
responses and chunks have the secrets masked (the stage gets the response as
recorded, so a replay gives it the same), and a failed call's exception is
scrubbed, chain and ``args`` included, before its type, message and ``args``
are kept.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

import anyio
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from .._errors import RecordedCallFailed, ReplayDiverged, UnrecordableCall
from .._hooks import RECORDER, aclose_iterator
from .._redact import scrub_data, scrub_exception, scrub_secrets
from ..protocols._seams import check_json, json_data, may_hold_sets, share_fields_set
from ._as_recorded import validation_checks_json

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
    from contextvars import Token

    from .._hooks import Recorder
    from ..protocols import Store
    from ..protocols._seams import ScheduledMessage

__all__ = ["CallPlayback", "CallRecorder"]


@functools.lru_cache(maxsize=256)
def _adapter(returns: Any) -> TypeAdapter[Any]:
    return TypeAdapter(returns)


@functools.lru_cache(maxsize=256)
def _dumper(returns: Any) -> Callable[[Any], Any]:
    """How a response of type ``returns`` becomes JSON data (sets sorted, if it may hold any)."""
    adapter = _adapter(returns)
    if may_hold_sets(returns):
        return lambda value: json_data(adapter.dump_python(value))
    # The core serializer itself: the adapter's wrapper adds only its defaults' checks.
    return functools.partial(adapter.serializer.to_python, mode="json")


#: A recorder's bookkeeping before its first call: empty, never written to.
_NONE: dict[int, int] = {}


class CallRecorder:
    """Records the calls of one stage invocation (the supervisor makes one per run).

    Used as a context manager around the stage. Once it is left, it records
    nothing more: a task the stage left running calls straight through.

    Attributes:
        calls: The records, in the order the calls started.
    """

    __slots__ = (
        "_after",
        "_done",
        "_token",
        "calls",
        "closed",
        "effects",
        "session_id",
        "step",
        "timers",
    )

    def __init__(self, session_id: str = "", step: int = 0, effects: Store | None = None) -> None:
        self.session_id = session_id
        #: The number naming the step (the same across a retry; a resumed session
        #: records a resume event first, so a step run again after it has the next).
        self.step = step
        #: The store keeping the session's effect ledger (see `call_site`), if any.
        self.effects = effects
        self.calls: list[dict[str, Any]] = []
        #: The timers the stage scheduled (`schedule`), ``None`` until the first.
        self.timers: list[ScheduledMessage] | None = None
        self.closed = False
        # Made by the first call (most steps make none): id(record) -> its place in
        # completion order, and id(record) -> calls finished when it started.
        self._done: dict[int, int] = _NONE
        self._after: dict[int, int] = _NONE

    def open(self) -> Token[Recorder | None]:
        """Make this the recorder of the calls the current context makes; `close` undoes it."""
        self.closed = False
        return RECORDER.set(self)

    def close(self, token: Token[Recorder | None]) -> None:
        """Restore the recorder ``token`` replaced; calls made after this are refused."""
        try:
            RECORDER.reset(token)
        finally:
            self.closed = True

    def __enter__(self) -> Self:
        self._token = self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self._token)

    def finished(self) -> list[dict[str, Any]]:
        """The records of the calls that finished while the stage ran.

        A call that overlapped others (concurrent calls) keeps its place in
        completion order as ``"done"`` and how many calls had finished when it
        started as ``"after"``, so a replay can answer the calls in the order
        they finished.
        """
        if not self.calls:
            return []
        records = []
        for index, record in enumerate(self.calls):
            done = self._done.get(id(record))
            if done is None:
                continue  # still running when the stage returned: not part of its step
            after = self._after[id(record)]
            if done != index or after != index:
                record = {**record, "done": done, "after": after}
            records.append(record)
        return records

    def schedule(self, timer: ScheduledMessage) -> str:
        """Keep ``timer`` for the step's commit; return its id (made from the step's, if none)."""
        timers = self.timers
        if timers is None:
            timers = self.timers = []
        if not timer.message_id:
            timer = replace(timer, message_id=f"timer-{self.step}.{len(timers) + 1}")
        timers.append(timer)
        return timer.message_id

    def _start(self, record: dict[str, Any]) -> None:
        if self._after is _NONE:
            self._after, self._done = {}, {}
        self.calls.append(record)  # its place is where it started
        self._after[id(record)] = len(self._done)

    def _finish(self, record: dict[str, Any]) -> None:
        self._done[id(record)] = len(self._done)

    async def call(
        self, kind: str, request: Any, call: Callable[[], Awaitable[Any]], returns: Any
    ) -> Any:
        """Make the call and record it (a call that raises is recorded, then re-raised)."""
        if self.closed:
            return await call()
        record: dict[str, Any] = {"kind": kind, "request": scrub_data(request)}
        self._start(record)
        token = RECORDER.set(None)  # calls made inside this one are part of it
        try:
            response = await call()
        except anyio.get_cancelled_exc_class():
            record["cancelled"] = True
            self._finish(record)
            raise
        except Exception as exc:
            record["error"] = _error(exc)
            self._finish(record)
            raise
        finally:
            RECORDER.reset(token)
        adapter = _adapter(returns)
        result: Any = _UNCHECKED
        try:
            dumped = scrub_data(_dumper(returns)(response))
            if validation_checks_json(returns):
                result = _validated_or_unchecked(adapter, dumped)
            if result is _UNCHECKED:
                check_json(dumped)
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            raise UnrecordableCall(
                kind=kind, what="response", reason=scrub_secrets(str(exc))
            ) from exc
        record["response"] = dumped
        self._finish(record)
        if result is _UNCHECKED:
            result = adapter.validate_python(dumped)  # what a replay will return, exactly
        share_fields_set(result)  # a session may keep it (a model's reply) for its whole life
        return result

    async def stream(
        self, kind: str, request: Any, call: Callable[[], AsyncIterator[Any]], returns: Any
    ) -> AsyncGenerator[Any, None]:
        """Stream the call's chunks through, recording each (see `record_stream`)."""
        iterator = aiter(call())
        if self.closed:
            try:
                async for chunk in iterator:
                    yield chunk
            finally:
                await aclose_iterator(iterator)
            return
        chunks: list[Any] = []
        record: dict[str, Any] = {"kind": kind, "request": scrub_data(request), "stream": True}
        record["chunks"] = chunks
        self._start(record)
        adapter = _adapter(returns)
        try:
            while True:
                # Calls made while the stream produces a chunk are part of it; the
                # stage's own calls between chunks are not, so no token spans a yield.
                token = RECORDER.set(None)
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                finally:
                    RECORDER.reset(token)
                try:
                    dumped = scrub_data(json_data(adapter.dump_python(chunk), finite=True))
                except (PydanticSerializationError, ValueError, TypeError) as exc:
                    raise UnrecordableCall(
                        kind=kind, what="response", reason=scrub_secrets(str(exc))
                    ) from exc
                chunks.append(dumped)
                yield adapter.validate_python(dumped)  # what a replay will yield, exactly
        except anyio.get_cancelled_exc_class():
            record["cancelled"] = True
            raise
        except Exception as exc:
            record["error"] = _error(exc)
            raise
        finally:
            # Finished, failed, or left early by the stage (its chunks so far stand).
            self._finish(record)
            await aclose_iterator(iterator)


#: A response not validated yet (its dump is checked as JSON first).
_UNCHECKED: Any = object()


def _validated_or_unchecked(adapter: TypeAdapter[Any], dumped: Any) -> Any:
    """``dumped`` validated by ``adapter``; `_UNCHECKED` if it does not validate.

    A dump of a type whose validation checks JSON (`validation_checks_json`)
    that validates is plain JSON: it needs no encoding to be checked. One that
    does not is checked, then validated again, to fail as it always did.
    """
    try:
        return adapter.validator.validate_python(dumped)
    except ValidationError:
        return _UNCHECKED


def _error(exc: Exception) -> dict[str, Any]:
    """A failed call's exception as a record: scrubbed of secrets, in place and as kept.

    The exception the stage gets is scrubbed too (its ``args`` and chain), so it
    shows what a replay, rebuilt from this record, will.
    """
    cls = type(exc)
    scrub_exception(exc)
    message = scrub_secrets(str(exc))
    try:
        args = scrub_data(json_data(exc.args, finite=True))
    except (PydanticSerializationError, ValueError, TypeError):
        args = [message]
    if scrub_secrets(repr(args)) != repr(args):  # a secret the args hold some other way
        args = [message]
    return {"type": f"{cls.__module__}.{cls.__qualname__}", "message": message, "args": args}


class CallPlayback(CallRecorder):
    """Answers a re-executed stage's calls from a recorded run's records.

    Each call is matched with the first unused record of the same kind and
    request, and answered once the calls that finished while it ran in the
    recorded run have been answered: calls made concurrently finish in the
    order they did. A call with no such record, or one that waits more than
    ``wait`` seconds for those (a call that never comes), raises
    `ReplayDiverged` in the stage and is remembered in `diverged` (a stage
    that swallows the error still diverged).

    Args:
        records: The calls the recorded run made, in order.
        session_id: The session, for error messages.
        wait: How long a call may wait for the calls that finished before it.
    """

    __slots__ = ("_answered", "_changed", "_used", "_wait", "diverged", "records")

    def __init__(
        self, records: Sequence[dict[str, Any]], session_id: str = "", *, wait: float = 10.0
    ) -> None:
        super().__init__(session_id)
        self.records = records
        self._used = [False] * len(records)
        self._wait = wait
        self._answered: set[int] = set()  # completion places of the calls answered
        self._changed: anyio.Event | None = None
        self.diverged: ReplayDiverged | None = None

    @property
    def position(self) -> int:
        """How many recorded calls were matched."""
        return sum(self._used)

    def _diverge(self, kind: str, reason: str) -> ReplayDiverged:
        error = ReplayDiverged(session_id=self.session_id, kind=kind, reason=reason)
        if self.diverged is None:
            self.diverged = error
        return error

    async def call(
        self, kind: str, request: Any, call: Callable[[], Awaitable[Any]], returns: Any
    ) -> Any:
        """Return (or raise) what the recorded call did; never calls out."""
        record = await self._answer(kind, scrub_data(request), stream=False)
        if record.get("cancelled"):
            await anyio.sleep_forever()  # until the stage's own timeout fires, as it did
        if "error" in record:
            raise _rebuild(kind, record["error"])
        return self._validate(kind, record.get("response"), returns)

    async def stream(
        self, kind: str, request: Any, call: Callable[[], AsyncIterator[Any]], returns: Any
    ) -> AsyncGenerator[Any, None]:
        """Yield the recorded chunks, then end (or raise) as the recorded stream did."""
        record = await self._answer(kind, scrub_data(request), stream=True)
        for chunk in record.get("chunks", []):
            yield self._validate(kind, chunk, returns)
        if record.get("cancelled"):
            await anyio.sleep_forever()
        if "error" in record:
            raise _rebuild(kind, record["error"])

    def _validate(self, kind: str, data: Any, returns: Any) -> Any:
        try:
            return _adapter(returns).validate_python(data)
        except ValidationError as exc:
            raise self._diverge(
                kind, f"the recorded response no longer validates as {returns!r}: {exc}"
            ) from exc

    async def _answer(self, kind: str, request: Any, *, stream: bool) -> dict[str, Any]:
        """The record answering this call, once the calls that finished before it are answered.

        Raises:
            ReplayDiverged: No unused record matches, or it waits for calls never made.
        """
        if self.closed:
            raise self._diverge(kind, "it was made after the stage returned")
        pending = [i for i, used in enumerate(self._used) if not used]
        for index in pending:
            record = self.records[index]
            if (
                record.get("kind") == kind
                and record.get("request") == request
                and bool(record.get("stream")) == stream
            ):
                break
        else:
            number = self.position + 1
            if not pending:
                reason = (
                    f"call #{number} was not made in the recorded run ({len(self.records)} were)"
                )
            else:
                expected = self.records[pending[0]]
                reason = (
                    f"call #{number} asked {request!r}; the recorded run's next "
                    f"{expected.get('kind')!r} call asked {expected.get('request')!r}"
                )
            raise self._diverge(kind, reason)
        self._used[index] = True
        done = int(record.get("done", index))
        first = set(range(int(record.get("after", index)), done))  # finished while it ran
        with anyio.move_on_after(self._wait):
            while not first <= self._answered:
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
        if not first <= self._answered:
            raise self._diverge(
                kind,
                f"call #{index + 1} waited for {len(first - self._answered)} calls that "
                "finished while it ran in the recorded run, and were not made",
            )
        self._answered.add(done)
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        return record

    def unused(self) -> int:
        """How many recorded calls the re-executed stage did not make."""
        return len(self.records) - self.position


def _rebuild(kind: str, error: dict[str, Any]) -> Exception:
    """The recorded exception as its own class (if that is loaded), else a stand-in.

    The instance is made without running the class's ``__init__`` (SDK errors
    often want more than a message), with the recorded ``args``; attributes
    its ``__init__`` would have set are missing.
    """
    name = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    module_name, _, qualname = name.rpartition(".")
    if module_name == "arkhon_rheo" and not hasattr(sys.modules.get(module_name), qualname):
        module_name = "arkhon_rheo.errors"  # recorded when every error was a top-level name
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            rebuilt = found.__new__(found)
            rebuilt.args = tuple(error.get("args", [message]))
        except Exception:  # a class that cannot be made this way
            pass
        else:
            return rebuilt
    return RecordedCallFailed(kind=kind, error_type=name, message=message)
