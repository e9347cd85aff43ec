"""Summaries: the oldest turns folded into one message once a conversation passes its budget.

An agent built with ``react_agent(memory=Summarize(...))`` thinks with
`MemoryThinkStage` (or `CheckedMemoryThinkStage`, with checks): before the
model turn, when the estimate of the conversation passes ``max_tokens``, the
step makes one model call instead, through ``record_call`` (a replay answers
it from the record), that summarises the oldest messages, and commits the
conversation with them replaced by one summary message. That step goes from
``THINKING`` to ``THINKING``; the next one is the model turn, sent the summary
and the recent turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import Recoverable
from .._log import get_logger
from ..models import governing
from ..protocols import (
    AssistantMessage,
    Lifecycle,
    Message,
    ModelReply,
    Patch,
    SystemMessage,
    ToolMessage,
    UserMessage,
    record_call,
)
from ._checks import CheckedThinkStage
from ._context import ContextWindow
from ._stages import ThinkStage, _added

if TYPE_CHECKING:
    import enum
    from collections.abc import Sequence

    from ..protocols import StateView
    from ._context import Summarize
    from ._state import ReactState

__all__ = ["SUMMARY_PREFIX", "CheckedMemoryThinkStage", "MemoryThinkStage", "fold_point"]

_log = get_logger("arkhon_rheo.react")

#: How a summary message begins: it marks the `SystemMessage` holding a summary.
SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary the agent made (`SUMMARY_PREFIX`)."""
    return isinstance(message, SystemMessage) and message.content.startswith(SUMMARY_PREFIX)


def fold_point(messages: Sequence[Message], keep_last: int) -> tuple[int, int] | None:
    """Where to fold: ``messages[head:cut]`` are summarised, or None when nothing new would be.

    ``head`` counts the leading system messages (the system prompt; not a
    summary, which is folded into the next). ``cut`` keeps the last
    ``keep_last`` messages, moved back over tool results to the call they answer.
    """
    count = len(messages)
    head = 0
    while head < count and isinstance(messages[head], SystemMessage):
        if is_summary(messages[head]):
            break
        head += 1
    cut = max(head, count - keep_last)
    while head < cut < count and isinstance(messages[cut], ToolMessage):
        cut -= 1
    if all(is_summary(message) for message in messages[head:cut]):
        return None  # nothing but an earlier summary (or nothing) to fold
    return head, cut


def transcript(messages: Sequence[Message]) -> str:
    """The messages to summarise, as text (tool calls and results named)."""
    lines: list[str] = []
    for message in messages:
        if is_summary(message):
            earlier = (message.content or "").removeprefix(SUMMARY_PREFIX)
            lines.append(f"Earlier summary: {earlier}")
        elif isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"Assistant: {message.content}")
            lines.extend(
                f"Assistant called {call.name}({call.arguments})" for call in message.tool_calls
            )
        elif isinstance(message, ToolMessage):
            lines.append(f"Tool {message.name} returned: {message.content}")
        else:
            lines.append(f"{message.role.capitalize()}: {message.content}")
    return "\n".join(lines)


class MemoryThinkStage(
    ThinkStage,
    name="think",
    reads=ThinkStage.reads | {"summaries"},
    writes=ThinkStage.writes | {"summary", "summaries"},
):
    """A model turn, or, past the memory's budget, the oldest turns folded into a summary."""

    #: The session's conversation as estimated so far (one per session, as the stage is).
    estimated: ContextWindow | None = None

    async def execute(self, view: StateView[ReactState]) -> Patch:
        """The summary's patch when the conversation passes the budget; else the turn's."""
        folded = None if view.stop else await self._fold(view)
        return folded if folded is not None else await super().execute(view)

    def next(self, state: ReactState) -> enum.Enum:
        """Finish (or, conversational, wait) on an answer; act on calls; else think again."""
        if state.exit is not None:
            return Lifecycle.OBSERVING if self.config.conversational else Lifecycle.FINISHED
        return Lifecycle.ACTING if state.pending else Lifecycle.THINKING

    async def _fold(self, view: StateView[ReactState]) -> Patch | None:
        """The conversation with its oldest turns summarised, or None while it fits."""
        config = self.config
        memory: Summarize | None = config.memory
        assert memory is not None
        messages = tuple(view.messages)
        if self.estimated is None:
            self.estimated = ContextWindow()
        if self.estimated.size(messages) <= memory.max_tokens:
            return None
        where = fold_point(messages, memory.keep_last)
        if where is None:
            return None
        head, cut = where
        payload = (
            SystemMessage(content=memory.prompt),
            UserMessage(content=transcript(messages[head:cut])),
        )
        summaries = view.summaries
        request = {"summary": summaries + 1, "turn": view.turns, "folded": cut - head}
        model = governing(config.model)
        reply = await record_call(
            "model",
            request,
            lambda: model.complete(payload, tools=(), json_mode=False),
            returns=ModelReply,
        )
        text = (reply.text or "").strip()
        if not text:
            raise Recoverable("the model's summary of the conversation was empty")
        _log.info("react_summarised", folded=cut - head, summaries=summaries + 1)
        usage = _added(view.usage, reply.usage)
        cost = view.cost
        if config.pricing is not None:
            cost += config.pricing.cost(reply.usage, reply.model)
        summary = SystemMessage(content=SUMMARY_PREFIX + text)
        kept = (*messages[:head], summary, *messages[cut:])
        return Patch(messages=kept, summary=text, summaries=summaries + 1, usage=usage, cost=cost)


class CheckedMemoryThinkStage(
    MemoryThinkStage,
    CheckedThinkStage,
    name="think",
    reads=MemoryThinkStage.reads | CheckedThinkStage.reads,
    writes=MemoryThinkStage.writes | CheckedThinkStage.writes,
):
    """`MemoryThinkStage` over `CheckedThinkStage`: a summary, or a checked model turn."""
