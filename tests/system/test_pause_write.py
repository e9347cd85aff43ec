"""A pause at a gate is one write: its event, its status, its question and its lease, together.

A process killed between two writes must not leave a session ``paused`` with no
record of what it waits for (its question lost). Here every other write a pause
could make (``park``, ``set_status``, ``release``; an edit: ``park``,
``set_status``) fails, as if the process died right after the first one: the
record must still say the session is paused, at which gate, on what question,
with its lease given up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentState, AgentSystem, ExitReason, Lifecycle, Machine, Patch, StateView
from arkhon_rheo import stage as make_stage
from arkhon_rheo.protocols import Gate
from arkhon_rheo.store import MemoryStore, PostgresStore, SQLiteStore
from arkhon_rheo.testing import FaultyStore

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Order(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    item: str = ""
    approved: bool | None = None
    shipped: bool = False


def order_machine() -> Machine[Order]:
    @make_stage(reads={"item"}, writes=(), next=L.ACTING)
    async def plan(view: StateView[Order]) -> Patch:
        return Patch()

    @make_stage(reads={"approved"}, writes={"shipped"}, next=L.FINISHED)
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
        gates=[Gate.before("ship", field="approved", question=lambda s: f"ship {s.item}?")],
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "orders.db")
    return PostgresStore(request.getfixturevalue("postgres_url"))


def only_first_write(store: FaultyStore) -> None:
    """Fail every write but ``append``, as a process killed after its first write would."""
    for operation in ("park", "set_status", "release"):
        store.fail(operation)


async def test_a_pause_records_its_question_in_the_write_of_its_event(inner: Any) -> None:
    machine = order_machine()
    store = FaultyStore(inner)
    only_first_write(store)
    async with store, AgentSystem(store=store) as system:
        appends = store.calls["append"]
        result = await system.run(machine, Order(item="book"), session_id="o1")
        assert result.exit_reason is ExitReason.PAUSED
        record = await inner.record("o1")
        assert record.status == "paused"
        assert record.waiting is not None
        assert record.waiting["gate"] == "before ship"
        assert record.waiting["question"] == "ship book?"
        assert record.waiting["field"] == "approved"
        assert sorted(record.waiting["accepts"]) == ["abort", "approve", "edit"]
        assert store.calls["park"] == 0
        assert store.calls["append"] - appends == 2  # the step, then the pause
        assert [lease.session_id for lease in await inner.leases()] == []
        # The decision still finds it, and lets it go on.
        handle = await system.stored(machine, "o1").approve(True)
        done = await handle.result()
    assert done.ok
    assert done.state.shipped is True


async def test_an_edit_keeps_the_question_in_the_write_of_its_event(inner: Any) -> None:
    machine = order_machine()
    store = FaultyStore(inner)
    async with store, AgentSystem(store=store) as system:
        await system.run(machine, Order(item="lamp"), session_id="o2")
        question = (await inner.record("o2")).waiting
        assert question is not None
        store.fail("park")  # the edit's own lease is its claim's, given up after it
        store.fail("set_status")
        await system.stored(machine, "o2").edit({"item": "desk lamp"})
        record = await inner.record("o2")
        assert record.status == "paused"
        assert record.waiting == question
        assert store.calls["park"] == 0
        assert [lease.session_id for lease in await inner.leases()] == []
        handle = await system.stored(machine, "o2").approve(False)
        done = await handle.result()
    assert done.ok
    assert done.state.item == "desk lamp"
    assert done.state.shipped is False
