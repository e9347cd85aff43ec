"""A ReAct agent on AnthropicClient, end to end against a loopback Messages server.

Tool use and tool results across turns, streamed tool input, rate limits and
overload ridden out by the supervisor, a refused key failing the session, and
a stored run replayed with the server gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.models import AnthropicClient
from arkhon_rheo.protocols import ReplyDelta, ToolMessage, Usage
from arkhon_rheo.react import Calls, ReactState, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.tools import tool
from tests.support.anthropic_server import error, message, streamed
from tests.support.chat_server import open_chat_server

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

KEY = "sk-ant-agent-key-0123456789"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_tool_using_agent_runs_end_to_end_and_replays_without_the_server(
    tmp_path: Path,
) -> None:
    async with open_chat_server() as server:
        server.add(
            message("I will add.", tool_uses=[("tu_1", "add", {"a": 20, "b": 22})]),
            message("20 + 22 = 42", usage=(30, 7, 0, 12)),
        )
        client = AnthropicClient("claude-test", api_key=KEY, base_url=server.root)
        agent = react_agent(client, [add], system_prompt="You add numbers.")
        async with AgentSystem(path=tmp_path / "a.db") as system:
            result = await system.run(agent, ReactState(task="20 + 22?"), session_id="s")
        bodies = [received.json for received in server.requests]
    assert result.ok, result.failure
    assert result.state.answer == "20 + 22 = 42"
    (answer,) = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert (answer.tool_call_id, answer.content) == ("tu_1", "42")
    assert result.state.usage == Usage(
        prompt_tokens=3 + 42, completion_tokens=5 + 7, cache_read_tokens=12
    )
    first, second = bodies
    assert first["system"] == "You add numbers."
    assert [t["name"] for t in first["tools"]] == ["add"]
    assert first["tools"][0]["input_schema"]["properties"].keys() == {"a", "b"}
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I will add."},
            {"type": "tool_use", "id": "tu_1", "name": "add", "input": {"a": 20, "b": 22}},
        ],
    }
    assert second["messages"][-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "tu_1",
        "content": "42",
    }

    # The server is gone: the replay runs every stage on its recorded calls.
    replayed = react_agent(
        AnthropicClient("claude-test", api_key=KEY, base_url=server.root),
        [add],
        system_prompt="You add numbers.",
    )
    async with AgentSystem(path=tmp_path / "a.db") as system:
        report = await system.stored(replayed, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert report.state == result.state


async def test_a_streaming_agent_assembles_tool_input_split_across_events(
    tmp_path: Path,
) -> None:
    async with open_chat_server() as server:
        server.add(
            streamed(tool_uses=[("tu_1", "add", ['{"a": 2', '0, "b"', ": 22}"])]),
            streamed("The sum ", "is 42."),
        )
        client = AnthropicClient("claude-test", api_key=KEY, base_url=server.root)
        agent = react_agent(client, [add], calls=Calls(stream=True))
        async with AgentSystem(path=tmp_path / "s.db") as system:
            handle = await system.start(agent, ReactState(task="20 + 22?"), session_id="s")
            pieces: list[str] = []
            async with handle.partials() as partials:
                async for partial in partials:
                    assert isinstance(partial.data, ReplyDelta)
                    pieces.append(partial.data.text)
            result = await handle.result()
            report = await system.stored(agent, "s").replay(reexecute=True)
    assert result.ok, result.failure
    assert result.state.answer == "The sum is 42."
    assert "".join(pieces) in ("The sum is 42.", "is 42.", "")  # a late reader misses pieces
    (answer,) = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert answer.content == "42"
    assert all(received.json["stream"] is True for received in server.requests)
    assert report.ok, report.divergence


async def test_rate_limits_and_overload_are_ridden_out_by_the_supervisor() -> None:
    async with open_chat_server() as server:
        server.add(
            error(429, "rate limited", **{"retry-after": "0"}),
            error(529, "Overloaded", **{"retry-after": "0"}),
            message(tool_uses=[("tu_1", "add", {"a": 1, "b": 2})]),
            error(529, "Overloaded"),
            message("3"),
        )
        client = AnthropicClient("claude-test", api_key=KEY, base_url=server.root)
        async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
            result = await system.run(react_agent(client, [add]), ReactState(task="1 + 2"))
    assert result.ok, result.failure
    assert result.state.answer == "3"
    assert result.retries == 3
    assert len(server.requests) == 5


async def test_a_refused_key_fails_the_session_with_what_to_fix() -> None:
    async with open_chat_server() as server:
        server.add(error(401, f"invalid x-api-key: {KEY}"))
        client = AnthropicClient("claude-test", api_key=KEY, base_url=server.root)
        async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
            result = await system.run(react_agent(client, [add]), ReactState(task="1 + 2"))
    assert not result.ok
    assert result.failure is not None
    assert "check ANTHROPIC_API_KEY" in result.failure.message
    assert "invalid x-api-key: [REDACTED]" in result.failure.message
    assert KEY not in result.failure.message
    assert len(server.requests) == 1  # fatal: never retried
