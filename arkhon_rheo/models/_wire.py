"""The chat-completions wire format: our messages and tool specs out, replies back in.

Pure functions over JSON data, no I/O: request bodies, a reply's parsing, and
the assembly of a server-sent-event stream (text and tool-call deltas, usage)
into one `ModelReply`. What does not parse raises `Recoverable`: a body that is
not the format (a proxy's error page, a truncated reply) is worth a restart,
not a retry of the same request as it is; what it quotes of the body is
scrubbed of secrets before it is cut to length. A reply that quotes a
registered secret (a server echoing the key) comes back with it masked, in a
stream too (`StreamScrubber` holds back what may be the start of one).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal, get_args

from .._errors import Recoverable
from .._redact import StreamScrubber, scrub, scrub_secrets
from ..protocols import (
    AssistantMessage,
    FinishReason,
    ModelReply,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import Message, ResponseSchema

__all__ = [
    "JSON_INSTRUCTION",
    "StreamAssembly",
    "Structured",
    "parse_reply",
    "request_body",
    "schema_instruction",
    "strict_allowed",
]

Structured = Literal["json_schema", "json_object", "instructions"]
"""How `OpenAIChatClient` asks for a typed answer (see `request_body`)."""

#: The instruction that asks for JSON when no schema is given.
JSON_INSTRUCTION = "Answer with one JSON object and nothing else: no prose, no code fence."
#: The keywords OpenAI's strict structured outputs take (any other one: ``strict`` false).
_STRICT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "$ref",
        "$defs",
        "enum",
        "const",
        "description",
        "title",
    }
)

_FINISH_REASONS = frozenset(get_args(FinishReason))
_FINISH_ALIASES = {"function_call": "tool_calls", "tool_use": "tool_calls", "max_tokens": "length"}


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.role, "content": message.content}
    if isinstance(message, AssistantMessage):
        data: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            data["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        return data
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    raise TypeError(f"not a chat message: {message!r}")  # pragma: no cover - the union is closed


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name, "parameters": spec.parameters}
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def schema_instruction(schema: ResponseSchema | None) -> str:
    """The instruction line that asks for JSON: `JSON_INSTRUCTION`, or one naming the schema."""
    if schema is None:
        return JSON_INSTRUCTION
    text = json.dumps(schema.json_schema, sort_keys=True, separators=(",", ":"))
    return (
        "When you give your final answer, give it as JSON that fits this JSON schema, "
        f"and nothing else (no prose, no code fence): {text}"
    )


def strict_allowed(schema: Any) -> bool:
    """Whether OpenAI's strict structured outputs take ``schema`` as it is.

    Every object must list all its properties in ``required`` and set
    ``additionalProperties`` to false, and no keyword outside the subset
    strict mode supports (``minLength``, ``pattern``, ``default``...) may appear.
    """
    if isinstance(schema, list):
        return all(strict_allowed(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if not schema.keys() <= _STRICT_KEYWORDS:
        return False
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, dict) or set(schema.get("required", ())) != set(properties):
            return False
    for key in ("properties", "$defs"):
        if not all(strict_allowed(value) for value in dict(schema.get(key) or {}).values()):
            return False
    return all(strict_allowed(schema[key]) for key in ("items", "anyOf") if key in schema)


def _says_json(messages: list[dict[str, Any]]) -> bool:
    return any("json" in str(m.get("content") or "").lower() for m in messages)


def _instruct(messages: list[dict[str, Any]], text: str) -> None:
    """Add a system message saying ``text`` after the leading system messages."""
    at = 0
    while at < len(messages) and messages[at]["role"] == "system":
        at += 1
    messages.insert(at, {"role": "system", "content": text})


def _answer_format(
    messages: list[dict[str, Any]],
    json_mode: bool,
    schema: ResponseSchema | None,
    structured: Structured,
) -> dict[str, Any] | None:
    """The ``response_format`` asked for (None: none), adding the instruction it needs."""
    if schema is None and not json_mode:
        return None
    if structured == "json_schema" and schema is not None and schema.is_object:
        spec: dict[str, Any] = {"name": schema.name, "schema": schema.json_schema}
        if schema.description:
            spec["description"] = schema.description
        spec["strict"] = strict_allowed(schema.json_schema)
        return {"type": "json_schema", "json_schema": spec}
    if structured == "instructions" or (schema is not None and not schema.is_object):
        _instruct(messages, schema_instruction(schema))
        return None
    # JSON mode: OpenAI refuses it unless the messages say "JSON".
    if schema is not None or not _says_json(messages):
        _instruct(messages, schema_instruction(schema))
    return {"type": "json_object"}


def request_body(
    model: str,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolSpec] = (),
    json_mode: bool = False,
    schema: ResponseSchema | None = None,
    structured: Structured = "json_schema",
    stream: bool = False,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a chat-completions request (no headers, so no key).

    A typed answer (``schema``) is asked for as ``structured`` says:
    ``"json_schema"`` sends the schema as ``response_format`` (``strict``
    where `strict_allowed`); ``"json_object"`` sends JSON mode and an
    instruction naming the schema; ``"instructions"`` only the instruction.
    A schema whose answer is no JSON object is sent as instructions (the
    structured outputs take objects only). ``json_mode`` without a schema
    sends JSON mode (``"instructions"``: the instruction alone), with an
    instruction naming JSON when no message does (OpenAI refuses JSON mode
    otherwise).
    """
    wire = [_message(m) for m in messages]
    answer = _answer_format(wire, json_mode, schema, structured)
    body: dict[str, Any] = {"model": model, "messages": wire}
    if tools:
        body["tools"] = [_tool(spec) for spec in tools]
    if answer is not None:
        body["response_format"] = answer
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if options:
        body.update(options)
    return body


def finish_reason(value: Any, *, has_tool_calls: bool) -> FinishReason:
    """A server's finish reason as one of ours (``"unknown"`` for anything else)."""
    if value is None:
        return "tool_calls" if has_tool_calls else "stop"
    reason = _FINISH_ALIASES.get(str(value), str(value))
    return reason if reason in _FINISH_REASONS else "unknown"  # type: ignore[return-value]


def count(value: Any) -> int:
    """A token count as the server wrote it (0 unless a non-negative integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage(data: Any) -> Usage:
    """The ``usage`` object of a reply (zero when absent or malformed).

    ``prompt_tokens_details.cached_tokens`` (OpenAI's prompt cache) is the
    part of the prompt read from the cache.
    """
    if not isinstance(data, dict):
        return Usage()
    prompt = count(data.get("prompt_tokens"))
    details = data.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=count(data.get("completion_tokens")),
        cache_read_tokens=min(cached, prompt),
    )


def _bad(what: str, model: str) -> Recoverable:
    return Recoverable(
        f"the chat-completions reply for model {model!r} is not in the expected format: "
        f"{scrub(what)}; check that the base URL points at an OpenAI-compatible server"
    )


def parse_reply(text: str, model: str) -> ModelReply:
    """Parse a complete (non-streamed) chat-completions body.

    Raises:
        Recoverable: The body is not JSON, or has no ``choices[0].message``.
    """
    try:
        data = json.loads(text)
    except ValueError:
        raise _bad(f"the body is not JSON (starts {scrub(text)[:80]!r})", model) from None
    try:
        choice = data["choices"][0]
        message = choice["message"]
        calls = tuple(
            ToolCall(
                id=scrub_secrets(str(call.get("id") or f"call_{index}")),
                name=scrub_secrets(str(call["function"]["name"])),
                arguments=scrub_secrets(str(call["function"].get("arguments") or "{}")),
            )
            for index, call in enumerate(message.get("tool_calls") or ())
        )
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"content is {type(content).__name__}, not text")
        if content is not None:
            content = scrub_secrets(content)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _bad(f"no usable choices[0].message ({exc!r})", model) from None
    return ModelReply(
        message=AssistantMessage(content=content, tool_calls=calls),
        finish_reason=finish_reason(choice.get("finish_reason"), has_tool_calls=bool(calls)),
        usage=usage(data.get("usage")),
        model=scrub_secrets(str(data.get("model") or model)),
    )


class StreamAssembly:
    """Folds the ``data:`` events of a streamed reply into one `ModelReply`.

    Text pieces come back from `add` as they arrive (scrubbed of registered
    secrets: a piece that may begin one waits for the next, and `flush` gives
    what is left); tool calls are assembled by their ``index`` (the id and name
    come first, the arguments in pieces).
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.served_by = ""
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: Any = None
        self.usage = Usage()
        self.done = False
        self._scrubber = StreamScrubber()

    def add(self, data: str) -> str:
        """Take one event's data; return the text it adds.

        Raises:
            Recoverable: The event is not JSON or not a chat-completions chunk.
        """
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(data)
            if chunk.get("usage"):
                self.usage = usage(chunk["usage"])
            self.served_by = scrub_secrets(str(chunk.get("model") or self.served_by))
            choices = chunk.get("choices") or ()
            if not choices:
                return ""  # the usage chunk of stream_options.include_usage
            choice = choices[0]
            if choice.get("finish_reason") is not None:
                self.finish = choice["finish_reason"]
            delta = choice.get("delta") or {}
            for piece in delta.get("tool_calls") or ():
                self._call_piece(piece)
            text = delta.get("content") or ""
            if not isinstance(text, str):
                raise TypeError(f"delta content is {type(text).__name__}, not text")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _bad(
                f"a stream event does not parse ({exc!r}): {scrub(data)[:80]!r}", self.model
            ) from None
        text = self._scrubber.feed(text) if text else ""
        if text:
            self.text.append(text)
        return text

    def flush(self) -> str:
        """The text held back at the end of the stream (part of a secret is masked)."""
        text = self._scrubber.flush()
        if text:
            self.text.append(text)
        return text

    def _call_piece(self, piece: dict[str, Any]) -> None:
        index = int(piece.get("index", len(self.calls)))
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if piece.get("id"):
            call["id"] = str(piece["id"])
        function = piece.get("function") or {}
        if function.get("name"):
            call["name"] += str(function["name"])
        if function.get("arguments"):
            call["arguments"].append(str(function["arguments"]))

    def reply(self) -> ModelReply:
        """The reply the stream made (with any text `flush` had not yet given)."""
        self.flush()
        calls = tuple(
            ToolCall(
                id=scrub_secrets(call["id"] or f"call_{index}"),
                name=scrub_secrets(call["name"]),
                arguments=scrub_secrets("".join(call["arguments"]) or "{}"),
            )
            for index, call in sorted(self.calls.items())
        )
        return ModelReply(
            message=AssistantMessage(content="".join(self.text) or None, tool_calls=calls),
            finish_reason=finish_reason(self.finish, has_tool_calls=bool(calls)),
            usage=self.usage,
            model=self.served_by or self.model,
        )
