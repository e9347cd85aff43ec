"""The engine's dealings with model replies and tool calls, outside its loop.

What is new to the model in a turn, whether a tool call's arguments can be
used, which failure of concurrent tool calls to report, and the error a model
that keeps answering in an unusable form ends with.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from .._errors import Fatal, Recoverable, StageFailure
from ..protocols import AssistantMessage, Message, ToolRunner

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import ToolCall

__all__ = ["MalformedModelOutput", "bad_arguments", "tail", "tool_runner", "unwrap"]

_MESSAGES = TypeAdapter(tuple[Message, ...])


class MalformedModelOutput(Recoverable):
    """The model kept answering in a form the engine cannot use, past its format retries.

    Attributes:
        problem: What was wrong with the last reply.
    """

    def __init__(self, problem: str, *, retries: int) -> None:
        super().__init__(
            f"the model's reply could not be used after {retries} format retries: {problem}; "
            "check that the model supports tool calls (and JSON mode, if asked), or raise "
            "max_format_retries"
        )
        self.problem = problem


def tail(messages: Sequence[Message]) -> list[Any]:
    """The messages after the last assistant message: what is new to the model this turn."""
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AssistantMessage):
            start = index + 1
            break
    return list(_MESSAGES.dump_python(tuple(messages[start:]), mode="json"))


def bad_arguments(call: ToolCall) -> str | None:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"the arguments of tool call {call.name!r} are not valid JSON ({exc.msg})"
    if not isinstance(value, dict):
        return f"the arguments of tool call {call.name!r} must be a JSON object"
    return None


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
