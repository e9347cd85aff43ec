"""Once-only effects in a ReAct agent: the ledger, the crash policies, and the run policies.

A tool with side effects has its call's intent committed before it runs and its
answer once it returns: a call whose answer is stored is never run again (a
crash after the tool returned and before the step committed); one that started
and never finished (a crash in the middle of it) is run again, fails the
session, or waits for a human at the ``"tool call"`` gate, as its tool says.
Run policies: a tool whose calls need approval holds each at the same gate
first, with editable arguments checked against its schema; a blocked tool is
not offered and never runs. "A crash" here is the service cancelled in the
middle (the SIGKILL test is ``tests/react/test_effects_crash.py``).
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, ExitReason, MemoryStore
from arkhon_rheo.errors import InvariantViolation, MessageRefused
from arkhon_rheo.protocols import AssistantMessage, EffectStatus, ModelReply, ToolCall, Usage
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import (
    AmbiguousEffect,
    Effect,
    Toolbox,
    ToolCallHeld,
    ToolContext,
    idempotency_key,
    tool,
)

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio


def call(name: str, arguments: dict[str, Any], id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments))


def calls(*made: ToolCall) -> ModelReply:
    message = AssistantMessage(content=None, tool_calls=made)
    return ModelReply(message=message, finish_reason="tool_calls", usage=Usage(), model="m")


class Outbox:
    """A side-effecting tool's world: every email it sent, and the keys it sent them with.

    ``hang`` makes the next call hang after it sent (a crash lands mid-call);
    ``entered`` is set once a call has sent.
    """

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []
        self.hang = False
        self.entered = anyio.Event()

    def tool(self, effect: Effect | str = "read", run: str = "allow") -> Any:
        outbox = self

        @tool(effect=effect, run=run)
        async def send(to: str, ctx: ToolContext) -> str:
            """Send an email.

            Args:
                to: Who gets it.
            """
            outbox.sent.append((to, ctx.idempotency_key))
            outbox.entered.set()
            if outbox.hang:
                await anyio.sleep_forever()
            return f"sent to {to}"

        return send


async def crash_mid_call(db: Path, agent: Any, outbox: Outbox, session_id: str = "s") -> None:
    """Start the agent and stop the service in the middle of its tool call."""
    outbox.hang = True
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(agent, ReactState(task="mail bob"), session_id=session_id)
            await outbox.entered.wait()
            scope.cancel()
    outbox.hang = False


async def test_a_side_effecting_call_is_ledgered_and_replays_without_the_tool(
    tmp_path: Path,
) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("ask")])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="mail bob"), session_id="s")
        assert result.ok, result.failure
        (effect,) = await system.store.effects("s")  # type: ignore[union-attr]
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert (effect.status, effect.tool) == (EffectStatus.DONE, "send")
    assert effect.arguments == {"to": "bob"}
    assert effect.result == {"content": "sent to bob", "is_error": False}
    # The key the tool saw is the ledger's, made from the session, the asking step, the call.
    ((_, key),) = outbox.sent
    assert key == effect.key
    assert key == idempotency_key("s", result.state.pending_step or 0, "c1")
    assert result.state.pending_step == 2  # the think step after the start step


class CrashAfterFinish:
    """A store that stops the service right after the first effect's answer is stored."""

    def __init__(self, inner: Store, scope: anyio.CancelScope) -> None:
        self.inner, self.scope = inner, scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def __aenter__(self) -> Any:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    async def finish_effect(self, *args: Any, **kwargs: Any) -> Any:
        done = await self.inner.finish_effect(*args, **kwargs)
        self.scope.cancel()  # before the act step commits
        return done


@pytest.mark.parametrize("effect", ["idempotent", "ask", "fail"])
async def test_a_completed_effect_is_never_run_again(tmp_path: Path, effect: str) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool(effect)])
    db = tmp_path / "a.db"
    with anyio.CancelScope() as scope:
        store = CrashAfterFinish(SQLiteStore(db), scope)
        async with store, AgentSystem(store=store) as system:
            await system.run(agent, ReactState(task="mail bob"), session_id="s")
    assert scope.cancelled_caught
    async with AgentSystem(path=db) as system:
        record = await system.stored(agent, "s").record()
        assert record.status != "finished"  # the act step had not committed
        result = await (await system.resume(agent, "s")).result()
        report = await system.stored(agent, "s").replay(reexecute=True)
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
    assert result.ok, result.failure
    assert outbox.sent == [("bob", entry.key)]  # once
    assert result.state.messages[-2].content == "sent to bob"  # the stored answer
    assert (entry.status, entry.attempts) == (EffectStatus.DONE, 1)
    assert report.ok, report.divergence


async def test_an_idempotent_call_that_may_have_happened_runs_again_with_its_key(
    tmp_path: Path,
) -> None:
    outbox = Outbox()
    agent = react_agent(
        ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("idempotent")]
    )
    db = tmp_path / "a.db"
    await crash_mid_call(db, agent, outbox)
    async with AgentSystem(path=db) as system:
        result = await (await system.resume(agent, "s")).result()
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert result.ok, result.failure
    # Run again, with the same key: the service it calls knows it is the same call.
    assert outbox.sent == [("bob", entry.key), ("bob", entry.key)]
    assert (entry.status, entry.attempts) == (EffectStatus.DONE, 2)
    assert report.ok, report.divergence


async def test_a_call_that_may_have_happened_fails_the_session_if_its_tool_says_so(
    tmp_path: Path,
) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("fail")])
    db = tmp_path / "a.db"
    await crash_mid_call(db, agent, outbox)
    async with AgentSystem(path=db) as system:
        result = await (await system.resume(agent, "s")).result()
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
    assert not result.ok
    assert result.failure is not None
    assert result.failure.error_type.endswith("AmbiguousEffect")
    assert "may or may not have happened" in result.failure.message
    assert len(outbox.sent) == 1
    assert entry.status is EffectStatus.STARTED


async def test_a_call_that_may_have_happened_waits_for_a_human_who_sees_and_edits_it(
    tmp_path: Path,
) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("ask")])
    db = tmp_path / "a.db"
    await crash_mid_call(db, agent, outbox)
    async with AgentSystem(path=db) as system:
        paused = await (await system.resume(agent, "s")).result()
        assert paused.exit_reason is ExitReason.PAUSED
        assert len(outbox.sent) == 1  # not run again on its own
        stored = system.stored(agent, "s")
        record = await stored.record()
        assert record.waiting is not None
        assert record.waiting["gate"] == "tool call"
        question = record.waiting["question"]
        assert (question["tool"], question["call_id"], question["reason"]) == (
            "send",
            "c1",
            "ambiguous",
        )
        assert question["arguments"] == {"to": "bob"}
        assert question["schema"]["properties"]["to"]["type"] == "string"
        # An edit its tool would refuse is refused before anything is stored.
        with pytest.raises(InvariantViolation, match=r"'send'.*to"):
            await stored.approve({"to": 7})
        with pytest.raises(MessageRefused):
            await stored.approve(["bob"])
        assert (await stored.record()).last_seq == record.last_seq
        result = await (await stored.approve({"to": "bob@example.com"})).result()
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
        report = await stored.replay(reexecute=True)
    assert result.ok, result.failure
    assert [to for to, _ in outbox.sent] == ["bob", "bob@example.com"]
    assert (entry.arguments, entry.attempts, entry.status) == (
        {"to": "bob@example.com"},
        2,
        EffectStatus.DONE,
    )
    assert result.state.held is None
    assert report.ok, report.divergence


async def test_a_human_lets_an_ambiguous_call_run_once_and_is_asked_again_if_cut_short(
    tmp_path: Path,
) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("ask")])
    db = tmp_path / "a.db"
    await crash_mid_call(db, agent, outbox)
    outbox.entered = anyio.Event()
    outbox.hang = True
    with anyio.CancelScope() as scope:  # the approved run is cut short too
        async with AgentSystem(path=db) as system:
            await (await system.resume(agent, "s")).result()
            await system.stored(agent, "s").approve()
            await outbox.entered.wait()
            scope.cancel()
    outbox.hang = False
    async with AgentSystem(path=db) as system:
        paused = await (await system.resume(agent, "s")).result()
        assert paused.exit_reason is ExitReason.PAUSED  # not run a third time on its own
        assert len(outbox.sent) == 2
        waiting = (await system.stored(agent, "s").record()).waiting
        assert waiting is not None
        assert (waiting["question"]["reason"], waiting["question"]["attempts"]) == ("ambiguous", 2)
        result = await (await system.stored(agent, "s").approve()).result()
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert result.ok, result.failure
    assert len(outbox.sent) == 3  # each run again by a human's decision, once
    assert (entry.attempts, entry.status) == (3, EffectStatus.DONE)
    assert report.ok, report.divergence


async def test_an_aborted_ambiguous_call_never_runs_again(tmp_path: Path) -> None:
    outbox = Outbox()
    agent = react_agent(ScriptedModel([call("send", {"to": "bob"}), "done"]), [outbox.tool("ask")])
    db = tmp_path / "a.db"
    await crash_mid_call(db, agent, outbox)
    async with AgentSystem(path=db) as system:
        await (await system.resume(agent, "s")).result()
        await system.stored(agent, "s").abort()
        assert (await system.stored(agent, "s").record()).status == "aborted"
    assert len(outbox.sent) == 1


@pytest.mark.parametrize("where", ["file", "memory", "none"])
async def test_a_tool_that_needs_approval_waits_before_it_runs(tmp_path: Path, where: str) -> None:
    outbox = Outbox()
    model = ScriptedModel([calls(call("send", {"to": "bob"}), call("look", {}, id="c2")), "done"])

    @tool
    async def look() -> str:
        """Look around."""
        return "nothing"

    agent = react_agent(model, [outbox.tool("fail", run="approve"), look])
    store = MemoryStore() if where == "memory" else None
    path = tmp_path / "a.db" if where == "file" else None
    async with contextlib.AsyncExitStack() as stack:
        if store is not None:
            await stack.enter_async_context(store)
        system = await stack.enter_async_context(AgentSystem(path=path, store=store))
        paused = await system.run(agent, ReactState(task="mail bob"), session_id="s")
        assert paused.exit_reason is ExitReason.PAUSED
        assert outbox.sent == []  # nothing of the turn ran
        assert paused.state.held is not None
        assert (paused.state.held.reason, dict(paused.state.held.arguments)) == (
            "approval",
            {"to": "bob"},
        )
        stored = system.stored(agent, "s")
        with pytest.raises(InvariantViolation):
            await stored.approve({"to": "bob", "cc": "eve"})  # not a parameter
        result = await (await stored.approve()).result()  # as shown
    assert result.ok, result.failure
    assert [to for to, _ in outbox.sent] == ["bob"]
    contents = [m.content for m in result.state.messages if m.role == "tool"]
    assert contents == ["sent to bob", "nothing"]
    assert (result.state.held, result.state.approval, result.state.approved) == (None, False, ())


async def test_two_calls_to_approve_in_one_turn_are_asked_one_at_a_time(tmp_path: Path) -> None:
    outbox = Outbox()
    model = ScriptedModel(
        [calls(call("send", {"to": "a"}), call("send", {"to": "b"}, id="c2")), "done"]
    )
    agent = react_agent(model, [outbox.tool(run="approve")])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        first = await system.run(agent, ReactState(task="mail"), session_id="s")
        assert first.state.held is not None
        assert first.state.held.call.id == "c1"
        stored = system.stored(agent, "s")
        second = await (await stored.approve({"to": "a2"})).result()
        assert second.exit_reason is ExitReason.PAUSED
        assert second.state.held is not None
        assert second.state.held.call.id == "c2"
        assert outbox.sent == []
        result = await (await stored.approve()).result()
        report = await stored.replay(reexecute=True)
    assert result.ok, result.failure
    assert sorted(to for to, _ in outbox.sent) == ["a2", "b"]  # run together, once each
    assert report.ok, report.divergence


async def test_a_blocked_tool_is_not_offered_and_never_runs() -> None:
    outbox = Outbox()
    model = ScriptedModel([call("send", {"to": "bob"}), "could not"])
    agent = react_agent(model, Toolbox(outbox.tool("ask"), policies={"send": "block"}))
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="mail bob"))
    assert result.ok, result.failure
    assert outbox.sent == []
    assert model.requests[0].tools == ()
    reply = next(m for m in result.state.messages if m.role == "tool")
    assert reply.is_error
    assert "blocked" in reply.content


async def test_a_toolbox_outside_an_agent_raises_what_holds_a_call() -> None:
    outbox = Outbox()
    box = Toolbox(outbox.tool(run="approve"))
    with pytest.raises(ToolCallHeld) as held:
        await box.call(call("send", {"to": "x"}))
    assert held.value.reason == "approval"
    message = await box.call(call("send", {"to": "x"}), approved=True)
    assert message.content == "sent to x"
    assert outbox.sent == [("x", None)]  # no session: no key


async def test_in_memory_each_call_has_its_own_effect_and_none_is_ambiguous() -> None:
    outbox = Outbox()
    agent = react_agent(
        ScriptedModel([call("send", {"to": "a"}), call("send", {"to": "b"}, id="c2"), "done"]),
        [outbox.tool("fail")],
    )
    store = MemoryStore()
    async with store, AgentSystem(store=store) as system:
        result = await system.run(agent, ReactState(task="mail"), session_id="s")
        entries = await store.effects("s")
    assert result.ok, result.failure
    assert [e.status for e in entries] == [EffectStatus.DONE, EffectStatus.DONE]
    assert len({e.key for e in entries}) == 2


async def test_a_timed_out_side_effect_is_ambiguous_and_its_policy_decides(
    tmp_path: Path,
) -> None:
    attempts: list[str | None] = []

    @tool(timeout=0.05, effect="fail")
    async def charge(cents: int, ctx: ToolContext) -> str:
        """Charge a card."""
        attempts.append(ctx.idempotency_key)
        await anyio.sleep_forever()
        return "charged"

    agent = react_agent(ScriptedModel([call("charge", {"cents": 5}), "done"]), [charge])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="charge"), session_id="s")
    assert not result.ok
    assert result.failure is not None
    assert "AmbiguousEffect" in result.failure.error_type
    assert len(attempts) == 1  # the supervisor's retry did not run it again


async def test_an_error_the_tool_classifies_itself_lets_the_retry_run_it(tmp_path: Path) -> None:
    from arkhon_rheo import Transient

    attempts: list[int] = []

    @tool(effect="fail")
    async def post(n: int) -> str:
        """Post a number."""
        attempts.append(n)
        if len(attempts) == 1:
            raise Transient("the service is busy")
        return "posted"

    agent = react_agent(ScriptedModel([call("post", {"n": 1}), "done"]), [post])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="post"), session_id="s")
        (entry,) = await system.store.effects("s")  # type: ignore[union-attr]
    assert result.ok, result.failure
    assert attempts == [1, 1]
    assert (entry.status, entry.attempts) == (EffectStatus.DONE, 2)


def test_ambiguous_effect_names_the_tool_and_key() -> None:
    error = AmbiguousEffect(tool="send", key="arkr-1")
    assert (error.tool, error.key) == ("send", "arkr-1")
    assert "effect='ask'" in str(error)
