"""An append that parks: its events, the status, what it waits for and the lease, in one write."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import ConfigurationError
from arkhon_rheo.errors import LeaseLost
from arkhon_rheo.protocols import NewMessage, StoredEvent

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore

pytestmark = pytest.mark.anyio


def event(seq: int) -> StoredEvent:
    return StoredEvent("s", seq, "pause", None, "A", "A", (), (), {}, 1, 0.0, 0.0)


async def test_an_append_parks_the_session_and_gives_its_lease_up(
    make_store: Callable[..., AnyStore],
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "me", ttl=60)
        await store.append(
            "s",
            [event(1)],
            status="paused",
            waiting={"gate": "g", "question": "go?"},
            accepts=["approve", "abort"],
            owner="me",
        )
        record = await store.record("s")
        assert (record.status, record.last_seq) == ("paused", 1)
        assert (record.waiting, record.wake_at) == ({"gate": "g", "question": "go?"}, None)
        assert await store.leases() == ()
        # A message it accepts does not wake a paused session; any later status clears it.
        await store.post("s", NewMessage("m1", "approve", {}, 0.0), capacity=10)
        assert (await store.waking(10**10))[0] == ()
        await store.append("s", [event(2)], status="running")
        assert (await store.record("s")).waiting is None


async def test_an_append_that_parks_is_fenced_and_checked(
    make_store: Callable[..., AnyStore],
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(ConfigurationError, match="sets its status too"):
            await store.append("s", [event(1)], waiting={"for": "x"}, accepts=["approve"])
        with pytest.raises(ConfigurationError, match="accepts must be"):
            await store.append("s", [event(1)], status="paused", waiting={}, accepts="approve")
        await store.acquire("s", "other", ttl=60)
        with pytest.raises(LeaseLost):
            await store.append(
                "s", [event(1)], status="paused", waiting={}, accepts=["approve"], owner="me"
            )
        record = await store.record("s")
        assert (record.status, record.last_seq, record.waiting) == ("running", 0, None)
        assert [lease.owner for lease in await store.leases()] == ["other"]
