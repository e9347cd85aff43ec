"""Streaming: transition events and the partial output stages `emit`, live, never blocking."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Lifecycle,
    Machine,
    Partial,
    Patch,
    SessionHandle,
    StateView,
    Transient,
    TransitionEvent,
    emit,
    stage,
)
from arkhon_rheo.protocols import EventKind, SessionStreamStatistics
from arkhon_rheo.supervision import Backoff

L = Lifecycle
pytestmark = pytest.mark.anyio


def System(**options: Any) -> AgentSystem:
    return AgentSystem(path=None, backoff=Backoff(base=0.0), **options)


class ChatState(AgentState):
    lifecycle: Lifecycle = L.THINKING
    thought: str = ""
    answer: str = ""


Body = Callable[[], Awaitable[str]]


def chat_machine(think: Body, answer: Body) -> Machine[ChatState]:
    """THINKING (``think`` streams the thought) -> OBSERVING (``answer``) -> FINISHED."""

    @stage(writes={"thought"}, next=L.OBSERVING)
    async def think_stage(view: StateView[ChatState]) -> Patch:
        return Patch(thought=await think())

    @stage(writes={"answer"}, next=L.FINISHED)
    async def answer_stage(view: StateView[ChatState]) -> Patch:
        return Patch(answer=await answer())

    return Machine(
        name="chat",
        state_type=ChatState,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.OBSERVING}, L.OBSERVING: {L.FINISHED}},
        stages={L.THINKING: think_stage, L.OBSERVING: answer_stage},
        invariants={L.FINISHED: [lambda s: bool(s.answer)]},
    )


def streamer(*pieces: str, wait: anyio.Event | None = None, paced: bool = False) -> Body:
    """A body that waits for ``wait`` (if given), emits each piece, returns them joined.

    ``paced``: after each piece it lets every other task run until all are
    blocked, as a model stream waiting on the network would.
    """

    async def body() -> str:
        if wait is not None:
            await wait.wait()
        for piece in pieces:
            emit(piece)
            if paced:
                await wait_all_tasks_blocked()
        return "".join(pieces)

    return body


def key(item: TransitionEvent | Partial) -> tuple[Any, ...]:
    if isinstance(item, Partial):
        return ("partial", item.stage, item.seq, item.attempt, item.position, item.data)
    return ("event", item.stage, item.seq, item.attempt)


async def test_subscribers_get_every_delta_in_order_interleaved_with_the_events() -> None:
    go = anyio.Event()
    machine = chat_machine(streamer("Thi", "nk", "ing", wait=go), streamer("4", "2"))
    async with System() as system:
        handle: SessionHandle[ChatState] = await system.start(machine, ChatState())
        combined = handle.stream()
        first, second = handle.partials(), handle.partials()
        go.set()
        result = await handle.result()
        items = [item async for item in combined]
        partials = [item async for item in first]
        assert [p.data for p in partials] == ["Thi", "nk", "ing", "4", "2"]
        assert [p.data async for p in second] == ["Thi", "nk", "ing", "4", "2"]
    assert [key(item) for item in items] == [
        ("partial", "think_stage", 1, 1, 0, "Thi"),
        ("partial", "think_stage", 1, 1, 1, "nk"),
        ("partial", "think_stage", 1, 1, 2, "ing"),
        ("event", "think_stage", 1, 1),
        ("partial", "answer_stage", 2, 1, 0, "4"),
        ("partial", "answer_stage", 2, 1, 1, "2"),
        ("event", "answer_stage", 2, 1),
    ]
    assert all(p.session_id == handle.session_id and p.dropped == 0 for p in partials)
    # The full reply is in the committed state, whatever the subscribers saw.
    assert (result.state.thought, result.state.answer) == ("Thinking", "42")
    assert first.statistics() == SessionStreamStatistics(
        received=5, dropped=0, buffered=0, capacity=256, open=False
    )


async def test_a_live_consumer_sees_each_delta_before_the_commit_that_follows_it() -> None:
    go = anyio.Event()
    machine = chat_machine(streamer("a", "b", wait=go, paced=True), streamer("c", paced=True))
    seen: list[tuple[Any, ...]] = []
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stream = handle.stream(capacity=1)  # read as fast as it comes: nothing lost

        async def consume() -> None:
            async for item in stream:
                seen.append(key(item))
                if isinstance(item, Partial):
                    # The stage has not returned yet when its delta is read.
                    assert len(await handle.history()) < item.seq

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await wait_all_tasks_blocked()
            go.set()
        assert stream.statistics().dropped == 0
    assert [k[0] for k in seen] == ["partial", "partial", "event", "partial", "event"]


async def test_a_subscriber_that_never_reads_blocks_no_commit() -> None:
    pieces = [str(n) for n in range(10)]
    go = anyio.Event()
    machine = chat_machine(streamer(*pieces, wait=go), streamer("done"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stalled = handle.partials(capacity=2)
        combined = handle.stream(capacity=2)
        events = handle.events()  # an events() iterator never advanced
        go.set()
        with anyio.fail_after(10):  # a guard against a hang, not a timing check
            result = await handle.result()
        assert result.exit_reason is ExitReason.FINISHED
        assert result.state.thought == "".join(pieces)
        assert stalled.statistics() == SessionStreamStatistics(
            received=0, dropped=9, buffered=2, capacity=2, open=False
        )
        # What was buffered is still delivered; then the iterator ends.
        assert [p.data async for p in stalled] == ["0", "1"]
        assert [key(item)[0] for item in [item async for item in combined]] == [
            "partial",
            "partial",
            "event",
            "event",
        ]
        assert combined.statistics().dropped == 9
        assert [event.seq async for event in events] == [1, 2]


async def test_the_next_item_after_a_gap_says_how_many_were_lost() -> None:
    go, more = anyio.Event(), anyio.Event()

    async def think() -> str:
        await go.wait()
        for piece in "abcde":
            emit(piece)
        await more.wait()
        emit("f")
        return "abcdef"

    machine = chat_machine(think, streamer("ok"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stream = handle.partials(capacity=2)
        go.set()
        await wait_all_tasks_blocked()  # the stage emitted five and waits
        assert [p.data for p in (stream.receive_nowait(), stream.receive_nowait())] == ["a", "b"]
        with pytest.raises(anyio.WouldBlock):
            stream.receive_nowait()
        more.set()
        after_gap = await stream.receive()
        assert (after_gap.data, after_gap.position, after_gap.dropped) == ("f", 5, 3)
        assert stream.statistics().dropped == 3
        assert (await handle.result()).state.thought == "abcdef"
        stream.close()


async def test_a_late_subscriber_gets_only_new_deltas() -> None:
    half, rest = anyio.Event(), anyio.Event()

    async def think() -> str:
        emit("a")
        emit("b")
        await half.wait()
        emit("c")
        emit("d")
        await rest.wait()
        return "abcd"

    machine = chat_machine(think, streamer("e"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        await wait_all_tasks_blocked()  # "a" and "b" went out to nobody
        early = handle.partials()
        await wait_all_tasks_blocked()
        half.set()
        await wait_all_tasks_blocked()  # "c" and "d" went out to the early one only
        late = handle.stream()
        rest.set()
        await handle.result()
        assert [(p.data, p.position) async for p in early] == [("c", 2), ("d", 3), ("e", 0)]
        items = [key(item) async for item in late]
    # The combined stream still has every event, from the first.
    assert [k[0] for k in items] == ["event", "partial", "event"]
    assert items[1][4:] == (0, "e")


async def test_iterators_end_when_the_session_ends() -> None:
    machine = chat_machine(streamer("x"), streamer("y"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        async with handle.partials() as stream:
            got = [p.data async for p in stream]  # ends by itself at the session's end
        assert handle.done
        assert got in (["x", "y"], ["y"], [])  # depending on when it subscribed
        # Subscribing to an ended session: partials end at once, stream() has the events.
        assert [p async for p in handle.partials()] == []
        assert [item.seq async for item in handle.stream()] == [1, 2]

        # A cancelled session ends its iterators too.
        never = anyio.Event()
        cancelled = await system.start(
            chat_machine(streamer(wait=never), streamer("z")), ChatState()
        )
        stream = cancelled.partials()
        await wait_all_tasks_blocked()
        cancelled.cancel()
        assert [p async for p in stream] == []
        assert (await cancelled.result()).exit_reason is ExitReason.CANCELLED


async def test_closing_a_subscription_unsubscribes_it() -> None:
    go = anyio.Event()
    machine = chat_machine(streamer("a", wait=go), streamer("b"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stream = handle.partials()
        stream.close()
        go.set()
        await handle.result()
        assert stream.statistics().received == 0
        assert stream.statistics().dropped == 0
        assert [p async for p in stream] == []
        with pytest.raises(ConfigurationError, match="capacity"):
            handle.partials(capacity=0)


async def test_emit_outside_a_stage_does_nothing() -> None:
    emit("nobody is listening")  # no session, no error
    captured: list[contextvars.Context] = []
    hold = anyio.Event()

    async def think() -> str:
        captured.append(contextvars.copy_context())  # the stage's scope, kept past its return
        emit("in")
        return "in"

    async def answer() -> str:
        await hold.wait()
        return "out"

    machine = chat_machine(think, answer)
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stream = handle.partials()
        await wait_all_tasks_blocked()  # think has returned; answer waits
        captured[0].run(emit, "after the stage returned")
        hold.set()
        await handle.result()
        assert [p.data async for p in stream] in (["in"], [])
        assert stream.statistics().dropped == 0


async def test_deltas_of_a_failed_attempt_carry_their_attempt() -> None:
    go = anyio.Event()
    attempts: list[int] = []

    async def think() -> str:
        await go.wait()
        attempts.append(1)
        emit("dra")
        if len(attempts) == 1:
            emit("ft")
            raise Transient("the model hung up")
        emit("wn")
        return "drawn"

    machine = chat_machine(think, streamer("ok"))
    async with System() as system:
        handle = await system.start(machine, ChatState())
        stream = handle.stream()
        go.set()
        result = await handle.result()
        items = [item async for item in stream]
    assert [key(item) for item in items[:5]] == [
        ("partial", "think_stage", 1, 1, 0, "dra"),
        ("partial", "think_stage", 1, 1, 1, "ft"),
        ("partial", "think_stage", 1, 2, 0, "dra"),
        ("partial", "think_stage", 1, 2, 1, "wn"),
        ("event", "think_stage", 1, 2),
    ]
    assert result.retries == 1
    assert result.state.thought == "drawn"
    # What a consumer keeps: the partials of the attempt its step committed.
    committed = {item.seq: item.attempt for item in items if isinstance(item, TransitionEvent)}
    kept = [p.data for p in items if isinstance(p, Partial) and committed[p.seq] == p.attempt]
    assert "".join(kept[:2]) == result.state.thought
    assert items[4].kind is EventKind.STEP  # type: ignore[union-attr]
