"""`StoredSession`: a stored session as an object, and the handles nobody constructs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    SessionHandle,
    SessionNotFound,
    StoredSession,
)
from arkhon_rheo.actors import ActorRef
from arkhon_rheo.protocols import EventKind, Gate
from tests.system.test_pauses import L, Order, order_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", [SessionHandle, StoredSession, ActorRef])
def test_handles_have_no_public_constructor(kind: type) -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        kind()


async def test_stored_takes_a_machine_then_an_id(tmp_path: Path) -> None:
    machine = order_machine()
    async with AgentSystem(path=tmp_path / "s.db") as system:
        with pytest.raises(ConfigurationError, match="machine first"):
            system.stored("s1", machine)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="non-empty string"):
            system.stored(machine, "")
        stored = system.stored(machine, "nobody")  # reads nothing yet
        assert repr(stored) == "<StoredSession 'nobody' of 'order'>"
        with pytest.raises(SessionNotFound):
            await stored.history()


async def test_a_stored_session_reads_its_record_states_and_forks(tmp_path: Path) -> None:
    machine = order_machine(Gate.before("ship", field="approved"))
    async with AgentSystem(path=tmp_path / "s.db") as system:
        await system.run(machine, Order(item="lamp"), session_id="o1")
        stored = system.stored(machine, "o1")
        record = await stored.record()
        assert (record.status, record.last_seq) == ("paused", 2)
        assert (await stored.state(0)).lifecycle is L.INITIALIZED
        assert (await stored.state()).lifecycle is L.ACTING
        with pytest.raises(ConfigurationError, match="between 0"):
            await stored.state(9)
        fork = await stored.fork(at_seq=1, new_id="o1-fork")
        assert isinstance(fork, StoredSession)
        assert (await fork.record()).parent == "o1"
        handle = await stored.approve(True)
        result = await handle.result()
        history = await stored.history()
    assert result.ok
    assert result.state.shipped
    assert [event.kind for event in history][-2:] == [EventKind.DECISION, EventKind.STEP]


async def test_a_stored_session_needs_a_store_except_to_answer_a_gate() -> None:
    machine = order_machine(Gate.before("ship"))
    async with AgentSystem(path=None) as system:
        await system.run(machine, Order(item="pen"), session_id="m1")
        stored = system.stored(machine, "m1")
        for read in (stored.history, stored.record, stored.replay, stored.fork):
            with pytest.raises(ConfigurationError, match="without a store"):
                await read()
        handle = await stored.approve()
        assert (await handle.result()).ok


async def test_a_stored_sessions_other_reads_need_a_store_too() -> None:
    machine = order_machine(Gate.before("ship"))
    async with AgentSystem(path=None) as system:
        await system.run(machine, Order(item="pen"), session_id="m1")
        stored = system.stored(machine, "m1")
        with pytest.raises(ConfigurationError, match="without a store"):
            await stored.resume()
        with pytest.raises(ConfigurationError, match="without a store"):
            await stored.rollback(0)
        with pytest.raises(ConfigurationError, match="without a store"):
            await stored.state()
        # The paused session is untouched by the refused calls.
        assert (await (await stored.approve()).result()).ok


@pytest.mark.parametrize("new_id", [5, "", b"raw"])
async def test_a_fork_id_is_checked_before_anything_is_stored(
    tmp_path: Path, new_id: object
) -> None:
    machine = order_machine(Gate.before("ship"))
    async with AgentSystem(path=tmp_path / "s.db") as system:
        await system.run(machine, Order(item="lamp"), session_id="o1")
        stored = system.stored(machine, "o1")
        with pytest.raises(ConfigurationError, match="non-empty string"):
            await stored.fork(new_id=new_id)  # type: ignore[arg-type]
        store = system.store
        assert store is not None
        assert [record.session_id for record in await store.sessions()] == ["o1"]
        fresh = await stored.fork()  # a fresh id when none is given
        assert fresh.session_id != "o1"
        assert (await fresh.record()).parent == "o1"


@pytest.mark.parametrize("fields", [{}, None, ["item"], {1: "x"}])
async def test_an_edit_takes_a_non_empty_mapping_of_field_names(
    tmp_path: Path, fields: object
) -> None:
    machine = order_machine(Gate.before("ship"))
    async with AgentSystem(path=tmp_path / "s.db") as system:
        await system.run(machine, Order(item="lamp"), session_id="o1")
        stored = system.stored(machine, "o1")
        with pytest.raises(ConfigurationError, match="edit\\(\\) takes"):
            await stored.edit(fields)  # type: ignore[arg-type]
        record = await stored.record()
        assert (record.status, record.last_seq) == ("paused", 2)
        assert (await stored.state()).item == "lamp"
