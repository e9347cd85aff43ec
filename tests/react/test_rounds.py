"""Seed 001's budgets: counters, the must-finish gate, the overdraft, the BUDGET_STATE line."""

from __future__ import annotations

import dataclasses
import re

import pytest

from arkhon_rheo import AgentState, ConfigurationError, Lifecycle, Machine, Patch, stage
from arkhon_rheo.protocols import FrozenMap
from arkhon_rheo.react import (
    STRATEGIES,
    DecisionBudget,
    RoundBudget,
    SlotBudget,
    format_budget_for_llm,
)

#: The seed's "Budget Snapshot Format" block, character for character.
SEED_FORMAT = (
    "BUDGET_STATE: global(decisions left D/T, tools left C/T, explore left E/T, exploit left "
    "X/T, render left R/T, decision_reruns left r/R, context_reads left c/C)\n"
    "        stage[slot_id](explore left e/E, exploit left x/X, render left r/R, "
    "context_reads left c/C)"
)


def budget(**used: int) -> RoundBudget:
    return RoundBudget(9, 8, 7, 6, 5, 4, 3, **used)


def test_the_line_has_the_seeds_format_character_for_character() -> None:
    state = DecisionBudget(
        budget(decision_rounds_used=2, tool_calls_used=1, context_reads_used=1),
        FrozenMap({"slot_id": SlotBudget(4, 3, 2, 1, explore_used=1)}),
    )
    line = format_budget_for_llm(state, "slot_id")
    assert line == (
        "BUDGET_STATE: global(decisions left 7/9, tools left 7/8, explore left 7/7, exploit left "
        "6/6, render left 5/5, decision_reruns left 4/4, context_reads left 2/3)\n"
        "        stage[slot_id](explore left 3/4, exploit left 3/3, render left 2/2, "
        "context_reads left 1/1)"
    )
    # The same text as the seed's, once each "left/total" pair is made a placeholder.
    assert re.sub(r"\d+/\d+", "n/n", line) == re.sub(r"[A-Za-z]/[A-Za-z]", "n/n", SEED_FORMAT)


def test_the_global_part_alone_without_a_stage() -> None:
    state = DecisionBudget(budget(), FrozenMap({"a": SlotBudget(1, 1, 1, 1)}))
    expected = (
        "BUDGET_STATE: global(decisions left 9/9, tools left 8/8, explore left 7/7, exploit left "
        "6/6, render left 5/5, decision_reruns left 4/4, context_reads left 3/3)"
    )
    assert format_budget_for_llm(state) == expected
    assert format_budget_for_llm(state, "unknown-slot") == expected  # no stage budget: no stage
    assert "\n" not in expected


def test_the_flags_follow_the_global_part() -> None:
    state = DecisionBudget(
        budget(decision_rounds_used=9, exploit_rounds_used=1),
        FrozenMap({"s": SlotBudget(1, 1, 1, 1)}),
        exploit_overdraft_used=1,
        exploit_overdraft_limit=5,
    )
    head = (
        "BUDGET_STATE: global(decisions left 0/9, tools left 8/8, explore left 7/7, exploit left "
        "5/6, render left 5/5, decision_reruns left 4/4, context_reads left 3/3)"
    )
    stage_part = (
        "\n        stage[s](explore left 1/1, exploit left 1/1, render left 1/1, "
        "context_reads left 1/1)"
    )
    assert format_budget_for_llm(state, wrapup=True) == head + ", wrapup active"
    assert format_budget_for_llm(state, overdraft=True) == head + ", exploit_overdraft 1/5"
    assert (
        format_budget_for_llm(state, "s", wrapup=True, overdraft=True)
        == head + ", wrapup active, exploit_overdraft 1/5" + stage_part
    )


def test_an_overdrawn_counter_shows_zero_left() -> None:
    state = DecisionBudget(budget(decision_rounds_used=11, tool_calls_used=8))
    assert "decisions left 0/9, tools left 0/8," in format_budget_for_llm(state)
    assert state.global_budget.remaining_decision_rounds == -2


@pytest.mark.parametrize(
    ("used", "must_finish"),
    [
        ({}, False),
        ({"decision_rounds_used": 8}, False),
        ({"decision_rounds_used": 9}, True),
        ({"tool_calls_used": 8}, True),
        ({"decision_rounds_used": 12}, True),
        ({"explore_rounds_used": 7, "exploit_rounds_used": 6, "render_rounds_used": 5}, False),
        ({"decision_reruns_used": 4, "context_reads_used": 3}, False),
    ],
)
def test_must_finish_is_no_decision_or_no_tool_call_left(
    used: dict[str, int], must_finish: bool
) -> None:
    assert budget(**used).must_finish is must_finish
    assert DecisionBudget(budget(**used)).must_finish is must_finish


def test_spending_returns_new_values_and_leaves_the_old_ones() -> None:
    start = DecisionBudget(budget(), FrozenMap({"s": SlotBudget(2, 2, 1, 2)}))
    after = start.spend_round("exploit", "s").spend_context_reads(2, "s")
    after = dataclasses.replace(
        after, global_budget=after.global_budget.spend(decision_rounds=1, tool_calls=1)
    )
    assert start.global_budget == budget()
    assert start.stages["s"] == SlotBudget(2, 2, 1, 2)
    g = after.global_budget
    assert (g.decision_rounds_used, g.tool_calls_used, g.exploit_rounds_used) == (1, 1, 1)
    assert (g.context_reads_used, g.remaining_context_reads) == (2, 1)
    assert after.stages["s"] == SlotBudget(2, 2, 1, 2, exploit_used=1, context_reads_used=2)
    for strategy in STRATEGIES:  # a slot without a stage budget counts globally only
        assert start.spend_round(strategy, "other").stages == start.stages
    with pytest.raises(dataclasses.FrozenInstanceError):
        start.global_budget.tool_calls_used = 3  # type: ignore[misc]


def test_bad_counts_are_refused_with_a_typed_error() -> None:
    with pytest.raises(ConfigurationError, match=r"RoundBudget\(max_tool_calls=-1\)"):
        RoundBudget(1, -1, 1, 1, 1, 1, 1)
    with pytest.raises(ConfigurationError, match=r"SlotBudget\(render=1.5\)"):
        SlotBudget(1, 1, 1.5, 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown strategy 'search'"):
        DecisionBudget(budget()).spend_round("search")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"stages\['s'\]"):
        DecisionBudget(budget(), FrozenMap({"s": 3}))  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="exploit_overdraft_used"):
        DecisionBudget(budget(), exploit_overdraft_used=-1)


def test_exploit_overdraft_needs_exploit_rounds_globally_and_in_a_pending_slot() -> None:
    stages = FrozenMap({"a": SlotBudget(1, 1, 1, 1), "b": SlotBudget(1, 0, 1, 1)})
    state = DecisionBudget(budget(decision_rounds_used=9), stages)
    assert state.exploit_overdraft_available(["a"])
    assert not state.exploit_overdraft_available(["b"])  # b's stage has no exploit round left
    assert state.exploit_overdraft_available(["b", "c"])  # c has no stage budget
    assert not state.exploit_overdraft_available([])  # nothing pending: nothing to exploit for
    spent = DecisionBudget(budget(exploit_rounds_used=6), stages)
    assert not spent.exploit_overdraft_available(["a"])


def test_the_overdraft_limit_is_fixed_when_it_begins() -> None:
    state = DecisionBudget(budget(decision_rounds_used=9, exploit_rounds_used=4))
    first = state.take_overdraft_round()
    assert (first.exploit_overdraft_used, first.exploit_overdraft_limit) == (1, 2)
    second = first.take_overdraft_round()
    assert (second.exploit_overdraft_used, second.exploit_overdraft_limit) == (2, 2)
    assert not second.exploit_overdraft_available(["x"])  # 2 of 2 overdraft rounds taken
    assert format_budget_for_llm(second, overdraft=True).endswith(", exploit_overdraft 2/2")


def test_a_budget_state_is_a_field_of_an_agent_state_and_round_trips() -> None:
    class Counted(AgentState):
        lifecycle: Lifecycle = Lifecycle.INITIALIZED
        budget: DecisionBudget = DecisionBudget(RoundBudget(1, 1, 1, 1, 1, 1, 1))

    @stage(reads={"budget"}, writes={"budget"}, next=Lifecycle.FINISHED)
    async def spend(view: object) -> Patch:
        return Patch()

    # Machine refuses mutable field types: a DecisionBudget passes.
    Machine(
        state_type=Counted,
        initial=Lifecycle.INITIALIZED,
        transitions={Lifecycle.INITIALIZED: {Lifecycle.FINISHED}},
        stages={Lifecycle.INITIALIZED: spend},
        terminal={Lifecycle.FINISHED, Lifecycle.FAILED},
        failed=Lifecycle.FAILED,
    )
    state = Counted(
        budget=DecisionBudget(
            budget(tool_calls_used=2),
            FrozenMap({"s": SlotBudget(1, 2, 3, 4, exploit_used=1)}),
            exploit_overdraft_used=1,
            exploit_overdraft_limit=2,
        )
    )
    again = Counted.model_validate_json(state.model_dump_json())
    assert again == state
    assert isinstance(again.budget.stages, FrozenMap)
