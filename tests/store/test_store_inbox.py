"""Each session's durable inbox, on every store, durability mode and backend: the stores' own.

What the protocol asks of an inbox (posting once, order, capacity, parking, waking,
applying, timers, concurrent posts, reopening) is the conformance suite's
(``InboxConformance``, run by test_conformance.py); here are the package's refusals of
malformed messages and its store fault seam.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import ConfigurationError, StoreError
from arkhon_rheo.protocols import NewMessage, StoredEvent, StoredMessage
from arkhon_rheo.testing import FaultPlan

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore

pytestmark = pytest.mark.anyio

T0 = 1000.0


def event(session_id: str, seq: int) -> StoredEvent:
    return StoredEvent(
        session_id, seq, "step", "receive", "Waiting", "Thinking", (), ("n",), {"set": {"n": seq}},
        1, T0, T0,
    )  # fmt: skip


def message(message_id: str, due_at: float = T0, kind: str = "Ask", **payload: Any) -> NewMessage:
    return NewMessage(message_id, kind, payload or {"text": message_id}, due_at)


def ids(messages: tuple[StoredMessage, ...]) -> list[str]:
    return [m.message_id for m in messages]


@pytest.fixture
def clock() -> list[float]:
    """The stores' clock: ``clock[0]``, moved by the test."""
    return [T0]


@pytest.fixture
def make(make_store: Callable[..., AnyStore], clock: list[float]) -> Callable[[], AnyStore]:
    return lambda: make_store(clock=lambda: clock[0])


async def test_malformed_messages_are_refused_before_anything_is_stored(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="payload of message 'a'"):
            await store.post("s", NewMessage("a", "Ask", {"x": object()}, T0), capacity=5)
        with pytest.raises(ConfigurationError, match="capacity"):
            await store.post("s", message("a"), capacity=0)
        with pytest.raises(ConfigurationError, match="message_id"):
            await store.post("s", message(""), capacity=5)
        with pytest.raises(ConfigurationError, match="due_at"):
            await store.post("s", NewMessage("a", "Ask", {}, float("nan")), capacity=5)
        with pytest.raises(ConfigurationError, match="applied"):
            await store.append("s", [], applied=1)
        assert await store.messages("s") == ()


async def test_the_store_fault_seam_fails_posts_and_parks_before_anything_is_written(
    make: Callable[[], AnyStore],
) -> None:
    plan = FaultPlan()
    plan.store().disk_full(when=lambda call: call.detail["operation"] in ("post", "park"))
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        with plan.installed():
            with pytest.raises(StoreError, match="disk is full"):
                await store.post("s", message("a"), capacity=5)
            with pytest.raises(StoreError, match="disk is full"):
                await store.park("s", None, status="waiting", waiting=None, accepts=(), now=T0)
            await store.append("s", [event("s", 1)], posts=[message("t")])  # not named
        assert ids(await store.messages("s")) == ["t"]
        assert (await store.record("s")).status == "running"
        assert [(f.kind.value, f.index) for f in plan.injected] == [
            ("disk_full", 1),
            ("disk_full", 2),
        ]
