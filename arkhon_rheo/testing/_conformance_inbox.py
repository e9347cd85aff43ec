"""The conformance group of each session's inbox: posts, pending order, parking, waking."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import anyio
import pytest

from .._errors import DuplicateEvent, InboxFull, LeaseLost, SessionLocked, StoreError
from ..protocols import StoredMessage
from ._conformance_base import T0, ConformanceBase, ids, make_event, message

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..protocols import Store

__all__ = ["InboxConformance"]


def _unstamped(stored: StoredMessage) -> StoredMessage:
    """The message with its ``posted_at`` (the store's clock) set aside."""
    assert isinstance(stored.posted_at, float)
    return dataclasses.replace(stored, posted_at=0.0)


async def _waiting(store: Store, sid: str) -> tuple[str, object, float | None]:
    record = await store.record(sid)
    return record.status, record.waiting, record.wake_at


class InboxConformance(ConformanceBase):
    """Posting (idempotent, bounded), pending order, parking atomically, waking."""

    async def test_a_post_is_stored_once_and_a_repost_changes_nothing(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            stored, new = await store.post("s", message("a", T0 + 5, n=1), capacity=10)
            assert new
            assert _unstamped(stored) == StoredMessage("s", "a", 1, "Ask", {"n": 1}, 0.0, T0 + 5)
            again, new = await store.post("s", message("a", T0 + 99, n=2), capacity=10)
            assert (again, new) == (stored, False)
            second, _ = await store.post("s", message("b"), capacity=10)
            assert second.position == 2
            assert await store.pending("s") == (second, stored)  # by due time
            assert await store.messages("s") == (stored, second)  # by position
            # Applied, its id is still taken: a re-send does not come back.
            await store.append("s", [make_event("s", 1)], applied=1)
            again, new = await store.post("s", message("a"), capacity=10)
            assert (new, again.applied_seq, again.payload) == (False, 1, {"n": 1})
            assert ids(await store.pending("s")) == ["b"]
            assert ids(await store.messages("s")) == ["a", "b"]

    async def test_pending_is_ordered_by_due_time_then_position(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.create_session("other", machine="m", snapshot={})
            posts = [("late", T0 + 30), ("soon", T0 + 10), ("also-soon", T0 + 10), ("now", T0)]
            for mid, due in posts:
                await store.post("s", message(mid, due), capacity=10)
            await store.post("other", message("elsewhere"), capacity=10)
            assert ids(await store.pending("s")) == ["now", "soon", "also-soon", "late"]
            assert ids(await store.messages("s")) == ["late", "soon", "also-soon", "now"]
            assert [m.position for m in await store.messages("s")] == [1, 2, 3, 4]
            assert ids(await store.pending("other")) == ["elsewhere"]
            assert [m.position for m in await store.messages("other")] == [1]

    async def test_a_full_inbox_refuses_a_new_message_and_stores_nothing(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            for mid in ("a", "b"):
                await store.post("s", message(mid), capacity=2)
            with pytest.raises(InboxFull) as caught:
                await store.post("s", message("c"), capacity=2)
            assert (caught.value.session_id, caught.value.capacity) == ("s", 2)
            assert ids(await store.messages("s")) == ["a", "b"]
            # A re-post of a message it has is no new message: answered, not refused.
            assert (await store.post("s", message("a"), capacity=2))[1] is False
            # Applying one makes room: applied messages do not count.
            await store.append("s", [make_event("s", 1)], applied=1)
            stored, new = await store.post("s", message("c"), capacity=2)
            assert (stored.position, new) == (3, True)
            # The timers a step posts are not bounded.
            await store.append("s", [make_event("s", 2)], posts=[message("t1"), message("t2")])
            assert ids(await store.pending("s")) == ["b", "c", "t1", "t2"]

    async def test_applying_a_message_marks_it_with_the_last_event_once(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.post("s", message("a"), capacity=5)
            await store.post("s", message("b"), capacity=5)
            await store.append("s", [make_event("s", 1), make_event("s", 2)], applied=2)
            assert [m.applied_seq for m in await store.messages("s")] == [None, 2]
            # Applying it again refuses the whole append: no event, no mark, no post.
            with pytest.raises(StoreError) as caught:
                await store.append("s", [make_event("s", 3)], applied=2, posts=[message("t")])
            assert not isinstance(caught.value, DuplicateEvent)
            with pytest.raises(StoreError):  # never posted
                await store.append("s", [make_event("s", 3)], applied=9)
            assert (await store.record("s")).last_seq == 2
            assert len(await store.history("s")) == 2
            assert ids(await store.messages("s")) == ["a", "b"]
            await store.append("s", [make_event("s", 3)], applied=1)
            assert await store.pending("s") == ()
            assert [m.applied_seq for m in await store.messages("s")] == [3, 2]

    async def test_an_append_posts_its_timers_in_the_same_write(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.post("s", message("ask"), capacity=1)
            timers = [message("remind", T0 + 3600, kind="Remind"), message("ask", T0 + 1)]
            await store.append("s", [make_event("s", 1)], applied=1, posts=timers)
            stored = await store.messages("s")
            # "ask" was in the inbox already: skipped.
            assert [(m.message_id, m.position, m.applied_seq) for m in stored] == [
                ("ask", 1, 1),
                ("remind", 2, None),
            ]
            assert (stored[1].kind, stored[1].payload, stored[1].due_at) == (
                "Remind",
                {"text": "remind"},
                T0 + 3600,
            )
            # Posted twice by one step (the ids repeat): once.
            await store.append("s", [make_event("s", 2)], posts=[message("x"), message("x")])
            assert ids(await store.pending("s")) == ["x", "remind"]

    async def test_park_is_refused_while_an_accepted_message_is_due(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "me", ttl=3600)
            await store.post("s", message("due", T0 + 10), capacity=10)
            parked = await store.park(
                "s", "me", status="waiting", waiting={"for": "Ask"}, accepts={"Ask"}, now=T0 + 10
            )
            assert not parked
            assert await _waiting(store, "s") == ("running", None, None)
            with pytest.raises(SessionLocked):  # still held
                await store.acquire("s", "another", ttl=3600)

    async def test_park_sets_what_the_session_waits_for_and_releases_its_lease(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "me", ttl=3600)
            await store.post("s", message("later", T0 + 20), capacity=10)
            await store.post("s", message("sooner", T0 + 10), capacity=10)
            # Of a kind it does not accept: neither blocks parking nor sets the wake.
            await store.post("s", message("other", T0, kind="Other"), capacity=10)
            waiting = {"stage": "receive", "accepts": ["Ask"]}
            assert await store.park(
                "s", "me", status="waiting", waiting=waiting, accepts=["Ask"], now=T0 + 5
            )
            assert await _waiting(store, "s") == ("waiting", waiting, T0 + 10)
            assert [lease.session_id for lease in await store.leases()] == []
            await store.acquire("s", "another", ttl=3600)  # free
            # Nothing accepted pending: only a new message wakes it.
            await store.create_session("t", machine="m", snapshot={})
            await store.post("t", message("x", T0, kind="Other"), capacity=10)
            assert await store.park(
                "t", None, status="paused", waiting={"gate": "g"}, accepts=["Ask"], now=T0 + 5
            )
            assert await _waiting(store, "t") == ("paused", {"gate": "g"}, None)

    async def test_a_park_for_an_owner_that_does_not_hold_the_lease_is_refused(
        self, new_store: Callable[[], Store]
    ) -> None:
        # Fenced as an append is: a driver that lost the lease parks nothing.
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.acquire("s", "holder", ttl=3600)
            with pytest.raises(LeaseLost):
                await store.park("s", "me", status="waiting", waiting=None, accepts=(), now=T0)
            assert [lease.owner for lease in await store.leases()] == ["holder"]
            assert (await store.record("s")).status == "running"

    async def test_a_status_change_clears_what_the_session_waited_for(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            for sid in ("a", "b", "c"):
                await store.create_session(sid, machine="m", snapshot={})
                await store.post(sid, message("m", T0 + 10), capacity=5)
                assert await store.park(
                    sid, None, status="waiting", waiting={"w": 1}, accepts=["Ask"], now=T0
                )
            await store.set_status("a", "running")
            await store.append("b", [make_event("b", 1)], status="running", applied=1)
            await store.append("c", [make_event("c", 1)])  # no status given: still waiting
            assert await _waiting(store, "a") == ("running", None, None)
            assert await _waiting(store, "b") == ("running", None, None)
            assert await _waiting(store, "c") == ("waiting", {"w": 1}, T0 + 10)
            assert [r.session_id for r in (await store.waking(T0 + 10))[0]] == ["c"]

    async def test_waking_lists_the_due_sessions_earliest_first_and_the_next_wake(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            timers = {"a": T0 + 30, "b": T0 + 10, "c": T0 + 20, "e": None, "p": T0 + 1}
            for sid, at in timers.items():
                await store.create_session(sid, machine="m", snapshot={})
                if at is not None:
                    await store.post(sid, message("timer", at, kind="Tick"), capacity=5)
                status = "paused" if sid == "p" else "waiting"
                assert await store.park(
                    sid, None, status=status, waiting=None, accepts=["Tick"], now=T0
                )
            assert await store.waking(T0) == ((), T0 + 10)
            due, later = await store.waking(T0 + 20)
            assert [(r.session_id, r.wake_at) for r in due] == [("b", T0 + 10), ("c", T0 + 20)]
            assert later == T0 + 30
            due, later = await store.waking(T0 + 100)
            assert ([r.session_id for r in due], later) == (["b", "c", "a"], None)
            await store.set_status("b", "running")
            assert [r.session_id for r in (await store.waking(T0 + 100))[0]] == ["c", "a"]

    async def test_a_post_to_a_waiting_session_brings_its_wake_forward(
        self, new_store: Callable[[], Store]
    ) -> None:
        async with new_store() as store:
            await store.create_session("s", machine="m", snapshot={})
            await store.post("s", message("t", T0 + 50), capacity=5)
            assert await store.park(
                "s", None, status="waiting", waiting=None, accepts=["Ask"], now=T0
            )
            await store.post("s", message("later", T0 + 90), capacity=5)
            assert (await store.record("s")).wake_at == T0 + 50
            # A kind it does not accept: a store that keeps the accepted kinds leaves the
            # wake time as it is; one that does not may wake it then (it parks again).
            await store.post("s", message("other", T0 + 1, kind="Other"), capacity=5)
            wake_at = (await store.record("s")).wake_at
            assert wake_at in (T0 + 50, T0 + 1)
            due = [r.session_id for r in (await store.waking(T0 + 1))[0]]
            assert due == (["s"] if wake_at == T0 + 1 else [])
            # Parking again computes it from the accepted kinds alone.
            assert await store.park(
                "s", None, status="waiting", waiting=None, accepts=["Ask"], now=T0
            )
            assert (await store.record("s")).wake_at == T0 + 50
            # A kind it accepts, due sooner: its due time is the wake time, in every store.
            await store.post("s", message("soon", T0 + 2), capacity=5)
            assert (await store.record("s")).wake_at == T0 + 2
            assert [r.session_id for r in (await store.waking(T0 + 2))[0]] == ["s"]
            # Not waiting (paused, running): no wake.
            await store.create_session("p", machine="m", snapshot={}, status="paused")
            await store.post("p", message("m"), capacity=5)
            assert (await store.record("p")).wake_at is None

    async def test_concurrent_posts_to_many_sessions_all_land_in_order(
        self, new_store: Callable[[], Store]
    ) -> None:
        async def send(sid: str) -> None:
            for j in range(6):
                await store.post(sid, message(f"m{j}", n=j), capacity=100)

        async with new_store() as store:
            for i in range(12):
                await store.create_session(f"s{i}", machine="m", snapshot={})
            async with anyio.create_task_group() as tg:
                for i in range(12):
                    tg.start_soon(send, f"s{i}")
            for i in range(12):
                stored = await store.pending(f"s{i}")
                assert [(m.message_id, m.position, m.payload) for m in stored] == [
                    (f"m{j}", j + 1, {"n": j}) for j in range(6)
                ]
