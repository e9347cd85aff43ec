"""The conformance group of the work queue: `WorkQueue.claim` and `WorkQueue.wait_for_work`.

`WorkQueue` is an optional capability: each test skips, saying so, when the
store is not one. A claim leases sessions that have something to do (a new
or orphaned ``"running"`` session with no live lease, a ``"waiting"`` one
whose wake time has come) to the claimer, never one session to two
claimers; ``wait_for_work`` returns once another instance posts, or after
its timeout (a hang guard bounds every wait; no test measures time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import anyio
import anyio.lowlevel
import pytest

from .._errors import LeaseLost, SessionLocked
from ..protocols import WorkQueue
from ._conformance_base import PATIENCE, T0, ConformanceBase, eventually, make_event, message

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import SessionRecord, Store

__all__ = ["QueueConformance"]

#: A lease that runs out while the test polls for it (by the store's own clock).
SHORT_TTL = 0.05
#: A lease that outlives any test.
LONG_TTL = 3600.0


def _queue(store: Store) -> WorkQueue:
    """``store`` as a `WorkQueue`; the test skips if it is not one."""
    if not isinstance(store, WorkQueue):
        pytest.skip(f"{type(store).__name__} is not a WorkQueue (claim, wait_for_work)")
    return cast("WorkQueue", store)


async def _claim(
    queue: WorkQueue, owner: str, now: float = T0, limit: int = 100
) -> tuple[SessionRecord, ...]:
    return await queue.claim(owner, machines=["m"], limit=limit, ttl=LONG_TTL, now=now)


def _sids(records: tuple[SessionRecord, ...]) -> set[str]:
    return {r.session_id for r in records}


async def _owners(store: Store) -> dict[str, str]:
    return {lease.session_id: lease.owner for lease in await store.leases()}


class QueueConformance(ConformanceBase):
    """Claiming sessions that have something to do, and waiting for work (a `WorkQueue`).

    Attributes:
        notifies_across_instances: Whether ``wait_for_work`` returns as soon as
            another instance on the same storage posts (PostgreSQL's
            ``LISTEN/NOTIFY``). The protocol does not require it: a store that
            wakes on its own writes only finds the others' at its next claim,
            after the wait's timeout (polling), and leaves this ``False``.
    """

    notifies_across_instances: ClassVar[bool] = False

    async def test_a_claim_takes_only_sessions_with_something_to_do(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            queue = _queue(store)
            for sid in ("new", "held", "lapsed", "due", "later", "idle", "done"):
                await store.create_session(sid, machine="m", snapshot={})
            await store.create_session("elsewhere", machine="other", snapshot={})
            await store.create_session("paused", machine="m", snapshot={}, status="paused")
            await store.acquire("held", "someone", ttl=LONG_TTL)
            await store.acquire("lapsed", "gone", ttl=SHORT_TTL)
            for sid, due in (("due", T0 + 10), ("later", T0 + 90)):
                await store.post(sid, message("timer", due), capacity=5)
            for sid in ("due", "later", "idle"):
                assert await store.park(
                    sid, None, status="waiting", waiting=None, accepts=["Ask"], now=T0
                )
            await store.set_status("done", "finished")

            async def lapsed() -> bool:
                return "lapsed" not in await _owners(store)

            await eventually(lapsed)
            claimed = await _claim(queue, "worker", now=T0 + 20)
            assert _sids(claimed) == {"new", "lapsed", "due"}
            # Their leases are the claimer's: nobody else claims or takes them.
            owners = await _owners(store)
            assert {sid: owners[sid] for sid in ("new", "lapsed", "due")} == dict.fromkeys(
                ("new", "lapsed", "due"), "worker"
            )
            assert await _claim(queue, "rival", now=T0 + 20) == ()
            with pytest.raises(SessionLocked) as caught:
                await store.acquire("new", "rival", ttl=LONG_TTL)
            assert caught.value.owner == "worker"
            # The claimer commits under its lease; the owner whose lease lapsed is fenced off.
            await store.append("lapsed", [make_event("lapsed", 1)], owner="worker")
            with pytest.raises(LeaseLost):
                await store.append(
                    "lapsed", [make_event("lapsed", 2)], posts=[message("x")], owner="gone"
                )
            # The later timer's time comes: that session is work too.
            (later,) = await _claim(queue, "rival", now=T0 + 90)
            assert later.session_id == "later"

    async def test_a_claim_takes_at_most_its_limit(self, new_store: Callable[[], Store]) -> None:
        async with new_store() as store:
            queue = _queue(store)
            for i in range(5):
                await store.create_session(f"s{i}", machine="m", snapshot={})
            first = await _claim(queue, "a", limit=2)
            second = await _claim(queue, "b", limit=2)
            third = await _claim(queue, "c", limit=2)
            assert [len(first), len(second), len(third)] == [2, 2, 1]
            assert _sids(first) | _sids(second) | _sids(third) == {f"s{i}" for i in range(5)}
            assert await _claim(queue, "d") == ()

    async def test_a_post_of_a_kind_it_accepts_makes_a_waiting_session_work(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            queue = _queue(store)
            await store.create_session("s", machine="m", snapshot={})
            assert await store.park(
                "s", None, status="waiting", waiting=None, accepts=["Ask"], now=T0
            )
            assert await _claim(queue, "w", now=T0 + 100) == ()
            await store.post("s", message("other", T0, kind="Other"), capacity=5)
            assert await _claim(queue, "w", now=T0 + 100) == ()  # not a kind it takes
            await store.post("s", message("timer", T0 + 50), capacity=5)
            assert await _claim(queue, "w", now=T0) == ()  # not due yet
            (claimed,) = await _claim(queue, "w", now=T0 + 50)
            assert claimed.session_id == "s"
            assert await _owners(store) == {"s": "w"}

    async def test_concurrent_claimers_never_get_the_same_session(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            queue = _queue(store)
            await self._claim_all_concurrently(store, [queue, queue, queue])

    async def test_two_instances_claiming_at_once_never_get_the_same_session(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance claims from the same sessions")
        async with new_store() as one, new_store() as two:
            await self._claim_all_concurrently(one, [_queue(one), _queue(two)])

    async def _claim_all_concurrently(self, store: Store, queues: list[WorkQueue]) -> None:
        sids = {f"s{i}" for i in range(30)}
        for sid in sorted(sids):
            await store.create_session(sid, machine="m", snapshot={})
        claimed: dict[str, list[str]] = {f"w{i}": [] for i in range(len(queues))}

        async def claim(queue: WorkQueue, owner: str) -> None:
            while records := await _claim(queue, owner, limit=3):
                claimed[owner].extend(r.session_id for r in records)
                await anyio.lowlevel.checkpoint()  # let the other claimers in

        async with anyio.create_task_group() as tg:
            for i, queue in enumerate(queues):
                tg.start_soon(claim, queue, f"w{i}")
        every = [sid for got in claimed.values() for sid in got]
        assert sorted(every) == sorted(sids)  # each exactly once
        owners = await _owners(store)
        assert {sid: owners[sid] for sid in sids} == {
            sid: owner for owner, got in claimed.items() for sid in got
        }

    async def test_wait_for_work_returns_after_a_post_from_another_instance(
        self, new_store: Callable[[], Store]
    ) -> None:
        self.need_shared_storage("no second instance posts to the same sessions")
        if not self.notifies_across_instances:
            pytest.skip(
                f"{type(self).__name__} finds another instance's posts at its next claim "
                "(notifies_across_instances is False)"
            )
        async with new_store() as worker, new_store() as service:
            queue = _queue(worker)
            await service.create_session("s", machine="m", snapshot={})
            await queue.wait_for_work(0)  # (a first wait may start listening)
            woke = anyio.Event()

            async def wait() -> None:
                await queue.wait_for_work(LONG_TTL)
                woke.set()

            with anyio.fail_after(PATIENCE):  # a hang guard only
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait)
                    n = 0
                    while not woke.is_set():  # a post made before the waiter listened is news
                        n += 1  # it may miss: post again until it wakes
                        await service.post("s", message(f"hello {n}"), capacity=1000)
                        with anyio.move_on_after(0.05):
                            await woke.wait()

    async def test_wait_for_work_returns_after_its_timeout_without_news(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            queue = _queue(store)
            with anyio.fail_after(PATIENCE):  # a hang guard only
                await queue.wait_for_work(0)
                await queue.wait_for_work(0.05)
                await queue.wait_for_work(0.05)
