"""A conversational agent for the cross-process ask tests: it repeats the user's words.

In a process whose environment sets ``ASK_HOLD``, a message ``slow`` makes its
model say ``driving`` on stdout and never answer (a process to be killed
mid-turn). Importable as ``tests.support.ask_agent:agent``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import anyio

from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    ReplyDelta,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import react_agent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


class Repeat:
    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        if last == "slow" and os.environ.get("ASK_HOLD"):
            print("driving", flush=True)
            sys.stdout.flush()
            await anyio.sleep_forever()
        return ModelReply(message=AssistantMessage(content=f"You said: {last}"))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        """The reply word by word, then whole."""
        reply = await self.complete(messages, tools=tools, json_mode=json_mode)
        for index, word in enumerate((reply.message.content or "").split(" ")):
            yield ReplyDelta(text=word if index == 0 else f" {word}", index=index)
        yield reply


agent = react_agent(Repeat(), conversational=True, name="ask-agent")


async def _drive(path: str, backend: str) -> None:
    from arkhon_rheo import AgentSystem
    from arkhon_rheo.react import Conversation

    async with AgentSystem(path=path) as system:
        chat = await Conversation.open(system, agent, "k")
        await chat.say("slow", message_id="k1")


if __name__ == "__main__":  # python -m tests.support.ask_agent STORE BACKEND
    anyio.run(_drive, sys.argv[1], sys.argv[2], backend=sys.argv[2])
