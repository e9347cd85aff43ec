"""A ReAct agent whose tools come from an MCP server (over stdio), beside a Python tool.

The example starts its own MCP server (``examples/agent_tools/mcp_server.py``,
built on the MCP SDK's server framework) as a subprocess through
`MCPToolbox.stdio`: the agent system opens the toolbox (connects, lists the
server's tools with their schemas) and closes it when it stops (the server
process ends). The model sees the server's tools and a Python tool side by
side; a call the server answers with an error comes back to the model as an
observation. The stored run is then replayed, re-executing every stage on its
recorded calls, with neither the model nor the server.

Offline it runs on a scripted model; with ``OPENAI_BASE_URL`` set (and
``OPENAI_API_KEY``, ``ARKHON_MODEL`` as your server needs) it asks that server.

Run it with ``python examples/mcp_agent.py [asyncio|trio]`` (needs ``pip install
"arkhon-rheo[mcp]"``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import anyio

from arkhon_rheo import AgentSystem
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import ModelClient, ToolCall, ToolMessage
from arkhon_rheo.react import Budget, Limits, ReactState, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import MCPToolbox, tool

SERVER = Path(__file__).resolve().parent / "agent_tools" / "mcp_server.py"
TASK = "Which city has more people, Paris or Berlin, and by what factor? Is Atlantis bigger?"


@tool
def thousands(number: int) -> str:
    """A whole number written with thousands separators (3878100 -> 3,878,100)."""
    return f"{number:,}"


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            [  # two calls of the server's tool in one turn: they run concurrently
                ToolCall(id="p1", name="population", arguments='{"city": "Paris"}'),
                ToolCall(id="p2", name="population", arguments='{"city": "Berlin"}'),
            ],
            ToolCall(id="c1", name="compare", arguments='{"a": 2102650, "b": 3878100}'),
            [
                ToolCall(id="t1", name="thousands", arguments='{"number": 3878100}'),
                ToolCall(id="a1", name="population", arguments='{"city": "Atlantis"}'),
            ],
            "Berlin has more people: 3,878,100, about 1.844 times Paris's 2,102,650. "
            "I have no figure for Atlantis.",
        ]
    )


async def run(model: ModelClient, db: Path) -> None:
    # The MCP server's tools (a subprocess, over stdio), and the Python tool beside them.
    tools = MCPToolbox.stdio(sys.executable, [str(SERVER)], tools=[thousands])
    agent = react_agent(
        model,
        tools,
        limits=Limits(budget=Budget(max_turns=8, max_tool_calls=10)),
    )
    async with AgentSystem(path=db) as system:
        # The system opens the toolbox before the session starts: the server starts.
        result = await system.run(agent, ReactState(task=TASK), session_id="cities")
        print("tools:")
        for spec in tools.specs:
            print(f"  {spec.name}({', '.join(spec.parameters.get('properties', {}))})")
        for event in await system.stored(agent, "cities").history():
            calls = sorted(call["kind"] for call in (event.info or {}).get("io", []))
            print(
                f"  #{event.seq} {event.stage}: {event.from_state.name} -> {event.to_state.name}"
                + (f" (recorded calls: {', '.join(calls)})" if calls else "")
            )
        for message in result.state.messages:
            if isinstance(message, ToolMessage):
                error = " (error: an observation for the model)" if message.is_error else ""
                print(f"  tool {message.name} -> {message.content}{error}")
        print(f"answer: {result.state.answer}")
        stop = result.state.exit.value if result.state.exit else None
        print(f"exit: {result.exit_reason.value} ({stop})")
    print(f"toolbox open after the system stopped: {tools.is_open} (the server process ended)")

    # Replay in a new system, without the server: a toolbox given the specs the model saw.
    offline = MCPToolbox.stdio("/no/server/needed", tools=[thousands], specs=tools.server_specs)
    again = react_agent(
        model,
        offline,
        limits=Limits(budget=Budget(max_turns=8, max_tool_calls=10)),
    )
    async with AgentSystem(path=db) as system:
        report = await system.stored(again, "cities").replay(reexecute=True)
    print(
        f"replay: {'ok' if report.ok else report.divergence}; {report.reexecuted} stages "
        "re-executed on their recorded calls, without the model or the MCP server"
    )


async def main() -> None:
    model: ModelClient = OpenAIChatClient() if os.environ.get("OPENAI_BASE_URL") else scripted()
    with tempfile.TemporaryDirectory() as folder:
        await run(model, Path(folder) / "mcp-agent.db")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
