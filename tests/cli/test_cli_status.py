"""What ``show`` says a paused session waits for, and an orphaned session in ``sessions``.

The sessions are made here with the API (a gated machine this module exposes
by MODULE:ATTR, and store records with or without a live lease); the commands
run in-process through ``main(argv)``, as in ``test_cli``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, stage
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.protocols import Gate
from arkhon_rheo.store import SQLiteStore
from tests.cli.test_cli import run, run_json

if TYPE_CHECKING:
    from pathlib import Path

HERE = "tests.cli.test_cli_status"


class Order(AgentState):
    lifecycle: L = L.INITIALIZED
    item: str = ""
    approved: bool | None = None
    shipped: str = ""


@stage(reads={"item"}, writes={"item"}, next=L.ACTING)
async def pick(view: StateView[Order]) -> Patch:
    return Patch(item=view.item or "book")


@stage(reads={"item", "approved"}, writes={"shipped"}, next=L.FINISHED)
async def ship(view: StateView[Order]) -> Patch:
    return Patch(shipped=view.item if view.approved else "")


def _orders(*gates: Gate) -> Machine[Order]:
    return Machine(
        name="orders",
        state_type=Order,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
        stages={L.INITIALIZED: pick, L.ACTING: ship},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        gates=gates,
    )


#: Pauses before ``ship``; an approve value goes to ``approved``.
orders = _orders(Gate.before("ship", field="approved", name="sign-off"))
#: The same machine (one fingerprint), its gate taking no value.
orders_plain = _orders(Gate.before("ship", name="sign-off"))


class Other(AgentState):
    lifecycle: L = L.INITIALIZED


@stage(reads=(), writes=(), next=L.FINISHED)
async def noop(view: StateView[Other]) -> Patch:
    return Patch()


#: Not the sessions' machine: ``show --machine`` refuses it.
other = Machine(
    name="other",
    state_type=Other,
    initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.FINISHED}},
    stages={L.INITIALIZED: noop},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
)


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store holding ``paused`` (at the gate, then edited) and ``done`` (finished)."""
    path = tmp_path / "orders.db"

    async def make() -> None:
        async with AgentSystem(path=path) as system:
            await system.run(orders, Order(), session_id="paused")
            await system.stored(orders, "paused").edit({"item": "atlas"})
            await system.run(_orders(), Order(), session_id="done")

    anyio.run(make)
    return str(path)


def test_show_says_which_gate_a_paused_session_waits_at(store: str) -> None:
    code, out, _ = run("show", "paused", "--store", store)
    assert code == 0
    # Its last event is the edit's: it still waits at the gate of its pause, and its
    # record names the field (only the machine knows the field's type).
    assert (
        "  waits for a decision at gate 'sign-off', before stage 'ship'; "
        "approve writes field 'approved'"
    ) in out
    data = run_json("show", "paused", "--store", store)
    assert data["events"][-1]["kind"] == "decision"
    assert data["waits_for"] == {
        "kind": "decision",
        "gate": "sign-off",
        "stage": "ship",
        "field": "approved",
        "type": None,
        "resolved": True,
        "question": None,
        "answer": None,
        "accepts": [],
        "wake_at": None,
    }


def test_with_its_machine_show_names_the_field_a_value_goes_to_and_its_type(store: str) -> None:
    code, out, _ = run("show", "paused", "-m", f"{HERE}:orders", "--store", store)
    assert code == 0
    expected = (
        "  waits for a decision at gate 'sign-off', before stage 'ship'; "
        "approve writes field 'approved' (bool | None)"
    )
    assert expected in out
    data = run_json("show", "paused", "--machine", f"{HERE}:orders", "--store", store)
    assert data["waits_for"] == {
        "kind": "decision",
        "gate": "sign-off",
        "stage": "ship",
        "field": "approved",
        "type": "bool | None",
        "resolved": True,
        "question": None,
        "answer": None,
        "accepts": [],
        "wake_at": None,
    }
    _, plain, _ = run("show", "paused", "-m", f"{HERE}:orders_plain", "--store", store)
    assert "before stage 'ship'; approve takes no value" in plain


def test_a_session_that_waits_for_nothing_shows_no_such_line(store: str) -> None:
    code, out, _ = run("show", "done", "-m", f"{HERE}:orders", "--store", store)
    assert code == 0
    assert "waits for" not in out
    assert run_json("show", "done", "--store", store)["waits_for"] is None


def test_show_refuses_a_machine_that_is_not_the_sessions(store: str) -> None:
    code, out, err = run("show", "paused", "-m", f"{HERE}:other", "--store", store)
    assert (code, out) == (2, "")
    assert "session 'paused' runs machine 'orders', not 'other'" in err


def _records(path: str) -> None:
    """Two "running" sessions: ``alive`` with a live lease, ``orphan`` without one."""

    async def make() -> None:
        async with SQLiteStore(path) as store:
            for session_id in ("alive", "orphan"):
                await store.create_session(session_id, machine="orders", snapshot={})
            await store.acquire("alive", "another-process", ttl=600)

    anyio.run(make)


def test_sessions_json_gives_orphaned_its_own_field(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    _records(path)
    rows: dict[str, Any] = {row["session_id"]: row for row in run_json("sessions", "--store", path)}
    assert (rows["orphan"]["status"], rows["orphan"]["orphaned"]) == ("running", True)
    assert (rows["alive"]["status"], rows["alive"]["orphaned"]) == ("running", False)
    # --status matches the status itself: an orphan is a running session.
    running = run_json("sessions", "--status", "running", "--store", path)
    assert {row["session_id"] for row in running} == {"alive", "orphan"}
    code, out, _ = run("sessions", "--store", path)
    assert code == 0
    assert "running (orphaned)" in out
    assert out.count("(orphaned)") == 1
    shown = json.loads(run("show", "orphan", "--json", "--store", path)[1])
    assert shown["session"]["orphaned"] is True
    assert run_json("show", "alive", "--store", path)["session"]["orphaned"] is False
