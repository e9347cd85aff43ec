"""ScriptedModel: the public scripted stand-in for a model client."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from arkhon_rheo import Fatal, Transient
from arkhon_rheo.protocols import (
    ModelReply,
    ReplyDelta,
    StreamingModelClient,
    ToolCall,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.testing import Chunks, Delay, ScriptedModel, ScriptedRequest

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
