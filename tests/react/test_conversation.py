"""Conversational ReAct agents: answer, park, take the next user message, close."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason, MemoryStore
from arkhon_rheo.errors import MessageRefused, SessionError
from arkhon_rheo.protocols import Lifecycle, ToolCall, UserMessage
from arkhon_rheo.react import Close, Conversation, ReactState, StopReason, UserInput, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def chat_agent(model: ScriptedModel) -> object:
    return react_agent(model, [add], conversational=True, name="chat")


async def test_three_turns_then_close_keep_one_conversation(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            "Hello! How can I help?",
            ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}'),
            "2 + 3 = 5.",
            "You're welcome.",
        ]
    )
    agent = react_agent(model, [add], conversational=True, name="chat")
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        chat = Conversation(system, agent, session_id="c1")
        assert await chat.start("hi") == "Hello! How can I help?"
        record = await system.stored(agent, "c1").record()
        assert record.status == "waiting"
        assert record.waiting is not None
        assert record.waiting["stage"] == "listen"
        assert await chat.say("what is 2 + 3?") == "2 + 3 = 5."
        assert await chat.say("thanks") == "You're welcome."
        await chat.close()
        state = await system.stored(agent, "c1").state()
        assert state.lifecycle is Lifecycle.FINISHED
        assert state.exit is StopReason.CLOSED
        assert state.answer == "You're welcome."
        users = [m.content for m in state.messages if isinstance(m, UserMessage)]
        assert users == ["hi", "what is 2 + 3?", "thanks"]
        # The model saw the whole conversation on each turn.
        assert len(model.requests[-1].messages) > len(model.requests[0].messages)
        report = await system.stored(agent, "c1").replay(reexecute=True)
        assert report.ok, report.divergence
        with pytest.raises(MessageRefused, match="has ended"):
            await chat.say("are you there?")


async def test_a_conversation_goes_on_in_another_system() -> None:
    model = ScriptedModel(["first", "second"])
    agent = react_agent(model, conversational=True, name="chat")
    async with MemoryStore() as store:
        async with AgentSystem(store=store) as system:
            assert await Conversation(system, agent).start("one") == "first"
            (session_id,) = [r.session_id for r in await store.sessions()]
        async with AgentSystem(store=store) as system:
            chat = Conversation(system, agent, session_id=session_id)
            assert await chat.say("two") == "second"


async def test_a_conversational_agent_parks_between_turns_and_takes_raw_messages() -> None:
    agent = react_agent(ScriptedModel(["a", "b"]), conversational=True, name="chat")
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        result = await system.run(agent, ReactState(task="x"), session_id="s")
        assert result.exit_reason is ExitReason.WAITING
        assert result.ok
        assert result.state.lifecycle is Lifecycle.OBSERVING
        sent = await system.send(agent, "s", {"kind": "user_input", "text": "y"})
        assert sent.handle is not None
        assert (await sent.handle.result()).state.answer == "b"
        with pytest.raises(MessageRefused, match="user_input message is invalid: text"):
            await system.send(agent, "s", UserInput.model_construct(text=""))
        await system.send(agent, "s", Close())


async def test_conversation_refuses_an_agent_that_does_not_converse() -> None:
    agent = react_agent(ScriptedModel(["a"]), name="plain")
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        with pytest.raises(ConfigurationError, match="conversational=True"):
            Conversation(system, agent)
        chat = Conversation(system, react_agent(ScriptedModel([]), conversational=True))
        with pytest.raises(SessionError, match="start"):
            await chat.say("hello?")
