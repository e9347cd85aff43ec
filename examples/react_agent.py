"""A ReAct agent with two tools (one sandboxed), supervised and durable, then replayed.

Offline it runs on a scripted model. With ``ANTHROPIC_API_KEY`` or
``ANTHROPIC_BASE_URL`` set it asks Anthropic's Messages API (or a server
speaking it); else, with ``OPENAI_BASE_URL`` set (and ``OPENAI_API_KEY`` as
your server needs), any OpenAI-compatible chat-completions API (vLLM,
llama.cpp, Ollama, hosted). ``ARKHON_MODEL`` names the model for either.
It prints each step, the answer, the usage and why the agent finished, then
replays the stored run, re-executing every stage without the model.

Run it with ``python examples/react_agent.py [asyncio|trio]``. ``agent`` makes
its machine for the command line: ``arkhon-rheo replay SESSION -m
examples.react_agent:agent --reexecute``.
"""

from __future__ import annotations

import os
import sys
import uuid

import anyio
from agent_tools import TOOLS

from arkhon_rheo import AgentSystem, Machine
from arkhon_rheo.models import AnthropicClient, OpenAIChatClient
from arkhon_rheo.protocols import ModelClient, ToolCall, ToolMessage
from arkhon_rheo.react import Budget, Limits, ReactState, react_agent
from arkhon_rheo.testing import ScriptedModel

TASK = "What is (17 + 25) * 3, and how many words are in 'the quick brown fox'?"


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            [  # one turn, two tool calls: they run concurrently
                ToolCall(id="c1", name="calculate", arguments='{"expression": "(17 + 25) * 3"}'),
                ToolCall(id="c2", name="count_words", arguments='{"text": "the quick brown fox"}'),
            ],
            "(17 + 25) * 3 = 126, and 'the quick brown fox' has 4 words.",
        ]
    )


def agent(model: ModelClient | None = None) -> Machine[ReactState]:
    """The agent on ``model`` (by default the scripted one: the command line replays offline)."""
    return react_agent(
        scripted() if model is None else model,
        TOOLS,
        limits=Limits(budget=Budget(max_turns=8, max_tool_calls=10)),
    )


async def run(model: ModelClient) -> None:
    machine = agent(model)
    session_id = f"react-{uuid.uuid4().hex[:8]}"
    async with AgentSystem() as system:  # sessions kept in ./arkhon-rheo.db
        result = await system.run(machine, ReactState(task=TASK), session_id=session_id)
        for event in await system.stored(machine, session_id).history():
            calls = ", ".join(call["kind"] for call in (event.info or {}).get("io", []))
            print(
                f"  #{event.seq} {event.stage}: {event.from_state.name} -> {event.to_state.name}"
                + (f" (recorded calls: {calls})" if calls else "")
            )
        for message in result.state.messages:
            if isinstance(message, ToolMessage):
                print(f"  tool {message.name} -> {message.content}")
        state = result.state
        print(f"answer: {state.answer}")
        print(
            f"usage: {state.usage.total_tokens} tokens, {state.turns} turns, "
            f"{state.tool_calls} tool calls"
        )
        print(f"exit: {result.exit_reason.value} ({state.exit.value if state.exit else None})")
        report = await system.stored(machine, session_id).replay(reexecute=True)
        print(
            f"replay: {'ok' if report.ok else report.divergence}; "
            f"{report.reexecuted} stages re-executed on their recorded calls, without the model"
        )


async def main() -> None:
    # A client is a resource of the agent: the system opens and closes it.
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_BASE_URL"):
        await run(AnthropicClient())
    elif os.environ.get("OPENAI_BASE_URL"):
        await run(OpenAIChatClient())
    else:
        await run(scripted())


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
