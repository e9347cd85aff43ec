"""The conformance groups of storage that outlives a store: reopening, two instances, upgrades."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from .._errors import SessionLocked
from ..protocols import EffectStatus
from ._conformance_base import (
    T0,
    ConformanceBase,
    eventually,
    ids,
    make_event,
    make_events,
    message,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..protocols import Store

__all__ = ["SharedStorageConformance", "UpgradeConformance"]


async def _everything(store: Store) -> tuple[object, ...]:
    """All a store holds that a reader can see (but leases: they expire)."""
    found: list[object] = [await store.sessions()]
    for record in await store.sessions():
        sid = record.session_id
        found += [
            await store.history(sid),
            await store.load(sid),
            await store.messages(sid),
            await store.pending(sid),
            await store.effects(sid),
        ]
    return tuple(found)


class SharedStorageConformance(ConformanceBase):
    """What one store wrote, another on the same storage reads; leases hold across them."""

    async def test_a_store_opened_again_reads_everything_back(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("nothing to reopen")
        async with new_store() as store:
            await store.create_session("a", machine="m", snapshot={"v": 0}, fingerprint={"f": 1})
            await store.create_session("b", machine="m", snapshot={"v": 0}, parent="a")
            for seq in range(1, 13):
                snapshot = (seq, {"v": seq}) if seq % 5 == 0 else None
                await store.append("a", [make_event("a", seq)], snapshot=snapshot)
            await store.post("b", message("m1", T0 + 5), capacity=5)
            await store.post("b", message("m2"), capacity=5)
            await store.append("b", make_events("b", 1, 2), applied=2, posts=[message("t")])
            assert await store.park(
                "b", None, status="waiting", waiting={"w": [1]}, accepts=["Ask"], now=T0 - 1
            )
            await store.begin_effect("a", "k1", tool="t", arguments={"x": 1})
            await store.begin_effect("a", "k2", tool="t", arguments={"x": 2})
            await store.finish_effect("a", "k2", result=[2])
            before = await _everything(store)
        async with new_store() as store:
            assert await _everything(store) == before
            assert (await store.load("a")).snapshot_seq == 10
            assert (await store.record("b")).wake_at == T0
            await store.append("a", make_events("a", 13, 13))
            stored, new = await store.post("b", message("m3"), capacity=5)
            assert (stored.position, new) == (4, True)
            assert [(r.session_id, r.wake_at) for r in (await store.waking(T0))[0]] == [("b", T0)]

    async def test_leaving_the_store_commits_every_acknowledged_write(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("nothing to reopen")
        store = new_store()
        async with store:
            await store.create_session("s", machine="m", snapshot={})
            for seq in range(1, 151):
                await store.append("s", [make_event("s", seq)])
            await store.set_status("s", "finished")
        assert store.statistics().pending == 0
        async with new_store() as store:
            assert await store.history("s") == tuple(make_events("s", 1, 150))
            assert (await store.record("s")).status == "finished"

    async def test_leaving_on_an_error_commits_and_lets_it_through(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("nothing to reopen")
        store = new_store()

        async def body() -> None:
            async with store:
                await store.create_session("s", machine="m", snapshot={})
                for seq in range(1, 41):
                    await store.append("s", [make_event("s", seq)])
                raise LookupError("mine")

        with pytest.raises(LookupError, match="mine"):
            await body()
        async with new_store() as again:
            assert [e.seq for e in await again.history("s")] == list(range(1, 41))

    async def test_leaving_by_cancellation_commits_every_acknowledged_write(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("nothing to reopen")
        acknowledged: list[int] = []
        with anyio.CancelScope() as scope:
            async with new_store() as store:
                await store.create_session("s", machine="m", snapshot={})
                for seq in range(1, 41):
                    await store.append("s", [make_event("s", seq)])
                    acknowledged.append(seq)
                scope.cancel()
                await anyio.sleep_forever()
        async with new_store() as store:
            assert [e.seq for e in await store.history("s")] == acknowledged

    async def test_a_lease_holds_across_instances(self, new_store: Callable[[], Store]) -> None:
        self.need_shared_storage("no second instance sees the first one's leases")
        async with new_store() as one, new_store() as two:
            await one.create_session("s", machine="m", snapshot={})
            await one.acquire("s", "alice", ttl=3600)
            assert [(lease.session_id, lease.owner) for lease in await two.leases()] == [
                ("s", "alice")
            ]
            with pytest.raises(SessionLocked) as caught:
                await two.acquire("s", "bob", ttl=3600)
            assert caught.value.owner == "alice"
            await one.release("s", "alice")
            await two.acquire("s", "bob", ttl=3600)
            with pytest.raises(SessionLocked):
                await one.acquire("s", "alice", ttl=3600)

    async def test_another_instance_takes_over_a_dead_owners_lease(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance sees the first one's leases")
        async with new_store() as one, new_store() as two:
            await one.create_session("s", machine="m", snapshot={})
            await one.acquire("s", "dead", ttl=3600)
            await two.acquire("s", "heir", ttl=3600, replacing="dead")
            with pytest.raises(SessionLocked) as caught:
                await one.acquire("s", "dead", ttl=3600)
            assert caught.value.owner == "heir"

    async def test_a_short_lease_runs_out_for_another_instance(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance sees the first one's leases")
        async with new_store() as one, new_store() as two:
            await one.create_session("s", machine="m", snapshot={})
            await one.acquire("s", "alice", ttl=0.05)

            async def taken() -> bool:
                try:
                    await two.acquire("s", "bob", ttl=3600)
                except SessionLocked:
                    return False
                return True

            await eventually(taken)
            assert [lease.owner for lease in await one.leases()] == ["bob"]

    async def test_an_effects_intent_is_seen_by_another_instance_at_once(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance sees the first one's ledger")
        async with new_store() as one, new_store() as two:
            await one.create_session("s", machine="m", snapshot={})
            effect, began = await one.begin_effect("s", "k", tool="t", arguments={"x": 1})
            assert began
            found, began = await two.begin_effect("s", "k", tool="t", arguments={"x": 2})
            assert (found, began) == (effect, False)
            await one.finish_effect("s", "k", result="done")
            (done,) = await two.effects("s")
            assert (done.status, done.result) == (EffectStatus.DONE, "done")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


class UpgradeConformance(ConformanceBase):
    """Storage an older version wrote opens, reads back as it did, and takes new writes.

    Enabled by overriding the ``old_store_factory`` and ``old_store_histories``
    fixtures; skipped otherwise.
    """

    @pytest.fixture
    def old_store(
        self,
        old_store_factory: Callable[[], Store] | None,
        old_store_histories: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> Callable[[], Store]:
        if old_store_factory is None:
            pytest.skip(f"{type(self).__name__} gives no older storage (old_store_factory)")
        assert old_store_histories, "old_store_histories: the old storage's sessions"
        return old_store_factory

    async def test_old_storage_reads_back_as_the_old_version_read_it(
        self,
        old_store: Callable[[], Store],
        old_store_histories: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> None:
        async with old_store() as store:
            records = await store.sessions()
            assert [r.session_id for r in records] == list(old_store_histories)
            for record in records:
                expected = old_store_histories[record.session_id]
                history = await store.history(record.session_id)
                assert _plain([asdict(e) for e in history]) == _plain(expected)
                assert record.last_seq == len(history)
                loaded = await store.load(record.session_id)
                assert loaded.events == history[loaded.snapshot_seq :]
                at = await store.snapshot_at(record.session_id, loaded.snapshot_seq)
                assert at == (loaded.snapshot_seq, loaded.snapshot)

    async def test_upgraded_storage_takes_every_kind_of_write(
        self,
        old_store: Callable[[], Store],
        old_store_histories: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> None:
        async with old_store() as store:
            for sid in old_store_histories:
                last = (await store.record(sid)).last_seq
                await store.post(sid, message(f"up-{sid}"), capacity=1000)
                await store.append(sid, [make_event(sid, last + 1)], snapshot=(last + 1, {"up": 1}))
                _, began = await store.begin_effect(sid, f"up-{sid}", tool="t", arguments={})
                assert began
            await store.create_session("new", machine="m", snapshot={"n": 0})
            await store.acquire("new", "me", ttl=3600)
            assert await store.park("new", "me", status="waiting", waiting={}, accepts=(), now=T0)
            after = await _everything(store)
        if not self.shared_storage:
            return
        async with old_store() as store:  # upgraded once: opened again as it is
            assert await _everything(store) == after
            for sid in old_store_histories:
                assert f"up-{sid}" in ids(await store.pending(sid))
                assert (await store.load(sid)).snapshot == {"up": 1}
