"""Human-in-the-loop gates: durable pauses, resume values, aborts and validated edits."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ErrorClass,
    ExitReason,
    FailureRecord,
    Lifecycle,
    Machine,
    Patch,
    SessionError,
    SessionNotFound,
    StateView,
    stage,
)
from arkhon_rheo.core import fold
from arkhon_rheo.errors import InvalidPatch, InvariantViolation, UndeclaredWrite
from arkhon_rheo.protocols import EventKind, Gate

pytestmark = pytest.mark.anyio

L = Lifecycle


class Order(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    item: str = ""
    approved: bool | None = None
    shipped: bool = False


def order_machine(*gates: Gate) -> Machine[Order]:
    @stage(reads={"item"}, writes=(), next=L.ACTING)
    async def plan(view: StateView[Order]) -> Patch:
        return Patch()

    @stage(reads={"approved"}, writes={"shipped"}, next=L.FINISHED)
    async def ship(view: StateView[Order]) -> Patch:
        return Patch(shipped=bool(view.approved))

    return Machine(
        name="order",
        state_type=Order,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
        stages={L.INITIALIZED: plan, L.ACTING: ship},
        invariants={None: [lambda s: bool(s.item)]},
        gates=gates,
    )


async def test_a_pause_survives_a_restart_and_resumes_with_a_validated_value(
    tmp_path: Any,
) -> None:
    machine = order_machine(Gate.before("ship", field="approved"))
    path = tmp_path / "orders.db"
    async with AgentSystem(path=path) as system:
        result = await system.run(machine, Order(item="book"), session_id="o1")
        assert result.exit_reason is ExitReason.PAUSED
        assert result.state.shipped is False
        with pytest.raises(SessionError, match="paused at a gate"):
            await system.resume(machine, "o1")
    # A new process: the pause is still there.
    async with AgentSystem(path=path) as system:
        with pytest.raises(InvalidPatch, match="approved"):
            await system.stored(machine, "o1").approve({"not": "a bool"})
        handle = await system.stored(machine, "o1").approve(True)
        assert handle is not None
        done = await handle.result()
        history = await system.stored(machine, "o1").history()
    assert done.ok
    assert done.state.shipped is True
    kinds = [event.kind for event in history]
    assert kinds == [EventKind.STEP, EventKind.PAUSE, EventKind.DECISION, EventKind.STEP]
    assert history[1].info == {"gate": "before ship", "stage": "ship"}
    assert fold(machine, Order(item="book", session_id="o1"), history) == done.state


async def test_abort_and_edit_a_paused_session() -> None:
    machine = order_machine(Gate.before("ship"))
    async with AgentSystem() as system:
        await system.run(machine, Order(item="lamp"), session_id="o2")
        with pytest.raises(UndeclaredWrite):
            await system.stored(machine, "o2").edit({"lifecycle": L.FINISHED})
        with pytest.raises(InvariantViolation):
            await system.stored(machine, "o2").edit({"item": ""})
        await system.stored(machine, "o2").edit({"item": "desk lamp"})
        with pytest.raises(ConfigurationError, match="takes no resume value"):
            await system.stored(machine, "o2").approve(1)
        await system.stored(machine, "o2").abort()
        with pytest.raises(SessionError, match="not paused"):
            await system.stored(machine, "o2").approve()
        history = await system.stored(machine, "o2").history()
    state = fold(machine, Order(item="lamp", session_id="o2"), history)
    assert isinstance(state, Order)
    assert state.item == "desk lamp"
    assert state.lifecycle is L.FAILED
    assert state.last_error is not None
    assert state.last_error.error_type == "Aborted"


async def test_every_n_steps_and_predicate_gates() -> None:
    every = order_machine(Gate.every(1))
    when = order_machine(Gate.when(lambda s: s.lifecycle is L.ACTING, name="acting"))
    async with AgentSystem() as system:
        first = await system.run(every, Order(item="pen"), session_id="o3")
        second = await system.run(when, Order(item="pen"), session_id="o4")
        handle = await system.stored(when, "o4").approve()
        assert handle is not None
        third = await handle.result()
    assert first.exit_reason is ExitReason.PAUSED
    assert first.state.lifecycle is L.ACTING  # paused before its second commit
    assert second.exit_reason is ExitReason.PAUSED
    assert third.ok


async def test_without_a_store_a_pause_is_decided_in_memory() -> None:
    machine = order_machine(Gate.before("ship", field="approved"))
    async with AgentSystem(path=None) as system:
        paused = await system.run(machine, Order(item="book"), session_id="m1")
        assert paused.exit_reason is ExitReason.PAUSED
        with pytest.raises(InvalidPatch, match="approved"):
            await system.stored(machine, "m1").approve({"not": "a bool"})
        with pytest.raises(UndeclaredWrite):
            await system.stored(machine, "m1").edit({"lifecycle": L.FINISHED})
        with pytest.raises(InvariantViolation):
            await system.stored(machine, "m1").edit({"item": ""})
        with pytest.raises(ConfigurationError, match="runs machine 'order', not 'other'"):
            await system.stored(
                Machine(
                    name="other",
                    state_type=Order,
                    initial=L.INITIALIZED,
                    terminal={L.FINISHED, L.FAILED},
                    failed=L.FAILED,
                    transitions=machine.transitions,
                    stages=machine.stages,
                ),
                "m1",
            ).approve()
        with pytest.raises(SessionNotFound):
            await system.stored(machine, "nobody").approve()
        assert system.session("m1").state == paused.state  # refused: nothing changed
        await system.stored(machine, "m1").edit({"item": "atlas"})
        assert (await system.session("m1").result()).exit_reason is ExitReason.PAUSED
        handle = await system.stored(machine, "m1").approve(True)
        assert handle is not None
        done = await handle.result()
        with pytest.raises(SessionError, match="not paused"):
            await system.stored(machine, "m1").approve()

        await system.run(machine, Order(item="lamp"), session_id="m2")
        await system.stored(machine, "m2").abort()
        aborted = await system.session("m2").result()
        with pytest.raises(SessionError, match="not paused"):
            await system.stored(machine, "m2").approve(True)
    assert done.ok
    assert (done.state.item, done.state.approved, done.state.shipped) == ("atlas", True, True)
    history = await handle.history()
    assert [event.kind for event in history] == [
        EventKind.STEP,
        EventKind.PAUSE,
        EventKind.DECISION,
        EventKind.DECISION,
        EventKind.STEP,
    ]
    assert [event.seq for event in history] == [1, 2, 3, 4, 5]
    assert history[3].info == {"decision": "approve", "gate": "before ship"}
    assert fold(machine, Order(item="book", session_id="m1"), history) == done.state
    assert aborted.exit_reason is ExitReason.FAILED
    assert aborted.state.lifecycle is L.FAILED
    assert aborted.failure is not None
    assert aborted.failure.error_type == "Aborted"
    assert aborted.state.last_error == aborted.failure


def _decisions(events: Any) -> list[Any]:
    """The decision events, but for their times and the inbox message a stored one applied."""
    return [
        e._replace(
            started_at=0.0,
            finished_at=0.0,
            info={k: v for k, v in (e.info or {}).items() if k != "message"},
        )
        for e in events
        if e.kind is EventKind.DECISION or (e.kind is EventKind.FAILURE and e.stage is None)
    ]


async def test_a_decision_is_the_same_event_in_memory_and_stored(tmp_path: Any) -> None:
    # One path: the decision's event is made once and committed to the session's
    # record, its journal or (without a store) the session itself.
    machine = order_machine(Gate.before("ship", field="approved"))
    found = []
    for path in (None, tmp_path / "orders.db"):
        async with AgentSystem(path=path) as system:
            await system.run(machine, Order(item="book"), session_id="d1")
            await system.stored(machine, "d1").edit({"item": "atlas"})
            handle = await system.stored(machine, "d1").approve(True)
            assert (await handle.result()).ok
            await system.run(machine, Order(item="lamp"), session_id="d2")
            await system.stored(machine, "d2").abort()
            if path is None:
                events = [*await handle.history(), *await system.session("d2").history()]
                assert system.session("d2").state.lifecycle is L.FAILED
            else:
                events = [
                    *await system.stored(machine, "d1").history(),
                    *await system.stored(machine, "d2").history(),
                ]
                assert (await system.stored(machine, "d2").record()).status == "aborted"
                # Stored, each decision is an inbox message its event applied.
                kinds = [(e.info or {}).get("message", {}).get("kind") for e in events]
                assert [k for k in kinds if k] == ["edit", "approve", "abort"]
                assert await system.store.pending("d1") == ()  # type: ignore[union-attr]
            found.append(_decisions(events))
    in_memory, stored = found
    assert len(in_memory) == 3
    assert in_memory == stored


#: Edits a human may not make: each writes a field only the supervisor writes.
FORGERIES: list[dict[str, Any]] = [
    {"last_error": FailureRecord(error_type="Fine", message="ok", error_class=ErrorClass.FATAL)},
    {"last_error": None, "item": "forged"},
    {"metadata": {"exit_reason": "finished"}},
    {"iteration": 7},
    {"session_id": "someone-else"},
]


@pytest.mark.parametrize("path", ["memory", "file"])
async def test_an_edit_may_not_write_the_supervisors_fields(tmp_path: Any, path: str) -> None:
    machine = order_machine(Gate.before("ship"))
    store = None if path == "memory" else tmp_path / "orders.db"
    async with AgentSystem(path=store) as system:
        paused = await system.run(machine, Order(item="lamp"), session_id="e1")
        assert paused.exit_reason is ExitReason.PAUSED
        stored = system.stored(machine, "e1")
        before = await (stored if store else system.session("e1")).history()
        for forged in FORGERIES:
            with pytest.raises(UndeclaredWrite, match="the supervisor owns") as caught:
                await stored.edit(forged)
            assert set(caught.value.fields) == set(forged) - {"item"}
        if store is not None:  # nothing stored
            assert await stored.history() == before
            assert (await stored.record()).status == "paused"
            assert await stored.state() == paused.state
        else:  # nothing changed in memory
            assert await system.session("e1").history() == before
            assert system.session("e1").state == paused.state
        await stored.edit({"item": "desk lamp"})  # a business field is still editable
        handle = await stored.approve()
        assert handle is not None
        done = await handle.result()
    assert done.ok
    assert done.state.item == "desk lamp"
    assert done.state.last_error is None


def test_gates_are_checked_with_the_machine() -> None:
    with pytest.raises(ConfigurationError, match="unknown stage 'nope'"):
        order_machine(Gate.before("nope"))
    with pytest.raises(ConfigurationError, match="'lifecycle'"):
        order_machine(Gate.before("ship", field="lifecycle"))
    with pytest.raises(ConfigurationError, match="positive"):
        Gate.every(0)


async def test_an_in_memory_pause_takes_one_resume_only() -> None:
    machine = order_machine(Gate.before("ship"))
    outcomes: list[str] = []

    async def resume() -> None:
        try:
            handle = await system.stored(machine, "m3").approve()
        except SessionError:
            outcomes.append("refused")
        else:
            assert handle is not None
            outcomes.append((await handle.result()).exit_reason.value)

    async with AgentSystem(path=None) as system:
        await system.run(machine, Order(item="pen"), session_id="m3")
        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            tg.start_soon(resume)
    assert sorted(outcomes) == ["finished", "refused"]
