"""Invariants that see the transition being made (seed 004 §5.3, Module B)."""

from __future__ import annotations

import enum

import pytest

from arkhon_rheo import (
    AgentState,
    ConfigurationError,
    ExitReason,
    Machine,
    Patch,
    SessionResult,
    StateView,
    TransitionCondition,
    stage,
)
from arkhon_rheo.errors import TransitionInvariantViolation
from arkhon_rheo.testing import run_machine

pytestmark = pytest.mark.anyio


class L(enum.Enum):
    THINK = "think"
    ACT = "act"
    OBSERVE = "observe"
    DONE = "done"
    FAILED = "failed"


class S(AgentState):
    lifecycle: L = L.THINK
    use_tool: bool = True
    action: str | None = None
    act_writes: bool = True


def build(transition_invariants: object = None) -> Machine[S]:
    @stage(reads={"use_tool"}, writes=(), next=lambda s: L.ACT if s.use_tool else L.OBSERVE)
    async def think(view: StateView[S]) -> Patch:
        return Patch()

    @stage(reads={"act_writes"}, writes={"action"}, next=L.OBSERVE)
    async def act(view: StateView[S]) -> Patch:
        return Patch(action="calc") if view.act_writes else Patch()

    @stage(reads=(), writes=(), next=L.DONE)
    async def observe(view: StateView[S]) -> Patch:
        return Patch()

    return Machine(
        state_type=S,
        initial=L.THINK,
        transitions={L.THINK: {L.ACT, L.OBSERVE}, L.ACT: {L.OBSERVE}, L.OBSERVE: {L.DONE}},
        stages={L.THINK: think, L.ACT: act, L.OBSERVE: observe},
        terminal={L.DONE, L.FAILED},
        failed=L.FAILED,
        transition_invariants=transition_invariants  # type: ignore[arg-type]
        or {
            (L.ACT, L.OBSERVE): [
                TransitionCondition(
                    "observing reached from act needs an action",
                    lambda before, after: after.action is not None,
                )
            ]
        },
    )


async def run(machine: Machine[S], state: S) -> tuple[SessionResult[S], list[enum.Enum]]:
    done = await run_machine(machine, state)
    return done.result, [event.to_state for event in done.events]


async def test_the_transition_invariant_holds_on_the_edge_it_names() -> None:
    result, path = await run(build(), S())
    assert result.exit_reason is ExitReason.FINISHED
    assert path == [L.ACT, L.OBSERVE, L.DONE]


async def test_another_path_into_the_same_state_is_not_checked() -> None:
    result, path = await run(build(), S(use_tool=False))
    assert result.exit_reason is ExitReason.FINISHED
    assert result.state.action is None  # Observing reached from Think: no action needed
    assert path == [L.OBSERVE, L.DONE]


async def test_a_violation_is_refused_with_a_typed_error() -> None:
    result, path = await run(build(), S(act_writes=False))
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "TransitionInvariantViolation"
    assert "'act' -> 'observe'" in result.failure.message
    assert "observing reached from act needs an action" in result.failure.message
    # Nothing of the refused step was committed.
    assert result.state.action is None
    assert path == [L.ACT, L.FAILED]


def test_the_validator_error_carries_both_ends() -> None:
    from arkhon_rheo.session._commit_rule import PatchValidator

    validator = PatchValidator(build())
    with pytest.raises(TransitionInvariantViolation) as caught:
        validator.check_transition(S(lifecycle=L.ACT), S(lifecycle=L.OBSERVE), stage="act")
    assert (caught.value.from_state, caught.value.to_state) == ("act", "observe")
    assert caught.value.stage == "act"
    validator.check_transition(S(lifecycle=L.THINK), S(lifecycle=L.OBSERVE), stage="think")


def test_a_broken_predicate_is_a_violation() -> None:
    from arkhon_rheo.session._commit_rule import PatchValidator

    def broken(before: S, after: S) -> bool:
        raise KeyError("x")

    machine = build()
    machine.transition_invariants[(L.ACT, L.OBSERVE)] = (TransitionCondition.coerce(broken),)
    with pytest.raises(TransitionInvariantViolation, match="the check raised KeyError"):
        PatchValidator(machine).check_transition(
            S(lifecycle=L.ACT), S(lifecycle=L.OBSERVE), stage="act"
        )


def test_an_invariant_on_an_edge_the_machine_forbids_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="does not allow that transition"):
        build(transition_invariants={(L.THINK, L.DONE): [lambda before, after: True]})


def test_a_key_that_is_not_a_pair_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must be \\(from, to\\) pairs"):
        build(transition_invariants={L.ACT: [lambda before, after: True]})


def test_a_plain_condition_is_not_a_transition_condition() -> None:
    from arkhon_rheo import Condition

    with pytest.raises(ConfigurationError, match="callable of \\(before, after\\)"):
        TransitionCondition.coerce(Condition("x", lambda s: True))  # type: ignore[arg-type]


def test_the_failed_edge_may_carry_an_invariant() -> None:
    machine = build(transition_invariants={(L.ACT, L.FAILED): [lambda before, after: True]})
    assert len(machine.transition_invariants_of(L.ACT, L.FAILED)) == 1
    assert machine.transition_invariants_of(L.THINK, L.ACT) == ()
