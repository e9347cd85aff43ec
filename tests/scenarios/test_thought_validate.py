"""Seeds 000 and 002, scenario by scenario, on their hand-built machine (thought_validate_machine).

Each test names the seed section it covers. States are compared as the exact
sequence the session went through (its initial state, then each event's target).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason, Fatal
from arkhon_rheo.rules import Rule
from arkhon_rheo.testing import ScriptedModel, run_machine

if TYPE_CHECKING:
    from arkhon_rheo import Machine, SessionHandle

pytestmark = pytest.mark.anyio

_PATH = Path(__file__).resolve().parent / "thought_validate_machine.py"
_spec = importlib.util.spec_from_file_location("thought_validate_agent", _PATH)
assert _spec is not None
assert _spec.loader is not None
ex: Any = importlib.util.module_from_spec(_spec)
sys.modules["thought_validate_agent"] = ex
_spec.loader.exec_module(ex)

reply = ex.reply
CYCLE = ["Validate", "Action", "Observation", "Commit"]
GOAL = {"goal": "How long does light take to reach the moon?"}


async def states(handle: SessionHandle[Any]) -> list[str]:
    return ["Thought", *[event.to_state.value for event in (await handle.history())]]


async def run(script: list[Any], **options: Any) -> tuple[Any, list[str]]:
    done = await run_machine(
        ex.build_machine(ScriptedModel(script), **options), ex.ReActState(metadata=GOAL)
    )
    return done.result, ["Thought", *[event.to_state.value for event in done.events]]


async def test_the_demo_cycle_ends_on_final_answer() -> None:
    """000 §2.1-2.2 (every edge but the retry), §4.1 goal achieved; 002 §2.2 steps."""
    result, path = await run(ex.DEMO_SCRIPT[:1] + ex.DEMO_SCRIPT[2:])
    assert path == ["Thought", *CYCLE, "Thought", *CYCLE, "Thought", *CYCLE, "END"]
    state = result.state
    assert result.exit_reason is ExitReason.FINISHED
    assert ex.exit_of(state) is ex.Exit.GOAL_ACHIEVED
    assert [s.status for s in state.steps] == ["committed"] * 3
    assert [s.action for s in state.steps] == ["search", "calculator", None]
    assert [s.observation for s in state.steps] == ["384400 km", "1.282", "(no action)"]
    # 000 §5.1: the seed's metadata keys.
    assert state.metadata["goal"] == GOAL["goal"]
    assert state.metadata["tool_history"] == ("search", "calculator")
    assert state.metadata["total_cost"] == pytest.approx(0.6)
    assert state.metadata["summary"] == "3 steps done; last tools: ['search', 'calculator']"
    assert "retry_count" not in state.metadata


async def test_a_retryable_violation_goes_back_to_thought_with_its_reason() -> None:
    """000 §4.2 retryable → Thought; 002 §2.1 Validating → Thinking; 002 §4.1 invalid input."""
    result, path = await run(ex.DEMO_SCRIPT)
    assert path == [
        "Thought",
        *CYCLE,
        "Thought",
        "Validate",
        "Thought",
        *CYCLE,
        "Thought",
        *CYCLE,
        "END",
    ]
    state = result.state
    assert ex.exit_of(state) is ex.Exit.GOAL_ACHIEVED
    assert state.metadata["retry_count"] == 1
    assert [s.status for s in state.steps] == ["committed", "rejected", "committed", "committed"]


async def test_the_retry_reason_is_in_metadata_and_in_the_next_prompt() -> None:
    """000 §4.2: metadata["retry_reason"], and the Thought that follows sees it."""
    model = ScriptedModel([reply("", "web_browser"), reply("FINAL ANSWER: 1")])
    machine = ex.build_machine(model)
    async with AgentSystem(path=None) as system:
        handle = await system.start(machine, ex.ReActState(metadata=GOAL))
        result = await handle.result()
    validate = (await handle.history())[1]
    assert validate.patch.values["metadata"]["retry_reason"].startswith("unknown tool")
    assert validate.patch.values["metadata"]["rules"][-1]["rule"] == "known_tool"
    assert "refused: unknown tool 'web_browser'" in str(model.requests[1].messages[-1])
    assert "retry_reason" not in result.state.metadata  # cleared once the rules passed


async def test_a_terminal_violation_ends_the_run_and_is_logged() -> None:
    """000 §4.2 terminal → END; 002 §4.1 rule violation → terminate; §6.1 blocked input."""
    script = [reply("compute", "calculator", '{"expression": "__import__(\\"os\\")"}')]
    with capture_logs() as logs:
        result, path = await run(script)
    assert path == ["Thought", "Validate", "END"]
    assert ex.exit_of(result.state) is ex.Exit.TERMINAL_VIOLATION
    assert result.state.metadata["violation"]["rule"] == "no_blocked_functions"
    assert any(e["event"] == "terminal_violation" and e["log_level"] == "error" for e in logs)


async def test_max_steps_ends_the_run_with_a_warning() -> None:
    """000 §1.2 bounded, §4.1 max steps (logger.warning("max_steps_reached"))."""
    script = [reply("look", "search", '{"query": "moon distance"}')] * 2
    with capture_logs() as logs:
        result, path = await run(script, max_steps=2)
    assert path == ["Thought", *CYCLE, "Thought", *CYCLE, "END"]
    assert ex.exit_of(result.state) is ex.Exit.MAX_STEPS
    warning = next(e for e in logs if e["event"] == "max_steps_reached")
    assert (warning["log_level"], warning["steps"]) == ("warning", 2)


async def test_the_cost_limit_ends_the_run() -> None:
    """000 §5.2: total_cost > COST_LIMIT → END (exit reason COST_LIMIT)."""
    script = [reply("look", "search", '{"query": "moon distance"}', tokens=1000)]
    result, path = await run(script, cost_limit=1.0)
    assert path == ["Thought", *CYCLE, "END"]
    assert ex.exit_of(result.state) is ex.Exit.COST_LIMIT
    assert result.state.metadata["total_cost"] == pytest.approx(2.0)


async def retry_four_times(system: AgentSystem, machine: Machine[Any]) -> SessionHandle[Any]:
    handle = await system.start(machine, ex.ReActState(metadata=GOAL))
    result = await handle.result()
    assert result.exit_reason is ExitReason.PAUSED
    assert await states(handle) == ["Thought", *["Validate", "Thought"] * 4, "Thought"]
    assert (await handle.history())[-1].info == {"gate": "human_approval", "stage": "thought"}
    return handle


BAD = reply("?", "web_browser")


async def test_more_than_three_retries_pause_for_a_human_who_approves() -> None:
    """000 §5.2 retry_count > 3 → human_approval; 002 §2.1 Thinking → Interrupted → Thinking."""
    machine = ex.build_machine(ScriptedModel([BAD] * 4 + [reply("FINAL ANSWER: 1")]))
    async with AgentSystem(path=None) as system:
        handle = await retry_four_times(system, machine)
        assert handle.state.metadata["retry_count"] == 4
        resumed = await system.stored(machine, handle.session_id).approve("approved")
        assert resumed is not None
        result = await resumed.result()
    assert ex.exit_of(result.state) is ex.Exit.GOAL_ACHIEVED
    assert result.state.metadata["user_feedback"] == {"step_4": "approved"}
    assert result.state.metadata["retry_count"] == 0
    assert (await states(resumed))[-6:] == ["Thought", "Thought", *CYCLE, "END"][-6:]


async def test_a_human_can_set_the_terminated_flag_at_the_gate() -> None:
    """000 §4.1 the explicit terminated flag; §8.1 the user's decision."""
    model = ScriptedModel([BAD] * 4)
    machine = ex.build_machine(model)
    async with AgentSystem(path=None) as system:
        handle = await retry_four_times(system, machine)
        await system.stored(machine, handle.session_id).edit({"terminated": True})
        resumed = await system.stored(machine, handle.session_id).approve("approved")
        assert resumed is not None
        result = await resumed.result()
    assert ex.exit_of(result.state) is ex.Exit.TERMINATED
    assert result.state.steps[-1].thought == "(terminated on request)"
    assert len(model.requests) == 4  # no model call after the flag
    assert [e.to_state.value for e in (await resumed.history())][-5:] == [*CYCLE, "END"]


async def test_a_human_can_abort_at_the_gate() -> None:
    """000 §8.1 AwaitUser → abort; 002 §2.1 Interrupted → Terminated (user abort)."""
    machine = ex.build_machine(ScriptedModel([BAD] * 4))
    async with AgentSystem(path=None) as system:
        handle = await retry_four_times(system, machine)
        await system.stored(machine, handle.session_id).abort()
        assert handle.state.lifecycle is ex.Node.FAILED


async def test_rollback_to_an_earlier_step_resets_to_thought(tmp_path: Path) -> None:
    """000 §7.2 rollback_to_step (later steps discarded, current_node = thought), §8.1 Rollback."""
    db = tmp_path / "rollback.db"
    first = ex.build_machine(ScriptedModel(ex.DEMO_SCRIPT[:1] + ex.DEMO_SCRIPT[2:]))
    async with AgentSystem(path=db) as system:
        done = await system.run(first, ex.ReActState(metadata=GOAL), session_id="s")
        assert len(done.state.steps) == 3
        event = await ex.rollback_to_step(system, first, "s", 0)
        assert event.info == {"rolled_back_from": 15, "rolled_back_to": 5}
        with pytest.raises(ConfigurationError, match="invalid step_id 7"):
            await ex.rollback_to_step(system, first, "s", 7)
        again = ex.build_machine(ScriptedModel([reply("FINAL ANSWER: about a second")]))
        handle = await system.resume(again, "s")
        assert handle.state.lifecycle is ex.Node.THOUGHT
        assert [s.id for s in handle.state.steps] == [0]
        result = await handle.result()
    assert [s.thought for s in result.state.steps] == [
        "I need the distance to the moon.",
        "FINAL ANSWER: about a second",
    ]
    assert ex.exit_of(result.state) is ex.Exit.GOAL_ACHIEVED


async def test_a_durable_run_survives_a_stop_mid_way_and_replays_without_the_model(
    tmp_path: Path,
) -> None:
    """000 §1.2 resumable, §7.1 checkpointing, §10.2 replay; 002 §8.1 .checkpoints.db."""
    db = tmp_path / "durable.db"
    reached = anyio.Event()

    class Stopping(ScriptedModel):
        async def complete(self, messages: Any, **options: Any) -> Any:
            if len(self.requests) == 2:  # the third thought: stop the process here
                reached.set()
                await anyio.sleep_forever()
            return await super().complete(messages, **options)

    script = ex.DEMO_SCRIPT[:1] + ex.DEMO_SCRIPT[2:]
    first = ex.build_machine(Stopping(script))
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(first, ex.ReActState(metadata=GOAL), session_id="d")
            await reached.wait()
            scope.cancel()
    async with AgentSystem(path=db) as system:
        assert system.store is not None
        record = await system.store.load("d")
        assert record.record.status == "cancelled"
        assert all(lease.session_id != "d" for lease in await system.store.leases())
        second = ex.build_machine(ScriptedModel(script[2:]))  # only the last answer is left
        handle = await system.resume(second, "d")
        result = await handle.result()
        report = await system.stored(ex.build_machine(ScriptedModel([])), "d").replay(
            reexecute=True
        )
        history = await system.stored(second, "d").history()
    assert ex.exit_of(result.state) is ex.Exit.GOAL_ACHIEVED
    path = ["Thought", *[e.to_state.value for e in history if e.stage != "(resume)"]]
    assert [e.kind.value for e in history].count("resume") == 1
    assert report.ok, report.divergence
    assert report.reexecuted == 15
    assert path[-5:] == [*CYCLE, "END"]


async def test_rule_results_are_cached_per_input() -> None:
    """002 §5.2: the rule engine's cache keyed by the step's (thought, action)."""
    rules = ex.RuleSet(ex.says_something, ex.known_tool, ex.json_arguments)
    machine = ex.build_machine(ScriptedModel([BAD] * 3 + [reply("FINAL ANSWER: 1")]), rules=rules)
    async with AgentSystem(path=None) as system:
        await system.run(machine, ex.ReActState(metadata=GOAL))
    stats = rules.statistics()
    assert stats.evaluations == 4
    assert stats.cache_hits == 4  # the 2nd and 3rd bad replies: 2 rules each, from the cache
    assert stats.checks == 2 + 3


async def test_a_rule_that_returns_nonsense_fails_the_session() -> None:
    """002 §4.2: an unexpected error is not swallowed (a typed Fatal)."""
    bad = ex.RuleSet(Rule("broken", lambda step: "yes"))  # type: ignore[arg-type,return-value]
    machine = ex.build_machine(ScriptedModel([reply("hm")]), rules=bad)
    async with AgentSystem(path=None) as system:
        result = await system.run(machine, ex.ReActState(metadata=GOAL))
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == Fatal.__name__
