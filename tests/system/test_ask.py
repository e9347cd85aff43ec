"""`AgentSystem.ask`: the reply to one's own message, under concurrency, retries and limits."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, Machine, MemoryStore, Patch, SessionBusy
from arkhon_rheo.errors import ConfigurationError, MessageRefused, NoReply, SessionError
from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    ModelReply,
    Receive,
    ToolCall,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import (
    Calls,
    Close,
    Conversation,
    Limits,
    ReactState,
    StopReason,
    UserInput,
    react_agent,
)
from arkhon_rheo.system import Reply
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from arkhon_rheo import StateView

pytestmark = pytest.mark.anyio


class Echo:
    """A model that answers ``echo: <the user's last words>``; ``loop`` makes it call tools."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.inside = anyio.Event()
        self.hold = False

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        last = [m.content for m in messages if isinstance(m, UserMessage)][-1]
        if self.hold and last == "slow":
            self.inside.set()
            await self.release.wait()
        if last == "loop":  # a turn that never ends by itself: a tool call after another
            self.inside.set()
            calls = sum(isinstance(m, AssistantMessage) and bool(m.tool_calls) for m in messages)
            call = ToolCall(id=f"w{calls}", name="pause", arguments="{}")
            return ModelReply(message=AssistantMessage(tool_calls=(call,)))
        return ModelReply(message=AssistantMessage(content=f"echo: {last}"))


@tool
async def pause() -> str:
    """Wait a little."""
    await anyio.sleep(0.01)
    return "done"


def chat(model: Echo | None = None, **options: Any) -> Machine[ReactState]:
    return react_agent(model or Echo(), [pause], conversational=True, name="chat", **options)


async def test_each_of_many_concurrent_asks_gets_the_reply_to_its_own_message(
    tmp_path: Path,
) -> None:
    agent = chat()
    async with AgentSystem(path=tmp_path / "s.db") as system:
        talk = await Conversation.open(system, agent, "t")
        replies: dict[int, Reply[Any]] = {}

        async def one(i: int) -> None:
            replies[i] = await system.ask(agent, "t", UserInput(text=f"m{i}"))

        async with anyio.create_task_group() as group:
            for i in range(60):
                group.start_soon(one, i)
        assert {i: r.value for i, r in replies.items()} == {i: f"echo: m{i}" for i in range(60)}
        assert all(r.status == "waiting" and r.ok and not r.duplicate for r in replies.values())
        # Applied once each, in the order the inbox took them.
        messages = await system.store.messages("t")  # type: ignore[union-attr]
        assert len(messages) == 60
        users = [s.text for s in await talk.transcript() if s.role == "user"]
        by_position = [m.payload["text"] for m in sorted(messages, key=lambda m: m.position)]
        assert users == by_position


async def test_asking_again_with_the_same_id_returns_the_same_reply_and_applies_nothing() -> None:
    agent = chat()
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await Conversation.open(system, agent, "t")
        first = await system.ask(agent, "t", UserInput(text="one"), message_id="m1")
        await system.ask(agent, "t", UserInput(text="two"))
        again = await system.ask(agent, "t", UserInput(text="one"), message_id="m1")
        assert again.duplicate
        assert not first.duplicate
        assert (again.seq, again.applied_seq, again.value) == (
            first.seq,
            first.applied_seq,
            "echo: one",
        )
        assert [m.message_id for m in await store.messages("t")].count("m1") == 1
        users = [m for m in again.state.messages if isinstance(m, UserMessage)]
        assert [m.content for m in users] == ["one"]  # the state as of its own turn's end


async def test_a_timed_out_ask_leaves_its_message_and_asking_again_gets_the_reply() -> None:
    model = Echo()
    model.hold = True
    agent = chat(model)
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await Conversation.open(system, agent, "t")
        with pytest.raises(NoReply, match="ask again with message_id='s1'") as caught:
            await system.ask(agent, "t", UserInput(text="slow"), message_id="s1", timeout=0.05)
        assert caught.value.timed_out
        assert caught.value.message_id == "s1"
        model.release.set()
        reply = await system.ask(agent, "t", UserInput(text="slow"), message_id="s1")
        assert reply.value == "echo: slow"
        assert reply.duplicate
        assert len(await store.messages("t")) == 1


async def test_reject_refuses_a_message_while_a_turn_runs_and_stores_nothing() -> None:
    model = Echo()
    model.hold = True
    agent = chat(model)
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await Conversation.open(system, agent, "t")
        async with anyio.create_task_group() as group:
            group.start_soon(system.ask, agent, "t", UserInput(text="slow"))
            await model.inside.wait()
            with pytest.raises(SessionBusy, match="on_busy='reject': nothing was stored"):
                await system.ask(agent, "t", UserInput(text="now"), on_busy="reject")
            assert len(await store.messages("t")) == 1
            model.release.set()
        reply = await system.ask(agent, "t", UserInput(text="later"), on_busy="reject")
        assert reply.value == "echo: later"
        with pytest.raises(ConfigurationError, match="is not a policy"):
            await system.ask(agent, "t", UserInput(text="x"), on_busy="drop")


async def test_interrupt_cuts_the_turn_under_way_and_applies_the_new_message() -> None:
    model = Echo()
    agent = chat(model, limits=Limits(max_steps=10_000))
    async with MemoryStore() as store, AgentSystem(store=store, max_steps=100_000) as system:
        talk = await Conversation.open(system, agent, "t")
        await talk.say("hello")
        cut: list[Reply[Any]] = []
        async with anyio.create_task_group() as group:

            async def looping() -> None:
                cut.append(await system.ask(agent, "t", UserInput(text="loop")))

            group.start_soon(looping)
            await model.inside.wait()
            await anyio.sleep(0.05)  # a few tool calls in
            reply = await system.ask(agent, "t", UserInput(text="stop"), on_busy="interrupt")
        assert reply.value == "echo: stop"
        assert not reply.interrupted
        (looped,) = cut
        assert looped.interrupted
        assert not looped.ok
        assert looped.status == "waiting"
        assert looped.state.answer == "echo: hello"  # where the turn began
        with pytest.raises(SessionError, match="interrupted by a later message"):
            await talk.say("loop", message_id=looped.message_id)
        said = [(s.role, s.text) for s in await talk.transcript()]
        assert said == [
            ("user", "hello"),
            ("assistant", "echo: hello"),
            ("user", "stop"),
            ("assistant", "echo: stop"),
        ]
        history = await system.stored(agent, "t").history()
        (rollback,) = [e for e in history if e.info and e.info.get("interrupted_by")]
        assert rollback.info["interrupted_by"] == reply.message_id  # type: ignore[index]
        report = await system.stored(agent, "t").replay()
        assert report.ok, report.divergence


async def test_interrupt_without_a_message_cuts_the_turn_run_here() -> None:
    model = Echo()
    agent = chat(model, limits=Limits(max_steps=10_000))
    async with MemoryStore() as store, AgentSystem(store=store, max_steps=100_000) as system:
        talk = await Conversation.open(system, agent, "t")
        assert not system.interrupt("t", by="cancel-1")  # between turns: nothing to cut
        with pytest.raises(ConfigurationError, match="message id"):
            system.interrupt("t", by="")
        cut: list[Reply[Any]] = []
        async with anyio.create_task_group() as group:

            async def looping() -> None:
                cut.append(await system.ask(agent, "t", UserInput(text="loop")))

            group.start_soon(looping)
            await model.inside.wait()
            assert system.interrupt("t", by="cancel-1")
        (looped,) = cut
        assert looped.interrupted
        assert looped.status == "waiting"
        history = await system.stored(agent, "t").history()
        (rollback,) = [e for e in history if e.info and e.info.get("interrupted_by")]
        assert rollback.info["interrupted_by"] == "cancel-1"  # type: ignore[index]
        assert (await talk.ask("again")).value == "echo: again"


class Phase(enum.Enum):
    WAIT = "wait"
    DONE = "done"
    FAILED = "failed"


class Tally(AgentState):
    lifecycle: Phase = Phase.WAIT
    got: int = 0


class Add(BaseModel):
    n: int


class Collect(Receive[Tally], name="collect", reads={"got"}, writes={"got"}, accepts=(Add,)):
    async def apply(self, view: StateView[Tally], message: Add) -> Patch:
        return Patch(got=view.got + 1)

    def next(self, state: Tally) -> Phase:
        return Phase.WAIT


TALLY: Machine[Tally] = Machine(
    name="tally",
    state_type=Tally,
    initial=Phase.WAIT,
    transitions={Phase.WAIT: {Phase.WAIT, Phase.DONE}},
    stages={Phase.WAIT: Collect},
    terminal={Phase.DONE, Phase.FAILED},
    failed=Phase.FAILED,
    reply=lambda state: state.got,
)


async def test_a_burst_of_a_thousand_messages_is_applied_whole_and_never_ends_the_session(
    tmp_path: Path,
) -> None:
    async with AgentSystem(path=tmp_path / "s.db", max_steps=100) as system:
        await system.start(TALLY, Tally(), session_id="b")
        async with anyio.create_task_group() as group:
            for i in range(1000):
                group.start_soon(system.send, TALLY, "b", Add(n=i))
        reply = await system.ask(TALLY, "b", Add(n=-1))
        assert reply.value == 1001
        assert reply.status == "waiting"
        assert not await system.store.pending("b")  # type: ignore[union-attr]
        with anyio.fail_after(10):  # the reply comes at its turn's end; the park just after
            while (await system.stored(TALLY, "b").record()).status != "waiting":  # noqa: ASYNC110
                await anyio.sleep(0.01)


async def test_a_conversation_goes_on_past_max_steps_turns(tmp_path: Path) -> None:
    agent = chat(limits=Limits(max_steps=50))
    async with AgentSystem(path=tmp_path / "s.db", max_steps=50) as system:
        talk = await Conversation.open(system, agent, "long")
        for turn in range(60):
            assert await talk.say(f"turn {turn}") == f"echo: turn {turn}"
        reply = await talk.ask("one more")
        assert reply.status == "waiting"
        assert reply.state.turns == 1
        assert len(await talk.transcript()) == 122


async def test_a_turn_out_of_model_turns_ends_with_a_typed_reason_and_the_session_waits() -> None:
    agent = chat(limits=Limits(max_steps=3))
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        talk = await Conversation.open(system, agent, "t")
        reply = await talk.ask("loop")
        assert reply.status == "waiting"
        assert reply.state.exit is StopReason.MAX_STEPS
        with pytest.raises(SessionError, match="without an answer \\(max_steps\\)"):
            await talk.say("loop")
        assert await talk.say("hello") == "echo: hello"


async def test_open_is_get_or_create_for_concurrent_callers() -> None:
    agent = chat()
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        said: list[str] = []

        async def caller(i: int) -> None:
            talk = await Conversation.open(system, agent, "shared")
            said.append(await talk.say(f"hi {i}"))

        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(caller, i)
        assert sorted(said) == sorted(f"echo: hi {i}" for i in range(10))
        assert len(await store.sessions()) == 1


async def test_close_ends_the_thread_and_later_asks_are_refused() -> None:
    agent = chat()
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        talk = await Conversation.open(system, agent, "t")
        assert await talk.say("hi") == "echo: hi"
        closed = await system.ask(agent, "t", Close(), message_id="bye")
        again = await system.ask(agent, "t", Close(), message_id="bye")
        assert closed.status == again.status == "finished"
        assert again.duplicate
        assert again.seq == closed.seq
        with pytest.raises(MessageRefused, match="has ended"):
            await talk.say("are you there?")


async def test_ask_refuses_bad_arguments_before_storing_anything() -> None:
    agent = chat()
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await Conversation.open(system, agent, "t")
        with pytest.raises(ConfigurationError, match="positive number"):
            await system.ask(agent, "t", UserInput(text="x"), timeout=0)
        with pytest.raises(ConfigurationError, match="non-empty string"):
            await system.ask(agent, "t", UserInput(text="x"), message_id="")
        with pytest.raises(ConfigurationError, match="not asked"):
            await system.ask(agent, "t", {"kind": "approve"})
        with pytest.raises(MessageRefused, match="nothing was stored"):
            await system.ask(agent, "t", {"kind": "nope"})
        assert not await store.messages("t")


async def test_a_stream_yields_the_turns_deltas_then_the_reply() -> None:
    from tests.support.ask_agent import Repeat

    agent = react_agent(
        Repeat(),
        conversational=True,
        name="streamed",
        calls=Calls(stream=True),
    )
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        talk = await Conversation.open(system, agent, "t")
        pieces = [piece async for piece in talk.stream("one two three")]
        assert pieces == ["You", " said:", " one", " two", " three"]
        assert await talk.say("again") == "You said: again"


def test_a_reply_reads_as_text() -> None:
    reply = Reply("s", "m", 1, 2, 3, Tally(), "waiting", 7)
    assert reply.text == "7"
    assert reply.ok
    assert Reply("s", "m", 1, 2, 3, Tally(), "failed", None).text == ""


async def test_an_ask_goes_on_with_a_session_its_last_system_stopped(tmp_path: Path) -> None:
    model = Echo()
    model.hold = True
    agent = chat(model)
    path = tmp_path / "s.db"
    async with AgentSystem(path=path) as system:
        await Conversation.open(system, agent, "t")
        async with anyio.create_task_group() as group:
            group.start_soon(system.send, agent, "t", UserInput(text="slow"))
            await model.inside.wait()
            handle = system.session("t")
            handle.cancel()  # as a deploy's shutdown stops it mid-turn
            await handle.result()
        record = await system.stored(agent, "t").record()
        assert record.status == "cancelled"
    model.hold = False
    async with AgentSystem(path=path) as system:  # a later process: no recover() called
        reply = await system.ask(agent, "t", UserInput(text="back"), timeout=30)
        assert reply.value == "echo: back"
        said = [s.text for s in await Conversation(system, agent, session_id="t").transcript()]
        assert said == ["slow", "echo: slow", "back", "echo: back"]
