"""ScriptedModel: the public scripted stand-in for a model client."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest
import trio
import trio.testing

from arkhon_rheo import AgentSystem, ExitReason, Fatal, Transient
from arkhon_rheo.protocols import (
    AssistantMessage,
    EventKind,
    ModelReply,
    ReplyDelta,
    StreamingModelClient,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import Calls, ReactState, react_agent
from arkhon_rheo.testing import Chunks, Delay, ScriptedModel, ScriptedRequest
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    from arkhon_rheo.protocols import Message
    from arkhon_rheo.testing import Step

HI = [UserMessage(content="hi")]
ADD = ToolCall(id="1", name="add", arguments='{"a": 1}')


@pytest.mark.anyio
async def test_a_script_of_answers_tool_calls_and_errors() -> None:
    tools = (ToolSpec(name="add"),)
    model = ScriptedModel(["hello", ADD, Transient("rate limited", retry_after=2.0), "done"])
    assert isinstance(model, StreamingModelClient)
    first = await model.complete(HI)
    assert (first.text, first.finish_reason, first.model) == ("hello", "stop", "scripted")
    second = await model.complete(HI, tools=tools, json_mode=True)
    assert second.tool_calls == (ADD,)
    assert second.finish_reason == "tool_calls"
    with pytest.raises(Transient, match="rate limited"):
        await model.complete(HI)
    assert (await model.complete(HI)).text == "done"
    assert model.requests[1] == ScriptedRequest(messages=tuple(HI), tools=tools, json_mode=True)
    assert len(model.requests) == 4
    with pytest.raises(Fatal, match="script is exhausted: call #5"):
        await model.complete(HI)


@pytest.mark.anyio
async def test_streaming_chunks_and_plain_steps() -> None:
    model = ScriptedModel(
        [
            Chunks(("Hel", "lo"), tool_calls=(ADD,)),
            "whole",
            Chunks(("par",), error=Transient("cut")),
        ]
    )
    chunks = [chunk async for chunk in model.stream(HI)]
    assert chunks[:2] == [ReplyDelta(text="Hel", index=0), ReplyDelta(text="lo", index=1)]
    final = chunks[2]
    assert isinstance(final, ModelReply)
    assert (final.text, final.tool_calls) == ("Hello", (ADD,))
    plain = [chunk async for chunk in model.stream(HI)]
    assert plain[0] == ReplyDelta(text="whole")
    assert isinstance(plain[1], ModelReply)
    got: list[object] = []

    async def drain() -> None:
        async for chunk in model.stream(HI):
            got.append(chunk)  # noqa: PERF401 - the chunks before the error count

    with pytest.raises(Transient, match="cut"):
        await drain()
    assert got == [ReplyDelta(text="par")]
    assert all(request.stream for request in model.requests)


@pytest.mark.trio
async def test_delays_run_on_the_virtual_clock(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([Delay(30.0), "late"])
    start = trio.current_time()
    assert (await model.complete(HI)).text == "late"
    assert trio.current_time() - start == pytest.approx(30.0)
    assert "0 steps left" in repr(model)


# -- by position in the conversation: resume-safe ------------------------------------


def conversation(turns: int) -> list[Message]:
    """A conversation holding ``turns`` assistant turns, each answered by a tool result."""
    messages: list[Message] = [UserMessage(content="count")]
    for n in range(turns):
        call = ToolCall(id=str(n), name="add", arguments="{}")
        messages += [
            AssistantMessage(tool_calls=(call,)),
            ToolMessage(tool_call_id=str(n), name="add", content=str(n)),
        ]
    return messages


@pytest.mark.anyio
async def test_a_fresh_model_answers_where_the_conversation_stands() -> None:
    script: list[Step] = [Transient("429"), ADD, Delay(3600.0), "second", Transient("x"), "third"]
    model = ScriptedModel(script)
    # Two assistant turns are in the conversation already: the steps of answers 1
    # and 2, the error and the delay before them too, are behind it; answer 3's
    # error (the delays and errors before an answer belong to it) is not.
    with anyio.fail_after(60):  # the hour's delay is skipped
        with pytest.raises(Transient, match="x"):
            await model.complete(conversation(2))
        assert (await model.complete(conversation(2))).text == "third"
    assert model.script == []
    with pytest.raises(Transient, match="429"):  # from the start: the first answer's error
        await ScriptedModel(script).complete(conversation(0))


@pytest.mark.anyio
async def test_it_never_goes_back_so_calls_outside_a_conversation_take_the_steps_in_order() -> None:
    model = ScriptedModel(["one", "two", "three"])
    assert (await model.complete(conversation(1))).text == "two"
    assert (await model.complete(conversation(0))).text == "three"  # behind: the next step
    with pytest.raises(Fatal, match="call #3 asks for answer #4"):
        await model.complete(HI)


@pytest.mark.anyio
async def test_a_conversation_past_the_script_says_so() -> None:
    model = ScriptedModel(["only"])
    with pytest.raises(Fatal) as caught:
        await model.complete(conversation(2))
    message = str(caught.value)
    assert "script is exhausted: call #1 asks for answer #3" in message
    assert "its conversation holds 2 assistant turns), past the script's 1 answer(s)" in message
    assert "add replies to the script" in message


@pytest.mark.anyio
async def test_a_streamed_call_goes_by_position_too() -> None:
    model = ScriptedModel([ADD, Chunks(("twen", "ty"))])
    chunks = [chunk async for chunk in model.stream(conversation(1))]
    assert chunks[:2] == [ReplyDelta(text="twen", index=0), ReplyDelta(text="ty", index=1)]


class Stopping:
    """Asks ``inner``, and hangs on call ``at`` (a process stopped there)."""

    def __init__(self, inner: ScriptedModel, at: int) -> None:
        self.inner = inner
        self.at = at
        self.calls = 0
        self.entered = anyio.Event()

    async def _gate(self) -> None:
        self.calls += 1
        if self.calls == self.at:
            self.entered.set()
            await anyio.sleep_forever()

    async def complete(self, messages: Sequence[Message], **options: Any) -> ModelReply:
        await self._gate()
        return await self.inner.complete(messages, **options)

    async def stream(
        self, messages: Sequence[Message], **options: Any
    ) -> AsyncIterator[ReplyDelta | ModelReply]:
        await self._gate()
        async for chunk in self.inner.stream(messages, **options):
            yield chunk


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_resumed_agent_with_a_fresh_model_does_not_run_its_tool_again(
    tmp_path: Path, stream: bool
) -> None:
    runs: list[str] = []

    @tool
    async def population(city: str) -> int:
        """The population of a city, in thousands."""
        runs.append(city)
        return 522

    arguments = json.dumps({"city": "Lyon"})
    script: list[Step] = [ToolCall(id="1", name="population", arguments=arguments), "522."]
    db = tmp_path / "agents.db"
    stopping = Stopping(ScriptedModel(script), at=2)  # stops before the answer
    first = react_agent(stopping, [population], calls=Calls(stream=stream))
    async with AgentSystem(path=db) as system:
        handle = await system.start(first, ReactState(task="Lyon?"), session_id="s")
        await stopping.entered.wait()
        handle.cancel()  # stopped after the tool's step was committed
        assert (await handle.result()).exit_reason is ExitReason.CANCELLED
    assert runs == ["Lyon"]

    fresh = ScriptedModel(script)  # a new process: the same script, from its start
    async with AgentSystem(path=db) as system:
        result = await (await system.resume(react_agent(fresh, [population]), "s")).result()
        events = await system.stored(first, "s").history()
    assert result.ok, result.failure
    assert runs == ["Lyon"]  # the tool did not run again
    assert result.state.answer == "522."
    assert (result.state.turns, result.state.tool_calls) == (2, 1)
    assert len(fresh.requests) == 1
    assert fresh.script == []
    assert [e.kind for e in events].count(EventKind.RESUME) == 1


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.anyio
async def test_sessions_sharing_one_model_at_once_each_answer_from_the_start() -> None:
    call = ToolCall(id="1", name="add", arguments='{"a": 20, "b": 22}')
    model = ScriptedModel([call, "42"])
    agent = react_agent(model, [add])
    async with AgentSystem(path=None) as system:
        handles = [
            await system.start(agent, ReactState(task=f"task {n}"), session_id=f"s{n}")
            for n in range(20)
        ]
        results = [await handle.result() for handle in handles]
    assert [result.failure for result in results if not result.ok] == []
    assert {result.state.answer for result in results} == {"42"}
    assert {(result.state.turns, result.state.tool_calls) for result in results} == {(2, 1)}
    assert len(model.requests) == 40


@pytest.mark.anyio
async def test_sessions_one_after_another_each_answer_from_the_start() -> None:
    model = ScriptedModel(["first"])
    agent = react_agent(model)
    async with AgentSystem(path=None) as system:
        for n in range(3):
            result = await system.run(agent, ReactState(task="t"), session_id=f"s{n}")
            assert result.state.answer == "first"
        assert model.script == []  # the first session's


@pytest.mark.anyio
async def test_a_session_past_the_script_is_named_with_its_own_calls() -> None:
    model = ScriptedModel([ToolCall(id="1", name="add", arguments='{"a": 1, "b": 2}')])
    agent = react_agent(model, [add])
    async with AgentSystem(path=None) as system:
        failed = [await system.run(agent, ReactState(task="t"), session_id=n) for n in "ab"]
    for name, result in zip("ab", failed, strict=True):
        assert not result.ok
        assert f"call #2 of session {name!r} asks for answer #2" in str(result.failure)
