"""The rules engine on its own (seed 000 §4.2, seed 002 §3-4, §5.2)."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from structlog.testing import capture_logs

from arkhon_rheo import AgentState, ConfigurationError, Fatal, Machine, Patch, stage
from arkhon_rheo import StateView as View
from arkhon_rheo.rules import (
    PASS,
    Evaluation,
    Retryable,
    Rule,
    RuleResult,
    RuleSet,
    Terminal,
    Verdict,
    rule,
    validate_stage,
)
from arkhon_rheo.testing import run_machine

pytestmark = pytest.mark.anyio


class Step(BaseModel):
    model_config = ConfigDict(frozen=True)
    thought: str
    action: str | None = None


calls: list[str] = []


@rule
def not_empty(step: Step) -> Verdict:
    calls.append("not_empty")
    return Retryable("the thought is empty") if not step.thought.strip() else PASS


@rule(name="no_rm")
async def no_destructive_tool(step: Step) -> Verdict:
    calls.append("no_rm")
    return Terminal("rm is forbidden") if step.action == "rm" else PASS


async def test_rules_run_in_order_and_stop_at_the_first_violation() -> None:
    rules = RuleSet(not_empty, no_destructive_tool)
    assert rules.names == ("not_empty", "no_rm")
    ok = await rules.evaluate(Step(thought="search", action="search"))
    assert ok.outcome == "pass"
    assert ok.violation is None
    assert [r.rule for r in ok.results] == ["not_empty", "no_rm"]
    retry = await rules.evaluate(Step(thought=" ", action="rm"))
    assert retry.results == (
        RuleResult(rule="not_empty", outcome="retryable", reason="the thought is empty"),
    )
    assert retry.outcome == "retryable"
    end = await rules.evaluate(Step(thought="wipe", action="rm"))
    assert end.outcome == "terminal"
    assert end.violation == RuleResult(rule="no_rm", outcome="terminal", reason="rm is forbidden")


async def test_a_terminal_violation_is_logged_with_its_rule() -> None:
    with capture_logs() as logs:
        await RuleSet(no_destructive_tool).evaluate(Step(thought="x", action="rm"))
    assert {
        "event": "terminal_violation",
        "rule": "no_rm",
        "reason": "rm is forbidden",
        "log_level": "error",
    } in logs


async def test_results_are_cached_per_rule_and_input_in_a_bounded_cache() -> None:
    calls.clear()
    rules = RuleSet(not_empty, no_destructive_tool, cache_size=2)
    await rules.evaluate(Step(thought="a"))
    await rules.evaluate(Step(thought="a"))  # the same input: both answers cached
    assert calls == ["not_empty", "no_rm"]
    stats = rules.statistics()
    assert (stats.evaluations, stats.checks, stats.cache_hits, stats.cached) == (2, 2, 2, 2)
    await rules.evaluate(Step(thought="b"))  # two new entries push the old ones out
    await rules.evaluate(Step(thought="a"))
    assert calls == ["not_empty", "no_rm"] * 3
    assert rules.statistics().cached == 2
    rules.clear_cache()
    assert rules.statistics().cached == 0


async def test_the_cache_key_is_stable_across_equal_inputs_of_any_json_form() -> None:
    seen: list[Any] = []

    def count(subject: Any) -> Verdict:
        seen.append(subject)
        return PASS

    rules = RuleSet(Rule("count", count))
    await rules.evaluate({"b": 1, "a": frozenset({"x", "y"})})
    await rules.evaluate({"a": frozenset({"y", "x"}), "b": 1})  # key order and set order
    assert len(seen) == 1


async def test_an_uncached_rule_runs_every_time_and_an_unhashable_input_is_not_cached() -> None:
    seen: list[Any] = []

    def count(subject: Any) -> Verdict:
        seen.append(subject)
        return PASS

    rules = RuleSet(Rule("count", count, cache=False))
    await rules.evaluate("x")
    await rules.evaluate("x")
    assert len(seen) == 2
    other = RuleSet(Rule("count", count))
    await other.evaluate(object())  # no JSON form: evaluated, never cached
    assert other.statistics().cached == 0


async def test_a_rule_that_returns_no_verdict_is_fatal() -> None:
    bad = Rule[Any]("bad", lambda step: True)  # type: ignore[arg-type,return-value]
    with pytest.raises(Fatal, match="rule 'bad' returned True"):
        await RuleSet(bad).evaluate("x")


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="two rules are named 'not_empty'"):
        RuleSet(not_empty, not_empty)
    with pytest.raises(ConfigurationError, match="cache_size"):
        RuleSet(not_empty, cache_size=-1)
    with pytest.raises(ConfigurationError, match="non-empty name"):
        Rule("", lambda step: PASS)
    with pytest.raises(ConfigurationError, match="must be callable"):
        Rule("x", 3)  # type: ignore[arg-type]


class P(enum.Enum):
    THINK = "think"
    VALIDATE = "validate"
    ACT = "act"
    END = "end"
    FAILED = "failed"


class S(AgentState):
    lifecycle: P = P.THINK
    proposals: tuple[Step, ...] = ()
    step: Step | None = None


@stage(reads={"proposals", "step"}, writes={"proposals", "step"}, next=P.VALIDATE)
async def think(view: View[S]) -> Patch:
    return Patch(step=view.proposals[0], proposals=view.proposals[1:])


@stage(reads=(), writes=(), next=P.END)
async def act(view: View[S]) -> Patch:
    return Patch()


def machine() -> Machine[S]:
    validate = validate_stage(
        RuleSet(not_empty, no_destructive_tool),
        subject=lambda view: view.step,
        reads={"step"},
        passed=P.ACT,
        retry=P.THINK,
        terminal=P.END,
    )
    return Machine(
        name="rules-test",
        state_type=S,
        initial=P.THINK,
        transitions={P.THINK: {P.VALIDATE}, P.VALIDATE: {P.ACT, P.THINK, P.END}, P.ACT: {P.END}},
        stages={P.THINK: think, P.VALIDATE: validate, P.ACT: act},
        terminal={P.END, P.FAILED},
        failed=P.FAILED,
    )


async def run(*proposals: Step) -> tuple[S, list[tuple[str, str, Any]]]:
    done = await run_machine(machine(), S(proposals=proposals))
    trail = [(e.from_state.value, e.to_state.value, e.patch.values) for e in done.events]
    return done.state, trail


async def test_the_validate_stage_sends_a_retryable_step_back_with_its_reason() -> None:
    state, trail = await run(Step(thought=""), Step(thought=""), Step(thought="go"))
    assert [(a, b) for a, b, _ in trail] == [
        ("think", "validate"),
        ("validate", "think"),
        ("think", "validate"),
        ("validate", "think"),
        ("think", "validate"),
        ("validate", "act"),
        ("act", "end"),
    ]
    # The rule results are in the step's event (its patch).
    retried = trail[1][2]["metadata"]
    assert retried["retry_reason"] == "the thought is empty"
    assert retried["retry_count"] == 1
    assert retried["rules"] == (
        {"rule": "not_empty", "outcome": "retryable", "reason": "the thought is empty"},
    )
    assert state.metadata["retry_count"] == 2
    assert "retry_reason" not in state.metadata  # cleared by the pass
    assert [r["outcome"] for r in state.metadata["rules"]] == ["pass", "pass"]


async def test_the_validate_stage_ends_the_run_on_a_terminal_violation() -> None:
    state, trail = await run(Step(thought="wipe", action="rm"))
    assert [(a, b) for a, b, _ in trail] == [("think", "validate"), ("validate", "end")]
    assert state.metadata["exit_reason"] == "terminal_violation"
    assert state.metadata["violation"] == {"rule": "no_rm", "reason": "rm is forbidden"}


def test_an_evaluation_is_a_plain_model() -> None:
    evaluation = Evaluation(results=(RuleResult(rule="r", outcome="pass"),))
    assert Evaluation.model_validate_json(evaluation.model_dump_json()) == evaluation
