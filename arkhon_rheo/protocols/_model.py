"""The chat contract between an agent and a model: messages, replies, tool specs, clients.

Every type here is a frozen pydantic model, so a conversation can live in an
agent's state (as a `History` of `Message`), be stored in an event and be
recorded for replay without conversion. The shapes follow the
chat-completions format most model servers speak (hosted APIs, vLLM,
llama.cpp's server, Ollama), but nothing here knows about HTTP: clients live
in `arkhon_rheo.models`, tools in `arkhon_rheo.tools`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

__all__ = [
    "AssistantMessage",
    "FinishReason",
    "Message",
    "ModelClient",
    "ModelReply",
    "NamedModelClient",
    "ReplyDelta",
    "ResponseSchema",
    "StreamingModelClient",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "ToolRunner",
    "ToolSpec",
    "Usage",
    "UserMessage",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SystemMessage(BaseModel):
    """Instructions for the model, usually the first message of a conversation."""

    model_config = _FROZEN
    role: Literal["system"] = "system"
    content: str


class UserMessage(BaseModel):
    """What the user (or the program standing in for one) says."""

    model_config = _FROZEN
    role: Literal["user"] = "user"
    content: str


class ToolCall(BaseModel):
    """One tool call the model asked for.

    Attributes:
        id: The model's id for the call; the tool's result answers it.
        name: The tool's name, as the model wrote it (it may name no tool).
        arguments: The arguments as the JSON text the model wrote. Kept raw so
            that a call with malformed arguments can be answered with an error
            the model can act on instead of being lost.
    """

    model_config = _FROZEN
    id: str
    name: str
    arguments: str = "{}"


class AssistantMessage(BaseModel):
    """What the model said: text, tool calls, or both."""

    model_config = _FROZEN
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class ToolMessage(BaseModel):
    """The result of one tool call, sent back to the model.

    Attributes:
        tool_call_id: The id of the `ToolCall` this answers.
        name: The tool's name.
        content: The result as text (JSON for structured results).
        is_error: The call failed (unknown tool, invalid arguments, the tool's
            own error); ``content`` says what went wrong, for the model to act on.
    """

    model_config = _FROZEN
    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any chat message; pydantic picks the type by its ``role``."""

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "unknown"]
"""Why the model stopped: ``"stop"`` (an answer), ``"tool_calls"``, ``"length"`` (cut off)..."""


class Usage(BaseModel):
    """Tokens one model call consumed.

    Attributes:
        prompt_tokens: Every token of the prompt, cached or not.
        completion_tokens: The tokens the model generated.
        cache_read_tokens: The part of ``prompt_tokens`` read from the
            provider's prompt cache (Anthropic's ``cache_read_input_tokens``,
            OpenAI's ``prompt_tokens_details.cached_tokens``), usually billed
            at a fraction of the input price.
        cache_creation_tokens: The part of ``prompt_tokens`` written to the
            prompt cache (Anthropic's ``cache_creation_input_tokens``),
            usually billed above the input price.
    """

    model_config = _FROZEN
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_creation_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
        )


class ModelReply(BaseModel):
    """One complete answer from a model.

    Attributes:
        message: What the model said (text and/or tool calls).
        finish_reason: Why it stopped.
        usage: The tokens the call consumed (zero when the server does not say).
        model: The model that answered, as the server named it.
    """

    model_config = _FROZEN
    message: AssistantMessage
    finish_reason: FinishReason = "stop"
    usage: Usage = Usage()
    model: str = ""

    @property
    def text(self) -> str | None:
        """The reply's text, if any."""
        return self.message.content

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the model asked for, in its order."""
        return self.message.tool_calls


class ReplyDelta(BaseModel):
    """A piece of a streamed reply: text as it arrives.

    Attributes:
        text: Text added to the reply since the previous delta.
        index: The delta's place in the stream, from 0.
    """

    model_config = _FROZEN
    text: str = ""
    index: int = 0


class ToolSpec(BaseModel):
    """A tool as the model sees it: a name, a description and a JSON schema of its arguments."""

    model_config = _FROZEN
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ResponseSchema(BaseModel):
    """The JSON schema a final answer must fit, sent through a client's structured output.

    The engine makes one from ``react_agent(answer_type=T)`` and passes it as
    the ``schema`` keyword of ``complete`` and ``stream`` to a client whose
    methods take one (`OpenAIChatClient` and `AnthropicClient` do, each in
    its provider's way); other clients are asked for JSON (``json_mode``) as
    before.

    Attributes:
        name: A name for the answer (letters, digits, ``_`` and ``-``, at most
            64): the ``json_schema`` name on OpenAI, the answer tool's on Anthropic.
        json_schema: The JSON schema of the answer.
        description: What the answer is, for the model.
    """

    model_config = _FROZEN
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    json_schema: dict[str, Any]
    description: str = ""

    @property
    def is_object(self) -> bool:
        """Whether the answer is a JSON object (what the providers' structured outputs take)."""
        return self.json_schema.get("type") == "object"


def takes_schema(client: object) -> bool:
    """Whether ``client.complete`` takes a ``schema`` keyword (a `ResponseSchema`)."""
    method = getattr(client, "complete", None)
    try:
        parameters = inspect.signature(method).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("schema")
    return parameter is not None and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY


@runtime_checkable
class ModelClient(Protocol):
    """Anything that answers a conversation with one `ModelReply`.

    ``complete`` is all the ReAct engine needs. Implementations raise the
    library's classified errors (`Transient`, `Recoverable`, `Fatal` from
    ``arkhon_rheo``) so the supervisor can retry, restart or fail the stage
    that made the call. A client may offer more, and the engine uses it when
    it does: ``stream`` (a `StreamingModelClient`, for ``stream=True``) and
    the ``system`` and ``model`` names of its model-call spans (a
    `NamedModelClient`; other clients' spans name their class, and no model).

    A client may also take a ``schema`` keyword (``schema: ResponseSchema |
    None = None``) on ``complete`` and ``stream``: the schema of a typed final
    answer, to send through its provider's structured output. The engine
    passes it only to a client whose ``complete`` names that parameter.
    """

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        """Ask the model; return its complete reply."""
        ...


@runtime_checkable
class StreamingModelClient(ModelClient, Protocol):
    """A `ModelClient` that can also stream its reply as it is generated."""

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """Yield `ReplyDelta` pieces as they arrive, then the full `ModelReply` last."""
        ...


@runtime_checkable
class NamedModelClient(ModelClient, Protocol):
    """A `ModelClient` that names its provider and model, for the engine's model-call spans.

    The names follow OpenTelemetry's GenAI conventions: ``system`` is
    ``gen_ai.system`` (``"openai"``; an empty name stands for the client's
    class name) and ``model`` is ``gen_ai.request.model``, the model asked
    (the reply's `ModelReply.model` says which one answered). Plain attributes
    satisfy it (``system = "openai"`` on the class, ``self.model = ...``).
    """

    @property
    def system(self) -> str:
        """The provider, as ``gen_ai.system`` names it."""
        ...

    @property
    def model(self) -> str:
        """The model the client asks."""
        ...


@runtime_checkable
class ToolRunner(Protocol):
    """A set of tools an agent may call (`arkhon_rheo.tools.Toolbox` is the implementation).

    ``call`` answers every call with a `ToolMessage`: an unknown tool, arguments
    that do not validate or a tool's own error become an error message the
    model can act on (``is_error=True``). Only failures the supervisor should
    handle propagate, as the library's classified errors (a `Transient`
    failure is retried by the supervisor's policy, not by the runner).
    """

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The tools as the model sees them, in a stable order."""
        ...

    async def call(self, call: ToolCall) -> ToolMessage:
        """Run one tool call (recorded for replay when made inside a stage)."""
        ...
