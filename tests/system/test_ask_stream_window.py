"""`ask_stream` gets the first deltas of its turn when the run under way parks instead of taking it.

The window: a caller starts a session and asks it at once. The stream subscribes
to the run under way (the session's first, on its way to park); the message is
posted, and the post's wake reads the record while that run is still "running",
so it counts on that run to take the message. But the run read its clock (and
found no message due) before the post: it parks all the same, and the message
is taken by the next run, launched here when it falls due. The stream followed
the run that parked, and lost the turn's deltas (CI saw it once, through serve).

A store subclass holds the first run's park until the post's wake has read the
record, so the window is hit every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import AgentSystem, MemoryStore
from arkhon_rheo.react import Calls, Conversation, react_agent
from arkhon_rheo.store import SQLiteStore
from tests.support.ask_agent import Repeat

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def _held(base: type[Any]) -> type[Any]:
    """``base`` with its first park held until a message is posted and the record read after."""

    class Held(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **options: Any) -> None:
            super().__init__(*args, **options)
            self.parking = anyio.Event()  # the first run is at its park, its clock read
            self.go = anyio.Event()
            self.posted = False
            self.parks = 0
            self.first: bool | None = None  # whether the first run parked

        async def park(self, session_id: str, owner: str | None, **options: Any) -> bool:
            self.parks += 1
            if self.parks == 1:
                self.parking.set()
                await self.go.wait()
            parked: bool = await super().park(session_id, owner, **options)
            if self.parks == 1:
                self.first = parked
            return parked

        async def post(self, *args: Any, **options: Any) -> Any:
            stored = await super().post(*args, **options)
            self.posted = True
            return stored

        async def record(self, session_id: str) -> Any:
            found = await super().record(session_id)
            if self.posted:
                self.go.set()  # the post's wake read "running": now the run parks
            return found

    return Held


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return _held(MemoryStore)()
    return _held(SQLiteStore)(tmp_path / "s.db")


async def test_a_stream_asked_as_its_session_starts_gets_its_turns_first_deltas(
    store: Any,
) -> None:
    agent = react_agent(Repeat(), conversational=True, name="streamed", calls=Calls(stream=True))
    async with store, AgentSystem(store=store) as system:
        talk = await Conversation.open(system, agent, "t")  # its first run under way
        await store.parking.wait()
        with anyio.fail_after(20):
            pieces = [piece async for piece in talk.stream("one two three")]
        assert store.first is True  # the first run parked: another one took the message
        assert pieces == ["You", " said:", " one", " two", " three"]
        assert await talk.say("again") == "You said: again"
