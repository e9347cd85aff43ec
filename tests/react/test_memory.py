"""``Memory(summarize=Summarize(...))``: the oldest turns folded into a recorded summary."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.protocols import (
    AssistantMessage,
    Lifecycle,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from arkhon_rheo.react import Checks, Memory, ReactState, StopReason, Summarize, react_agent
from arkhon_rheo.react._memory import SUMMARY_PREFIX, fold_point
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@tool
async def look(key: int) -> str:
    """Look a key up: a long text."""
    return f"value {key} " + "x" * 200


def call(key: int) -> ToolCall:
    return ToolCall(id=f"c{key}", name="look", arguments=json.dumps({"key": key}))


def script() -> list[Any]:
    """Two lookups, the summary (asked once the second's result passes the budget), the answer."""
    return [call(1), call(2), "SUMMARY: key 1 looked up", "done: 1 and 2"]


#: One lookup's turn fits (about 80 tokens); two do not (about 140).
MEMORY = Memory(summarize=Summarize(max_tokens=120, keep_last=2, prompt="Summarise."))


async def test_a_conversation_past_the_budget_is_summarised() -> None:
    model = ScriptedModel(script())
    agent = react_agent(model, [look], system_prompt="Be brief.", memory=MEMORY)
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="look up 1 and 2"))
    assert result.ok, result.failure
    state = result.state
    assert (state.answer, state.exit, state.summaries) == ("done: 1 and 2", StopReason.ANSWERED, 1)
    assert state.summary == "SUMMARY: key 1 looked up"
    assert state.turns == 3  # the summarising call is no model turn
    asks = model.requests
    assert len(asks) == 4
    summarising = asks[2]
    assert summarising.tools == ()
    assert summarising.messages[0] == SystemMessage(content="Summarise.")
    told = summarising.messages[1].content or ""
    assert "User: look up 1 and 2" in told
    assert 'Assistant called look({"key": 1})' in told
    assert "Tool look returned: value 1" in told
    assert "value 2" not in told  # the last turn (a call and its result) stays whole
    after = asks[3].messages  # the model's next turn: the summary and the recent turns
    summary = SystemMessage(content=SUMMARY_PREFIX + "SUMMARY: key 1 looked up")
    assert after[:2] == (SystemMessage(content="Be brief."), summary)
    assert [type(m).__name__ for m in after[2:]] == ["AssistantMessage", "ToolMessage"]
    assert after[2] == AssistantMessage(tool_calls=(call(2),))
    assert not any(isinstance(m, UserMessage) for m in after)  # the task is in the summary
    assert state.messages[:2] == (SystemMessage(content="Be brief."), summary)
    assert state.lifecycle is Lifecycle.FINISHED


async def test_a_summarised_agent_replays_without_the_model(tmp_path: Path) -> None:
    model = ScriptedModel(script())
    agent = react_agent(model, [look], memory=MEMORY)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="look up 1 and 2"), session_id="s")
        assert result.ok, result.failure
        assert result.state.summaries == 1
        asked = len(model.requests)
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert report.state == result.state
    assert len(model.requests) == asked  # the summary was answered from the record


async def test_without_memory_nothing_is_summarised() -> None:
    model = ScriptedModel([call(1), call(2), call(3), "done"])
    agent = react_agent(model, [look], system_prompt="Be brief.")
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="look up 1 and 2"))
    assert result.ok, result.failure
    state = result.state
    assert (state.answer, state.summary, state.summaries, state.turns) == ("done", None, 0, 4)
    assert len(model.requests) == 4
    last = model.requests[-1].messages
    assert last == tuple(state.messages[:-1])  # the whole conversation, as before
    assert len(last) == 8


async def test_a_conversation_within_the_budget_is_not_summarised() -> None:
    model = ScriptedModel([call(1), "done"])
    agent = react_agent(
        model,
        [look],
        memory=Memory(summarize=Summarize(max_tokens=10_000)),
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="look up 1"))
    assert (result.state.answer, result.state.summaries, len(model.requests)) == ("done", 0, 2)


async def test_a_summarised_agent_with_checks_still_checks() -> None:
    model = ScriptedModel(script())
    agent = react_agent(model, [look], memory=MEMORY, checks=Checks(stuck="soft"))
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="look up 1 and 2"))
    assert result.ok, result.failure
    assert (result.state.answer, result.state.summaries) == ("done: 1 and 2", 1)


def test_the_fold_never_splits_a_call_from_its_results() -> None:
    both = AssistantMessage(tool_calls=(call(1), call(2)))
    messages: list[Message] = [
        SystemMessage(content="rules"),
        UserMessage(content="task"),
        both,
        ToolMessage(tool_call_id="c1", name="look", content="a"),
        ToolMessage(tool_call_id="c2", name="look", content="b"),
    ]
    assert fold_point(messages, keep_last=1) == (1, 2)  # the cut moves back to the call
    assert fold_point(messages, keep_last=4) is None  # nothing old enough to fold
    summarised = [messages[0], SystemMessage(content=SUMMARY_PREFIX + "s"), *messages[2:]]
    assert fold_point(summarised, keep_last=3) is None  # only the summary is old: nothing new
    assert fold_point([*summarised, UserMessage(content="more")], keep_last=1) == (1, 5)


def test_summarize_checks_its_settings() -> None:
    for max_tokens, keep_last in ((0, 4), (10, 0)):
        with pytest.raises(ConfigurationError):
            Summarize(max_tokens=max_tokens, keep_last=keep_last)
    with pytest.raises(ConfigurationError):
        Summarize(max_tokens=10, prompt=" ")
    with pytest.raises(ConfigurationError, match="memory"):
        react_agent(ScriptedModel(), memory=100)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="summarize"):
        react_agent(ScriptedModel(), memory=Memory(summarize=100))  # type: ignore[arg-type]
