"""A tool's context argument: injected by the toolbox, never in the model's schema or arguments."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.protocols import ModelReply, ToolCall, ToolMessage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Sandbox, Toolbox, ToolContext, tool

pytestmark = pytest.mark.anyio

#: What the context-taking tools below were given, call after call.
SEEN: list[ToolContext] = []


@tool
async def note(text: str, ctx: ToolContext) -> str:
    """Note a text down.

    Args:
        text: What to note.
        ctx: The call's context (the model never sees it).
    """
    SEEN.append(ctx)
    return f"noted {text!r} in {ctx.session_id} at step {ctx.step}"


@tool(thread=True)
def note_in_thread(ctx: Annotated[ToolContext, "injected"], /, text: str = "") -> str:
    """Note a text down, from a worker thread."""
    SEEN.append(ctx)
    return text.upper()


def call(name: str, arguments: dict[str, Any], id: str) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments))


@pytest.fixture(autouse=True)
def _forget() -> None:
    SEEN.clear()


def test_the_context_is_not_in_the_schema_the_model_sees() -> None:
    for one in (note, note_in_thread):
        assert one.takes_context
        parameters = one.spec.parameters
        assert "ctx" not in parameters["properties"]
        assert "ctx" not in parameters.get("required", [])
        assert "ctx" not in one.arguments.model_fields
    assert note.spec.parameters["properties"] == {
        "text": {"type": "string", "description": "What to note."}
    }
    assert note.spec.parameters["required"] == ["text"]


async def test_the_model_cannot_send_the_context_and_validation_ignores_it() -> None:
    box = Toolbox(note)
    answer = await box.call(call("note", {"text": "x", "ctx": {"session_id": "forged"}}, "c1"))
    assert answer.is_error
    assert "ctx: not a parameter of this tool" in answer.content
    assert SEEN == []
    note.validate({"text": "x"})  # valid without it


async def test_outside_a_session_the_context_has_the_call_id_and_no_session() -> None:
    answer = await Toolbox(note, note_in_thread).call(call("note", {"text": "x"}, "c9"))
    assert not answer.is_error
    (seen,) = SEEN
    assert seen == ToolContext(session_id=None, step=None, call_id="c9", resources={})


async def test_a_tool_in_an_agent_gets_its_session_step_call_id_and_resources() -> None:
    http = object()  # any object: only async context managers are opened
    model = ScriptedModel(
        [
            [
                call("note", {"text": "a"}, "call-a"),
                call("note_in_thread", {"text": "b"}, "call-b"),
            ],
            call("note", {"text": "c"}, "call-c"),
            "done",
        ]
    )
    agent = react_agent(model, [note, note_in_thread], resources={"http": http})
    async with AgentSystem(path=None) as system:
        handle = await system.start(agent, ReactState(task="go"), session_id="s1")
        result = await handle.result()
        history = await handle.history()
    assert result.ok, result.failure
    by_call = {ctx.call_id: ctx for ctx in SEEN}
    assert set(by_call) == {"call-a", "call-b", "call-c"}
    assert {ctx.session_id for ctx in SEEN} == {"s1"}
    acts = [event.seq for event in history if event.stage == "act"]
    assert len(acts) == 2
    assert by_call["call-a"].step == by_call["call-b"].step == acts[0]
    assert by_call["call-c"].step == acts[1]
    for ctx in SEEN:
        assert ctx.resources == {"model": model, "http": http}
        with pytest.raises(TypeError):
            ctx.resources["other"] = 1  # type: ignore[index]
    results = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert results[0].content == f"noted 'a' in s1 at step {acts[0]}"
    assert results[1].content == "B"


async def test_a_replay_answers_a_context_taking_tool_from_its_record(tmp_path: Any) -> None:
    model = ScriptedModel([call("note", {"text": "a"}, "c1"), "done"])
    agent = react_agent(model, [note])
    async with AgentSystem(path=tmp_path / "s.db") as system:
        result = await system.run(agent, ReactState(task="go"), session_id="r")
        assert result.ok
        report = await system.stored(agent, "r").replay(reexecute=True)
    assert report.ok, report.divergence
    assert len(SEEN) == 1  # the re-execution did not run the tool again


def test_a_sandboxed_tool_cannot_declare_a_context() -> None:
    with pytest.raises(ConfigurationError, match="declares a ToolContext parameter"):
        tool(sandbox=Sandbox())(_sandboxed)


def _sandboxed(text: str, ctx: ToolContext) -> str:
    """A tool that would like a context in its sandbox."""
    return text


def test_react_agent_keeps_the_names_it_declares_itself() -> None:
    model = ScriptedModel([ModelReply.model_construct()])
    with pytest.raises(ConfigurationError, match=r"resources names \['model'\]"):
        react_agent(model, resources={"model": object()})
    agent = react_agent(model, resources={"db": 1})
    assert dict(agent.resources) == {"model": model, "db": 1}
