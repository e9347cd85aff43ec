"""The `Sensitive` marker, checked by `Machine`, and the sealed codec, without a backend."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import AgentState, ConfigurationError, History, Machine, Patch, StateView, stage
from arkhon_rheo.core._sealed import masked, session_codec, shown_state
from arkhon_rheo.errors import KeyringError, StoreCorrupt
from arkhon_rheo.protocols import EventKind, Sensitive, TransitionEvent
from arkhon_rheo.session._compiled import compiled

pytest.importorskip("cryptography", reason="the `secrets` extra (cryptography) is not installed")

from arkhon_rheo.core import Keyring

SECRET = "s3cret-value-0042"


class S(enum.Enum):
    GO = "go"
    DONE = "done"
    FAILED = "failed"


@stage(reads=(), writes={"token"}, next=S.DONE)
async def go(view: StateView[AgentState]) -> Patch:
    return Patch()


def machine_of(state_type: type[AgentState]) -> Machine[AgentState]:
    return Machine(
        state_type=state_type,
        initial=S.GO,
        transitions={S.GO: {S.DONE}},
        stages={S.GO: go},
        terminal={S.DONE, S.FAILED},
        failed=S.FAILED,
        name="m",
    )


class Account(AgentState):
    lifecycle: S = S.GO
    token: Annotated[str, Sensitive()] = ""
    codes: Annotated[History[str], Sensitive()] = History()
    card: Annotated[int | None, Sensitive()] = None
    plain: str = ""


class Inner(BaseModel):
    model_config = ConfigDict(frozen=True)
    secret: Annotated[str, Sensitive()] = ""


class Nested(AgentState):
    lifecycle: S = S.GO
    token: str = ""
    inner: Inner = Inner()


class Items(AgentState):
    lifecycle: S = S.GO
    token: str = ""
    parts: tuple[Annotated[str, Sensitive()], ...] = ()


class AsDefault(AgentState):
    lifecycle: S = S.GO
    token: str = Sensitive()  # type: ignore[assignment]


class OnABaseField(AgentState):
    lifecycle: S = S.GO
    token: str = ""
    session_id: Annotated[str, Sensitive()] = ""


@pytest.mark.parametrize(
    ("state_type", "message"),
    [
        (Nested, "field 'inner' of Nested marks field 'secret' of the nested Inner Sensitive()"),
        (Items, "field 'parts' of Items marks a part of its type"),
        (AsDefault, "has Sensitive\\(\\) as its default value; mark its type instead"),
        (OnABaseField, "field 'session_id' of OnABaseField is one every state has"),
    ],
)
def test_the_machine_refuses_a_misplaced_marker(state_type: type[AgentState], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        machine_of(state_type)


def test_the_marker_leaves_the_fingerprint_and_the_schema_alone() -> None:
    class Plain(AgentState):
        lifecycle: S = S.GO
        token: str = ""
        codes: History[str] = History()
        card: int | None = None
        plain: str = ""

    mine, theirs = compiled(machine_of(Account)), compiled(machine_of(Plain))
    assert mine.fingerprint["schema"] == theirs.fingerprint["schema"]
    assert Account.model_json_schema()["properties"]["token"] == {
        "default": "",
        "title": "Token",
        "type": "string",
    }


def test_a_sealed_codec_round_trips_states_and_patches_and_shows_nothing() -> None:
    machine = machine_of(Account)
    plain_codec = compiled(machine).codec
    ring = Keyring(Keyring.generate())
    codec = session_codec(machine, plain_codec, ring, "s1")
    assert codec is not plain_codec
    state = Account(token=SECRET, codes=History(["c0de-1111", "c0de-2222"]), card=4111111111111111)
    data = codec.encode_state(state)
    assert SECRET not in repr(data)
    assert len(data["codes"]) == 2  # a sequence: its items sealed one by one
    assert all(item.startswith("arkhon-sealed:1:") for item in data["codes"])
    assert codec.decode_state(data) == state
    assert codec.decode_state(json.loads(codec.state_json(state))) == state
    assert masked(data)["token"] == "[SENSITIVE]"
    assert shown_state(state)["token"] == "[SENSITIVE]"
    assert shown_state(state)["plain"] == ""

    patch = Patch(token="t0ken-new-2", plain="x").append("codes", "c0de-3333")
    encoded = codec.encode_patch(patch)
    assert "t0ken-new-2" not in repr(encoded)
    assert encoded["set"]["plain"] == "x"
    assert codec.decode_patch(encoded) == patch
    assert codec.describe_patch(patch)["set"]["token"] == "[SENSITIVE]"

    event = TransitionEvent(
        "s1", 1, EventKind.STEP, "go", S.GO, S.DONE, frozenset(), frozenset({"token"}),
        patch, 1, 0.0, 0.0, None,
        {"io": [{"kind": "tool:x", "request": {}, "response": {"t": "got t0ken-new-2 ok"}}]},
    )  # fmt: skip
    stored = codec.encode_event(event, 1234)
    assert "t0ken-new-2" not in repr(stored)
    assert stored.digest is not None
    assert stored.digest != 1234  # keyed
    assert codec.digest_fits(1234, stored.digest)
    back = codec.decode_event(stored)
    assert back.patch == patch
    assert back.info == event.info  # the recorded string that held the value, opened back


def test_a_value_opens_only_for_its_session_field_and_key() -> None:
    machine = machine_of(Account)
    ring = Keyring(Keyring.generate())
    plain_codec = compiled(machine).codec
    data = session_codec(machine, plain_codec, ring, "s1").encode_state(Account(token=SECRET))
    with pytest.raises(StoreCorrupt, match="copied from another session or field"):
        session_codec(machine, plain_codec, ring, "s2").decode_state(data)
    swapped = {**data, "plain": "", "token": data["codes"] or data["token"]}
    swapped["card"] = data["token"]
    with pytest.raises(StoreCorrupt, match="field 'card'"):
        session_codec(machine, plain_codec, ring, "s1").decode_state(swapped)
    with pytest.raises(KeyringError, match="no keyring was given"):
        session_codec(machine, plain_codec, None, "s1").decode_state(data)
    other = Keyring(Keyring.generate())
    with pytest.raises(KeyringError, match="does not hold"):
        session_codec(machine, plain_codec, other, "s1").decode_state(data)
    # A value stored before its field was marked sensitive still loads as it was.
    old = plain_codec.encode_state(Account(token=SECRET))
    loaded = session_codec(machine, plain_codec, ring, "s1").decode_state(old)
    assert isinstance(loaded, Account)
    assert loaded.token == SECRET


def test_a_machine_without_sensitive_fields_keeps_its_own_codec() -> None:
    class Plain(AgentState):
        lifecycle: S = S.GO
        token: str = ""

    machine = machine_of(Plain)
    codec = compiled(machine).codec
    assert session_codec(machine, codec, None, "s1") is codec
    assert codec.stored_digest(5) == 5
