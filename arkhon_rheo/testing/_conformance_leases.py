"""The conformance groups of leases (one driver per session) and of the effect ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from .._errors import LeaseLost, SessionLocked, StoreError
from ..protocols import EffectStatus
from ._conformance_base import ConformanceBase, eventually

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import Store, StoredEffect

__all__ = ["EffectConformance", "LeaseConformance"]

STARTED, DONE, FAILED = EffectStatus.STARTED, EffectStatus.DONE, EffectStatus.FAILED

#: A lease that runs out while the test polls for it (by the store's own clock).
SHORT_TTL = 0.05
#: A lease that outlives any test.
LONG_TTL = 3600.0


async def _owners(store: Store) -> dict[str, str]:
    return {lease.session_id: lease.owner for lease in await store.leases()}


class LeaseConformance(ConformanceBase):
    """Taking, renewing, refusing, taking over, releasing and running out of leases."""

    async def test_one_owner_at_a_time_and_the_holder_renews(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            for sid in ("s", "t"):
                await store.create_session(sid, machine="m", snapshot={})
            await store.acquire("s", "alice", ttl=60)
            (first,) = await store.leases()
            assert (first.session_id, first.owner) == ("s", "alice")
            await store.acquire("s", "alice", ttl=LONG_TTL)  # renewed, for longer
            (renewed,) = await store.leases()
            assert renewed.owner == "alice"
            assert renewed.expires_at > first.expires_at
            with pytest.raises(SessionLocked) as caught:
                await store.acquire("s", "bob", ttl=60)
            assert (caught.value.session_id, caught.value.owner) == ("s", "alice")
            assert caught.value.expires_at == renewed.expires_at
            await store.acquire("t", "bob", ttl=60)  # another session: another lease
            assert await _owners(store) == {"s": "alice", "t": "bob"}

    async def test_a_release_frees_the_lease_of_its_owner_only(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "alice", ttl=LONG_TTL)
            await store.release("s", "bob")  # not bob's: nothing changes
            with pytest.raises(SessionLocked):
                await store.acquire("s", "bob", ttl=LONG_TTL)
            await store.release("s", "alice")
            assert await store.leases() == ()
            await store.acquire("s", "bob", ttl=LONG_TTL)
            assert await _owners(store) == {"s": "bob"}
            await store.release("s", "bob")
            await store.release("s", "bob")  # not held: nothing to do

    async def test_a_dead_owners_lease_is_taken_over_when_named(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "dead", ttl=LONG_TTL)
            with pytest.raises(SessionLocked):
                await store.acquire("s", "heir", ttl=LONG_TTL, replacing="someone else")
            await store.acquire("s", "heir", ttl=LONG_TTL, replacing="dead")
            assert await _owners(store) == {"s": "heir"}
            with pytest.raises(SessionLocked) as caught:
                await store.acquire("s", "dead", ttl=LONG_TTL)
            assert caught.value.owner == "heir"
            # Naming a dead owner takes no lease from a live one.
            with pytest.raises(SessionLocked):
                await store.acquire("s", "third", ttl=LONG_TTL, replacing="dead")

    async def test_a_renewal_renews_only_a_lease_its_owner_holds(
        self, new_store: Callable[[], Store]
    ) -> None:
        # A driver paused past its lease must never take back a session that others
        # drove on meanwhile: its renewal refuses a lease given up, or taken by
        # another owner since (even if that owner gave it up again).
        async with new_store() as store:
            for sid in ("s", "t", "u"):
                await store.create_session(sid, machine="m", snapshot={})
            with pytest.raises(LeaseLost) as lost:
                await store.acquire("s", "alice", ttl=LONG_TTL, renew=True)  # never taken
            assert (lost.value.session_id, lost.value.owner, lost.value.holder) == (
                "s",
                "alice",
                None,
            )
            assert await store.leases() == ()
            await store.acquire("s", "alice", ttl=60)
            (first,) = await store.leases()
            await store.acquire("s", "alice", ttl=LONG_TTL, renew=True)  # held: renewed
            (renewed,) = await store.leases()
            assert renewed.owner == "alice"
            assert renewed.expires_at > first.expires_at
            await store.release("s", "alice")
            with pytest.raises(LeaseLost):  # given up: not taken back
                await store.acquire("s", "alice", ttl=LONG_TTL, renew=True)
            await store.acquire("t", "alice", ttl=LONG_TTL)
            await store.acquire("t", "bob", ttl=LONG_TTL, replacing="alice")
            with pytest.raises(LeaseLost) as lost:  # another owner holds it
                await store.acquire("t", "alice", ttl=LONG_TTL, renew=True)
            assert lost.value.holder == "bob"
            await store.release("t", "bob")
            with pytest.raises(LeaseLost):  # taken by another since, then given up
                await store.acquire("t", "alice", ttl=LONG_TTL, renew=True)
            await store.acquire("u", "alice", ttl=SHORT_TTL)

            async def ran_out() -> bool:
                return await store.leases() == ()

            await eventually(ran_out)
            # Run out, but taken by nobody since: its owner renews it.
            await store.acquire("u", "alice", ttl=LONG_TTL, renew=True)
            assert await _owners(store) == {"u": "alice"}

    async def test_a_lease_runs_out_by_the_stores_clock(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "alice", ttl=SHORT_TTL)
            holders: set[str] = set()

            async def bob_takes_it() -> bool:
                try:
                    await store.acquire("s", "bob", ttl=LONG_TTL)
                except SessionLocked as exc:
                    holders.add(exc.owner)
                    return False
                return True

            await eventually(bob_takes_it)
            assert holders <= {"alice"}
            assert await _owners(store) == {"s": "bob"}
            with pytest.raises(SessionLocked):
                await store.acquire("s", "alice", ttl=LONG_TTL)

    async def test_an_expired_lease_is_no_longer_listed(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            for sid in ("s", "t"):
                await store.create_session(sid, machine="m", snapshot={})
            await store.acquire("s", "brief", ttl=SHORT_TTL)
            await store.acquire("t", "steady", ttl=LONG_TTL)

            async def gone() -> bool:
                return await _owners(store) == {"t": "steady"}

            await eventually(gone)

    async def test_concurrent_acquirers_of_a_session_one_wins(
        self, new_store: Callable[[], Store]
    ) -> None:
        won: dict[str, list[str]] = {f"s{i}": [] for i in range(8)}

        async def take(sid: str, owner: str) -> None:
            try:
                await store.acquire(sid, owner, ttl=LONG_TTL)
            except SessionLocked:
                return
            won[sid].append(owner)

        async with new_store() as store:
            for sid in won:
                await store.create_session(sid, machine="m", snapshot={})
            async with anyio.create_task_group() as tg:
                for sid in won:
                    for owner in ("alice", "bob", "carol"):
                        tg.start_soon(take, sid, owner)
            assert all(len(owners) == 1 for owners in won.values()), won
            assert await _owners(store) == {sid: owners[0] for sid, owners in won.items()}


class EffectConformance(ConformanceBase):
    """The effect ledger: intents committed once, outcomes stored once, in order."""

    async def test_an_intent_is_committed_once_and_its_outcome_is_the_answer(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            effect, began = await store.begin_effect("s", "k", tool="send", arguments={"to": "a"})
            assert began
            assert (effect.session_id, effect.key, effect.tool) == ("s", "k", "send")
            assert (effect.arguments, effect.status, effect.attempts) == ({"to": "a"}, STARTED, 1)
            assert (effect.finished_at, effect.result, effect.error) == (None, None, None)
            # Ambiguous (it may have happened): begun again without retry, returned as it is.
            again, began = await store.begin_effect("s", "k", tool="send", arguments={"to": "b"})
            assert (again, began) == (effect, False)
            done = await store.finish_effect("s", "k", result={"content": "sent", "n": [1, 2]})
            assert (done.status, done.result, done.error) == (
                DONE,
                {"content": "sent", "n": [1, 2]},
                None,
            )
            assert (done.arguments, done.attempts, done.started_at) == (
                {"to": "a"},
                1,
                effect.started_at,
            )
            assert done.finished_at is not None
            # Done: never begun again, not even on retry.
            for retry in (False, True):
                found, began = await store.begin_effect(
                    "s", "k", tool="send", arguments={}, retry=retry
                )
                assert (found, began) == (done, False)
            assert await store.effects("s") == (done,)

    async def test_a_retried_ambiguous_effect_and_a_failed_one_are_begun_again(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.begin_effect("s", "a", tool="t", arguments={"x": 1})
            await store.begin_effect("s", "b", tool="t", arguments={"x": 2})
            retried, began = await store.begin_effect(
                "s", "a", tool="t", arguments={"x": 10}, retry=True
            )
            assert began
            assert (retried.arguments, retried.status, retried.attempts) == ({"x": 10}, STARTED, 2)
            failed = await store.finish_effect("s", "b", error="Transient('busy')")
            assert (failed.status, failed.error, failed.result) == (
                FAILED,
                "Transient('busy')",
                None,
            )
            assert failed.finished_at is not None
            again, began = await store.begin_effect("s", "b", tool="t", arguments={"x": 3})
            assert began
            assert (again.status, again.attempts, again.arguments) == (STARTED, 2, {"x": 3})
            assert (again.error, again.finished_at) == (None, None)
            # Listed in the order first begun, whatever was updated since.
            assert [(e.key, e.attempts) for e in await store.effects("s")] == [("a", 2), ("b", 2)]

    async def test_an_outcome_is_stored_for_a_started_effect_only(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            with pytest.raises(StoreError):  # never begun
                await store.finish_effect("s", "nope", result=1)
            assert await store.effects("s") == ()
            await store.begin_effect("s", "k", tool="t", arguments={})
            await store.finish_effect("s", "k", result=None)
            with pytest.raises(StoreError):  # done already
                await store.finish_effect("s", "k", result=2)
            with pytest.raises(StoreError):
                await store.finish_effect("s", "k", error="late")
            (effect,) = await store.effects("s")
            assert (effect.status, effect.result, effect.error) == (DONE, None, None)
            await store.begin_effect("s", "f", tool="t", arguments={})
            await store.finish_effect("s", "f", error="boom")
            with pytest.raises(StoreError):  # failed already
                await store.finish_effect("s", "f", result=1)
            assert [(e.status, e.error) for e in await store.effects("s")] == [
                (DONE, None),
                (FAILED, "boom"),
            ]

    async def test_ledgers_are_per_session(self, new_store: Callable[[], Store]) -> None:
        async with new_store() as store:
            for sid in ("s", "t"):
                await store.create_session(sid, machine="m", snapshot={})
            await store.begin_effect("s", "k", tool="t", arguments={"in": "s"})
            effect, began = await store.begin_effect("t", "k", tool="t", arguments={"in": "t"})
            assert began  # the same key in another session is another effect
            assert effect.session_id == "t"
            await store.finish_effect("t", "k", result=1)
            assert [(e.session_id, e.status) for e in await store.effects("s")] == [("s", STARTED)]
            assert [(e.session_id, e.status) for e in await store.effects("t")] == [("t", DONE)]

    async def test_concurrent_sessions_commit_their_effects(
        self, new_store: Callable[[], Store]
    ) -> None:
        async def one(i: int) -> None:
            _, began = await store.begin_effect(f"s{i}", "k", tool="t", arguments={"i": i})
            assert began
            await store.finish_effect(f"s{i}", "k", result=i)

        async with new_store() as store:
            for i in range(12):
                await store.create_session(f"s{i}", machine="m", snapshot={})
            async with anyio.create_task_group() as tg:
                for i in range(12):
                    tg.start_soon(one, i)
            for i in range(12):
                effects: tuple[StoredEffect, ...] = await store.effects(f"s{i}")
                assert [(e.status, e.result, e.arguments) for e in effects] == [(DONE, i, {"i": i})]
