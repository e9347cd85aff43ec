"""A conversational agent between turns: it waits for the user's next message, or a close.

`ListenStage` is the `Receive` stage of a conversational agent's waiting
state: a `UserInput` adds the user's message to the conversation and the
agent thinks again, with the whole conversation (trimmed and budgeted as any
turn); a `Close` ends the session (`StopReason.CLOSED`, the last answer kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..protocols import Lifecycle, Patch, Receive, Usage, UserMessage
from ._stages import ReactStage
from ._state import ReactState, StopReason

if TYPE_CHECKING:
    import enum

    from ..protocols import StateView

__all__ = ["Close", "ListenStage", "UserInput"]

L = Lifecycle

#: What a new turn of a conversation starts again from: the counters its limits read.
_NEW_TURN: dict[str, object] = {
    "turns": 0,
    "tool_calls": 0,
    "usage": Usage(),
    "cost": 0.0,
    "started_at": None,
    "elapsed": 0.0,
    "wrapup": False,
    "rule_retries": 0,
}
_PER_TURN = frozenset(_NEW_TURN)


class UserInput(BaseModel):
    """The user's next message to a conversational agent.

    Attributes:
        text: What the user says.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "user_input"
    text: str = Field(min_length=1)


class Close(BaseModel):
    """End a conversational agent's conversation: the session finishes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "close"


class ListenStage(
    Receive[ReactState],
    ReactStage,
    name="listen",
    reads={"messages"},
    writes={"messages", "answer", "output", "exit", *_PER_TURN},
    accepts=(UserInput, Close),
):
    """Take the user's next message into the conversation, or close it.

    Each message begins a turn: the counters the agent's limits read (model
    turns for ``max_steps``, tool calls, tokens, cost, time, the wrap-up flag)
    start again from zero, so the limits bound the work done for one message,
    never the conversation's life.
    """

    async def apply(self, view: StateView[ReactState], message: UserInput | Close) -> Patch:
        """The user's message appended (the last answer and its output cleared), or the close."""
        if isinstance(message, Close):
            return Patch(exit=StopReason.CLOSED)
        cleared = Patch(answer=None, output=None, exit=None, **_NEW_TURN)
        return cleared.append("messages", UserMessage(content=message.text))

    def next(self, state: ReactState) -> enum.Enum:
        """Think about the new message; finish once closed."""
        return L.FINISHED if state.exit is StopReason.CLOSED else L.THINKING
