"""What a message may hold: storable JSON, at most ``max_message_bytes`` of it.

Content a store cannot keep (nested thousands deep, a string that is not valid
Unicode, a value that is not JSON data) and a payload over the size limit are
each refused with `MessageRefused` saying what was wrong, before anything is
stored; they used to escape as a raw `ValueError`, `UnicodeEncodeError` or
`PydanticSerializationError`, or (a 100 MB message) be stored.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from arkhon_rheo import AgentState, AgentSystem, ConfigurationError, Machine, Patch, StateView
from arkhon_rheo.errors import MessageRefused
from arkhon_rheo.protocols import Receive
from arkhon_rheo.store import MemoryStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


class Step(enum.Enum):
    WAIT = "wait"
    DONE = "done"
    FAILED = "failed"


class Box(AgentState):
    lifecycle: Step = Step.WAIT
    got: int = 0


class Note(BaseModel):
    text: str = ""
    data: Any = None


class Take(Receive[Box], reads={"got"}, writes={"got"}, accepts=(Note,)):
    async def apply(self, view: StateView[Box], message: Any) -> Patch:
        return Patch(got=view.got + 1)

    def next(self, state: Box) -> Step:
        return Step.WAIT


MACHINE = Machine(
    name="notes",
    state_type=Box,
    initial=Step.WAIT,
    transitions={Step.WAIT: {Step.WAIT, Step.DONE}},
    stages={Step.WAIT: Take},
    terminal={Step.DONE, Step.FAILED},
    failed=Step.FAILED,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "notes.db")
    return PostgresStore(request.getfixturevalue("postgres_url"))


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"in": value}
    return value


UNSTORABLE = {
    "nested 5,000 deep": ({"kind": "Note", "data": nested(5000)}, "nested too deep"),
    "a lone surrogate": ({"kind": "Note", "text": "half \ud800 of a pair"}, "not valid Unicode"),
    "invalid UTF-8 bytes": ({"kind": "Note", "data": b"\xff\xfe"}, "not valid Unicode"),
    "an object": ({"kind": "Note", "data": {"x": object()}}, "not JSON data"),
}


@pytest.mark.parametrize("case", sorted(UNSTORABLE))
async def test_content_that_cannot_be_stored_is_refused(store: Any, case: str) -> None:
    message, why = UNSTORABLE[case]
    async with store, AgentSystem(store=store) as system:
        await system.run(MACHINE, Box(), session_id="n")
        with pytest.raises(MessageRefused, match=why) as caught:
            await system.send(MACHINE, "n", message)
        assert "nothing was stored" in str(caught.value)
        assert caught.value.session_id == "n"
        assert await store.messages("n") == ()
        await system.send(MACHINE, "n", Note(text="fine"))
        assert len(await store.messages("n")) == 1


async def test_a_message_over_the_size_limit_is_refused(store: Any) -> None:
    async with store, AgentSystem(store=store) as system:
        await system.run(MACHINE, Box(), session_id="n")
        with pytest.raises(MessageRefused, match=r"more than the 1,048,576 a message may hold"):
            await system.send(MACHINE, "n", Note(text="x" * (1 << 20)))
        with pytest.raises(MessageRefused, match="max_message_bytes"):
            await system.send(MACHINE, "n", Note(text="x" * 100_000_000), drive=False)
        assert await store.messages("n") == ()
        await system.send(MACHINE, "n", Note(text="x" * 1_000_000))  # under 1 MiB: taken
        assert len(await store.messages("n")) == 1


async def test_the_size_limit_is_configurable(store: Any) -> None:
    async with store, AgentSystem(store=store, max_message_bytes=100) as system:
        await system.run(MACHINE, Box(), session_id="n")
        with pytest.raises(MessageRefused, match=r"is 12\d bytes of JSON, more than the 100"):
            await system.send(MACHINE, "n", Note(text="y" * 100))
        await system.send(MACHINE, "n", Note(text="y" * 50))
        assert len(await store.messages("n")) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_size_limit_that_is_no_positive_int_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_message_bytes"):
        AgentSystem(store=MemoryStore(), max_message_bytes=bad)
