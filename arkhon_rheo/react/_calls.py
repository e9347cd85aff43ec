"""The engine's dealings with model replies and tool calls, outside its loop.

What is new to the model in a turn, whether a reply (and a tool call's
arguments) can be used, which failure of concurrent tool calls to report, and
the error a model that keeps answering in an unusable form ends with.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from .._errors import Fatal, Recoverable, StageFailure
from ..protocols import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    ToolRunner,
    UserMessage,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import ModelReply, ToolCall

__all__ = [
    "answer_data",
    "bad_arguments",
    "check_reply",
    "tail",
    "tool_runner",
    "unwrap",
]

_MESSAGES = TypeAdapter(tuple[Message, ...])

#: Each message type's own serializer: what the union's dumps each of its types with.
_SERIALIZERS = {
    kind: kind.__pydantic_serializer__
    for kind in (SystemMessage, UserMessage, AssistantMessage, ToolMessage)
}


def tail(messages: Sequence[Message]) -> tuple[list[Any], bool]:
    """The messages after the last assistant message (what is new to the model this turn), dumped.

    Returns:
        The dumps, and whether they are plain JSON data for certain: each of
        the four message types themselves (strings, bools, ``None`` and tool
        calls of strings) dumped by its own serializer. A subclass is dumped
        as the union dumps it, and its dump is not vouched for.
    """
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AssistantMessage):
            start = index + 1
            break
    new: list[Any] = []
    for message in messages[start:]:
        serializer = _SERIALIZERS.get(type(message))
        if serializer is None:  # a subclass: dumped as the union dumps it
            return list(_MESSAGES.dump_python(tuple(messages[start:]), mode="json")), False
        new.append(serializer.to_python(message, mode="json"))
    return new, True


#: Parses a call's arguments as ``json.loads`` does, without its wrapper's frame.
_decode = json.JSONDecoder().decode


def bad_arguments(call: ToolCall) -> str | None:
    try:
        value = _decode(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"the arguments of tool call {call.name!r} are not valid JSON ({exc.msg})"
    if not isinstance(value, dict):
        return f"the arguments of tool call {call.name!r} must be a JSON object"
    return None


def check_reply(
    reply: ModelReply, wrapup: bool, answer: TypeAdapter[Any] | None
) -> tuple[str, list[Message]]:
    """What is wrong with ``reply`` ("" if nothing), and the messages that tell the model.

    Args:
        reply: The model's reply.
        wrapup: Whether it is the wrap-up turn (no tool may be called).
        answer: The validator of a final answer, if its JSON has a type.

    Returns:
        The problem and the messages to send back, or ``("", [])``.
    """
    calls = reply.tool_calls
    if calls:
        return _check_calls(calls, wrapup)
    text = reply.text or ""
    if not text.strip():
        problem = "the reply was empty: answer in text or call a tool"
        return problem, [UserMessage(content=f"Your reply could not be used: {problem}.")]
    if answer is not None:
        try:
            answer.validate_json(text)
        except ValidationError as exc:
            problem = "the answer does not fit the expected JSON schema: " + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            message = f"Your reply could not be used: {problem}. Reply with JSON only."
            return problem, [UserMessage(content=message)]
    return "", []


def answer_data(text: str | None, answer: TypeAdapter[Any] | None) -> Any:
    """The final answer validated by ``answer`` as JSON data (``None`` without a validator).

    What ``ReactState.output`` keeps: the validated value dumped in JSON mode
    (defaults filled in, values coerced), which ``output_as`` validates back.
    The answer was checked by `check_reply` already, so it validates.
    """
    if answer is None or text is None:
        return None
    return answer.dump_python(answer.validate_json(text), mode="json")


def _check_calls(calls: Sequence[ToolCall], wrapup: bool) -> tuple[str, list[Message]]:
    """The first problem of a turn's tool calls, and an answer to each call if there is one."""
    problems = [
        "no tools are available in the wrap-up turn: answer in text"
        if wrapup
        else bad_arguments(call)
        for call in calls
    ]
    if not any(problems):
        return "", []
    answers: list[Message] = [
        ToolMessage(
            tool_call_id=call.id,
            name=call.name,
            content=f"error: {problem}; call again with corrected arguments"
            if problem
            else "not run: another call of this turn was malformed",
            is_error=True,
        )
        for call, problem in zip(calls, problems, strict=True)
    ]
    return next(p for p in problems if p) or "", answers


def unwrap(group: BaseExceptionGroup[Any]) -> BaseException:
    """The one failure to report for concurrent tool calls: the most severe class wins."""
    leaves: list[BaseException] = []

    def walk(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                walk(inner)
        else:
            leaves.append(error)

    walk(group)
    for kind in (Fatal, Recoverable, StageFailure):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0]


def tool_runner(tools: ToolRunner | Sequence[Any]) -> ToolRunner:
    if isinstance(tools, ToolRunner):
        return tools
    from ..tools import Toolbox

    return Toolbox(*tools)
