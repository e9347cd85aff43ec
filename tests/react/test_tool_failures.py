"""A tool that keeps failing becomes an observation (seeds 000 §3.2, 002 §3.3), or escalates.

A call that raises `Transient` (or runs past its timeout) is tried again within
the act step, ``@tool(retries=...)`` times; then, by the tool's
``on_exhausted`` or else the engine's ``tool_failures`` (``"observe"`` by
default), the model gets ``"Error after N attempts: <message>"`` as the call's
result and decides, or the failure goes to the supervisor (retries of the
step, restarts, at last a failed session). The observation is the call's
recorded response: a replay gives it back without the tool. Once-only effects:
a timeout of a side-effecting tool is never observed (its effect may have
happened); a `Transient` the tool raised itself is (it did not happen).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, Transient
from arkhon_rheo.protocols import (
    AssistantMessage,
    EffectStatus,
    ModelReply,
    ToolCall,
    ToolMessage,
    Usage,
)
from arkhon_rheo.react import Calls, ReactState, StopReason, react_agent
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, ToolContext, tool

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio

FAST = Backoff(base=0, cap=0)


def call(name: str, arguments: dict[str, Any] | None = None, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments or {}))


def calls(*made: ToolCall) -> ModelReply:
    message = AssistantMessage(content=None, tool_calls=made)
    return ModelReply(message=message, finish_reason="tool_calls", usage=Usage(), model="m")


def tool_results(state: ReactState) -> list[ToolMessage]:
    return [m for m in state.messages if isinstance(m, ToolMessage)]


class Service:
    """A service that is down for its first ``down`` calls (``None``: for good)."""

    def __init__(self, down: int | None = None, message: str = "the service is down") -> None:
        self.down = down
        self.message = message
        self.calls = 0

    def hit(self) -> str:
        self.calls += 1
        if self.down is None or self.calls <= self.down:
            raise Transient(f"{self.message} (call {self.calls})")
        return f"ok after {self.calls}"


def lookup_tool(service: Service, **options: Any) -> Any:
    @tool(**options)
    async def lookup() -> str:
        """Look something up."""
        await anyio.lowlevel.checkpoint()
        return service.hit()

    return lookup


async def test_a_tool_that_keeps_failing_is_observed_by_the_model_by_default() -> None:
    service = Service()
    toolbox = Toolbox(lookup_tool(service))
    model = ScriptedModel([call("lookup"), "I could not look it up."])
    async with AgentSystem(path=None, backoff=FAST) as system:
        result = await system.run(react_agent(model, toolbox), ReactState(task="look"))
    assert result.ok, result.failure
    assert (result.state.exit, result.state.answer) == (
        StopReason.ANSWERED,
        "I could not look it up.",
    )
    (observed,) = tool_results(result.state)
    assert observed.is_error
    assert observed.content == "Error after 3 attempts: the service is down (call 3)"
    assert service.calls == 3  # the first attempt and the tool's 2 retries
    assert result.retries == result.restarts == 0  # the supervisor never saw it
    # The model decided with the error in front of it.
    assert model.requests[1].messages[-1] == observed
    stats = toolbox.statistics()
    assert (stats.retries, stats.exhausted, stats.errors, stats.raised) == (2, 1, 1, 0)


async def test_a_tool_that_recovers_within_its_retries_answers_normally() -> None:
    service = Service(down=2)
    model = ScriptedModel([call("lookup"), "done"])
    async with AgentSystem(path=None) as system:
        result = await system.run(
            react_agent(model, [lookup_tool(service)]), ReactState(task="look")
        )
    (answered,) = tool_results(result.state)
    assert (answered.content, answered.is_error) == ("ok after 3", False)


async def test_the_tool_says_how_many_retries() -> None:
    service = Service()
    model = ScriptedModel([call("lookup"), "done"])
    agent = react_agent(model, [lookup_tool(service, retries=0)])
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="look"))
    (observed,) = tool_results(result.state)
    assert observed.content == "Error after 1 attempt: the service is down (call 1)"
    assert service.calls == 1


async def test_a_tool_that_says_escalate_fails_the_session_as_before() -> None:
    service = Service()
    model = ScriptedModel([call("lookup"), "never asked"])
    agent = react_agent(model, [lookup_tool(service, on_exhausted="escalate", retries=5)])
    async with AgentSystem(path=None, backoff=FAST) as system:
        result = await system.run(agent, ReactState(task="look"))
    assert not result.ok
    assert result.failure is not None
    assert result.failure.error_type == "Transient"  # the tool's, its retries spent
    assert "[the restart intensity ran out: " in result.failure.message
    assert result.retries > 0  # the supervisor retried the act stage: one attempt per try
    assert service.calls == result.retries + result.restarts + 1
    assert len(model.requests) == 1


async def test_the_engine_may_escalate_by_default_and_a_tool_may_still_be_observed() -> None:
    down, observed = Service(), Service()
    model = ScriptedModel([call("down"), "never asked"])
    box = Toolbox(
        lookup_tool(down, name="down"),
        lookup_tool(observed, name="observed", on_exhausted="observe", retries=1),
    )
    async with AgentSystem(path=None, backoff=FAST) as system:
        failed = await system.run(
            react_agent(model, box, calls=Calls(tool_failures="escalate")), ReactState(task="t")
        )
        model = ScriptedModel([call("observed"), "fine without it"])
        result = await system.run(
            react_agent(model, box, calls=Calls(tool_failures="escalate")), ReactState(task="t")
        )
    assert not failed.ok
    assert result.ok, result.failure
    (answer,) = tool_results(result.state)
    assert answer.content == "Error after 2 attempts: the service is down (call 2)"


async def test_only_the_failing_call_of_a_turn_is_tried_again() -> None:
    flaky, steady = Service(down=1), Service(down=0)
    model = ScriptedModel([calls(call("flaky", id="a"), call("steady", id="b")), "both done"])
    box = Toolbox(lookup_tool(flaky, name="flaky"), lookup_tool(steady, name="steady"))
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model, box), ReactState(task="t"))
    assert [m.content for m in tool_results(result.state)] == ["ok after 2", "ok after 1"]
    assert (flaky.calls, steady.calls) == (2, 1)


async def test_secrets_are_scrubbed_from_the_observation() -> None:
    service = Service(message="auth failed for key sk-live-0123456789abcdef")
    model = ScriptedModel([call("lookup"), "done"])
    async with AgentSystem(path=None) as system:
        result = await system.run(
            react_agent(model, [lookup_tool(service, retries=0)]), ReactState(task="t")
        )
    (observed,) = tool_results(result.state)
    assert observed.content.startswith("Error after 1 attempt: auth failed for key ")
    assert "sk-live-0123456789abcdef" not in observed.content


async def test_the_observation_is_recorded_and_replayed_without_the_tool(tmp_path: Path) -> None:
    service = Service()
    model = ScriptedModel([call("lookup"), "gave up"])
    agent = react_agent(model, [lookup_tool(service)])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(agent, ReactState(task="t"), session_id="s")
        history = await system.stored(agent, "s").history()
        report = await system.stored(agent, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert service.calls == 3  # the replay answered from the record
    records = [record for event in history for record in (event.info or {}).get("io", ())]
    (recorded,) = [r for r in records if r["kind"] == "tool:lookup"]
    assert recorded["response"]["content"] == "Error after 3 attempts: the service is down (call 3)"
    assert recorded["response"]["is_error"] is True
    assert report.state == result.state


def test_bad_failure_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="on_exhausted must be 'observe'"):
        lookup_tool(Service(), on_exhausted="ignore")
    with pytest.raises(ConfigurationError, match="retries must be an int >= 0"):
        lookup_tool(Service(), retries=-1)
    with pytest.raises(ConfigurationError, match="tool_failures must be 'observe' or 'escalate'"):
        react_agent(ScriptedModel([]), calls=Calls(tool_failures="retry"))  # type: ignore[arg-type]


async def test_a_toolbox_called_directly_escalates_unless_asked_to_observe() -> None:
    service = Service()
    box = Toolbox(lookup_tool(service))
    with pytest.raises(Transient, match="the service is down"):
        await box.call(call("lookup"))
    assert service.calls == 1
    observed = await box.call(call("lookup"), on_exhausted="observe")
    assert observed.content == "Error after 3 attempts: the service is down (call 4)"
    with pytest.raises(ConfigurationError, match="on_exhausted must be"):
        await box.call(call("lookup"), on_exhausted="maybe")  # type: ignore[arg-type]


# -- once-only effects -------------------------------------------------------------------


def effects_of(system: AgentSystem) -> Store:
    assert system.store is not None
    return system.store


async def test_a_side_effect_that_says_it_did_not_happen_is_retried_then_observed(
    tmp_path: Path,
) -> None:
    keys: list[str | None] = []

    @tool(effect="fail")
    async def post(n: int, ctx: ToolContext) -> str:
        """Post a number."""
        keys.append(ctx.idempotency_key)
        raise Transient("the service is busy")

    model = ScriptedModel([call("post", {"n": 1}), "could not post"])
    async with AgentSystem(path=tmp_path / "a.db") as system:
        result = await system.run(react_agent(model, [post]), ReactState(task="t"), session_id="s")
        (entry,) = await effects_of(system).effects("s")
    assert result.ok, result.failure
    (observed,) = tool_results(result.state)
    assert observed.content == "Error after 3 attempts: the service is busy"
    # Every attempt went through the ledger under the call's one key, and failed there.
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert (entry.status, entry.attempts) == (EffectStatus.FAILED, 3)


@pytest.mark.parametrize("effect", ["fail", "ask", "idempotent"])
async def test_a_side_effect_past_its_timeout_is_never_observed(
    effect: str, tmp_path: Path
) -> None:
    # It may have happened: an error result would let the model call it again under
    # a new key. It escalates, and the ledger decides by the tool's effect.
    attempts: list[str | None] = []

    @tool(effect=effect, timeout=0.05, retries=5)
    async def charge(cents: int, ctx: ToolContext) -> str:
        """Charge a card."""
        attempts.append(ctx.idempotency_key)
        if len(attempts) == 1:
            await anyio.sleep_forever()
        return "charged"

    model = ScriptedModel([call("charge", {"cents": 5}), "done"])
    async with AgentSystem(path=tmp_path / "a.db", backoff=FAST) as system:
        result = await system.run(
            react_agent(model, [charge]), ReactState(task="t"), session_id="s"
        )
        (entry,) = await effects_of(system).effects("s")
    assert not any(m.is_error for m in tool_results(result.state))
    if effect == "fail":
        assert result.failure is not None
        assert result.failure.error_type == "AmbiguousEffect"
        assert len(attempts) == 1
    elif effect == "ask":
        assert result.exit_reason.value == "paused"  # at the "tool call" gate
        assert result.state.held is not None
        assert result.state.held.reason == "ambiguous"
        assert len(attempts) == 1
    else:  # run again under the same key, by the supervisor's retry of the step
        assert result.ok, result.failure
        assert result.retries == 1
        assert len(attempts) == 2
        assert attempts[0] == attempts[1]
        assert entry.status is EffectStatus.DONE


async def test_a_read_only_tool_past_its_timeout_is_retried_then_observed() -> None:
    attempts: list[int] = []

    @tool(timeout=0.02, retries=1)
    async def slow() -> str:
        """Never answers."""
        attempts.append(1)
        await anyio.sleep_forever()
        return "never"

    model = ScriptedModel([call("slow"), "it timed out"])
    async with AgentSystem(path=None) as system:
        result = await system.run(react_agent(model, [slow]), ReactState(task="t"))
    (observed,) = tool_results(result.state)
    assert observed.content.startswith("Error after 2 attempts: tool 'slow' did not finish")
    assert len(attempts) == 2
