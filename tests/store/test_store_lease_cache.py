"""The SQLite writer's lease cache: fencing stays exact when another connection takes a lease.

The thread writer keeps the leases it last read or wrote and reads them back
only once ``PRAGMA data_version`` says another connection committed (see
``LeaseCache``). Two stores on one file are two connections, as two processes
would be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.errors import LeaseLost
from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import SQLiteStore
from tests.store.test_store import event

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("durability", [Durability.SYNC, Durability.BATCHED])
async def test_a_lease_taken_by_another_connection_fences_the_cached_holder(
    tmp_path: Path, durability: Durability
) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path, durability=durability) as alice_side:
        await alice_side.create_session("s", machine="m", snapshot={})
        await alice_side.acquire("s", "alice", ttl=30)
        # Fenced appends: alice's lease is now cached by this store's writer.
        await alice_side.append("s", [event("s", 1)], owner="alice")
        await alice_side.append("s", [event("s", 2)], owner="alice")
        async with SQLiteStore(path, durability=durability) as bob_side:
            await bob_side.acquire("s", "bob", ttl=30, replacing="alice")
            with pytest.raises(LeaseLost) as caught:
                await alice_side.append("s", [event("s", 3)], owner="alice")
            assert caught.value.holder == "bob"
            await bob_side.append("s", [event("s", 3)], owner="bob")
        # Bob gives the lease up in the other store; alice takes it back here.
        async with SQLiteStore(path, durability=durability) as bob_side:
            await bob_side.release("s", "bob")
        await alice_side.acquire("s", "alice", ttl=30)
        await alice_side.append("s", [event("s", 4)], owner="alice")
        assert [e.seq for e in await alice_side.history("s")] == [1, 2, 3, 4]


async def test_a_claim_on_the_same_connection_is_seen_by_the_next_fenced_append(
    tmp_path: Path,
) -> None:
    # A claim writes leases in a script of its own on the writer's connection, which
    # does not move ``data_version``: the writer forgets what it cached.
    async with SQLiteStore(tmp_path / "s.db", durability=Durability.BATCHED) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "alice", ttl=30)
        await store.append("s", [event("s", 1)], owner="alice")
        await store.release("s", "alice")
        claimed = await store.claim("bob", machines=["m"], limit=1, ttl=30, now=0.0)
        assert [record.session_id for record in claimed] == ["s"]
        with pytest.raises(LeaseLost) as caught:
            await store.append("s", [event("s", 2)], owner="alice")
        assert caught.value.holder == "bob"
