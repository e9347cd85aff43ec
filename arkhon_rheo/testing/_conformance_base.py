"""What every group of the store conformance suite shares: its fixtures and data.

A group is a class of tests on `ConformanceBase`; `StoreConformance` joins
them. The tests open their stores themselves (``async with new_store() as
store``), so one test can close a store and open another on the same storage.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import pytest

from ..protocols import NewMessage, StoredEvent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ..protocols import Store, StoredMessage

__all__ = [
    "PATIENCE",
    "T0",
    "ConformanceBase",
    "eventually",
    "ids",
    "make_event",
    "make_events",
    "message",
]

#: Due times of the inbox tests (the stores' own clock plays no part in them).
T0 = 1000.0

#: How long `eventually` waits for a short lease to run out before the test fails.
#: A hang guard only: a lease that does run out is seen within a few polls.
PATIENCE = 30.0

_BACKENDS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param(
        "trio",
        id="trio",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("trio") is None, reason="trio is not installed"
        ),
    ),
]


def make_event(session_id: str, seq: int, **changes: Any) -> StoredEvent:
    """An event as a supervisor commits it, with every field set; ``changes`` override."""
    base = StoredEvent(
        session_id=session_id,
        seq=seq,
        kind="step",
        stage="think",
        from_state="THINKING",
        to_state="ACTING",
        reads=("messages",),
        writes=("answer", "messages"),
        patch={
            "set": {"answer": f"answer {seq}"},
            "append": {"messages": [{"role": "assistant", "text": f"step {seq} ✓", "n": 1.5}]},
        },
        attempt=1,
        started_at=1000.0 + seq,
        finished_at=1000.25 + seq,
        io={"model": [{"request": "q", "response": "r"}]},
        digest=-5773838102707609839 + seq,
    )
    return dataclasses.replace(base, **changes)


def make_events(session_id: str, first: int, last: int) -> list[StoredEvent]:
    """Events ``first`` to ``last`` (both included) of a session."""
    return [make_event(session_id, seq) for seq in range(first, last + 1)]


def message(message_id: str, due_at: float = T0, kind: str = "Ask", **payload: Any) -> NewMessage:
    """A message to post; its payload is ``payload``, or ``{"text": message_id}``."""
    return NewMessage(message_id, kind, payload or {"text": message_id}, due_at)


def ids(messages: Sequence[StoredMessage]) -> list[str]:
    """The ids of ``messages``, in their order."""
    return [m.message_id for m in messages]


async def eventually(attempt: Callable[[], Awaitable[bool]]) -> None:
    """Call ``attempt`` until it returns true, polling; fail after `PATIENCE` seconds."""
    with anyio.fail_after(PATIENCE):
        # A lease runs out by the store's clock, with no event to wait on: poll.
        while not await attempt():  # noqa: ASYNC110
            await anyio.sleep(0.01)


class ConformanceBase:
    """The fixtures every group uses; a subclass of `StoreConformance` overrides them.

    Attributes:
        shared_storage: Whether the stores one test's ``new_store`` makes share
            their storage (a file, a database): a store opened after another
            closed reads what it wrote, and two open at once see each other's
            leases. ``False`` (an in-memory store): the tests that need it skip.
        backends: The anyio backends the store runs on.
    """

    #: Every async test runs through anyio's pytest plugin (on `anyio_backend`).
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    shared_storage: ClassVar[bool] = True
    backends: ClassVar[tuple[str, ...]] = ("asyncio", "trio")

    @pytest.fixture(params=_BACKENDS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        """Each test on asyncio and on trio (skipped where trio is not installed)."""
        backend: str = request.param
        if backend not in self.backends:
            pytest.skip(f"{type(self).__name__} runs on {', '.join(self.backends)} only")
        return backend

    @pytest.fixture
    def new_store(self) -> Callable[[], Store]:
        """Override: make a new store, not entered yet, on this test's storage."""
        pytest.fail(
            f"{type(self).__name__} must define a new_store fixture: a callable that makes "
            "a new store (not entered yet) on storage of the test's own"
        )

    @pytest.fixture
    def old_store_factory(self) -> Callable[[], Store] | None:
        """Override to enable the schema upgrade tests: storage an older version wrote.

        Return a callable that makes a store (not entered yet) on a copy of that
        storage; each call opens the same copy. ``None``: the tests skip.
        """
        return None

    @pytest.fixture
    def old_store_histories(self) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """Override with the old storage's sessions, oldest first, and their histories.

        Each event as the older version read it back, as JSON data
        (``dataclasses.asdict`` of each `StoredEvent`, through ``json``).
        """
        return {}

    def need_shared_storage(self, why: str) -> None:
        """Skip the test unless the store's storage outlives it (`shared_storage`)."""
        if not self.shared_storage:
            pytest.skip(f"{type(self).__name__} keeps nothing between instances: {why}")
