"""Agents for the A2A tests: they repeat the user's words, streamed word by word.

``agent`` (``tests.support.a2a_agent:agent``) is conversational with one tool,
``wait``: a message ``tool N`` makes it call the tool, which sleeps N
seconds, then answer ``done``. A message ``hold`` makes its model hang in a
process whose environment sets ``A2A_HOLD`` (one to be killed mid-turn), and
answer at once anywhere else. ``gated`` is the same agent with a gate before
each tool call, which asks ``run the tool?``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo.protocols import (
    AssistantMessage,
    Gate,
    Message,
    ModelReply,
    ReplyDelta,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import Calls, Checks, react_agent
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


@tool
async def wait(seconds: float) -> str:
    """Wait ``seconds`` seconds."""
    await anyio.sleep(seconds)
    return f"waited {seconds}"


#: When set (by a test, on its own event loop), the model's stream waits for it after its
#: first word: the test sees that word arrive while the turn is still under way.
STREAM_GATE: anyio.Event | None = None


class Repeat:
    """Repeats the user's last words; ``tool N`` calls the tool first."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return ModelReply(message=AssistantMessage(content=f"done: {last.content}"))
        text = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        if text == "hold" and os.environ.get("A2A_HOLD"):
            print("holding", flush=True)
            await anyio.sleep_forever()
        if text.startswith("tool "):
            call = ToolCall(
                id=f"call-{len(messages)}",
                name="wait",
                arguments=f'{{"seconds": {float(text[5:])}}}',
            )
            return ModelReply(message=AssistantMessage(content="", tool_calls=(call,)))
        return ModelReply(message=AssistantMessage(content=f"You said: {text}"))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """The reply word by word (a short pause between words), then whole."""
        reply = await self.complete(messages, tools=tools, json_mode=json_mode)
        words = (reply.message.content or "").split(" ")
        for index, word in enumerate(words if reply.message.content else []):
            yield ReplyDelta(text=word if index == 0 else f" {word}", index=index)
            if index == 0 and STREAM_GATE is not None:
                await STREAM_GATE.wait()
        yield reply


agent = react_agent(Repeat(), [wait], conversational=True, calls=Calls(stream=True), name="repeat")
gated = react_agent(
    Repeat(),
    [wait],
    conversational=True,
    calls=Calls(stream=True),
    checks=Checks(gates=[Gate.before("act", name="tool review", question="run the tool?")]),
    name="gated",
)
