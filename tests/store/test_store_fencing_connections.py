"""Fencing across connections: a lease another connection takes fences the holder's writer.

Two `SQLiteStore`s on one file are two connections, as two processes would be;
the first one's writer has fenced appends of the first owner before the other
takes the lease over (a writer that kept what it read would go wrong here).
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
