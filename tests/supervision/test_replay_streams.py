"""Streamed calls: recorded chunk by chunk, streamed back from the record in a replay."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import anyio.lowlevel
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    Transient,
    record_call,
    record_stream,
    stage,
)
from arkhon_rheo.errors import MailboxFull, ReplayDiverged
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ReplyDelta
from arkhon_rheo.session._recording import CallPlayback, CallRecorder

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.anyio

L = Lifecycle
Chunk = ReplyDelta | ModelReply


class Box(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    out: tuple[str, ...] = ()


async def three_chunks() -> AsyncIterator[Chunk]:
    for index, text in enumerate(["Hel", "lo"]):
        await anyio.lowlevel.checkpoint()
        yield ReplyDelta(text=text, index=index)
    yield ModelReply(message=AssistantMessage(content="Hello"), model="m")


async def failing_after_one() -> AsyncIterator[Chunk]:
    yield ReplyDelta(text="Hel")
    raise Transient("dropped mid-stream", retry_after=1.0)


async def test_a_stream_is_recorded_chunk_by_chunk_and_played_back() -> None:
    with CallRecorder() as recorder:
        got = [c async for c in record_stream("model", {"q": 1}, three_chunks, returns=Chunk)]
    assert [type(c) for c in got] == [ReplyDelta, ReplyDelta, ModelReply]
    (record,) = recorder.finished()
    assert record["stream"] is True
    assert record["request"] == {"q": 1}
    assert [c.get("text") for c in record["chunks"][:2]] == ["Hel", "lo"]
    assert record["chunks"][2]["message"]["content"] == "Hello"

    def never() -> AsyncIterator[Chunk]:
        raise AssertionError("a replay does not call out")

    with CallPlayback(recorder.finished()) as playback:
        again = [c async for c in record_stream("model", {"q": 1}, never, returns=Chunk)]
    assert again == got
    assert playback.unused() == 0


async def _drain(into: list[Any]) -> None:
    async for chunk in record_stream("model", {}, failing_after_one, returns=Chunk):
        into.append(chunk)  # noqa: PERF401 - the chunks before the error count


async def test_a_stream_that_fails_replays_its_chunks_then_the_error() -> None:
    seen: list[Any] = []
    with CallRecorder() as recorder, pytest.raises(Transient, match="dropped"):
        await _drain(seen)
    (record,) = recorder.finished()
    assert record["error"]["type"] == "arkhon_rheo.errors.Transient"
    assert len(record["chunks"]) == 1
    replayed: list[Any] = []
    with CallPlayback(recorder.finished()), pytest.raises(Transient, match="dropped"):
        await _drain(replayed)
    assert replayed == seen


async def test_a_stream_left_early_records_what_was_read() -> None:
    with CallRecorder() as recorder:
        chunks = record_stream("model", {}, three_chunks, returns=Chunk)
        async with contextlib.aclosing(chunks):
            async for _ in chunks:
                break
    (record,) = recorder.finished()
    assert len(record["chunks"]) == 1


async def test_a_plain_call_does_not_match_a_recorded_stream() -> None:
    with CallRecorder() as recorder:
        _ = [c async for c in record_stream("model", {}, three_chunks, returns=Chunk)]
    with CallPlayback(recorder.finished()), pytest.raises(ReplayDiverged):
        await record_call("model", {}, anyio.lowlevel.checkpoint)


async def test_outside_a_stage_a_stream_passes_through() -> None:
    got = [c async for c in record_stream("model", {}, three_chunks)]
    assert isinstance(got[-1], ModelReply)  # not dumped: nothing records it


async def test_a_streaming_stage_replays_from_its_stored_event() -> None:
    calls = []

    def source() -> AsyncIterator[Chunk]:
        calls.append(1)
        return three_chunks()

    @stage(reads={"out"}, writes={"out"}, next=L.FINISHED, name="talk")
    async def talk(view: StateView[Box]) -> Patch:
        text = ""
        async for chunk in record_stream("model", {"say": "hi"}, source, returns=Chunk):
            if isinstance(chunk, ReplyDelta):
                text += chunk.text
        return Patch(out=(text,))

    machine = Machine(
        name="stream",
        state_type=Box,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: talk},
    )
    async with AgentSystem() as agents:  # ./arkhon-rheo.db in the test's tmp_path
        result = await agents.run(machine, Box(), session_id="s1")
        assert result.exit_reason is ExitReason.FINISHED, result.failure
        report = await agents.stored(machine, "s1").replay(reexecute=True)
    assert isinstance(result.state, Box)
    assert result.state.out == ("Hello",)
    assert report.ok, report.divergence
    assert calls == [1]  # the replay streamed from the record


async def test_an_error_recorded_under_its_old_top_level_name_replays_as_its_class() -> None:
    # Recorded before the error tree moved to arkhon_rheo.errors (and left the top level).
    seen: list[Any] = []
    with CallRecorder() as recorder, pytest.raises(Transient, match="dropped"):
        await _drain(seen)
    (record,) = recorder.finished()
    for old_name, cls in (
        ("arkhon_rheo.Transient", Transient),
        ("arkhon_rheo.MailboxFull", MailboxFull),
    ):
        old = {**record, "error": {**record["error"], "type": old_name}}
        with CallPlayback([old]), pytest.raises(cls):
            await _drain([])
