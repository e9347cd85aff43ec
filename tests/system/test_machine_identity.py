"""A session read with a machine other than its own is a configuration error, never "corrupt"."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.protocols import Gate
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.store._schema import SCHEMA_VERSION
from tests.support.store_rows import write_schema_3

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Order(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    item: str = ""


class Invoice(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    amount: int = 0


class Retyped(AgentState):
    """Order's fields, with another type for ``item``."""

    lifecycle: Lifecycle = L.INITIALIZED
    item: int = 0


def build(
    state_type: type[AgentState],
    field: str,
    value: Any,
    *,
    name: str | None = None,
    loop: bool = False,
) -> Machine[Any]:
    @stage(reads=(), writes={field}, next=L.ACTING, name="plan")
    async def plan(view: StateView[Any]) -> Patch:
        return Patch(**{field: value})

    @stage(reads=(), writes=(), next=L.FINISHED, name="ship")
    async def ship(view: StateView[Any]) -> Patch:
        return Patch()

    acting = {L.FINISHED, L.INITIALIZED} if loop else {L.FINISHED}
    return Machine(
        name=name,
        state_type=state_type,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: acting},
        stages={L.INITIALIZED: plan, L.ACTING: ship},
        gates=[Gate.before("ship")],
    )


Operation = Callable[[AgentSystem, Machine[Any]], Awaitable[object]]
OPERATIONS: dict[str, Operation] = {
    "resume": lambda system, machine: system.resume(machine, "forked"),
    "history": lambda system, machine: system.stored(machine, "paused").history(),
    "replay": lambda system, machine: system.stored(machine, "paused").replay(),
    "rollback": lambda system, machine: system.stored(machine, "paused").rollback(0),
    "fork": lambda system, machine: system.stored(machine, "paused").fork(),
    "decide": lambda system, machine: system.stored(machine, "paused").approve(),
}


async def _stored_sessions(system: AgentSystem, machine: Machine[Any]) -> None:
    """A session paused at its gate, and a fork of it that resume would run."""
    result = await system.run(machine, machine.state_type(), session_id="paused")
    assert result.exit_reason is ExitReason.PAUSED
    await system.stored(machine, "paused").fork(at_seq=1, new_id="forked")


@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_unnamed_machines_of_other_state_types_are_told_apart(operation: str) -> None:
    order, invoice = build(Order, "item", "book"), build(Invoice, "amount", 3)
    assert order.name == f"{__name__}.Order"
    assert invoice.name != order.name
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await _stored_sessions(system, order)
        with pytest.raises(ConfigurationError, match=r"runs machine '[\w.]+\.Order', not") as info:
            await OPERATIONS[operation](system, invoice)
        assert "Pass the machine it was started with" in str(info.value)
        # Nothing was written, and the right machine still reads it.
        assert len(await system.stored(order, "paused").history()) == 2
        assert (await system.stored(order, "paused").replay()).ok


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize(
    ("other", "differs"),
    [
        (lambda: build(Invoice, "amount", 3, name="shop"), "field 'item' is gone from Invoice"),
        (
            lambda: build(Retyped, "item", 1, name="shop"),
            "field 'item' changed type from str to int",
        ),
    ],
    ids=["fields", "types"],
)
async def test_a_machine_of_the_same_name_that_differs_is_refused(
    tmp_path: Path, operation: str, other: Callable[[], Machine[Any]], differs: str
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store, AgentSystem(store=store) as system:
        await _stored_sessions(system, build(Order, "item", "book", name="shop"))
        with pytest.raises(ConfigurationError, match=differs) as info:
            await OPERATIONS[operation](system, other())
        message = str(info.value)
        assert "stored by version 1 of machine 'shop'" in message
        assert "not 'shop'" not in message  # the name is the same: what differs is said
        assert "upgrades={1: Upgrade(" in message


@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_a_machine_of_the_same_name_with_a_new_transition_reads_its_sessions(
    tmp_path: Path, operation: str
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store, AgentSystem(store=store) as system:
        await _stored_sessions(system, build(Order, "item", "book", name="shop"))
        await OPERATIONS[operation](system, build(Order, "item", "pen", name="shop", loop=True))


async def test_the_same_machine_built_again_reads_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with AgentSystem(path=path) as system:
        await _stored_sessions(system, build(Order, "item", "book"))
    async with AgentSystem(path=path) as system:  # another process builds it anew
        machine = build(Order, "item", "book")
        assert (await system.stored(machine, "paused").replay()).ok
        handle = await system.stored(machine, "paused").approve()
        assert handle is not None
        assert (await handle.result()).ok


@pytest.mark.parametrize("version", [1, 2])
async def test_a_store_of_an_older_version_is_upgraded_and_its_sessions_accepted(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "old.db"
    machine = build(Order, "item", "book")
    async with AgentSystem(path=path) as system:
        await _stored_sessions(system, machine)
    write_schema_3(path)  # rows laid out as before version 4...
    with sqlite3.connect(path, isolation_level=None) as db:  # ...then as that version left it
        db.execute("ALTER TABLE sessions DROP COLUMN fingerprint")
        if version == 1:
            db.execute("ALTER TABLE events DROP COLUMN digest")
        db.execute("UPDATE sessions SET machine = 'machine'")  # the old default name
        db.execute(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
        db.execute(f"PRAGMA user_version = {version}")
    db.close()
    async with AgentSystem(path=path) as system:
        assert (await system.stored(machine, "paused").replay()).ok
        assert (await system.store.record("paused")).fingerprint is None  # type: ignore[union-attr]
        handle = await system.stored(machine, "paused").approve()
        assert handle is not None
        assert (await handle.result()).ok
        await system.run(machine, Order(), session_id="new")
        assert (await system.store.record("new")).fingerprint is not None  # type: ignore[union-attr]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    db.close()
    assert meta["schema_version"] == str(SCHEMA_VERSION)
