"""The ReAct engine: a think -> act loop over a model and tools, supervised like any machine."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError, Gate
from arkhon_rheo.models import Pricing
from arkhon_rheo.protocols import (
    AssistantMessage,
    Lifecycle,
    ModelReply,
    ReplyDelta,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from arkhon_rheo.react import (
    Budget,
    Calls,
    Checks,
    Limits,
    MalformedModelOutput,
    PromptCache,
    ReactState,
    StopReason,
    Used,
    react_agent,
    trim_messages,
)
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import Chunks, ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(name: str, arguments: dict[str, Any] | str, id: str = "c1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=id, name=name, arguments=text)


def reply(text: str | None = None, *calls: ToolCall, usage: tuple[int, int] = (0, 0)) -> ModelReply:
    return ModelReply(
        message=AssistantMessage(content=text, tool_calls=calls),
        finish_reason="tool_calls" if calls else "stop",
        usage=Usage(prompt_tokens=usage[0], completion_tokens=usage[1]),
        model="gpt-4o-mini-2024-07-18",
    )


async def test_a_tool_using_agent_answers() -> None:
    model = ScriptedModel([call("add", {"a": 2, "b": 3}), "2 + 3 = 5"])
    agent = react_agent(model, [add], system_prompt="Be brief.")
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="what is 2 + 3?"))
    assert result.ok, result.failure
    state = result.state
    assert (state.answer, state.exit, state.turns, state.tool_calls) == (
        "2 + 3 = 5",
        StopReason.ANSWERED,
        2,
        1,
    )
    assert [type(m).__name__ for m in state.messages] == [
        "SystemMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "AssistantMessage",
    ]
    assert state.messages[3] == ToolMessage(tool_call_id="c1", name="add", content="5")
    assert [spec.name for spec in model.requests[0].tools] == ["add"]
    assert state.lifecycle is Lifecycle.FINISHED
    assert state.iteration == 2  # each return to Thinking


async def test_parallel_tool_calls_run_together_and_merge_in_call_order() -> None:
    entered: list[str] = []
    release = anyio.Event()

    @tool
    async def slow(name: str) -> str:
        """Wait for the test, then answer."""
        entered.append(name)
        await release.wait()
        return name.upper()

    model = ScriptedModel([[call("slow", {"name": n}, id=n) for n in ("a", "b", "c")], "done"])
    agent = react_agent(model, Toolbox(slow), calls=Calls(max_parallel_tools=8))
    async with AgentSystem(path=None) as system:
        handle = await system.start(agent, ReactState(task="go"))
        with anyio.fail_after(10):
            while len(entered) < 3:
                await wait_all_tasks_blocked()
        assert sorted(entered) == ["a", "b", "c"]  # all three in flight at once
        release.set()
        result = await handle.result()
    results = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [("a", "A"), ("b", "B"), ("c", "C")]


async def test_unknown_tools_and_bad_arguments_are_observations_the_model_acts_on() -> None:
    model = ScriptedModel(
        [
            [call("multiply", {"a": 1}, id="x"), call("add", {"a": "two", "b": 1}, id="y")],
            call("add", {"a": 2, "b": 1}, id="z"),
            "3",
        ]
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model, [add]), ReactState(task="2+1"))
    assert result.ok
    errors = [m for m in result.state.messages if isinstance(m, ToolMessage) and m.is_error]
    assert [m.tool_call_id for m in errors] == ["x", "y"]
    assert "add" in errors[0].content  # lists the tools it has
    assert result.state.answer == "3"
    second = model.requests[1].messages
    assert any(isinstance(m, ToolMessage) and m.is_error for m in second)


async def test_malformed_arguments_get_a_format_retry_with_the_error_shown() -> None:
    model = ScriptedModel([call("add", "{not json"), call("add", {"a": 1, "b": 1}), "2"])
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model, [add]), ReactState(task="1+1"))
    assert result.ok
    assert result.state.turns == 3
    retry = model.requests[1].messages
    last = retry[-1]
    assert isinstance(last, ToolMessage)
    assert last.is_error
    assert "not valid JSON" in last.content
    assert result.state.tool_calls == 1  # the malformed call never ran


async def test_an_empty_reply_gets_a_format_retry() -> None:
    model = ScriptedModel([reply(""), "now an answer"])
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model), ReactState(task="hi"))
    assert result.state.answer == "now an answer"
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage)
    assert "empty" in feedback.content


async def test_an_answer_that_does_not_fit_the_schema_is_retried_then_accepted() -> None:
    model = ScriptedModel(['{"value": "many"}', '{"value": 3}'])
    agent = react_agent(model, answer_type=dict[str, int])
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="count"))
    assert json.loads(result.state.answer or "") == {"value": 3}
    assert all(request.json_mode for request in model.requests)
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage)
    assert "value" in feedback.content


async def test_format_retries_run_out_as_a_classified_failure() -> None:
    model = ScriptedModel([reply("")] * 40)
    agent = react_agent(model, limits=Limits(max_format_retries=1))
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
        handle = await system.start(agent, ReactState(task="hi"))
        result = await handle.result()
        failures = [e.error for e in (await handle.history()) if e.error is not None]
    assert not result.ok  # restarted until the restart intensity escalated
    assert result.failure is not None
    assert result.failure.error_type == MalformedModelOutput.__name__
    assert "[the restart intensity ran out: " in result.failure.message
    assert failures[0].error_type == MalformedModelOutput.__name__
    assert failures[0].error_class.value == "recoverable"
    assert "after 1 format retries" in failures[0].message


async def test_a_budget_reached_mid_loop_ends_with_the_wrapup_turn() -> None:
    model = ScriptedModel(
        [
            reply(None, call("add", {"a": 1, "b": 1}), usage=(100, 20)),
            "final: 2",
        ]
    )
    agent = react_agent(
        model,
        [add],
        limits=Limits(budget=Budget(max_tool_calls=1, max_turns=10)),
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="1+1"))
    assert result.state.exit is StopReason.BUDGET_EXHAUSTED
    assert result.state.answer == "final: 2"
    wrapup = model.requests[-1]
    assert wrapup.tools == ()  # no tools in the wrap-up turn
    assert isinstance(wrapup.messages[-1], SystemMessage)
    assert wrapup.messages[-1].content == (
        "BUDGET turns 1/10 | tool_calls 1/1 | wrap-up: answer now, no tools"
    )
    assert "Budget reached (tool_calls 1/1)" in str(wrapup.messages[-2])
    first = model.requests[0].messages[-1]
    assert isinstance(first, SystemMessage)
    assert first.content == "BUDGET turns 0/10 | tool_calls 0/1"


async def test_a_tool_call_in_the_wrapup_turn_is_sent_back() -> None:
    model = ScriptedModel([call("add", {"a": 1, "b": 2}), "3"])
    agent = react_agent(model, [add], limits=Limits(budget=Budget(max_turns=0)))
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="1+2"))
    assert result.state.exit is StopReason.BUDGET_EXHAUSTED
    assert result.state.answer == "3"
    assert result.state.tool_calls == 0


async def test_max_steps_ends_the_agent_with_a_warning() -> None:
    model = ScriptedModel([call("add", {"a": 1, "b": 1}, id=str(i)) for i in range(5)])
    agent = react_agent(model, [add], limits=Limits(max_steps=2))
    with capture_logs() as logs:
        async with AgentSystem(path=None) as system:
            result = await system.run(agent, ReactState(task="loop"))
    assert result.ok
    assert (result.state.exit, result.state.answer, result.state.turns) == (
        StopReason.MAX_STEPS,
        None,
        2,
    )
    assert any(log["event"] == "react_max_steps" for log in logs)


async def test_a_human_stop_at_a_gate_ends_the_agent(tmp_path: Path) -> None:
    model = ScriptedModel([call("add", {"a": 1, "b": 1}), "never asked"])
    agent = react_agent(
        model,
        [add],
        checks=Checks(gates=[Gate.before("think", name="review")]),
    )
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="1+1"), session_id="s")
        assert result.exit_reason.value == "paused"
        await system.stored(agent, "s").edit({"stop": True})
        handle = await system.stored(agent, "s").approve()
        assert handle is not None
        result = await handle.result()
    assert result.state.exit is StopReason.STOPPED
    assert model.requests == []


async def test_usage_and_cost_accumulate_in_the_state() -> None:
    model = ScriptedModel(
        [
            reply(None, call("add", {"a": 1, "b": 1}), usage=(1_000_000, 0)),
            reply("2", usage=(0, 1_000_000)),
        ]
    )
    prices = Pricing({"gpt-4o-mini": (0.15, 0.60)})
    async with AgentSystem(path=None) as system:
        result = await system.run(
            react_agent(
                model,
                [add],
                calls=Calls(prices=prices),
            ),
            ReactState(task="x"),
        )
    assert result.state.usage == Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert result.state.cost == pytest.approx(0.75)


async def test_a_finished_agent_replays_without_the_model(tmp_path: Path) -> None:
    model = ScriptedModel(
        [[call("add", {"a": 2, "b": 2}, id="1"), call("add", {"a": 1, "b": 1}, id="2")], "4 and 2"]
    )
    agent = react_agent(
        model,
        [add],
        limits=Limits(budget=Budget(max_seconds=3600)),
    )
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="sums"), session_id="s")
        assert result.ok
        asked = len(model.requests)
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert report.state == result.state
    assert len(model.requests) == asked  # the model was not asked again


async def test_a_resumed_agent_reruns_the_tool_call_it_was_stopped_in(tmp_path: Path) -> None:
    runs: list[int] = []
    entered = anyio.Event()
    hang = [True]

    @tool
    async def fetch(n: int) -> int:
        """Fetch a number."""
        runs.append(n)
        if hang[0]:
            entered.set()
            await anyio.sleep_forever()
        return n * 10

    model = ScriptedModel([call("fetch", {"n": 4}), "40"])
    agent = react_agent(model, [fetch])
    db = tmp_path / "a.db"
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(agent, ReactState(task="fetch 4"), session_id="s")
            await entered.wait()
            scope.cancel()  # the service stops in the middle of the tool call
    hang[0] = False
    async with AgentSystem(path=db) as system:
        handle = await system.resume(agent, "s")
        result = await handle.result()
        events = await system.stored(agent, "s").history()
        report = await system.stored(agent, "s").replay()
    assert result.state.answer == "40"
    assert runs == [4, 4]  # the step in flight ran again
    assert [e.kind.value for e in events].count("resume") == 1
    assert report.ok


async def test_a_tool_past_its_timeout_is_retried_by_the_supervisor() -> None:
    attempts: list[int] = []

    @tool(timeout=0.05)
    async def flaky() -> str:
        """Hangs the first time."""
        attempts.append(1)
        if len(attempts) == 1:
            await anyio.sleep_forever()
        return "ok"

    model = ScriptedModel([call("flaky", {}), "fine"])
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
        agent = react_agent(
            model,
            [flaky],
            calls=Calls(tool_failures="escalate"),
        )  # the supervisor retries
        result = await system.run(agent, ReactState(task="t"))
    assert result.ok
    assert result.retries == 1
    assert len(attempts) == 2


async def test_a_cancelled_system_stores_its_sessions_status_and_gives_up_leases(
    tmp_path: Path,
) -> None:
    entered = anyio.Event()

    @tool
    async def hang() -> str:
        """Never answers."""
        entered.set()
        await anyio.sleep_forever()
        return ""  # pragma: no cover

    agent = react_agent(ScriptedModel([call("hang", {})]), [hang])
    db = tmp_path / "a.db"
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(agent, ReactState(task="x"), session_id="s")
            await entered.wait()
            scope.cancel()
    async with AgentSystem(path=db) as system:
        assert system.store is not None
        assert await system.store.leases() == ()
        assert (await system.store.record("s")).status == "cancelled"


async def test_the_prompt_cache_answers_a_repeated_prompt_and_stays_replay_safe(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([reply("cached answer", usage=(10, 5))])
    cache = PromptCache(maxsize=4)
    agent = react_agent(model, calls=Calls(cache=cache))
    async with AgentSystem(path=tmp_path / "a.db") as system:
        first = await system.run(agent, ReactState(task="same"), session_id="a")
        second = await system.run(agent, ReactState(task="same"), session_id="b")
        report = await system.stored(agent, "b").replay(reexecute=True)
    assert (first.state.answer, second.state.answer) == ("cached answer", "cached answer")
    assert len(model.requests) == 1
    assert (cache.hits, cache.misses) == (1, 1)
    assert second.state.usage == Usage()  # a hit costs nothing
    assert report.ok


async def test_streamed_replies_reach_subscribers_and_replay(tmp_path: Path) -> None:
    model = ScriptedModel([Chunks(("The ", "answer ", "is 42.")), "unused"])
    agent = react_agent(model, calls=Calls(stream=True))
    async with AgentSystem(path=tmp_path / "a.db") as system:
        handle = await system.start(agent, ReactState(task="?"), session_id="s")
        pieces: list[str] = []
        async with handle.partials() as partials:
            async for partial in partials:
                assert isinstance(partial.data, ReplyDelta)
                pieces.append(partial.data.text)
        result = await handle.result()
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert result.state.answer == "The answer is 42."
    assert "".join(pieces) in ("The answer is 42.", "answer is 42.", "is 42.", "")
    assert report.ok


async def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_steps"):
        react_agent(ScriptedModel(), limits=Limits(max_steps=0))
    with pytest.raises(ConfigurationError, match="stream"):
        react_agent(object(), calls=Calls(stream=True))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="limit"):
        Budget(max_tool_calls=-1)
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(ScriptedModel()), ReactState())
    assert not result.ok
    assert result.failure is not None
    assert "task" in result.failure.message


async def test_a_429_storm_from_a_real_server_is_ridden_out() -> None:
    from arkhon_rheo.models import OpenAIChatClient
    from tests.support.chat_server import Canned, open_chat_server

    async with open_chat_server() as server:
        server.add(
            Canned.error(429, "slow down", **{"Retry-After": "0"}),
            Canned.error(429, "slow down", **{"Retry-After": "0"}),
            Canned.completion(tool_calls=[("t1", "add", '{"a": 20, "b": 22}')]),
            Canned.error(503, "busy"),
            Canned.completion("42"),
        )
        async with OpenAIChatClient(
            "test-model", base_url=server.url, api_key="sk-test-key-123456"
        ) as client:
            agent = react_agent(client, [add])
            async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
                result = await system.run(agent, ReactState(task="20 + 22"))
        bodies = [received.json for received in server.requests]
    assert result.ok, result.failure
    assert result.state.answer == "42"
    assert result.retries == 3
    assert result.state.usage.total_tokens == 16  # two answered calls of (3, 5)
    assert bodies[-1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "add"


# -- the pure parts ----------------------------------------------------------------


def test_the_budget_line_names_only_the_limits_set() -> None:
    budget = Budget(max_turns=10, max_cost=0.5, max_seconds=60)
    used = Used(turns=3, tool_calls=7, tokens=999, cost=0.1234, seconds=12.5)
    assert budget.render(used) == "BUDGET turns 3/10 | cost 0.1234/0.5 | seconds 12.5/60"
    assert budget.exhausted(used) is None
    assert budget.exhausted(Used(turns=10)) == "turns 10/10"
    assert Budget().render(used) == ""


def test_trimming_keeps_the_system_prompt_and_the_latest_turns_whole() -> None:
    system = SystemMessage(content="rules")
    old = UserMessage(content="x" * 400)
    ask = AssistantMessage(tool_calls=(call("add", {"a": 1, "b": 2}),))
    result = ToolMessage(tool_call_id="c1", name="add", content="3")
    latest = UserMessage(content="and now?")
    messages = (system, old, ask, result, latest)
    assert trim_messages(messages, None) == messages
    assert trim_messages(messages, 60) == (system, ask, result, latest)
    assert trim_messages(messages, 1) == (system, latest)  # the latest turn always stays


def test_the_prompt_cache_is_bounded() -> None:
    cache = PromptCache(maxsize=2)
    for text in ("a", "b", "c"):
        cache.put(PromptCache.key([UserMessage(content=text)], (), False), reply(text))
    assert len(cache) == 2
    assert cache.get(PromptCache.key([UserMessage(content="a")], (), False)) is None
    with pytest.raises(ConfigurationError):
        PromptCache(maxsize=0)
