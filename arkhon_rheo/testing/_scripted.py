"""`ScriptedModel`: a model that answers from a script, for tests and examples.

It implements `StreamingModelClient` like the real clients, so the code under
test cannot tell the difference; it answers each call with the step for where
the conversation it is sent stands (resume-safe), each session from its own
place in the script (sessions may share one model, at once or one after
another), and records what it was asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import anyio
import anyio.lowlevel

from .._errors import Fatal
from .._hooks import current_session
from ..protocols import AssistantMessage, ModelReply, ReplyDelta, ToolCall, Usage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence

    from ..protocols import FinishReason, Message, ResponseSchema, ToolSpec

__all__ = ["Chunks", "Delay", "ScriptedModel", "ScriptedRequest", "Step"]


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait ``seconds`` (with ``anyio.sleep``: virtual time on trio's mock clock) first.

    A delay is not an answer: the call that meets it waits, then goes on to the
    script's next step.
    """

    seconds: float


@dataclass(frozen=True, slots=True)
class Chunks:
    """A streamed answer: one `ReplyDelta` per piece of text, then the full reply.

    Attributes:
        pieces: The text, in the pieces the stream yields.
        tool_calls: Tool calls the full reply carries.
        error: Raised after the pieces (a stream that breaks mid-way).
    """

    pieces: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...] = ()
    error: Exception | None = None

    def reply(self, model: str) -> ModelReply:
        """The full reply the pieces make."""
        return _reply(
            AssistantMessage(content="".join(self.pieces) or None, tool_calls=self.tool_calls),
            model,
        )


Step: TypeAlias = "str | ModelReply | ToolCall | Sequence[ToolCall] | Chunks | Delay | Exception"
"""One step of a script: a text answer, a reply, tool calls, a stream, a delay, or an error."""


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    """One call a `ScriptedModel` received.

    Attributes:
        messages: The conversation it was asked to answer.
        tools: The tools offered.
        json_mode: Whether JSON was asked for.
        stream: Whether it was a streamed call.
        schema: The typed answer's schema it was given, if any.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    json_mode: bool = False
    stream: bool = False
    schema: ResponseSchema | None = None


_Answer: TypeAlias = "ModelReply | str | ToolCall | Sequence[ToolCall] | Chunks"


class _Place:
    """Where one session (or the calls made outside any) stands in the script."""

    __slots__ = ("answered", "calls", "script")

    def __init__(self, script: list[Step]) -> None:
        #: The steps it has not taken (nor skipped) yet.
        self.script = script
        #: How many answers it has given or skipped: the next one's position.
        self.answered = 0
        #: How many calls it has received.
        self.calls = 0


def _reply(message: AssistantMessage, model: str) -> ModelReply:
    reason: FinishReason = "tool_calls" if message.tool_calls else "stop"
    return ModelReply(message=message, finish_reason=reason, usage=Usage(), model=model)


class ScriptedModel:
    """A `StreamingModelClient` that answers from a script, by position in the conversation.

    ::

        model = ScriptedModel([
            ToolCall(id="1", name="add", arguments='{"a": 1, "b": 2}'),  # asks for a tool
            Delay(5.0),                                                 # then waits...
            Transient("rate limited", retry_after=1.0),                 # ...and fails
            "The sum is 3.",                                            # then answers
        ])

    Steps: a ``str`` answers with that text; a `ModelReply` as it is; a
    `ToolCall` (or a sequence of them) asks for those tools; `Chunks` streams
    its pieces (or answers with their text when not streamed); an exception is
    raised (use the classified ones, `Transient`, `Recoverable`, `Fatal`); a
    `Delay` waits, then the call takes the next step. A streamed call on a
    plain step yields its whole text as one delta, then the reply.

    Answers go by position, so it is resume-safe: a call whose conversation
    already holds ``n`` assistant turns gets the script's answer number
    ``n + 1`` (the steps are numbered by their answers; the delays and errors
    before an answer belong to it). A fresh instance built from the same
    script, in a new process or after a resume, so answers where the
    conversation stands instead of starting over (and asking again for a tool
    that already ran). It never goes back: calls that are not a growing
    conversation (the same prompt each time, a conversation whose replies were
    dropped, a trimmed one) take the steps one after the other, as before.

    Each session answers from its own place in the script (the session whose
    stage makes the call, as its supervisor noted it): one model shared by
    sessions, at once or one after another, gives each of them the script from
    its start, its ``n``-th answer to its ``n``-th turn. Calls made outside any
    session (a test calling `complete` itself) share one place of their own.

    Attributes:
        script: The steps not taken (nor skipped) yet by the first session (or
            caller outside any) that called it; each one after it answers from
            its own copy of the script as it stood at that first call.
        requests: Every call received, in order, whatever session made it (for
            assertions).
        model: The model name the replies carry.
        system: The provider name of its model-call spans: its class's name.
    """

    def __init__(self, script: Iterable[Step] = (), *, model: str = "scripted") -> None:
        self.script: list[Step] = list(script)
        self.model = model
        self.requests: list[ScriptedRequest] = []
        #: Each session's place in the script, by session id ("" outside any session).
        self._places: dict[str, _Place] = {}
        #: The script as it stood at the first call: where each later session starts.
        self._given: tuple[Step, ...] = ()

    @property
    def system(self) -> str:
        """The provider name of its model-call spans (a `NamedModelClient`): its class's name."""
        return type(self).__name__

    def __repr__(self) -> str:
        return (
            f"ScriptedModel(model={self.model!r}, {len(self.script)} steps left, "
            f"{len(self.requests)} calls received)"
        )

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> ModelReply:
        """Answer with the script's step for where the conversation stands.

        ``schema`` (a typed answer's) is only recorded in `requests`.

        Raises:
            Fatal: The script has no step left.
            Exception: The step's exception, when the step is one.
        """
        step = await self._next(
            ScriptedRequest(tuple(messages), tuple(tools), json_mode, schema=schema)
        )
        if isinstance(step, Chunks):
            if step.error is not None:
                raise step.error
            return step.reply(self.model)
        return self._as_reply(step)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
        schema: ResponseSchema | None = None,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """Stream the script's step for where the conversation stands: its deltas, then its reply.

        Raises:
            Fatal: The script has no step left.
            Exception: The step's exception, when the step is one (for `Chunks`
                with an ``error``, after its pieces).
        """
        request = ScriptedRequest(
            tuple(messages), tuple(tools), json_mode, stream=True, schema=schema
        )
        step = await self._next(request)
        if isinstance(step, Chunks):
            for index, piece in enumerate(step.pieces):
                await anyio.lowlevel.checkpoint()
                yield ReplyDelta(text=piece, index=index)
            if step.error is not None:
                raise step.error
            yield step.reply(self.model)
            return
        reply = self._as_reply(step)
        if reply.text:
            yield ReplyDelta(text=reply.text, index=0)
        yield reply

    def _place(self) -> tuple[str, _Place]:
        """The calling session's id and place; the first to call takes `script` itself."""
        key = current_session() or ""
        place = self._places.get(key)
        if place is None:
            if self._places:
                place = _Place(list(self._given))
            else:
                self._given = tuple(self.script)
                place = _Place(self.script)
            self._places[key] = place
        return key, place

    async def _next(
        self, request: ScriptedRequest
    ) -> ModelReply | str | ToolCall | Sequence[ToolCall] | Chunks:
        self.requests.append(request)
        key, place = self._place()
        place.calls += 1
        await anyio.lowlevel.checkpoint()
        position = sum(isinstance(m, AssistantMessage) for m in request.messages)
        wanted = max(position, place.answered) + 1
        self._skip_to(place, position)
        script = place.script
        while True:
            if not script:
                asked = request.messages[-1] if request.messages else "nothing"
                whose = f" of session {key!r}" if key else ""
                raise Fatal(
                    f"the ScriptedModel's script is exhausted: call #{place.calls}{whose} "
                    f"asks for answer #{wanted} (its conversation holds {position} assistant "
                    f"turns), past the script's {place.answered} answer(s) "
                    f"(last message {asked!r}); add replies to the script"
                )
            step = script.pop(0)
            if isinstance(step, Delay):
                await anyio.sleep(step.seconds)
                continue
            if isinstance(step, Exception):
                raise step
            place.answered += 1
            return step

    @staticmethod
    def _skip_to(place: _Place, position: int) -> None:
        """Drop the steps of the answers before ``position`` not given yet (a resumed run)."""
        script = place.script
        while place.answered < position and script:
            if not isinstance(script.pop(0), Delay | Exception):
                place.answered += 1

    def _as_reply(self, step: ModelReply | str | ToolCall | Sequence[ToolCall]) -> ModelReply:
        if isinstance(step, ModelReply):
            return step
        if isinstance(step, str):
            return _reply(AssistantMessage(content=step), self.model)
        calls = (step,) if isinstance(step, ToolCall) else tuple(step)
        return _reply(AssistantMessage(tool_calls=calls), self.model)
