"""Seed 003: phases, stuck detection and the seed's hand-built phase machine (phase_machine.py).

``react_agent(checks=Checks(stuck=...))`` gives any agent the same machinery in one line
(tests/react/test_options.py, and the seed's scenarios on it at the end here).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from structlog.testing import capture_logs

from arkhon_rheo import AgentSystem, ConfigurationError
from arkhon_rheo.protocols import EventKind, ModelReply, SystemMessage, ToolCall
from arkhon_rheo.react import (
    PHASE_ACTIONS,
    PHASE_TIMEOUTS,
    PHASE_TRANSITIONS,
    Phase,
    PhaseStep,
    PhaseTrack,
    StuckDetector,
    StuckPolicy,
    StuckReason,
    action_allowed,
    exit_suggestion,
    infer_state_from_tool,
    offered_actions,
)
from arkhon_rheo.testing import Delay, ScriptedModel
from tests.scenarios import phase_machine as phase_agent
from tests.support.helpers import on_virtual_clock

if TYPE_CHECKING:
    import enum
    from collections.abc import Sequence

    from arkhon_rheo.protocols import Message, ToolSpec

pytestmark = pytest.mark.anyio
P = Phase
SEARCH = "context_fts_search"

# -- the library component: pure functions of the track and now -----------------


def test_the_transitions_are_the_seeds() -> None:
    moves = {src: set(dsts) - {src} for src, dsts in PHASE_TRANSITIONS.items()}
    assert moves == {
        P.INIT: {P.SEARCHING, P.DECIDING, P.FINISHING},
        P.SEARCHING: {P.ANALYZING, P.STUCK_SEARCH, P.FINISHING},
        P.ANALYZING: {P.DECIDING, P.STUCK_ANALYZE, P.FINISHING},
        P.DECIDING: {P.SEARCHING, P.FINISHING, P.STUCK_DECIDE},
        P.STUCK_SEARCH: {P.FINISHING},
        P.STUCK_ANALYZE: {P.FINISHING},
        P.STUCK_DECIDE: {P.FINISHING},
        P.FINISHING: {P.DONE},
    }
    assert P.DECIDING not in PHASE_TRANSITIONS[P.SEARCHING]  # must analyze first
    assert P.SEARCHING not in PHASE_TRANSITIONS[P.ANALYZING]  # must decide first
    assert all(P.INIT not in dsts for dsts in PHASE_TRANSITIONS.values())  # no reset
    staying = {src for src, dsts in PHASE_TRANSITIONS.items() if src in dsts}
    assert staying == {P.SEARCHING, P.ANALYZING, P.DECIDING}


def test_the_timeouts_are_the_seeds() -> None:
    assert dict(PHASE_TIMEOUTS) == {
        P.SEARCHING: 60,
        P.ANALYZING: 30,
        P.DECIDING: 45,
        P.STUCK_SEARCH: 10,
        P.STUCK_ANALYZE: 10,
        P.STUCK_DECIDE: 10,
        P.FINISHING: 5,
    }


def test_the_state_follows_from_the_tool_chosen() -> None:
    assert infer_state_from_tool("context.fts_search") is P.SEARCHING
    assert infer_state_from_tool("context_fts_search") is P.SEARCHING
    assert infer_state_from_tool("context.memory_search") is P.SEARCHING
    assert infer_state_from_tool(None) is P.FINISHING
    assert infer_state_from_tool("finish") is P.FINISHING
    assert infer_state_from_tool("analyze") is P.ANALYZING
    assert infer_state_from_tool("calculator") is P.DECIDING
    assert infer_state_from_tool("web", routes={"web": P.SEARCHING}) is P.SEARCHING


def test_each_phase_has_its_tool_allowlist() -> None:
    assert action_allowed(P.SEARCHING, "context.fts_search")
    assert not action_allowed(P.SEARCHING, "calculator")
    assert action_allowed(P.DECIDING, "calculator")  # any tool
    for phase in (P.INIT, P.ANALYZING, P.STUCK_SEARCH, P.FINISHING):
        assert not action_allowed(phase, SEARCH)
        assert PHASE_ACTIONS[phase] == frozenset()
    names = [SEARCH, "analyze", "decide", "finish", "calculator"]
    assert offered_actions(P.STUCK_SEARCH, names) == ("finish",)
    assert offered_actions(P.SEARCHING, names) == (SEARCH, "analyze", "finish")
    assert offered_actions(P.ANALYZING, names) == ("analyze", "decide", "finish", "calculator")
    assert offered_actions(P.INIT, names) == (SEARCH, "decide", "finish", "calculator")


def searching(now: float = 0.0) -> PhaseTrack:
    return PhaseTrack().start(now).enter(P.SEARCHING, now)


def test_the_same_tool_three_times_in_a_row_is_stuck() -> None:
    detector = StuckDetector()
    track = searching().step(SEARCH).step("context.fts_search")
    assert detector.why(track, 1.0) is None
    # a step without a tool call (an analysis) does not break the run of calls
    track = track.step(None).step(SEARCH)
    assert detector.why(track, 1.0) is StuckReason.REPEATED_TOOL
    other = searching().step(SEARCH).step("context_memory_search").step(SEARCH)
    assert detector.why(other, 1.0) is None


def test_five_steps_in_one_state_is_stuck() -> None:
    detector = StuckDetector()
    track = PhaseTrack().start(0).enter(P.ANALYZING, 0)
    for _ in range(4):
        track = track.step(None)
    assert not detector.stuck(track, 1.0)
    track = track.step(None)
    assert detector.why(track, 1.0) is StuckReason.TOO_MANY_STEPS
    assert track.enter(P.DECIDING, 2.0).steps_in_state == 0  # counted per visit


def test_three_failed_decisions_are_stuck() -> None:
    detector = StuckDetector()
    track = PhaseTrack().start(0).enter(P.DECIDING, 0)
    track = track.step("calculator", error=True).step("lookup", error=True)
    assert detector.why(track, 1.0) is None
    assert detector.why(track.step("calculator", error=False), 1.0) is None
    assert detector.why(track.step("web", error=True), 1.0) is StuckReason.FAILED_DECISIONS


@pytest.mark.parametrize(("phase", "limit"), sorted(PHASE_TIMEOUTS.items(), key=str))
def test_a_phase_past_its_timeout_is_stuck(phase: Phase, limit: float) -> None:
    detector = StuckDetector()
    track = PhaseTrack().start(100.0).enter(phase, 100.0)
    assert detector.why(track, 100.0 + limit) is None
    assert detector.why(track, 100.0 + limit + 0.001) is StuckReason.TIMEOUT
    assert detector.why(PhaseTrack().start(0.0), 1e9) is None  # INIT has no timeout


def test_the_exit_suggestions_are_the_seeds_texts() -> None:
    assert exit_suggestion(P.SEARCHING) == (
        "You've searched 3 times for similar information. Try: finish with the results you found."
    )
    assert exit_suggestion(P.ANALYZING) == (
        "Analysis is taking too long. You have enough information. Try: finish with your summary."
    )
    assert exit_suggestion(P.DECIDING) == "Decision loop detected. Commit to an action or finish."
    for phase in (P.INIT, P.STUCK_SEARCH, P.FINISHING):
        assert exit_suggestion(phase) == (
            "No progress made. Use 'finish' with the best answer you have."
        )
    detector = StuckDetector()
    track = searching()
    assert detector.suggest_exit(track, 1.0) is None
    assert detector.suggest_exit(track, 61.0) == exit_suggestion(P.SEARCHING)


def test_each_policy_says_where_a_stuck_agent_goes() -> None:
    soft, hard, auto = (StuckDetector(policy=p) for p in StuckPolicy)
    for phase, stuck in ((P.SEARCHING, P.STUCK_SEARCH), (P.ANALYZING, P.STUCK_ANALYZE)):
        assert soft.forced_state(phase) is None
        assert hard.forced_state(phase) is stuck
        assert auto.forced_state(phase) is P.FINISHING
    assert hard.forced_state(P.DECIDING) is P.STUCK_DECIDE
    assert hard.forced_state(P.STUCK_DECIDE) is P.FINISHING  # past its own timeout
    assert auto.forced_state(P.FINISHING) is None


def test_the_agent_state_block_has_the_seeds_fields() -> None:
    detector = StuckDetector()
    track = searching(10.0).step(SEARCH)
    history = [
        PhaseStep(step_num=n, state=P.SEARCHING, tool_name=SEARCH, timestamp=10.0)
        for n in range(1, 8)
    ]
    block = detector.agent_state(track, 12.5, history, last=2)
    assert block == {
        "current_state": "searching",
        "duration_ms": 2500,
        "history": [
            {"step_num": 6, "state": "searching", "tool_name": SEARCH, "error": False},
            {"step_num": 7, "state": "searching", "tool_name": SEARCH, "error": False},
        ],
        "stuck": False,
        "stuck_reason": None,
        "suggested_exit": None,
        "next_states": ["analyzing", "finishing", "searching", "stuck_search"],
    }
    late = detector.agent_state(track, 71.0)
    assert (late["stuck"], late["stuck_reason"]) == (True, "timeout")
    assert late["suggested_exit"] == exit_suggestion(P.SEARCHING)
    json.dumps(late)  # JSON data, ready for a payload


def test_time_per_state_and_transition_counts_are_kept() -> None:
    track = PhaseTrack().start(0.0).enter(P.SEARCHING, 2.0).enter(P.ANALYZING, 5.0)
    track = track.enter(P.DECIDING, 6.0).enter(P.SEARCHING, 10.0).enter(P.SEARCHING, 11.0)
    assert dict(track.transitions) == {
        "init->searching": 1,
        "searching->analyzing": 1,
        "analyzing->deciding": 1,
        "deciding->searching": 1,
    }
    assert track.time_per_state(12.0) == {
        "init": 2.0,
        "searching": 5.0,
        "analyzing": 1.0,
        "deciding": 4.0,
    }


def test_bad_detector_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="repeat_limit"):
        StuckDetector(repeat_limit=0)
    with pytest.raises(ConfigurationError, match="timeout"):
        StuckDetector(timeouts={P.SEARCHING: -1})
    with pytest.raises(ConfigurationError, match="StuckPolicy"):
        StuckDetector(policy="hard")  # type: ignore[arg-type]


# -- the phase agent: seed 003's scenarios --------------------------------------


def call(name: str, n: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"t{n}", name=name, arguments=json.dumps(arguments))


async def run(
    script: Sequence[Any],
    *,
    policy: StuckPolicy = StuckPolicy.HARD,
    path: Path | None = None,
    clock: Any = None,
    task: str = "find it",
) -> tuple[Any, list[enum.Enum], ScriptedModel]:
    model = ScriptedModel(script)
    extra = {"clock": clock} if clock is not None else {}
    machine = phase_agent.build_machine(model, policy=policy, **extra)
    async with AgentSystem(path=path) as system:
        result = await system.run(machine, phase_agent.PhaseState(task=task), session_id="s")
        events = await system.stored(machine, "s").history() if path is not None else []
        if path is not None:
            offline = phase_agent.build_machine(ScriptedModel([]), policy=policy, **extra)
            report = await system.stored(offline, "s").replay(reexecute=True)
            assert report.ok, report.divergence
            assert report.state == result.state
    states = [P.INIT, *(e.to_state for e in events if e.kind is EventKind.STEP)]
    return result, states, model


SCENARIOS = {
    "normal": (
        [P.INIT, P.SEARCHING, P.ANALYZING, P.DECIDING, P.FINISHING, P.DONE],
        "answered",
        None,
    ),
    "stuck_search": (
        [P.INIT, P.SEARCHING, P.SEARCHING, P.SEARCHING, P.STUCK_SEARCH, P.FINISHING, P.DONE],
        "stuck_summary",
        StuckReason.REPEATED_TOOL,
    ),
    "quick_decision": ([P.INIT, P.DECIDING, P.FINISHING, P.DONE], "answered", None),
    "math": ([P.INIT, P.DECIDING, P.FINISHING, P.DONE], "answered", None),
    "searcher": (
        [
            P.INIT,
            P.SEARCHING,
            P.ANALYZING,
            P.DECIDING,
            P.SEARCHING,
            P.SEARCHING,
            P.STUCK_SEARCH,
            P.FINISHING,
            P.DONE,
        ],
        "stuck_summary",
        StuckReason.REPEATED_TOOL,
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_seeds_scenarios_take_the_seeds_path(scenario: str, tmp_path: Path) -> None:
    expected, exit, reason = SCENARIOS[scenario]
    task, script = phase_agent.SCENARIOS[scenario]
    result, states, model = await run(script, path=tmp_path / "a.db", task=task)
    assert result.ok, result.failure
    assert states == expected
    assert result.state.exit.value == exit
    steps = [s for s in result.state.steps if s.state is P.STUCK_SEARCH]
    if reason is not None:
        assert steps  # the stuck phase was visited; it was flagged when it was forced
    # every model call carried the agent-state block, last in its payload; the step
    # that found the agent stuck forced the STUCK_* phase without asking the model
    blocks = [_block(request.messages) for request in model.requests]
    forced = {P.STUCK_SEARCH, P.STUCK_ANALYZE, P.STUCK_DECIDE}
    asked = [s.value for s, then in itertools.pairwise(expected[:-1]) if then not in forced]
    assert [b["current_state"] for b in blocks] == asked


def _block(messages: Sequence[Message]) -> dict[str, Any]:
    last = messages[-1]
    assert isinstance(last, SystemMessage)
    assert last.content.startswith("agent_state: ")
    block: dict[str, Any] = json.loads(last.content.removeprefix("agent_state: "))
    return block


async def test_the_math_agent_stays_deciding_and_answers() -> None:
    task, script = phase_agent.SCENARIOS["math"]
    result, _, model = await run(script, task=task)
    assert result.state.answer == "3"
    (calc,) = [s for s in result.state.steps if s.tool_name == "calculator"]
    assert (calc.state, calc.result, calc.error) == (P.DECIDING, "3.0", False)
    assert [spec.name for spec in model.requests[1].tools] == [
        SEARCH,
        "context_memory_search",
        "calculator",
        "decide",
        "finish",
    ]


async def test_the_searcher_is_stuck_after_its_third_search(tmp_path: Path) -> None:
    task, script = phase_agent.SCENARIOS["searcher"]
    result, _, model = await run(script, path=tmp_path / "a.db", task=task)
    searches = [s for s in result.state.steps if s.tool_name == SEARCH]
    assert len(searches) == 3
    assert result.state.stuck_reason is None  # cleared by the step after it
    stuck_request = model.requests[-1]
    assert [spec.name for spec in stuck_request.tools] == ["finish"]  # only finish when stuck
    told = [m.content for m in stuck_request.messages if m.role == "user"]
    assert told[-1] == f"You are stuck (repeated_tool). {exit_suggestion(P.SEARCHING)}"
    track = result.state.track
    assert track.transitions["deciding->searching"] == 1
    assert set(track.time_per_state(0.0)) >= {"init", "searching", "analyzing", "deciding"}


@pytest.mark.parametrize(
    ("policy", "expected", "exit"),
    [
        (
            StuckPolicy.SOFT,
            [P.INIT, P.SEARCHING, P.SEARCHING, P.SEARCHING, P.FINISHING, P.DONE],
            "answered",
        ),
        (
            StuckPolicy.HARD,
            [P.INIT, P.SEARCHING, P.SEARCHING, P.SEARCHING, P.STUCK_SEARCH, P.FINISHING, P.DONE],
            "stuck_summary",
        ),
        (
            StuckPolicy.AUTO_FINISH,
            [P.INIT, P.SEARCHING, P.SEARCHING, P.SEARCHING, P.FINISHING, P.DONE],
            "auto_finished",
        ),
    ],
)
async def test_each_policy_handles_stuck_in_search(
    policy: StuckPolicy, expected: list[Phase], exit: str
) -> None:
    task, script = phase_agent.SCENARIOS["stuck_search"]
    with capture_logs() as logs:
        result, _, model = await run(script, policy=policy, path=Path("p.db"), task=task)
    assert result.ok
    assert result.state.exit.value == exit
    from_events = await _states(Path("p.db"), policy)
    assert from_events == expected
    # logged once by the run, once more by the replay's re-execution of that step
    warnings = [(e["phase"], e["reason"]) for e in logs if e["event"] == "agent_stuck"]
    assert warnings == [("searching", "repeated_tool")] * 2
    if policy is StuckPolicy.SOFT:  # the model is told, and decides
        block = _block(model.requests[3].messages)
        assert block["stuck"] is True
        assert block["suggested_exit"] == exit_suggestion(P.SEARCHING)
        assert result.state.answer == "No quantum module is documented."
    if policy is StuckPolicy.AUTO_FINISH:  # the model is not asked again
        assert len(model.requests) == 3
        assert (result.state.answer or "").startswith("Reached stuck state. Summary: ")


async def _states(path: Path, policy: StuckPolicy) -> list[enum.Enum]:
    machine = phase_agent.build_machine(ScriptedModel([]), policy=policy)
    async with AgentSystem(path=path) as system:
        events = await system.stored(machine, "s").history()
    return [P.INIT, *(e.to_state for e in events if e.kind is EventKind.STEP)]


@pytest.mark.parametrize(
    ("script", "from_state", "to_state"),
    [
        (
            [call(SEARCH, 1, query="q"), call("calculator", 2, a=1, b=2, op="+")],
            "searching",
            "deciding",
        ),
        (
            [call(SEARCH, 1, query="q"), call("analyze", 2, notes="n"), call(SEARCH, 3, query="q")],
            "analyzing",
            "searching",
        ),
    ],
    ids=["searching-to-deciding", "analyzing-to-searching"],
)
async def test_a_forbidden_transition_fails_the_session(
    script: list[Any], from_state: str, to_state: str
) -> None:
    result, _, _ = await run(script)
    assert not result.ok
    assert result.state.lifecycle is P.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "IllegalTransition"
    assert f"{from_state!r} -> {to_state!r}" in result.failure.message


async def test_an_agent_in_a_tool_loop_is_stuck_deciding() -> None:
    loop = [call("calculator", n, a=1, b=1, op="+") for n in range(1, 4)]
    result, _, _ = await run([*loop, call("finish", 9, answer="2")], path=Path("l.db"))
    assert result.state.exit.value == "stuck_summary"
    assert await _states(Path("l.db"), StuckPolicy.HARD) == [
        P.INIT,
        P.DECIDING,
        P.DECIDING,
        P.DECIDING,
        P.STUCK_DECIDE,
        P.FINISHING,
        P.DONE,
    ]


async def test_failed_decisions_and_long_analysis_are_stuck_too() -> None:
    # three failing tool calls in a row (different tools: no repeated-tool streak)
    failing = [
        call("calculator", 1, a=1, b=0, op="%"),
        call("lookup", 2, key="k"),  # not a tool: an error observation
        call("calculator", 3, a=1, b=0, op="^"),
    ]
    result, _, _ = await run([*failing, "give up"])
    assert result.state.stuck_reason is None
    assert [(s.state, s.tool_name, s.error) for s in result.state.steps[1:4]] == [
        (P.DECIDING, "calculator", True),
        (P.DECIDING, "lookup", True),
        (P.DECIDING, "calculator", True),
    ]
    assert result.state.steps[-2].state is P.STUCK_DECIDE
    assert result.state.answer == "give up"
    # five steps in ANALYZING
    thinking = [call(SEARCH, 1, query="q")] + [
        call("analyze", n, notes=f"note {n}") for n in range(2, 7)
    ]
    result, _, _ = await run([*thinking, "summary"])
    assert [s.state for s in result.state.steps].count(P.ANALYZING) == 5
    assert result.state.steps[-2].state is P.STUCK_ANALYZE


async def test_an_agent_that_finishes_at_once_goes_init_to_finishing(tmp_path: Path) -> None:
    result, states, _ = await run(["nothing to do"], path=tmp_path / "a.db")
    assert states == [P.INIT, P.FINISHING, P.DONE]
    assert (result.state.answer, result.state.exit.value) == ("nothing to do", "answered")


# -- timeouts, on trio's virtual clock -------------------------------------------


@on_virtual_clock
async def test_a_slow_search_phase_times_out_after_60_seconds() -> None:
    # alternate the search tools so that no tool repeats: only the clock can say stuck
    script: list[Any] = [call(SEARCH, 1, query="a")]
    for n, name in enumerate([*(["context_memory_search", SEARCH] * 3)], start=2):
        script += [Delay(25), call(name, n, query="b")]
    result, _, _ = await run(
        [*script[:7], call("finish", 20, answer="x")], clock=anyio.current_time
    )
    visited = [(s.state, s.timestamp) for s in result.state.steps]
    assert visited[:5] == [
        (P.INIT, 0.0),
        (P.SEARCHING, 0.0),
        (P.SEARCHING, 25.0),
        (P.SEARCHING, 50.0),
        (P.SEARCHING, 75.0),  # 75 s in SEARCHING: past its 60 s
    ]
    assert visited[5][0] is P.STUCK_SEARCH
    assert result.state.answer == "x"


@on_virtual_clock
async def test_a_model_call_past_the_phase_timeout_is_cut_and_the_phase_is_stuck() -> None:
    script = [call(SEARCH, 1, query="a"), call("analyze", 2, notes="n"), Delay(1000)]
    script += [call("finish", 3, answer="summary")]
    result, _, _ = await run(script, clock=anyio.current_time)
    assert result.ok
    assert result.retries == 1  # the ANALYZING step overran 30 s and was cancelled
    phases = [s.state for s in result.state.steps]
    assert phases == [P.INIT, P.SEARCHING, P.ANALYZING, P.STUCK_ANALYZE, P.FINISHING]
    assert result.state.answer == "summary"
    assert anyio.current_time() < 100  # cancelled at the deadline, not after the delay


@on_virtual_clock
async def test_a_stuck_phase_past_its_10_seconds_finishes_with_the_best_answer() -> None:
    script = [call(SEARCH, n, query="a") for n in range(1, 4)] + [Delay(1000)]
    result, _, _ = await run(script, clock=anyio.current_time)
    assert result.ok
    phases = [s.state for s in result.state.steps]
    assert phases[-3:] == [P.SEARCHING, P.STUCK_SEARCH, P.FINISHING]
    assert result.state.exit.value == "auto_finished"
    assert result.state.stuck_reason is StuckReason.TIMEOUT


# -- durability ------------------------------------------------------------------


class Hanging:
    """A model that hangs on its ``at``-th call (until released), else asks the script."""

    def __init__(self, script: Sequence[Any], at: int) -> None:
        self.inner = ScriptedModel(script)
        self.at = at
        self.calls = 0
        self.entered = anyio.Event()
        self.hang = True

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        self.calls += 1
        if self.hang and self.calls == self.at:
            self.entered.set()
            await anyio.sleep_forever()
        return await self.inner.complete(messages, tools=tools, json_mode=json_mode)


async def test_a_run_stopped_midway_resumes_and_replays_without_the_model(
    tmp_path: Path,
) -> None:
    task, script = phase_agent.SCENARIOS["searcher"]
    db = tmp_path / "a.db"
    model = Hanging(script, at=4)  # in DECIDING, before the second search
    machine = phase_agent.build_machine(model)
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(machine, phase_agent.PhaseState(task=task), session_id="s")
            await model.entered.wait()
            scope.cancel()  # the service stops in the middle of a step
    model.hang = False
    async with AgentSystem(path=db) as system:
        handle = await system.resume(machine, "s")
        result = await handle.result()
        events = await system.stored(machine, "s").history()
        offline = phase_agent.build_machine(ScriptedModel([]))
        report = await system.stored(offline, "s").replay(reexecute=True)
    assert result.ok
    assert result.state.exit is phase_agent.PhaseExit.STUCK_SUMMARY
    assert [e.kind for e in events].count(EventKind.RESUME) == 1
    states = [P.INIT, *(e.to_state for e in events if e.kind is EventKind.STEP)]
    assert states == SCENARIOS["searcher"][0]
    assert report.ok, report.divergence
    assert report.state == result.state
    assert report.reexecuted == len([e for e in events if e.kind is EventKind.STEP])


# -- the example from the command line -------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_example_prints_a_readable_trace(backend: str) -> None:
    import os
    import subprocess

    script = Path(phase_agent.__file__)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}  # scripted
    result = subprocess.run(
        [sys.executable, str(script), backend, "hard"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**env, "PYTHONPATH": str(script.parents[2])},
    )
    lines = result.stdout.splitlines()
    assert (
        "searcher (hard): init -> searching -> analyzing -> deciding -> searching -> "
        "searching -> stuck_search -> finishing -> done"
    ) in lines
    assert "  #6 searching -> stuck_search ran context_fts_search" in lines
    assert (
        "  exit: stuck_summary; answer: Savant: a Ruby agent framework (runtime, reasoning API)."
        in lines
    )
    assert "  exit: answered; answer: 3" in lines  # the math agent
    assert lines.count("  replay without the model: ok") == len(phase_agent.SCENARIOS)
