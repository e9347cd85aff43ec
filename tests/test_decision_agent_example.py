"""examples/decision_agent.py, the budgeted decision agent: every exit reason, wrap-up, overdraft.

Each scenario asserts the exact sequence of states the session went through
(``D`` decision, ``PV`` protocol_verify, ``TE`` tool_execution, ``R`` the
router ``route_after_decision``, ``X`` exit) and its exit reasons.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem
from arkhon_rheo.react import RoundBudget, SlotBudget
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.testing import ScriptedModel, run_machine
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from arkhon_rheo import SessionResult
    from arkhon_rheo.protocols import TransitionEvent

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "decision_agent.py"
_spec = importlib.util.spec_from_file_location("decision_agent", SCRIPT)
assert _spec is not None
assert _spec.loader is not None
agent: Any = importlib.util.module_from_spec(_spec)
sys.modules["decision_agent"] = agent
_spec.loader.exec_module(agent)

Exit = agent.Exit
say, use = agent.say, agent.use
SEARCH, FETCH, LOOKUP = agent.SEARCH, agent.FETCH, agent.LOOKUP
NAMES = {
    "decision": "D",
    "protocol_verify": "PV",
    "tool_execution": "TE",
    "route_after_decision": "R",
    "exit": "X",
    "done": "DONE",
    "failed": "FAILED",
}


class Run:
    """One finished session: its result, the states it went through, what the model saw."""

    def __init__(
        self, result: SessionResult[Any], events: list[TransitionEvent], model: ScriptedModel
    ) -> None:
        self.result = result
        self.state = result.state
        self.events = events
        visited = [events[0].from_state] + [e.to_state for e in events if e.stage is not None]
        self.states = " ".join(NAMES[state.value] for state in visited)
        self.journals = [str(r.messages[-1].content) for r in model.requests]
        self.lines = [e.patch.values["budget_line"] for e in events if e.stage == "decision"]

    @property
    def reasons(self) -> tuple[str | None, str | None]:
        """(exit_reason set by the router, final_exit_reason after the final analysis)."""
        exit_reason, final = self.state.exit_reason, self.state.final_exit_reason
        return (exit_reason.value if exit_reason else None, final.value if final else None)


async def run(state: Any, script: list[str], tools: Toolbox | None = None) -> Run:
    model = ScriptedModel(script)
    machine = agent.build_machine(model, tools or agent.TOOLS)
    async with MemoryStore() as store:
        done = await run_machine(machine, state, session_id="s", store=store)
    assert done.result.ok, done.result.failure
    assert model.script == []  # every scripted decision was asked for
    return Run(done.result, list(done.events), model)


# -- one scenario per exit reason ----------------------------------------------------------

EXPECTED = {
    "complete": ("D PV TE D PV TE D R X DONE", "complete"),
    "clarify": ("D R X DONE", "clarify"),
    "max_iterations": ("D PV TE D PV TE D R X DONE", "max_iterations"),
    "context_reads_exhausted": ("D PV TE D R X DONE", "context_reads_exhausted"),
    "decision_no_progress": ("D R X DONE", "decision_no_progress"),
    "decision_reruns_exhausted": ("D D R X DONE", "decision_reruns_exhausted"),
    "wrapup_no_decision_rerun": ("D PV TE D R D R X DONE", "wrapup_no_decision_rerun"),
    "exploit_overdraft_blocked": ("D PV TE D R X DONE", "exploit_overdraft_blocked"),
    "incomplete_contract": ("D PV TE D R X DONE", "complete"),
}


def test_there_is_a_scenario_for_each_of_the_nine_exit_reasons() -> None:
    assert sorted(EXPECTED) == sorted(agent.SCENARIOS) == sorted(e.value for e in Exit)
    assert len(EXPECTED) == 9


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_each_exit_reason(name: str) -> None:
    state, script = agent.SCENARIOS[name]
    done = await run(state, list(script))
    states, exit_reason = EXPECTED[name]
    assert done.states == states
    assert done.reasons == (exit_reason, name)
    assert done.state.pending_exit_reason is not None or name == "incomplete_contract"


async def test_complete_maps_the_artifact_and_keeps_the_answer() -> None:
    done = await run(*agent.SCENARIOS["complete"])
    assert [a.artifact_kind for a in done.state.artifacts] == ["search", "document"]
    assert done.state.contract[0].artifact_id == "a2"
    assert done.state.answer == "Paris"
    g = done.state.budget.global_budget
    assert (g.decision_rounds_used, g.tool_calls_used) == (3, 2)
    assert (g.explore_rounds_used, g.exploit_rounds_used) == (1, 1)
    stage = done.state.budget.stages["capital"]
    assert (stage.explore_used, stage.exploit_used) == (1, 1)


async def test_the_budget_line_is_the_last_line_of_every_journal_the_model_reads() -> None:
    done = await run(*agent.SCENARIOS["complete"])
    assert len(done.journals) == len(done.lines) == 3
    for journal, line in zip(done.journals, done.lines, strict=True):
        assert journal.endswith("\n" + line)
    assert done.lines[1] == (
        "BUDGET_STATE: global(decisions left 5/6, tools left 5/6, explore left 2/3, exploit left "
        "3/3, render left 1/1, decision_reruns left 2/2, context_reads left 4/4)\n"
        "        stage[capital](explore left 1/2, exploit left 2/2, render left 1/1, "
        "context_reads left 2/2)"
    )


async def test_max_iterations_still_asks_the_model_once_past_the_gate() -> None:
    done = await run(*agent.SCENARIOS["max_iterations"])
    assert "decisions left 0/2," in done.lines[-1]
    assert len(done.journals) == 3  # two rounds of budget, then the must-finish round
    finishing = done.events[6]
    assert finishing.stage == "decision"
    assert finishing.patch.values["pending_exit_reason"] is Exit.MAX_ITERATIONS


async def test_the_tool_call_budget_is_a_must_finish_gate_too() -> None:
    state = agent.task_state(budget=RoundBudget(6, 1, 3, 0, 1, 2, 4))
    done = await run(state, [SEARCH, SEARCH])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("max_iterations", "max_iterations")
    assert "tools left 0/1," in done.lines[-1]


async def test_an_explicit_exit_in_the_must_finish_round_wins_over_max_iterations() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 0, 1, 2, 4))
    done = await run(state, [LOOKUP, say("complete", map={"capital": "a1"}, message="Paris")])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("complete", "complete")


async def test_an_unusable_reply_is_no_progress() -> None:
    done = await run(agent.task_state(), ["this is not JSON"])
    assert done.states == "D R X DONE"
    assert done.reasons == ("decision_no_progress", "decision_no_progress")
    assert "unusable decision: the reply is not JSON" in done.state.notes[-1]


# -- the wrap-up round --------------------------------------------------------------------


async def test_the_wrapup_round_maps_an_artifact_then_completes() -> None:
    script = [LOOKUP, say("complete"), say("complete", map={"capital": "a1"}, message="Paris")]
    done = await run(agent.task_state(), script)
    assert done.states == "D PV TE D R D R X DONE"
    assert done.reasons == ("complete", "complete")
    assert done.state.wrapup_round_used
    assert not done.state.is_wrapup_round
    assert ", wrapup active" not in done.lines[1]
    assert ", wrapup active\n" in done.lines[2]
    assert "WRAPUP:" in done.journals[2]
    route = done.events[4]
    assert route.stage == "route_after_decision"
    assert route.patch.values == {
        "exit_reason": None,
        "pending_exit_reason": None,
        "is_wrapup_round": True,
        "wrapup_round_used": True,
    }


async def test_a_tool_call_in_the_wrapup_round_forces_the_exit() -> None:
    done = await run(agent.task_state(), [LOOKUP, say("complete"), SEARCH])
    assert done.states == "D PV TE D R D R X DONE"
    assert done.reasons == (None, "incomplete_contract")  # nothing pending to preserve
    assert len(done.state.artifacts) == 1  # the tool did not run
    assert done.state.budget.global_budget.tool_calls_used == 1


async def test_a_forced_wrapup_exit_preserves_a_pending_max_iterations() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 0, 1, 2, 4))
    done = await run(state, [LOOKUP, SEARCH, SEARCH])
    assert done.states == "D PV TE D R D R X DONE"
    assert done.reasons == ("max_iterations", "max_iterations")
    assert ", wrapup active\n" in done.lines[2]


async def test_there_is_a_single_wrapup_round() -> None:
    done = await run(agent.task_state(), [LOOKUP, say("complete"), say("complete")])
    assert done.states == "D PV TE D R D R X DONE"  # no second wrap-up
    assert done.reasons == ("complete", "incomplete_contract")


async def test_a_clarify_with_mappable_artifacts_gets_the_wrapup_round_too() -> None:
    done = await run(agent.task_state(), [LOOKUP, say("clarify"), say("clarify")])
    assert done.states == "D PV TE D R D R X DONE"
    assert done.reasons == ("clarify", "clarify")


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (SEARCH, "a search artifact"),
        (use("fetch_page", "exploit", url="https://example.org/none"), "an artifact with an error"),
        (use("lookup", "exploit", key="unknown"), "an artifact with a null value"),
    ],
    ids=["search", "error", "null"],
)
async def test_no_wrapup_without_a_mappable_artifact(call: str, why: str) -> None:
    done = await run(agent.task_state(), [call, say("complete")])
    assert done.states == "D PV TE D R X DONE", why
    assert done.reasons == ("complete", "incomplete_contract")
    assert not done.state.artifacts[0].mappable
    assert not done.state.wrapup_round_used


async def test_no_wrapup_without_pending_slots() -> None:
    lookup = say(
        "call_tool", strategy="exploit", tool="lookup", arguments={"key": "france.capital"}
    )
    done = await run(agent.task_state(slots={}), [lookup, say("complete", message="Paris")])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("complete", "complete")


async def test_no_wrapup_when_the_mappable_artifact_is_already_mapped() -> None:
    slots = {"capital": "The capital", "population": "Its population"}
    state = agent.task_state(slots=slots)
    done = await run(state, [LOOKUP, say("complete", map={"capital": "a1"})])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("complete", "incomplete_contract")  # population is still pending


# -- the exploit overdraft ------------------------------------------------------------------


async def test_an_exploit_overdraft_round_runs_past_the_gate() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 3, 1, 2, 4))
    script = [SEARCH, FETCH, say("complete", map={"capital": "a2"}, message="Paris")]
    done = await run(state, script)
    assert done.states == "D PV TE D PV TE D R X DONE"
    assert done.reasons == ("complete", "complete")
    assert ", exploit_overdraft 1/3\n" in done.lines[1]
    assert ", exploit_overdraft 2/3\n" in done.lines[2]
    assert [
        e.patch.values["allow_exploit_overdraft"] for e in done.events if e.stage == "decision"
    ] == [
        False,
        True,
        True,
    ]
    assert done.state.budget.global_budget.decision_rounds_used == 3  # overdrawn: 3 of 1
    assert done.state.budget.exploit_overdraft_used == 2


async def test_a_decision_rerun_in_the_overdraft_is_blocked() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 3, 1, 2, 4))
    done = await run(state, [SEARCH, say("decision", show_artifacts=["a1"])])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("exploit_overdraft_blocked", "exploit_overdraft_blocked")


async def test_no_overdraft_when_the_pending_slots_stage_has_no_exploit_left() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 3, 1, 2, 4), stage=SlotBudget(2, 0, 1, 2))
    done = await run(state, [SEARCH, FETCH])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("max_iterations", "max_iterations")
    assert "exploit_overdraft" not in done.lines[1]


async def test_the_overdraft_ends_when_its_rounds_are_used() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 1, 1, 2, 4))
    done = await run(state, [SEARCH, FETCH, FETCH, SEARCH])
    # Round 3 is past the gate with no overdraft left: max_iterations, then the wrap-up
    # round for the unmapped page; its tool call forces the exit, max_iterations kept.
    assert done.states == "D PV TE D PV TE D R D R X DONE"
    assert done.reasons == ("max_iterations", "max_iterations")
    assert ", exploit_overdraft 1/1\n" in done.lines[1]
    assert "exploit_overdraft" not in done.lines[2]


# -- decision reruns ------------------------------------------------------------------------


async def test_a_rerun_shows_what_was_asked_and_counts_it() -> None:
    script = [
        LOOKUP,
        say("decision", slot_id="capital", show_artifacts=["a1"], show_skills=["mapping"]),
        say("complete", map={"capital": "a1"}, message="Paris"),
    ]
    done = await run(agent.task_state(), script)
    assert done.states == "D PV TE D D R X DONE"
    assert done.reasons == ("complete", "complete")
    assert "SKILL mapping:" in done.journals[2]
    assert "SKILL mapping:" not in done.journals[1]
    g = done.state.budget.global_budget
    assert (g.decision_reruns_used, g.context_reads_used, g.decision_rounds_used) == (1, 2, 3)
    assert done.state.budget.stages["capital"].context_reads_used == 2
    assert "decision_reruns left 1/2, context_reads left 2/4)" in done.lines[2]


async def test_a_rerun_shows_an_artifact_in_full() -> None:
    script = [SEARCH, say("decision", show_artifacts=["a1"]), say("clarify")]
    done = await run(agent.task_state(), script)
    assert '["https://example.org/paris","https://example.org/lyon"]' in done.journals[2]
    assert '["https://example.org/paris","https://example.org/lyon"]' not in done.journals[1]


async def test_no_rerun_past_the_gate() -> None:
    state = agent.task_state(budget=RoundBudget(1, 6, 3, 0, 1, 2, 4))
    done = await run(state, [SEARCH, say("decision", show_skills=["mapping"])])
    assert done.states == "D PV TE D R X DONE"
    assert done.reasons == ("max_iterations", "max_iterations")
    assert done.state.budget.global_budget.decision_reruns_used == 0


# -- protocol_verify's shape checks ---------------------------------------------------------


def bad(**fields: Any) -> str:
    base = {"strategy": "explore", "slot_id": "capital", "tool": "web_search"}
    return str(say("call_tool", **{**base, **fields}))


@pytest.mark.parametrize(
    ("decision", "problem"),
    [
        (bad(tool="teleport", arguments={}), "unknown tool 'teleport'"),
        (bad(strategy="guess", arguments={"query": "x"}), "strategy 'guess' is not one of"),
        (bad(strategy=None, arguments={"query": "x"}), "strategy None is not one of"),
        (bad(arguments="not json"), "the arguments of web_search are not JSON"),
        (bad(arguments="[1, 2]"), "the arguments of web_search must be a JSON object"),
        (bad(arguments={"q": "x"}), "bad arguments for web_search: query: Field required"),
        (bad(slot_id="elsewhere", arguments={"query": "x"}), "unknown slot 'elsewhere'"),
    ],
    ids=["tool", "strategy", "no-strategy", "not-json", "not-object", "schema", "slot"],
)
async def test_a_malformed_tool_call_is_blocked_and_goes_back_to_decision(
    decision: str, problem: str
) -> None:
    done = await run(agent.task_state(), [decision, say("clarify")])
    assert done.states == "D PV D R X DONE"
    assert done.reasons == ("clarify", "clarify")
    assert done.state.protocol_error.startswith(problem)
    assert f"NOTE: blocked: {problem}" in done.journals[1]
    assert done.state.artifacts == ()
    assert done.state.budget.global_budget.tool_calls_used == 0


# -- the router alone sets exit_reason --------------------------------------------------------


def test_only_the_router_may_write_exit_reason() -> None:
    machine = agent.build_machine(ScriptedModel())
    writers = {cls.name for cls in machine.stages.values() if "exit_reason" in cls.writes}
    assert writers == {"route_after_decision"}
    pending = {cls.name for cls in machine.stages.values() if "pending_exit_reason" in cls.writes}
    assert pending == {"decision", "route_after_decision"}
    final = {cls.name for cls in machine.stages.values() if "final_exit_reason" in cls.writes}
    assert final == {"exit"}


# -- durability: stop mid-way, resume, replay without the model ----------------------------------


async def test_a_stopped_run_resumes_and_replays_without_the_model(tmp_path: Path) -> None:
    entered = anyio.Event()
    hang = [True]
    runs: list[str] = []

    @tool(name="fetch_page")
    async def hanging_fetch(url: str) -> str:
        """Fetch a page; hangs the first time, as if the process stopped."""
        runs.append(url)
        if hang[0]:
            entered.set()
            await anyio.sleep_forever()
        return str(agent.PAGES[url])

    tools = Toolbox(agent.web_search, hanging_fetch, agent.lookup, agent.calculate)
    state, script = agent.SCENARIOS["complete"]
    model = ScriptedModel(list(script))
    machine = agent.build_machine(model, tools)
    db = tmp_path / "decisions.db"
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=db) as system:
            await system.start(machine, state, session_id="s")
            await entered.wait()
            scope.cancel()  # the service stops in the middle of the exploit round
    assert len(model.requests) == 2
    hang[0] = False
    async with AgentSystem(path=db) as system:
        handle = await system.resume(machine, "s")
        result = await handle.result()
        events = await system.stored(machine, "s").history()
        offline = agent.build_machine(ScriptedModel([]), tools)
        report = await system.stored(offline, "s").replay(reexecute=True)
    assert result.ok
    assert result.state.final_exit_reason is Exit.COMPLETE
    assert runs == ["https://example.org/paris"] * 2  # the step in flight reran
    stages = " ".join(NAMES[e.to_state.value] for e in events if e.stage is not None)
    assert stages == "PV TE D PV TE D R X DONE"
    assert [e.kind.value for e in events].count("resume") == 1
    assert report.ok, report.divergence
    assert report.state == result.state
    assert len(model.requests) == 3  # replay asked nothing of the model


async def test_the_machine_runs_on_an_openai_compatible_server() -> None:
    from arkhon_rheo.models import OpenAIChatClient
    from tests.support.chat_server import Canned, open_chat_server

    state, script = agent.SCENARIOS["complete"]
    async with open_chat_server() as server:
        server.add(*(Canned.completion(decision) for decision in script))
        async with (
            OpenAIChatClient("test-model", api_key="k", base_url=server.url) as client,
            MemoryStore() as store,
            AgentSystem(store=store) as system,
        ):
            result = await system.run(agent.build_machine(client), state, session_id="s")
    assert result.ok, result.failure
    assert result.state.final_exit_reason is Exit.COMPLETE
    assert len(server.requests) == 3
    body = server.requests[1].json
    assert body["response_format"] == {"type": "json_object"}
    assert "BUDGET_STATE: global(decisions left 5/6," in body["messages"][-1]["content"]
