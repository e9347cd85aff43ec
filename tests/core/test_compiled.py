"""One compiled machine per `Machine`: built once, shared, and freed with the machine."""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.errors import IllegalTransition, InvariantViolation
from arkhon_rheo.session._compiled import compiled

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Order(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    item: str = ""
    shipped: bool = False


def build(*, name: str = "order", ships: bool = True) -> Machine[Order]:
    """A fresh machine, with fresh stage classes (as a per-request factory makes)."""

    @stage(reads=(), writes={"item"}, next=L.ACTING, name="plan")
    async def plan(view: StateView[Any]) -> Patch:
        return Patch(item="book")

    @stage(reads={"item"}, writes={"shipped"}, next=L.FINISHED, name="ship")
    async def ship(view: StateView[Any]) -> Patch:
        return Patch(shipped=ships)

    return Machine(
        name=name,
        state_type=Order,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
        stages={L.INITIALIZED: plan, L.ACTING: ship},
        invariants={L.FINISHED: [lambda s: s.shipped]},
        transition_invariants={(L.ACTING, L.FINISHED): [lambda a, b: b.item == a.item]},
    )


@pytest.mark.parametrize("stored", [False, True], ids=["memory", "sqlite"])
async def test_a_dropped_machine_and_its_forgotten_sessions_are_garbage_collected(
    tmp_path: Path, stored: bool
) -> None:
    path = tmp_path / "sessions.db" if stored else None
    async with AgentSystem(path=path) as system:
        dropped: list[weakref.ref[Machine[Order]]] = []
        for _ in range(3):
            machine = build()
            result = await system.run(machine, Order())
            assert result.exit_reason is ExitReason.FINISHED
            if stored:  # the store's operations build the codec, hasher and fingerprint too
                assert len(await system.stored(machine, result.session_id).history()) == 2
                assert (await system.stored(machine, result.session_id).replay()).ok
            system.forget(result.session_id)
            dropped.append(weakref.ref(machine))
            del machine, result
        gc.collect()
        alive = [ref for ref in dropped if ref() is not None]
        assert not alive, f"{len(alive)} of 3 dropped machines are still alive"
        assert system.sessions() == []


def test_the_compiled_machine_is_built_once_and_kept_on_the_machine() -> None:
    machine = build()
    first = compiled(machine)
    assert compiled(machine) is first
    assert first.machine is machine
    assert first.codec is first.codec
    assert first.hasher is first.hasher
    assert first.fingerprint == compiled(build()).fingerprint  # same declaration, same print
    assert compiled(build()) is not first  # another machine, its own


async def test_two_systems_share_one_compiled_machine() -> None:
    machine = build()
    async with AgentSystem(path=None) as one, AgentSystem(path=None) as two:
        first = await one.run(machine, Order())
        built = compiled(machine)
        second = await two.run(machine, Order())
    assert first.state.shipped
    assert second.state.shipped
    assert compiled(machine) is built


def test_each_state_has_a_plan_of_what_the_step_needs() -> None:
    machine = build()
    plans = compiled(machine)
    start = plans.plan(L.INITIALIZED)
    assert not start.terminal
    assert start.name == "plan"
    assert start.writes == {"item"}
    assert start.allowed == {L.ACTING, L.FAILED}  # the implicit failed edge included
    assert {plan.state for plan in start.targets.values()} == {L.ACTING, L.FAILED}
    acting = plans.plan(L.ACTING)
    assert acting.reads == {"item"}
    assert acting.edge_checks.keys() == {id(L.FINISHED)}
    finished = plans.plan(L.FINISHED)
    assert finished.terminal
    assert not finished.failed
    assert finished.stage_type is None
    assert len(finished.invariants) == 1
    assert plans.plan(L.FAILED).failed


async def test_the_plans_refuse_what_the_machine_refuses() -> None:
    """The step's tables give the verdicts of the machine's own queries."""

    @stage(reads=(), writes=(), next=L.OBSERVING, name="astray")
    async def astray(view: StateView[Any]) -> Patch:
        return Patch()

    wrong = Machine(
        name="wrong",
        state_type=Order,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: astray},
    )
    async with AgentSystem(path=None) as system:
        moved = await system.run(wrong, Order())
        unshipped = await system.run(build(ships=False), Order())
    for result, error in ((moved, IllegalTransition), (unshipped, InvariantViolation)):
        assert result.exit_reason is ExitReason.FAILED
        assert result.state.last_error is not None
        assert result.state.last_error.error_type == error.__name__


def test_copy_with_makes_the_copy_model_copy_makes() -> None:
    plans = compiled(build())
    state = Order(item="book")
    updates: dict[str, Any] = {"shipped": True, "lifecycle": L.ACTING}
    fast = plans.copy_with(state, updates)
    slow = state.model_copy(update=updates)
    assert fast == slow
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__dict__ is not state.__dict__
    assert state.shipped is False  # the original is untouched
    assert type(fast) is Order
