"""Run policies and effects of an MCP server's tools, against a real MCP server.

The server (`tests/support/mcp_server.py`) sends "emails": ``send_email`` keeps
a count by recipient, which ``sent`` reads back, so a test sees how many times
a call really reached the server. Every test runs on asyncio and trio.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason
from arkhon_rheo.errors import InvariantViolation
from arkhon_rheo.protocols import EffectStatus, ToolMessage, ToolSpec
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import RunPolicy, ToolCallHeld, tool
from tests.react.test_effects import CrashAfterFinish
from tests.tools.test_mcp import call, server_of, shared_url, toolbox, transports

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.tools import MCPToolbox

__all__ = ["shared_url"]  # the fixture, shared with test_mcp

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator 'http(x|core)2[.]:ResourceWarning"),
]


def recipient() -> str:
    """An address no other test sends to (the HTTP server is shared)."""
    return f"bob-{uuid.uuid4().hex[:8]}@example.com"


async def count(tools: MCPToolbox, to: str) -> int:
    """How many emails the server sent to ``to``."""
    answer = await tools.call(call("sent", {"to": to}, id="count"))
    return int(json.loads(answer.content)["result"])


@transports
async def test_a_server_tool_to_approve_pauses_the_agent_and_runs_once_approved(
    transport: str, shared_url: str, tmp_path: Path
) -> None:
    to = recipient()
    email = {"to": to, "subject": "hi"}
    model = ScriptedModel([call("send_email", email), call("sent", {"to": to}, id="c2"), "sent"])
    tools = toolbox(transport, server_of(transport, shared_url), policies={"send_email": "approve"})
    assert tools.may_hold
    agent = react_agent(model, tools)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        paused = await system.run(agent, ReactState(task="mail bob"), session_id="s")
        assert paused.exit_reason is ExitReason.PAUSED
        assert await count(tools, to) == 0  # not sent before a human approved it
        assert tools.policy("send_email") is RunPolicy.APPROVE
        assert tools.policy("sent") is RunPolicy.ALLOW
        stored = system.stored(agent, "s")
        waiting = (await stored.record()).waiting
        assert waiting is not None
        assert waiting["gate"] == "tool call"
        question = waiting["question"]
        assert (question["tool"], question["reason"], question["arguments"]) == (
            "send_email",
            "approval",
            email,
        )
        assert question["schema"]["properties"]["to"]["type"] == "string"
        result = await (await stored.approve()).result()
        assert await count(tools, to) == 1
        report = await stored.replay(reexecute=True)  # answered from the record
        assert await count(tools, to) == 1
    assert result.ok, result.failure
    answers = [m.content for m in result.state.messages if isinstance(m, ToolMessage)]
    assert answers == [f'{{"result":"sent \'hi\' to {to}"}}', '{"result":1}']
    assert report.ok, report.divergence


@transports
async def test_an_edit_that_does_not_fit_the_servers_schema_is_refused_at_the_approval(
    transport: str, shared_url: str, tmp_path: Path
) -> None:
    to = recipient()
    model = ScriptedModel([call("send_email", {"to": to, "subject": "hi"}), "sent"])
    tools = toolbox(transport, server_of(transport, shared_url), policies={"send_email": "approve"})
    agent = react_agent(model, tools)
    async with AgentSystem(path=tmp_path / "a.db") as system:
        paused = await system.run(agent, ReactState(task="mail bob"), session_id="s")
        assert paused.exit_reason is ExitReason.PAUSED
        stored = system.stored(agent, "s")
        before = await stored.record()
        # Each edit is checked against the server's input schema when it is given:
        # refused, naming the tool and the field, and nothing is stored.
        for edit, field in (
            ({"to": 7, "subject": "hi"}, "to"),  # the wrong type
            ({"to": to}, "subject"),  # a required field left out
        ):
            with pytest.raises(InvariantViolation, match=f"'send_email'.*{field}"):
                await stored.approve(edit)
            after = await stored.record()
            assert (after.status, after.last_seq) == ("paused", before.last_seq)
            assert after.waiting == before.waiting
        assert await count(tools, to) == 0  # no call reached the server
        result = await (await stored.approve({"to": to, "subject": "edited"})).result()
        assert await count(tools, to) == 1
    assert result.ok, result.failure
    answers = [m.content for m in result.state.messages if isinstance(m, ToolMessage)]
    assert answers == [f'{{"result":"sent \'edited\' to {to}"}}']


def test_a_server_tool_given_by_specs_is_checked_before_the_toolbox_opens() -> None:
    spec = ToolSpec(
        name="send_email",
        parameters={
            "type": "object",
            "properties": {"to": {"type": "string"}},
            "required": ["to"],
        },
    )
    tools = toolbox("stdio", None, specs=[spec], tools=[celsius])
    assert not tools.is_open
    assert "to" in tools.argument_problems("send_email", {"to": 7})
    assert tools.argument_problems("send_email", {"to": "bob"}) == ""
    assert "fahrenheit" in tools.argument_problems("celsius", {"fahrenheit": "hot"})
    assert tools.argument_problems("nothing", {"x": 1}) == ""


@tool
def celsius(fahrenheit: float) -> float:
    """Fahrenheit to Celsius."""
    return round((fahrenheit - 32) * 5 / 9, 1)


async def test_a_blocked_server_tool_is_not_offered_and_its_call_is_an_observation(
    shared_url: str,
) -> None:
    to = recipient()
    model = ScriptedModel([call("send_email", {"to": to, "subject": "hi"}), "could not"])
    tools = toolbox("http", shared_url, policies={"send_email": "block"})
    agent = react_agent(model, tools)
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="mail bob"))
        assert await count(tools, to) == 0
        offered = [spec.name for spec in tools.specs]
    assert result.ok, result.failure
    assert not tools.may_hold
    assert "send_email" not in offered
    assert "send_email" not in [spec.name for spec in model.requests[0].tools]
    (reply,) = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert reply.is_error
    assert reply.content == "tool 'send_email' is blocked here (its run policy); do without it"


async def test_the_default_policy_covers_the_tools_policies_do_not_name(shared_url: str) -> None:
    @tool
    def shout(text: str) -> str:
        """Say it louder."""
        return text.upper()

    to = recipient()
    tools = toolbox(
        "http",
        shared_url,
        tools=[shout],
        include=["send_email", "sent", "add"],
        policies={"sent": "allow", "add": "block", "shout": "approve"},
        default_policy="approve",
    )
    async with tools:
        assert [spec.name for spec in tools.specs] == ["shout", "send_email", "sent"]
        with pytest.raises(ToolCallHeld) as held:  # outside an agent: raised
            await tools.call(call("send_email", {"to": to, "subject": "x"}))
        assert held.value.reason == "approval"
        assert await count(tools, to) == 0
        approved = await tools.call(call("send_email", {"to": to, "subject": "x"}), approved=True)
        assert approved.content == f'{{"result":"sent \'x\' to {to}"}}'
        assert await count(tools, to) == 1
        with pytest.raises(ToolCallHeld):  # the Python tool's policy, as in any toolbox
            await tools.call(call("shout", {"text": "a"}))
        assert (await tools.call(call("add", {"a": 1, "b": 1}))).is_error


async def test_a_name_the_server_does_not_list_is_refused_when_it_opens(shared_url: str) -> None:
    unknown = toolbox("http", shared_url, policies={"forecast": "approve"})
    with pytest.raises(
        ConfigurationError,
        match=r"policies names \['forecast'\], which the MCP server .* does not list "
        r"\(nor is it one of its Python tools\) \(it lists: add, fail, .*send_email, sent\)",
    ):
        async with unknown:
            pass


async def test_a_server_tool_with_effects_is_ledgered_and_not_sent_again_after_a_crash(
    shared_url: str, tmp_path: Path
) -> None:
    to = recipient()
    email = {"to": to, "subject": "hi"}
    model = ScriptedModel([call("send_email", email), "done"])
    tools = toolbox("http", shared_url, effects={"send_email": "fail"})
    agent = react_agent(model, tools)
    db = tmp_path / "a.db"
    with anyio.CancelScope() as scope:  # the service stops once the answer is stored
        store = CrashAfterFinish(SQLiteStore(db), scope)
        async with store, AgentSystem(store=store) as system:
            await system.run(agent, ReactState(task="mail bob"), session_id="s")
    assert scope.cancelled_caught
    async with AgentSystem(path=db) as system:
        assert (await system.stored(agent, "s").record()).status != "finished"
        result = await (await system.resume(agent, "s")).result()
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
        assert await count(tools, to) == 1  # sent once: the ledger answered the resume
    assert result.ok, result.failure
    assert (entry.tool, entry.status, entry.attempts) == ("send_email", EffectStatus.DONE, 1)
    assert entry.arguments == email
    (reply,) = [m for m in result.state.messages if isinstance(m, ToolMessage)]
    assert reply.content == f'{{"result":"sent \'hi\' to {to}"}}'
