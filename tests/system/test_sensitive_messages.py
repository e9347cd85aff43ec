"""A message's `Sensitive` fields are sealed wherever the message is kept (issue 41, item 2).

`send` seals them with the system's keyring before the post: the inbox row and
the event that applies the message (``info["message"]``) hold the token, and
``arkhon-rheo show --json`` prints ``[SENSITIVE]``; the stage gets the value.
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

from arkhon_rheo import AgentState, AgentSystem, ConfigurationError, ExitReason, Machine, Patch
from arkhon_rheo.cli import main
from arkhon_rheo.protocols import Receive, Sensitive, StateView
from tests.support.raw_store import stored_bytes

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring
from arkhon_rheo.errors import KeyringError

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

TOKEN = "tok-7d31c0ffee9a5b24"


class Step(enum.Enum):
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"


class Login(BaseModel):
    user: str
    token: Annotated[str, Sensitive()]


class Account(AgentState):
    lifecycle: Step = Step.WAITING
    user: str = ""
    token: Annotated[str, Sensitive()] = ""


class Checked(AgentState):
    lifecycle: Step = Step.WAITING
    user: str = ""
    valid: bool = False


class StoreToken(Receive[Account], reads=set(), writes={"user", "token"}, accepts=(Login,)):
    async def apply(self, view: StateView[Account], message: Login) -> Patch:
        return Patch(user=message.user, token=message.token)

    def next(self, state: Account) -> Step:
        return Step.DONE


class CheckToken(Receive[Checked], reads=set(), writes={"user", "valid"}, accepts=(Login,)):
    async def apply(self, view: StateView[Checked], message: Login) -> Patch:
        return Patch(user=message.user, valid=message.token == TOKEN)

    def next(self, state: Checked) -> Step:
        return Step.DONE


def _machine(name: str, state_type: type[AgentState], stage: type[Any]) -> Machine[Any]:
    return Machine(
        name=name,
        state_type=state_type,
        initial=Step.WAITING,
        transitions={Step.WAITING: {Step.DONE}},
        stages={Step.WAITING: stage},
        terminal={Step.DONE, Step.FAILED},
        failed=Step.FAILED,
    )


ACCOUNTS = _machine("accounts", Account, StoreToken)
CHECKS = _machine("checks", Checked, CheckToken)


def _show_json(path: Path, session_id: str) -> tuple[str, Any]:
    """``arkhon-rheo show <session> --json``'s output (no key given), and as JSON."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["show", session_id, "--store", str(path), "--json"])
    assert code == 0, err.getvalue()
    assert TOKEN not in err.getvalue()
    return out.getvalue(), json.loads(out.getvalue())


@pytest.mark.parametrize("machine", [ACCOUNTS, CHECKS], ids=["sensitive-state", "plain-state"])
async def test_a_sensitive_message_field_is_sealed_in_the_inbox_the_event_and_show(
    tmp_path: Path, machine: Machine[Any]
) -> None:
    path = tmp_path / "accounts.db"
    keyring = Keyring(Keyring.generate())
    async with AgentSystem(path=path, secrets=keyring) as system:
        parked = await system.run(machine, machine.state_type(), session_id="ann")
        assert parked.exit_reason is ExitReason.WAITING
        sent = await system.send(machine, "ann", Login(user="ann", token=TOKEN))
        assert sent.handle is not None
        result = await sent.handle.result()
        assert result.ok, result.failure
        assert result.state.user == "ann"
        if machine is ACCOUNTS:
            assert result.state.token == TOKEN  # the stage got the value itself
        else:
            assert result.state.valid is True
        (message,) = await system.store.messages("ann")  # type: ignore[union-attr]
        assert message.payload["user"] == "ann"
        assert message.payload["token"].startswith("arkhon-sealed:")
        events = await system.stored(machine, "ann").history()
        (recorded,) = [e.info["message"] for e in events if e.info and "message" in e.info]
        assert recorded["payload"]["token"].startswith("arkhon-sealed:")
        report = await system.stored(machine, "ann").replay(reexecute=True)
        assert report.ok, report.divergence
    raw = stored_bytes(path)
    assert TOKEN.encode() not in raw
    assert b"arkhon-sealed:" in raw
    text, shown = await anyio.to_thread.run_sync(_show_json, path, "ann")
    assert TOKEN not in text
    (event,) = [e for e in shown["events"] if "message" in (e.get("io") or {})]
    assert event["io"]["message"]["payload"] == {"user": "ann", "token": "[SENSITIVE]"}


async def test_a_sensitive_message_without_a_keyring_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    async with AgentSystem(path=tmp_path / "checks.db") as system:
        await system.run(CHECKS, Checked(), session_id="bob")
        with pytest.raises(KeyringError, match="AgentSystem\\(secrets=Keyring\\(key\\)\\)") as info:
            await system.send(CHECKS, "bob", {"user": "bob", "token": TOKEN})
        assert isinstance(info.value, ConfigurationError)
        assert "a login message has sensitive fields ('token')" in str(info.value)
        assert TOKEN not in str(info.value)
        assert not await system.store.messages("bob")  # type: ignore[union-attr]
    assert TOKEN.encode() not in stored_bytes(tmp_path / "checks.db")
