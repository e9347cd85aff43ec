"""Anthropic's Messages wire format: our messages and tool specs out, replies back in.

Pure functions over JSON data, no I/O. The library's chat messages map as:

* the leading `SystemMessage` s: the top-level ``system``; a system message
  later in the conversation (the engine's budget line) becomes a text block
  of the user turn it follows, since Anthropic's turns have no system role;
* an `AssistantMessage`: an assistant turn of a text block and a ``tool_use``
  block per `ToolCall` (its arguments parsed to the ``input`` object);
* a `ToolMessage`: a ``tool_result`` block (``is_error`` kept) in a user turn;
  consecutive turns of one role are merged into one message, so the results
  of one assistant turn's calls go back together.

With ``cache`` set, ``cache_control: {"type": "ephemeral"}`` marks the
system prompt, the last tool and the last block of the last user turn (three
of Anthropic's four breakpoints). What does not parse raises `Recoverable`,
and every text of a reply is scrubbed of registered secrets, as in ``_wire``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .._errors import Recoverable
from .._redact import scrub, scrub_secrets
from ..protocols import (
    AssistantMessage,
    FinishReason,
    ModelReply,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
)
from ._wire import JSON_INSTRUCTION, count, schema_instruction

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import Message, ResponseSchema, ToolSpec

__all__ = ["answer_tool", "finish_reason", "parse_message", "request_body", "usage", "with_answer"]

_EPHEMERAL = {"type": "ephemeral"}
#: Anthropic's stop reasons as ours.
_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


def _input(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object (``{}`` for malformed ones)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    """The role and content blocks of one (non-leading) message."""
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
            for c in message.tool_calls
        ]
        return "assistant", blocks
    if isinstance(message, ToolMessage):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    text = message.content  # a user message, or a system message mid-conversation
    return "user", ([{"type": "text", "text": text}] if text else [])


def _turns(messages: Sequence[Message]) -> tuple[list[str], list[dict[str, Any]], int | None]:
    """The leading system texts, the merged turns, and where the conversation's last block is.

    The last return value indexes the last user turn's blocks: its last block
    that is not a late system message (the budget line changes every turn; a
    cache breakpoint after it would never be read back), or ``None``.
    """
    system: list[str] = []
    leading = True
    turns: list[dict[str, Any]] = []
    anchor: int | None = None
    for message in messages:
        if leading and isinstance(message, SystemMessage):
            if message.content:
                system.append(message.content)
            continue
        leading = False
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
            anchor = None
        if role == "user" and not isinstance(message, SystemMessage):
            anchor = len(turns[-1]["content"]) - 1
    return system, turns, anchor


def request_body(
    model: str,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolSpec] = (),
    json_mode: bool = False,
    schema: ResponseSchema | None = None,
    stream: bool = False,
    max_tokens: int = 4096,
    cache: bool = False,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a Messages request (no headers, so no key).

    Args:
        model: The model to ask.
        messages: The conversation.
        tools: The tools offered, as ``{name, description, input_schema}``.
        json_mode: Ask for a JSON object (an instruction in the system prompt).
        schema: A typed answer's schema: offered as a tool the model must
            call (`answer_tool`), forced by ``tool_choice`` (``any`` tool
            when others are offered too). A schema whose answer is no JSON
            object goes into the system prompt instead.
        stream: Ask for server-sent events.
        max_tokens: The most tokens the reply may have (the API requires it).
        cache: Mark the system prompt, the tools and the last user turn for
            Anthropic's prompt cache.
        options: Further body fields (``temperature``, ``stop_sequences``...),
            sent last, so they override the rest.
    """
    system, turns, anchor = _turns(messages)
    answer = answer_tool(schema) if schema is not None and schema.is_object else None
    if answer is not None:
        system.append(f"Give your final answer by calling the {answer['name']} tool.")
    elif schema is not None:
        system.append(schema_instruction(schema))
    elif json_mode:
        system.append(JSON_INSTRUCTION)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system:
        text = "\n\n".join(system)
        body["system"] = (
            [{"type": "text", "text": text, "cache_control": dict(_EPHEMERAL)}] if cache else text
        )
    body["messages"] = turns
    if tools or answer is not None:
        specs: list[dict[str, Any]] = []
        for spec in tools:
            entry: dict[str, Any] = {"name": spec.name, "input_schema": spec.parameters}
            if spec.description:
                entry["description"] = spec.description
            specs.append(entry)
        if answer is not None:
            specs.append(answer)
            choice = {"type": "any"} if tools else {"type": "tool", "name": answer["name"]}
            body["tool_choice"] = choice
        if cache:
            specs[-1]["cache_control"] = dict(_EPHEMERAL)
        body["tools"] = specs
    if cache and anchor is not None and turns[-1]["role"] == "user":
        turns[-1]["content"][anchor]["cache_control"] = dict(_EPHEMERAL)
    if stream:
        body["stream"] = True
    if options:
        body.update(options)
    return body


def answer_tool(schema: ResponseSchema) -> dict[str, Any]:
    """The tool a typed answer is given through: its input schema is the answer's."""
    description = schema.description or "Give the final answer."
    return {"name": schema.name, "description": description, "input_schema": schema.json_schema}


def with_answer(reply: ModelReply, schema: ResponseSchema | None) -> ModelReply:
    """``reply`` with a call of the answer tool made its text: the answer, as JSON.

    A reply that calls other tools too keeps those calls (and drops the
    answer's: the model answers again once they have run).
    """
    if schema is None or not reply.tool_calls:
        return reply
    calls = reply.tool_calls
    others = tuple(call for call in calls if call.name != schema.name)
    if len(others) == len(calls):
        return reply
    if others:
        message = reply.message.model_copy(update={"tool_calls": others})
        return reply.model_copy(update={"message": message})
    answer = next(call for call in calls if call.name == schema.name)
    message = AssistantMessage(content=answer.arguments)
    return reply.model_copy(update={"message": message, "finish_reason": "stop"})


def finish_reason(value: Any, *, has_tool_calls: bool) -> FinishReason:
    """Anthropic's ``stop_reason`` as ours (``pause_turn`` and anything else: ``"unknown"``)."""
    if value is None:
        return "tool_calls" if has_tool_calls else "stop"
    return _STOP_REASONS.get(str(value), "unknown")


def usage(data: Any, before: Usage | None = None) -> Usage:
    """A reply's ``usage`` as ours: the prompt counts every input token, cached or not.

    Anthropic's ``input_tokens`` are those after the last cache breakpoint;
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are the
    rest. A stream's ``message_delta`` repeats some counts (cumulative): what
    it leaves out is taken from ``before`` (its ``message_start``'s).
    """
    if not isinstance(data, dict):
        return before or Usage()
    old = before or Usage()

    def field(name: str, fallback: int) -> int:
        return count(data[name]) if data.get(name) is not None else fallback

    read = field("cache_read_input_tokens", old.cache_read_tokens)
    made = field("cache_creation_input_tokens", old.cache_creation_tokens)
    uncached = old.prompt_tokens - old.cache_read_tokens - old.cache_creation_tokens
    return Usage(
        prompt_tokens=field("input_tokens", uncached) + read + made,
        completion_tokens=field("output_tokens", old.completion_tokens),
        cache_read_tokens=read,
        cache_creation_tokens=made,
    )


def bad(what: str, model: str) -> Recoverable:
    """The error for a reply that is not Anthropic's format (what it quotes scrubbed)."""
    return Recoverable(
        f"the Messages reply for model {model!r} is not in the expected format: "
        f"{scrub(what)}; check that the base URL points at Anthropic's API (its root, "
        "without /v1) or a server speaking its Messages format"
    )


def tool_call(block: dict[str, Any], arguments: str | None = None) -> ToolCall:
    """A ``tool_use`` block as a `ToolCall` (``arguments``: streamed JSON, if any)."""
    if arguments is None:
        given = block.get("input")
        arguments = json.dumps(given) if given else "{}"
    return ToolCall(
        id=scrub_secrets(str(block.get("id") or "")),
        name=scrub_secrets(str(block["name"])),
        arguments=scrub_secrets(arguments or "{}"),
    )


def parse_message(text: str, model: str) -> ModelReply:
    """Parse a complete (non-streamed) Messages reply.

    Text blocks are joined; ``tool_use`` blocks become tool calls; other
    blocks (``thinking``...) are left out.

    Raises:
        Recoverable: The body is not JSON, or has no ``content`` list.
    """
    try:
        data = json.loads(text)
    except ValueError:
        raise bad(f"the body is not JSON (starts {scrub(text)[:80]!r})", model) from None
    try:
        blocks = data["content"]
        if not isinstance(blocks, list):
            raise TypeError(f"content is {type(blocks).__name__}, not a list")
        pieces: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            if block["type"] == "text":
                if not isinstance(block["text"], str):
                    raise TypeError("a text block's text is not text")
                pieces.append(block["text"])
            elif block["type"] == "tool_use":
                calls.append(tool_call(block))
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise bad(f"no usable content ({exc!r})", model) from None
    return ModelReply(
        message=AssistantMessage(
            content=scrub_secrets("".join(pieces)) if pieces else None, tool_calls=tuple(calls)
        ),
        finish_reason=finish_reason(data.get("stop_reason"), has_tool_calls=bool(calls)),
        usage=usage(data.get("usage")),
        model=scrub_secrets(str(data.get("model") or model)),
    )
