"""The seeds' machinery as `react_agent` options: ``stuck=``, ``rules=``, ``budget=GlobalBudget``.

Every test runs on both backends; each ends with a re-executing replay of the
stored session, without the model, that must reproduce the run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.protocols import (
    AssistantMessage,
    EventKind,
    Lifecycle,
    ModelReply,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from arkhon_rheo.react import (
    Budget,
    Checks,
    Conversation,
    GlobalBudget,
    Limits,
    Phase,
    Proposal,
    ReactState,
    RoundBudget,
    StopReason,
    StuckDetector,
    StuckPolicy,
    StuckReason,
    react_agent,
)
from arkhon_rheo.rules import PASS, Retryable, RuleSet, Terminal, Verdict, rule
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Machine

pytestmark = pytest.mark.anyio

P = Phase


@tool(name="context_fts_search")
async def search(query: str) -> str:
    """Full-text search over the documents."""
    return json.dumps({"query": query, "results": ["savant-1"] if "savant" in query else []})


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(name: str, id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments))


def searches(count: int) -> list[ToolCall]:
    return [call("context_fts_search", f"s{n}", query=f"quantum {n}") for n in range(count)]


async def run(
    agent: Machine[ReactState], tmp_path: Path, task: str = "the task"
) -> tuple[ReactState, list[Any]]:
    """Run ``agent`` in a stored system, replay it re-executing, and give its state and events."""
    async with AgentSystem(path=tmp_path / "agent.db") as system:
        result = await system.run(agent, ReactState(task=task), session_id="s")
        assert result.ok, result.failure
        stored = system.stored(agent, "s")
        report = await stored.replay(reexecute=True)
        assert report.ok, report.divergence
        assert report.state == result.state
        events = list(await stored.history())
    return result.state, events


def tool_results(state: ReactState) -> list[ToolMessage]:
    return [m for m in state.messages if isinstance(m, ToolMessage)]


def last_system_line(model: ScriptedModel, request: int) -> str:
    message = model.requests[request].messages[-1]
    assert isinstance(message, SystemMessage)
    return message.content or ""


def agent_state(model: ScriptedModel, request: int) -> dict[str, Any]:
    line = next(
        part
        for part in last_system_line(model, request).splitlines()
        if part.startswith("agent_state: ")
    )
    block: dict[str, Any] = json.loads(line.removeprefix("agent_state: "))
    return block


# -- stuck= (seed 003) ------------------------------------------------------


async def test_hard_stuck_lets_the_third_search_run_then_offers_no_tool(tmp_path: Path) -> None:
    model = ScriptedModel([*searches(3), "No quantum module is documented."])
    agent = react_agent(model, [search, add], checks=Checks(stuck="hard"))
    state, events = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "No quantum module is documented.")
    assert len(tool_results(state)) == 3
    assert not any(m.is_error for m in tool_results(state))
    assert state.stuck_reason is StuckReason.REPEATED_TOOL
    assert dict(state.track.transitions) == {
        "init->searching": 1,
        "searching->stuck_search": 1,
        "stuck_search->finishing": 1,
    }
    assert [s.name for s in model.requests[0].tools] == [
        "context_fts_search",
        "add",
        "analyze",
        "decide",
    ]
    assert model.requests[3].tools == ()  # in STUCK_SEARCH the model may only answer
    block = agent_state(model, 3)
    assert block["current_state"] == "stuck_search"
    assert block["stuck"] is False
    steps = [(e.from_state, e.to_state) for e in events if e.kind is EventKind.STEP]
    assert (Lifecycle.THINKING, Lifecycle.FINISHED) in steps


async def test_soft_stuck_warns_and_tells_the_model_the_way_out(tmp_path: Path) -> None:
    model = ScriptedModel([*searches(3), "Nothing found."])
    agent = react_agent(model, [search], checks=Checks(stuck=StuckPolicy.SOFT))
    with capture_logs() as logs:
        state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "Nothing found.")
    assert next(s.name for s in model.requests[3].tools) == "context_fts_search"  # still offered
    block = agent_state(model, 3)
    assert block["stuck"] is True
    assert block["stuck_reason"] == "repeated_tool"
    assert block["suggested_exit"].startswith("You've searched 3 times")
    assert any(e["event"] == "agent_stuck" for e in logs)


async def test_auto_finish_ends_at_once_with_the_best_answer_so_far(tmp_path: Path) -> None:
    model = ScriptedModel([*searches(3), "never asked"])
    agent = react_agent(model, [search], checks=Checks(stuck="auto_finish"))
    state, _ = await run(agent, tmp_path)
    assert state.exit is StopReason.STUCK
    assert state.answer is not None
    assert state.answer.startswith("Reached stuck state. Summary: ")
    assert len(model.requests) == 3
    results = tool_results(state)
    assert [m.is_error for m in results] == [False, False, True]  # the third never ran
    assert results[-1].content == "not run: the agent was stuck"
    assert state.lifecycle is Lifecycle.FINISHED


async def test_a_forbidden_move_is_suggested_the_allowed_ones_under_soft(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            call("context_fts_search", "1", query="savant"),
            call("add", "2", a=1, b=2),  # SEARCHING -> DECIDING: forbidden
            call("analyze", "3", notes="one document about savant"),
            call("add", "4", a=1, b=2),  # ANALYZING -> DECIDING: allowed
            "3",
        ]
    )
    agent = react_agent(model, [search, add], checks=Checks(stuck="soft"))
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "3")
    refused = next(m for m in tool_results(state) if m.tool_call_id == "2")
    assert refused.is_error
    assert refused.content == (
        "not run: this moves the agent from searching to deciding, which is not allowed. "
        "From searching you may: analyzing (analyze); finishing (answer in text); "
        "searching (context_fts_search)."
    )
    noted = next(m for m in tool_results(state) if m.tool_call_id == "3")
    assert noted.content == "noted"
    assert [m.content for m in tool_results(state) if m.tool_call_id == "4"] == ["3"]
    assert dict(state.track.transitions) == {
        "init->searching": 1,
        "searching->analyzing": 1,
        "analyzing->deciding": 1,
        "deciding->finishing": 1,
    }


async def test_a_forbidden_move_forces_the_stuck_phase_under_hard(tmp_path: Path) -> None:
    model = ScriptedModel(
        [call("context_fts_search", "1", query="savant"), call("add", "2", a=1, b=2), "savant-1"]
    )
    agent = react_agent(
        model,
        [search, add],
        checks=Checks(stuck=StuckDetector(policy=StuckPolicy.HARD)),
    )
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "savant-1")
    refused = tool_results(state)[-1]
    assert refused.is_error
    assert "now stuck_search: answer now, in text" in refused.content
    assert model.requests[2].tools == ()
    assert "searching->stuck_search" in state.track.transitions


async def test_a_forbidden_move_finishes_at_once_under_auto_finish(tmp_path: Path) -> None:
    model = ScriptedModel(
        [call("context_fts_search", "1", query="savant"), call("add", "2", a=1, b=2), "unused"]
    )
    agent = react_agent(model, [search, add], checks=Checks(stuck="auto_finish"))
    state, _ = await run(agent, tmp_path)
    assert state.exit is StopReason.STUCK
    assert state.answer == (
        'Reached stuck state. Summary: {"query": "savant", "results": ["savant-1"]}'
    )
    assert len(model.requests) == 2


async def test_a_forbidden_first_move_is_suggested_under_hard(tmp_path: Path) -> None:
    model = ScriptedModel(
        [call("analyze", "1", notes="nothing yet"), call("add", "2", a=1, b=1), "2"]
    )
    state, _ = await run(react_agent(model, [add], checks=Checks(stuck="hard")), tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "2")
    refused = tool_results(state)[0]
    assert refused.content == (
        "not run: this moves the agent from init to analyzing, which is not allowed. "
        "From init you may: deciding (decide, another tool); finishing (answer in text); "
        "searching (context_fts_search)."
    )


async def test_failed_calls_in_a_row_while_deciding_are_stuck(tmp_path: Path) -> None:
    @tool
    async def div(a: int, b: int) -> float:
        """Divide."""
        return a / b

    @tool
    async def mod(a: int, b: int) -> int:
        """The remainder."""
        return a % b

    calls = [call(name, str(n), a=1, b=0) for n, name in enumerate(["div", "mod"] * 2)]
    model = ScriptedModel([*calls, "cannot divide by zero"])
    state, _ = await run(react_agent(model, [div, mod], checks=Checks(stuck="hard")), tmp_path)
    assert state.stuck_reason is StuckReason.FAILED_DECISIONS
    assert all(m.is_error for m in tool_results(state))
    assert "deciding->stuck_decide" in state.track.transitions
    assert state.answer == "cannot divide by zero"


async def test_routes_send_a_tool_of_yours_to_a_phase(tmp_path: Path) -> None:
    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    model = ScriptedModel([call("lookup", f"l{n}", key="k") for n in range(3)] + ["K"])
    detector = StuckDetector(routes={"lookup": P.SEARCHING})
    state, _ = await run(react_agent(model, [lookup], checks=Checks(stuck=detector)), tmp_path)
    assert state.answer == "K"
    assert "searching->stuck_search" in state.track.transitions


def seed(*names: str) -> list[Any]:
    """A script of one call per name (searches, control actions), then the answer."""
    arguments = {"context_fts_search": {"query": "savant"}, "analyze": {"notes": "n"}}
    steps: list[Any] = [
        call(name, f"x{n}", **arguments.get(name, {"decision": "d"}))
        for n, name in enumerate(names)
    ]
    return [*steps, "the answer"]


@pytest.mark.parametrize(
    ("script", "moves"),
    [
        # §7 scenario 1: Init → Searching → Analyzing → Deciding → Finishing.
        (
            seed("context_fts_search", "analyze", "decide"),
            [
                "init->searching",
                "searching->analyzing",
                "analyzing->deciding",
                "deciding->finishing",
            ],
        ),
        # §7 scenario 2: Init → Searching, three times (stuck) → Finishing.
        (
            seed(*["context_fts_search"] * 3),
            ["init->searching", "searching->stuck_search", "stuck_search->finishing"],
        ),
        # §7 scenario 3: Init → Deciding → Finishing.
        (seed("decide"), ["init->deciding", "deciding->finishing"]),
        # Appendix C: the searcher's third search is stuck, though not three in a row
        # of steps: control actions are no tool call.
        (
            seed(
                "context_fts_search",
                "analyze",
                "decide",
                "context_fts_search",
                "context_fts_search",
            ),
            [
                "init->searching",
                "searching->analyzing",
                "analyzing->deciding",
                "deciding->searching",
                "searching->stuck_search",
                "stuck_search->finishing",
            ],
        ),
    ],
    ids=["normal", "stuck_search", "quick_decision", "searcher"],
)
async def test_the_seeds_scenarios_on_the_engine(
    tmp_path: Path, script: list[Any], moves: list[str]
) -> None:
    model = ScriptedModel(script)
    state, _ = await run(react_agent(model, [search], checks=Checks(stuck="hard")), tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "the answer")
    assert list(state.track.transitions) == moves


async def test_a_checked_agent_stopped_midway_resumes_and_replays(tmp_path: Path) -> None:
    runs: list[int] = []
    entered = anyio.Event()
    hang = [True]

    @tool
    async def fetch(n: int) -> int:
        """Fetch a number."""
        runs.append(n)
        if hang[0]:
            entered.set()
            await anyio.sleep_forever()
        return n * 10

    model = ScriptedModel([call("fetch", "1", n=-4), call("fetch", "2", n=4), "it is 40"])

    @rule
    def positive(step: Proposal) -> Verdict:
        negative = any(json.loads(c.arguments)["n"] < 0 for c in step.tool_calls)
        return Retryable("n must be positive") if negative else PASS

    def build() -> Machine[ReactState]:
        budget = GlobalBudget(rounds(4), strategies={"fetch": "exploit"})
        return react_agent(
            model,
            [fetch],
            limits=Limits(budget=budget),
            checks=Checks(stuck="hard", rules=[positive]),
        )

    db = tmp_path / "a.db"
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(build(), ReactState(task="fetch 4"), session_id="s")
            await entered.wait()
            scope.cancel()  # the service stops in the middle of the tool call
    hang[0] = False
    async with AgentSystem(path=db) as system:
        result = await (await system.resume(build(), "s")).result()
        events = await system.stored(build(), "s").history()
        report = await system.stored(build(), "s").replay(reexecute=True)
    assert result.ok, result.failure
    assert result.state.answer == "it is 40"
    assert runs == [4, 4]  # the step in flight ran again, the refused one never
    assert [e.kind.value for e in events].count("resume") == 1
    assert result.state.decisions is not None
    assert result.state.decisions.global_budget.decision_rounds_used == 3
    assert report.ok, report.divergence
    assert report.state == result.state


# -- rules= (seeds 000/002) -------------------------------------------------


@rule
def no_subtraction(step: Proposal) -> Verdict:
    if any(json.loads(c.arguments).get("b", 0) < 0 for c in step.tool_calls):
        return Retryable("add only non-negative numbers")
    return PASS


@rule
def answer_has_a_number(step: Proposal) -> Verdict:
    if step.answer is not None and not any(ch.isdigit() for ch in step.answer):
        return Retryable("the answer must state the number")
    return PASS


@rule
def never_delete(step: Proposal) -> Verdict:
    if "delete" in step.thought:
        return Terminal("deleting is forbidden")
    return PASS


async def test_a_rule_violation_is_an_observation_and_the_corrected_step_runs(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            call("add", "1", a=5, b=-2),
            call("add", "2", a=5, b=2),
            "I could not say.",
            "5 + 2 = 7",
        ]
    )
    agent = react_agent(
        model,
        [add],
        checks=Checks(rules=[no_subtraction, answer_has_a_number]),
    )
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.ANSWERED, "5 + 2 = 7")
    first, second = tool_results(state)
    assert first.is_error
    assert first.content == (
        "rejected by rule no_subtraction: add only non-negative numbers. Revise your step."
    )
    assert second.content == "7"
    told = [m.content for m in state.messages if isinstance(m, UserMessage)][-1]
    assert told == (
        "Your answer was rejected by rule answer_has_a_number: the answer must state the "
        "number. Revise your step."
    )
    assert state.rule_retries == 0
    assert [r.outcome for r in state.checks] == ["pass", "pass"]


async def test_a_terminal_violation_ends_the_agent(tmp_path: Path) -> None:
    thought = AssistantMessage(content="I will delete it", tool_calls=(call("add", "1", a=1, b=1),))
    model = ScriptedModel([ModelReply(message=thought, finish_reason="tool_calls")])
    agent = react_agent(
        model,
        [add],
        checks=Checks(rules=RuleSet(never_delete, no_subtraction)),
    )
    state, _ = await run(agent, tmp_path)
    assert state.exit is StopReason.VIOLATION
    assert state.answer is None
    assert state.violation is not None
    assert (state.violation.rule, state.violation.reason) == (
        "never_delete",
        "deleting is forbidden",
    )
    assert tool_results(state)[-1].content.startswith("not run: rule never_delete ended the agent")


async def test_retryable_violations_past_their_retries_end_the_agent(tmp_path: Path) -> None:
    model = ScriptedModel([call("add", str(n), a=1, b=-1) for n in range(4)])
    agent = react_agent(model, [add], checks=Checks(rules=[no_subtraction]))
    state, _ = await run(agent, tmp_path)
    assert state.exit is StopReason.VIOLATION
    assert state.rule_retries == 4
    assert len(model.requests) == 4


# -- budget=GlobalBudget (seed 001) -----------------------------------------


def rounds(decisions: int, tools: int = 10, explore: int = 5, exploit: int = 0) -> RoundBudget:
    return RoundBudget(
        max_decision_rounds=decisions,
        max_tool_calls=tools,
        max_explore_rounds=explore,
        max_exploit_rounds=exploit,
        max_render_rounds=1,
        max_decision_reruns=0,
        ctx_reads=0,
    )


async def test_the_global_budget_ends_with_the_wrapup_turn(tmp_path: Path) -> None:
    model = ScriptedModel([*searches(2), "what I found"])
    agent = react_agent(model, [search], limits=Limits(budget=rounds(2)))
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.BUDGET_EXHAUSTED, "what I found")
    assert state.decisions is not None
    spent = state.decisions.global_budget
    assert (spent.decision_rounds_used, spent.tool_calls_used, spent.explore_rounds_used) == (
        3,
        2,
        2,
    )
    assert last_system_line(model, 0).startswith("BUDGET_STATE: global(decisions left 2/2, ")
    assert model.requests[2].tools == ()
    assert last_system_line(model, 2).endswith(", wrapup active")
    notice = [m.content for m in state.messages if isinstance(m, UserMessage)][-1]
    assert notice is not None
    assert notice.startswith("Budget reached (max_iterations: global(")


async def test_the_exploit_overdraft_then_a_blocked_explore_round(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            call("context_fts_search", "1", query="savant"),  # the one decision round
            call("add", "2", a=2, b=3),  # overdraft: exploit only
            call("context_fts_search", "3", query="more"),  # blocked: not exploit
            "5",
        ]
    )
    budget = GlobalBudget(rounds(1, exploit=2), strategies={"add": "exploit"})
    agent = react_agent(model, [search, add], limits=Limits(budget=budget))
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.BUDGET_EXHAUSTED, "5")
    assert [m.content for m in tool_results(state)][1] == "5"
    blocked = tool_results(state)[2]
    assert blocked.is_error
    assert blocked.content.startswith("not run: exploit_overdraft_blocked")
    assert "exploit_overdraft 0/2" in last_system_line(model, 1)
    assert "exploit_overdraft 1/2" in last_system_line(model, 2)
    assert model.requests[3].tools == ()
    assert state.decisions is not None
    assert (state.decisions.exploit_overdraft_used, state.decisions.exploit_overdraft_limit) == (
        1,
        2,
    )


async def test_a_plain_budget_keeps_working_beside_the_options(tmp_path: Path) -> None:
    model = ScriptedModel([*searches(1), "done"])
    agent = react_agent(
        model,
        [search],
        limits=Limits(budget=Budget(max_tool_calls=1)),
        checks=Checks(stuck="soft"),
    )
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.BUDGET_EXHAUSTED, "done")
    assert last_system_line(model, 1).startswith("BUDGET tool_calls 1/1 | wrap-up")


# -- the three together ------------------------------------------------------


async def test_the_three_options_together(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            call("context_fts_search", "1", query="savant"),
            call("add", "2", a=2, b=-1),  # rejected by the rule (and not a move yet)
            call("analyze", "3", notes="savant-1 is about agents"),
            call("add", "4", a=2, b=1),
            "no number",  # the wrap-up answer, rejected by the rule
            "2 + 1 = 3",
        ]
    )
    agent = react_agent(
        model,
        [search, add],
        limits=Limits(budget=GlobalBudget(rounds(4), strategies={"add": "exploit"})),
        checks=Checks(stuck="hard", rules=[no_subtraction, answer_has_a_number]),
    )
    state, _ = await run(agent, tmp_path)
    assert (state.exit, state.answer) == (StopReason.BUDGET_EXHAUSTED, "2 + 1 = 3")
    assert [m.content for m in tool_results(state)][-1] == "3"
    assert dict(state.track.transitions) == {
        "init->searching": 1,
        "searching->analyzing": 1,
        "analyzing->deciding": 1,
        "deciding->finishing": 1,
    }
    assert state.decisions is not None
    assert state.decisions.global_budget.decision_rounds_used == 6
    line = last_system_line(model, 5)
    assert "wrapup active" in line
    assert "agent_state: " in line


async def test_a_conversational_agent_checks_every_answer() -> None:
    model = ScriptedModel(["no number", "4", "and 5"])
    agent = react_agent(
        model,
        [add],
        conversational=True,
        checks=Checks(rules=[answer_has_a_number]),
    )
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        chat = Conversation(system, agent)
        assert await chat.start("2 + 2?") == "4"
        assert await chat.say("and 2 + 3?") == "and 5"
        await chat.close()
    told = [m.content for m in model.requests[1].messages if isinstance(m, UserMessage)]
    assert told[-1] is not None
    assert told[-1].startswith("Your answer was rejected by rule")


# -- configuration ------------------------------------------------------------


async def test_options_of_no_type_taken_are_refused() -> None:
    model = ScriptedModel()
    with pytest.raises(ConfigurationError, match=r"stuck='sideways'.*'soft', 'hard'"):
        react_agent(model, checks=Checks(stuck="sideways"))
    with pytest.raises(ConfigurationError, match="give a RuleSet"):
        react_agent(model, checks=Checks(rules="no_delete"))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="give a Budget, or a GlobalBudget of rounds"):
        react_agent(model, limits=Limits(budget=42))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="strategy 'hoard'"):
        GlobalBudget(rounds(1), strategies={"add": "hoard"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="give a RoundBudget"):
        GlobalBudget(Budget())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="map tool names to a Phase"):
        StuckDetector(routes={"lookup": "searching"})  # type: ignore[dict-item]


async def test_without_options_the_think_stage_is_the_plain_one() -> None:
    plain = react_agent(ScriptedModel(), [add])
    checked = react_agent(
        ScriptedModel(),
        [add],
        checks=Checks(rules=[no_subtraction]),
    )
    think, checking = plain.stages[Lifecycle.THINKING], checked.stages[Lifecycle.THINKING]
    assert think.name == checking.name == "think"
    assert "track" not in think.reads | think.writes
    assert checking.writes - think.writes == {
        "track",
        "stuck_reason",
        "agent_state",
        "checks",
        "rule_retries",
        "violation",
        "decisions",
    }
    assert Lifecycle.THINKING not in plain.transitions[Lifecycle.THINKING]
    assert Lifecycle.THINKING in checked.transitions[Lifecycle.THINKING]  # sent back
