"""What a ReAct turn commits and records: the counters that changed, the request as built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo._hooks import record_plain_call
from arkhon_rheo.models import Pricing
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ToolCall, Usage
from arkhon_rheo.react import Budget, Calls, Limits, ReactState, react_agent
from arkhon_rheo.session._recording import CallRecorder
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

COUNTERS = {"usage", "cost", "started_at", "elapsed", "wrapup"}


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def ask(key: str, usage: Usage | None = None) -> ModelReply:
    call = ToolCall(id=f"c-{key}", name="lookup", arguments=f'{{"key": "{key}"}}')
    message = AssistantMessage(tool_calls=(call,))
    return ModelReply(
        message=message, finish_reason="tool_calls", usage=usage or Usage(), model="gpt-4o-mini"
    )


async def think_patches(tmp_path: Path, agent: Any) -> tuple[Any, list[set[str]]]:
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="look"), session_id="s")
        stored = system.stored(agent, "s")
        events = await stored.history()
        report = await stored.replay(reexecute=True)
    assert report.ok, report.divergence  # the records answer the re-executed stages
    assert report.state == result.state
    return result, [set(e.patch.fields) for e in events if e.stage == "think"]


async def test_a_turn_writes_only_the_counters_it_changed(tmp_path: Path) -> None:
    model = ScriptedModel([ask("a"), ask("b"), "done"])
    result, patches = await think_patches(tmp_path, react_agent(model, [lookup]))
    assert result.ok
    assert result.state.turns == 3
    assert result.state.usage == Usage()
    assert result.state.cost == 0.0
    assert result.state.elapsed == 0.0
    assert patches[0] == {"turns", "messages", "pending", "pending_step"}
    assert all(not fields & COUNTERS for fields in patches)


async def test_usage_cost_and_time_are_written_when_they_change(tmp_path: Path) -> None:
    used = Usage(prompt_tokens=10, completion_tokens=5)
    model = ScriptedModel([ask("a", used), ask("b", used), "done"], model="gpt-4o-mini")
    prices = Pricing({"gpt-4o-mini": (0.15, 0.60)})
    agent = react_agent(
        model,
        [lookup],
        limits=Limits(budget=Budget(max_seconds=3600)),
        calls=Calls(prices=prices),
    )
    result, patches = await think_patches(tmp_path, agent)
    assert result.ok
    assert result.state.usage.prompt_tokens == 20
    assert result.state.cost > 0
    assert result.state.started_at is not None
    assert {"usage", "cost", "started_at"} <= patches[0]
    assert "started_at" not in patches[1]  # set once, at the first turn


async def test_a_plain_request_is_recorded_as_built() -> None:
    request = {"turn": 0, "new": [{"role": "user", "content": "hi"}], "tools": ["lookup"]}

    async def answer() -> ModelReply:
        return ModelReply(message=AssistantMessage(content="hello"))

    with CallRecorder() as recorder:
        reply = await record_plain_call("model", request, answer, returns=ModelReply)
    assert reply.text == "hello"
    assert recorder.calls[0]["request"] is request
    outside = await record_plain_call("model", request, answer, returns=ModelReply)
    assert outside.text == "hello"  # outside a stage it simply calls through
