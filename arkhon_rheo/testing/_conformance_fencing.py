"""The conformance group of fencing: an append made for an owner that lost its lease is refused.

A worker paused past its lease must never write over its successor: an
append naming an ``owner`` is checked against the session's lease in the
same transaction as its insert, and refused with `LeaseLost` (nothing
written: events, snapshot, status, applied message, posts) once another
owner took the lease. A lease that ran out but that nobody took still lets
its owner commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import pytest

from .._errors import LeaseLost
from ._conformance_base import ConformanceBase, eventually, ids, make_event, make_events, message

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import Store

__all__ = ["FencingConformance"]

#: A lease that runs out while the test polls for it (by the store's own clock).
SHORT_TTL = 0.05
#: A lease that outlives any test.
LONG_TTL = 3600.0


async def _stale_append(store: Store, seq: int) -> None:
    """Alice's append of event ``seq`` with everything an append carries, as she lost the lease."""
    await store.append(
        "s",
        [make_event("s", seq)],
        snapshot=(seq, {"by": "alice"}),
        status="finished",
        applied=1,
        posts=[message("alice-timer")],
        owner="alice",
    )


async def _untouched(store: Store, last_seq: int) -> None:
    """Nothing of a refused append is in the store: the session is as it was at ``last_seq``."""
    record = await store.record("s")
    assert (record.last_seq, record.status) == (last_seq, "running")
    assert [e.seq for e in await store.history("s")] == list(range(1, last_seq + 1))
    loaded = await store.load("s")
    assert (loaded.snapshot_seq, loaded.snapshot) == (0, {"v": 0})
    assert await store.snapshot_at("s", last_seq + 1) == (0, {"v": 0})
    assert ids(await store.pending("s")) == ["m1"]  # not applied; no timer posted
    assert [(m.message_id, m.applied_seq) for m in await store.messages("s")] == [("m1", None)]


class FencingConformance(ConformanceBase):
    """Appends made for an owner: refused once another owner took the lease, nothing written.

    Attributes:
        deferred_refusals: Whether the store acknowledges a plain append (no
            ``applied``, no ``posts``) before it commits (`Durability.ASYNC`): a
            refusal found at commit then surfaces at the session's next append.
            An append that applies or posts messages is refused at once in every
            store.
    """

    deferred_refusals: ClassVar[bool] = False

    async def _session_with_a_stale_holder(self, store: Store) -> None:
        """Session ``s`` with event 1 by alice, pending message ``m1``, and bob its holder now."""
        await store.create_session("s", machine="m", snapshot={"v": 0})
        await store.post("s", message("m1"), capacity=5)
        await store.acquire("s", "alice", ttl=LONG_TTL)
        await store.append("s", [make_event("s", 1)], owner="alice")
        await store.acquire("s", "bob", ttl=LONG_TTL, replacing="alice")  # alice taken for dead

    async def test_a_stale_holders_append_is_refused_and_nothing_is_written(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await self._session_with_a_stale_holder(store)
            with pytest.raises(LeaseLost) as caught:
                await _stale_append(store, 2)
            assert (caught.value.session_id, caught.value.owner) == ("s", "alice")
            assert caught.value.holder == "bob"
            await _untouched(store, 1)
            # The new holder's append, the same one, commits whole.
            await store.append(
                "s",
                [make_event("s", 2)],
                snapshot=(2, {"by": "bob"}),
                status="finished",
                applied=1,
                posts=[message("bob-timer")],
                owner="bob",
            )
            assert [e.seq for e in await store.history("s")] == [1, 2]
            assert (await store.load("s")).snapshot == {"by": "bob"}
            assert (await store.record("s")).status == "finished"
            assert [(m.message_id, m.applied_seq) for m in await store.messages("s")] == [
                ("m1", 2),
                ("bob-timer", None),
            ]

    async def test_a_stale_holders_plain_append_is_refused_too(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await self._session_with_a_stale_holder(store)
            refused: LeaseLost | None = None
            try:
                await store.append("s", [make_event("s", 2)], owner="alice")
            except LeaseLost as exc:
                refused = exc
            if refused is None:
                assert self.deferred_refusals, "alice's append was not refused"
                await store.history("s")  # (reads follow the queued appends)
                with pytest.raises(LeaseLost) as caught:  # surfaced at her next append
                    await store.append("s", [make_event("s", 2)], owner="alice")
                refused = caught.value
            assert (refused.owner, refused.holder) == ("alice", "bob")
            await _untouched(store, 1)
            # The new holder commits; so does an append that names no owner.
            await store.append("s", make_events("s", 2, 3), owner="bob")
            await store.append("s", [make_event("s", 4)])
            assert [e.seq for e in await store.history("s")] == [1, 2, 3, 4]

    async def test_a_stale_holders_status_write_is_refused(
        self, new_store: Callable[[], Store]
    ) -> None:
        # A driver paused past its lease stores its run's end ("stopped", a repaired
        # "finished") only if it still holds the lease: never over its successor's.
        async with new_store() as store:
            await self._session_with_a_stale_holder(store)
            with pytest.raises(LeaseLost) as caught:
                await store.set_status("s", "stopped", owner="alice")
            assert (caught.value.session_id, caught.value.owner) == ("s", "alice")
            assert caught.value.holder == "bob"
            await _untouched(store, 1)
            await store.set_status("s", "finished", owner="bob")  # the holder's lands
            assert (await store.record("s")).status == "finished"
            await store.release("s", "bob")
            with pytest.raises(LeaseLost):  # given up: not hers again either
                await store.set_status("s", "running", owner="alice")
            assert (await store.record("s")).status == "finished"
            await store.set_status("s", "cancelled")  # no owner: not fenced
            record = await store.record("s")
            assert (record.status, record.last_seq) == ("cancelled", 1)

    async def test_a_lease_that_ran_out_untaken_still_lets_its_owner_commit(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={"v": 0})
            await store.post("s", message("m1"), capacity=5)
            await store.acquire("s", "alice", ttl=SHORT_TTL)

            async def ran_out() -> bool:
                return await store.leases() == ()

            await eventually(ran_out)
            await store.append("s", [make_event("s", 1)], owner="alice")
            await store.append(
                "s", [make_event("s", 2)], applied=1, posts=[message("t")], owner="alice"
            )
            assert [e.seq for e in await store.history("s")] == [1, 2]
            # Taken by another owner (no `replacing=`: it ran out), she is refused.
            await store.acquire("s", "bob", ttl=LONG_TTL)
            with pytest.raises(LeaseLost) as caught:
                await store.append("s", [make_event("s", 3)], posts=[message("u")], owner="alice")
            assert caught.value.holder == "bob"
            await store.append("s", [make_event("s", 3)], owner="bob")
            assert [e.seq for e in await store.history("s")] == [1, 2, 3]
            assert ids(await store.pending("s")) == ["t"]

    async def test_a_lease_taken_over_then_released_still_fences_its_old_holder(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await self._session_with_a_stale_holder(store)
            await store.release("s", "bob")
            with pytest.raises(LeaseLost) as caught:
                await _stale_append(store, 2)
            assert caught.value.holder is None
            await _untouched(store, 1)

    async def test_a_holder_on_another_instance_fences_the_stale_one(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance takes the lease over")
        async with new_store() as one, new_store() as two:
            await self._session_with_a_stale_holder(one)
            await two.acquire("s", "carol", ttl=LONG_TTL, replacing="bob")
            for store, owner in ((one, "alice"), (one, "bob")):
                with pytest.raises(LeaseLost) as caught:
                    await store.append(
                        "s", [make_event("s", 2)], applied=1, posts=[message("x")], owner=owner
                    )
                assert caught.value.holder == "carol"
            await _untouched(two, 1)
            await two.append("s", [make_event("s", 2)], applied=1, owner="carol")
            assert [e.seq for e in await one.history("s")] == [1, 2]
            assert ids(await one.pending("s")) == []
