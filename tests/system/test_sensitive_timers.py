"""A timer's `Sensitive` fields are sealed wherever the timer is kept, as a sent message's are.

A stage that calls ``schedule(Login(token=...))`` posts a message to its own
session with the step's commit: the inbox row and the step's event
(``info["timers"]``) hold the sealed token, ``arkhon-rheo show --json`` prints
``[SENSITIVE]``, the receiving stage gets the value, and a re-executing replay
matches. Without a keyring the step fails with `KeyringError` and nothing of the
secret is stored. On SQLite (its every byte read) and PostgreSQL (its rows read).
"""

from __future__ import annotations

import contextlib
import enum
import io
import json
from typing import TYPE_CHECKING, Annotated, Any

import anyio.to_thread
import pytest
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, ExitReason, Machine, Patch, stage
from arkhon_rheo.cli import main
from arkhon_rheo.protocols import Receive, Sensitive, StateView, schedule
from arkhon_rheo.store import SQLiteStore
from tests.support.raw_store import stored_bytes

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

TOKEN = "tok-91b5e0c0ffee4d27"


class Step(enum.Enum):
    START = "start"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"


class Renew(BaseModel):
    user: str
    token: Annotated[str, Sensitive()]


class Account(AgentState):
    lifecycle: Step = Step.START
    user: str = ""
    token: Annotated[str, Sensitive()] = ""


@stage(reads=(), writes={"user"}, next=Step.WAITING)
async def plan_renewal(view: StateView[Account]) -> Patch:
    schedule(Renew(user="ann", token=TOKEN), after=0.0, message_id="renew")
    return Patch(user="pending")


class Renewed(Receive[Account], reads=set(), writes={"user", "token"}, accepts=(Renew,)):
    async def apply(self, view: StateView[Account], message: Renew) -> Patch:
        return Patch(user=message.user, token=message.token)

    def next(self, state: Account) -> Step:
        return Step.DONE


class Checked(AgentState):
    lifecycle: Step = Step.START
    user: str = ""
    valid: bool = False


@stage(reads=(), writes={"user"}, next=Step.WAITING)
async def plan_check(view: StateView[Checked]) -> Patch:
    schedule(Renew(user="ann", token=TOKEN), after=0.0, message_id="renew")
    return Patch(user="pending")


class Check(Receive[Checked], reads=set(), writes={"user", "valid"}, accepts=(Renew,)):
    async def apply(self, view: StateView[Checked], message: Renew) -> Patch:
        return Patch(user=message.user, valid=message.token == TOKEN)

    def next(self, state: Checked) -> Step:
        return Step.DONE


def _machine(name: str, state_type: type[AgentState], first: Any, then: Any) -> Machine[Any]:
    return Machine(
        name=name,
        state_type=state_type,
        initial=Step.START,
        transitions={Step.START: {Step.WAITING}, Step.WAITING: {Step.DONE}},
        stages={Step.START: first, Step.WAITING: then},
        terminal={Step.DONE, Step.FAILED},
        failed=Step.FAILED,
    )


RENEWALS = _machine("renewals", Account, plan_renewal, Renewed)
CHECKS = _machine("checks", Checked, plan_check, Check)


def _show_json(path: Path, session_id: str) -> str:
    """``arkhon-rheo show <session> --json``'s output (no key given)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["show", session_id, "--store", str(path), "--json"])
    assert code == 0, err.getvalue()
    assert TOKEN not in err.getvalue()
    return out.getvalue()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any]:
    """The store's kind and what makes one: a file path, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return "sqlite", tmp_path / "timers.db"
    return "postgres", request.getfixturevalue("postgres_url")


def _store(backend: tuple[str, Any]) -> Any:
    kind, where = backend
    if kind == "sqlite":
        return SQLiteStore(where)
    from arkhon_rheo.store import PostgresStore

    return PostgresStore(where)


def _raw_rows(backend: tuple[str, Any]) -> bytes:
    """Every stored byte (SQLite), or every inbox and event row as text (PostgreSQL)."""
    kind, where = backend
    if kind == "sqlite":
        return stored_bytes(where)
    import psycopg

    with psycopg.connect(where) as connection:
        rows = [
            *connection.execute("SELECT t::text FROM arkhon_rheo.inbox t"),
            *connection.execute("SELECT t::text FROM arkhon_rheo.events t"),
            *connection.execute("SELECT convert_from(patch, 'UTF8') FROM arkhon_rheo.events"),
        ]
    return "\n".join(str(row[0]) for row in rows).encode()


@pytest.mark.parametrize("machine", [RENEWALS, CHECKS], ids=["sensitive-state", "plain-state"])
async def test_a_timer_s_sensitive_fields_are_sealed_in_the_inbox_the_event_and_show(
    backend: tuple[str, Any], machine: Machine[Any]
) -> None:
    keyring = Keyring(Keyring.generate())
    store = _store(backend)
    async with store, AgentSystem(store=store, secrets=keyring) as system:
        result = await system.run(machine, machine.state_type(), session_id="ann")
        assert result.ok, result.failure
        if machine is RENEWALS:
            assert result.state.token == TOKEN  # the receiving stage got the value itself
        else:
            assert result.state.valid is True
        (message,) = await store.messages("ann")
        assert message.payload["user"] == "ann"
        assert message.payload["token"].startswith("arkhon-sealed:")
        events = await system.stored(machine, "ann").history()
        (timers,) = [e.info["timers"] for e in events if e.info and "timers" in e.info]
        assert timers[0]["payload"]["token"].startswith("arkhon-sealed:")
        report = await system.stored(machine, "ann").replay(reexecute=True)
        assert report.ok, report.divergence
    raw = await anyio.to_thread.run_sync(_raw_rows, backend)
    assert TOKEN.encode() not in raw
    assert b"arkhon-sealed:" in raw
    if backend[0] == "sqlite":
        text = await anyio.to_thread.run_sync(_show_json, backend[1], "ann")
        assert TOKEN not in text
        shown = json.loads(text)
        (event,) = [e for e in shown["events"] if "timers" in (e.get("io") or {})]
        assert event["io"]["timers"][0]["payload"] == {"user": "ann", "token": "[SENSITIVE]"}


async def test_a_sensitive_timer_without_a_keyring_fails_its_step_storing_nothing(
    backend: tuple[str, Any],
) -> None:
    store = _store(backend)
    async with store, AgentSystem(store=store) as system:
        result = await system.run(CHECKS, Checked(), session_id="bob")
        assert result.exit_reason is ExitReason.FAILED
        assert result.failure is not None
        assert result.failure.error_type == "KeyringError"
        assert "AgentSystem(secrets=Keyring(key))" in result.failure.message
        assert TOKEN not in result.failure.message
        assert not await store.messages("bob")
    assert TOKEN.encode() not in await anyio.to_thread.run_sync(_raw_rows, backend)
