"""Fencing, in every store: an append made for an owner that lost its lease is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.errors import ConfigurationError, LeaseLost, StoreError
from arkhon_rheo.protocols import Durability
from tests.store.test_store import event

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore, Kind

pytestmark = pytest.mark.anyio


async def test_a_stale_holder_is_refused_and_nothing_is_written(
    make_store: Callable[..., AnyStore], kind: Kind
) -> None:
    async with make_store() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "alice", ttl=30)
        await store.append("s", [event("s", 1)], owner="alice")
        # Alice is taken for dead (paused past her lease): Bob takes the session over.
        await store.acquire("s", "bob", ttl=30, replacing="alice")
        if kind.durability is Durability.ASYNC:
            await store.append("s", [event("s", 2)], owner="alice")  # queued, refused later
            assert [e.seq for e in await store.history("s")] == [1]  # (after the queue)
            with pytest.raises(LeaseLost) as caught:  # the deferred refusal surfaces
                await store.append("s", [event("s", 2)], owner="alice")
        else:
            with pytest.raises(LeaseLost) as caught:
                await store.append("s", [event("s", 2)], status="finished", owner="alice")
        assert isinstance(caught.value, StoreError)
        assert (caught.value.session_id, caught.value.owner) == ("s", "alice")
        assert caught.value.holder == "bob"
        assert "'bob' holds it now" in str(caught.value)
        assert "must stop driving the session" in str(caught.value)
        record = await store.record("s")
        assert (record.last_seq, record.status) == (1, "running")  # nothing written
        assert [e.seq for e in await store.history("s")] == [1]
        # The new holder commits; so does an append that names no owner.
        await store.append("s", [event("s", 2)], owner="bob")
        await store.append("s", [event("s", 3)])
        assert (await store.record("s")).last_seq == 3


async def _finished_by_a_successor(store: AnyStore) -> None:
    """ "s": alice held it and committed 1; bob took the lease over and finished it (2)."""
    await store.create_session("s", machine="m", snapshot={})
    await store.acquire("s", "alice", ttl=30)
    await store.append("s", [event("s", 1)], owner="alice")
    await store.acquire("s", "bob", ttl=30, replacing="alice")
    await store.append("s", [event("s", 2)], status="finished", owner="bob")


async def test_a_stale_holder_s_status_write_is_refused_at_once_in_every_mode(
    make_store: Callable[..., AnyStore],
) -> None:
    # A run's end ("cancelled") stored by a driver paused past its lease: refused, and
    # known at once (acknowledged once committed, even where plain appends are not).
    async with make_store() as store:
        await _finished_by_a_successor(store)
        with pytest.raises(LeaseLost) as caught:
            await store.set_status("s", "cancelled", owner="alice")
        assert (caught.value.owner, caught.value.holder) == ("alice", "bob")
        record = await store.record("s")
        assert (record.last_seq, record.status) == (2, "finished")
        await store.append("s", [event("s", 3)], owner="bob")  # nothing deferred for bob
        with pytest.raises(ConfigurationError, match="owner must be"):
            await store.set_status("s", "cancelled", owner="")
        await store.set_status("s", "waiting", owner="bob")
        await store.set_status("s", "stopped")  # no owner: not fenced
        assert (await store.record("s")).status == "stopped"


async def test_a_stale_holder_s_park_is_refused_and_the_successor_s_status_stands(
    make_store: Callable[..., AnyStore],
) -> None:
    # Found by the workers' chaos: a driver paused past its lease woke and parked a
    # session its successor had finished meanwhile, which no worker would claim again.
    async with make_store() as store:
        await _finished_by_a_successor(store)
        with pytest.raises(LeaseLost) as caught:
            await store.park("s", "alice", status="waiting", waiting={}, accepts=(), now=1.0)
        assert (caught.value.owner, caught.value.holder) == ("alice", "bob")
        record = await store.record("s")
        assert (record.last_seq, record.status, record.wake_at) == (2, "finished", None)
        # The holder parks; a park that names no owner is not fenced.
        await store.park("s", "bob", status="waiting", waiting={}, accepts=(), now=1.0)
        await store.park("s", None, status="waiting", waiting={}, accepts=(), now=1.0)
        assert (await store.record("s")).status == "waiting"
