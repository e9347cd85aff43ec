"""Each session's durable inbox, on every store, durability mode and backend.

Posting (idempotent by message id, bounded), the order messages are pending in,
parking (atomic against a due message), waking, and applying a message or
posting timers in the same transaction as a step's events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import ConfigurationError, SessionLocked, SessionNotFound, StoreError
from arkhon_rheo.errors import DuplicateEvent, InboxFull, LeaseLost
from arkhon_rheo.protocols import NewMessage, StoredEvent, StoredMessage
from arkhon_rheo.testing import FaultPlan

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.store.conftest import AnyStore, Kind

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


async def test_a_post_is_stored_once_and_a_repost_is_a_no_op(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        stored, new = await store.post("s", message("a", T0 + 5, n=1), capacity=10)
        assert new
        assert stored == StoredMessage("s", "a", 1, "Ask", {"n": 1}, T0, T0 + 5, None)
        again, new = await store.post("s", message("a", T0 + 99, n=2), capacity=10)
        assert (again, new) == (stored, False)
        second, _ = await store.post("s", message("b"), capacity=10)
        assert second.position == 2
        assert await store.pending("s") == (second, stored)  # by due time
        # Applied, the id is still taken: a re-send does not come back.
        await store.append("s", [event("s", 1)], applied=1)
        again, new = await store.post("s", message("a"), capacity=10)
        assert not new
        assert again.applied_seq == 1
        assert ids(await store.pending("s")) == ["b"]
        assert ids(await store.messages("s")) == ["a", "b"]
        with pytest.raises(SessionNotFound):
            await store.post("nope", message("a"), capacity=10)
        with pytest.raises(SessionNotFound):
            await store.pending("nope")
        with pytest.raises(SessionNotFound):
            await store.messages("nope")


async def test_pending_is_ordered_by_due_time_then_position(make: Callable[[], AnyStore]) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.create_session("other", machine="m", snapshot={})
        for mid, due in [("late", T0 + 30), ("soon", T0 + 10), ("also-soon", T0 + 10), ("now", T0)]:
            await store.post("s", message(mid, due), capacity=10)
        await store.post("other", message("elsewhere"), capacity=10)
        assert ids(await store.pending("s")) == ["now", "soon", "also-soon", "late"]
        assert ids(await store.messages("s")) == ["late", "soon", "also-soon", "now"]
        assert [m.position for m in await store.messages("s")] == [1, 2, 3, 4]
        assert ids(await store.pending("other")) == ["elsewhere"]


async def test_a_full_inbox_refuses_a_new_message_and_stores_nothing(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        for mid in ("a", "b"):
            await store.post("s", message(mid), capacity=2)
        with pytest.raises(InboxFull, match="inbox_capacity") as caught:
            await store.post("s", message("c"), capacity=2)
        assert (caught.value.session_id, caught.value.capacity) == ("s", 2)
        assert ids(await store.messages("s")) == ["a", "b"]
        # A re-post of a message it has is no new message: answered, not refused.
        assert (await store.post("s", message("a"), capacity=2))[1] is False
        # Applying one makes room; applied messages do not count.
        await store.append("s", [event("s", 1)], applied=1)
        stored, new = await store.post("s", message("c"), capacity=2)
        assert new
        assert stored.position == 3
        # Timers a step posts are not bounded.
        await store.append("s", [event("s", 2)], posts=[message("t1"), message("t2")])
        assert ids(await store.pending("s")) == ["b", "c", "t1", "t2"]


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


async def test_park_is_refused_while_an_accepted_message_is_due(
    make: Callable[[], AnyStore], clock: list[float]
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "me", ttl=60)
        await store.post("s", message("due", T0 + 10), capacity=10)
        parked = await store.park(
            "s", "me", status="waiting", waiting={"for": "Ask"}, accepts={"Ask"}, now=T0 + 10
        )
        assert not parked
        record = await store.record("s")
        assert (record.status, record.waiting, record.wake_at) == ("running", None, None)
        with pytest.raises(SessionLocked):  # still held
            await store.acquire("s", "another", ttl=60)
        with pytest.raises(SessionNotFound):
            await store.park("nope", None, status="waiting", waiting=None, accepts=(), now=T0)


async def test_park_sets_what_the_session_waits_for_and_releases_its_lease(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "me", ttl=60)
        await store.post("s", message("later", T0 + 20), capacity=10)
        await store.post("s", message("sooner", T0 + 10), capacity=10)
        # Of a kind the state does not take: neither blocks parking nor sets the wake.
        await store.post("s", message("other", T0, kind="Other"), capacity=10)
        waiting = {"stage": "receive", "accepts": ["Ask"]}
        parked = await store.park(
            "s", "me", status="waiting", waiting=waiting, accepts=["Ask"], now=T0 + 5
        )
        assert parked
        record = await store.record("s")
        assert (record.status, record.waiting, record.wake_at) == ("waiting", waiting, T0 + 10)
        assert await store.leases() == ()
        await store.acquire("s", "another", ttl=60)  # free
        assert (await store.sessions())[0] == record
        # Nothing accepted pending: only a new message wakes it.
        await store.create_session("t", machine="m", snapshot={})
        await store.post("t", message("x", T0, kind="Other"), capacity=10)
        assert await store.park(
            "t", None, status="paused", waiting={"gate": "g"}, accepts=["Ask"], now=T0 + 5
        )
        record = await store.record("t")
        assert (record.status, record.waiting, record.wake_at) == ("paused", {"gate": "g"}, None)


async def test_a_park_for_another_owner_s_session_is_refused_and_changes_nothing(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "holder", ttl=60)
        with pytest.raises(LeaseLost):
            await store.park("s", "me", status="waiting", waiting=None, accepts=(), now=T0)
        assert [lease.owner for lease in await store.leases()] == ["holder"]
        assert (await store.record("s")).status == "running"


async def test_a_status_change_clears_what_the_session_waited_for(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        for sid in ("a", "b", "c"):
            await store.create_session(sid, machine="m", snapshot={})
            await store.post(sid, message("m", T0 + 10), capacity=5)
            assert await store.park(
                sid, None, status="waiting", waiting={"w": 1}, accepts=["Ask"], now=T0
            )
        await store.set_status("a", "running")
        await store.append("b", [event("b", 1)], status="running", applied=1)
        await store.append("c", [event("c", 1)])  # no status given: still waiting
        records = {r.session_id: r for r in await store.sessions()}
        assert (records["a"].status, records["a"].waiting, records["a"].wake_at) == (
            "running",
            None,
            None,
        )
        assert (records["b"].status, records["b"].waiting, records["b"].wake_at) == (
            "running",
            None,
            None,
        )
        assert (records["c"].status, records["c"].waiting, records["c"].wake_at) == (
            "waiting",
            {"w": 1},
            T0 + 10,
        )
        assert [r.session_id for r in (await store.waking(T0 + 10))[0]] == ["c"]


async def test_waking_lists_the_due_sessions_earliest_first_and_the_next_wake(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        timers = {"a": T0 + 30, "b": T0 + 10, "c": T0 + 20, "d": T0 + 10, "e": None, "p": T0 + 1}
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
        assert [r.session_id for r in due] == ["b", "d", "c"]  # ties: oldest session first
        assert [r.wake_at for r in due] == [T0 + 10, T0 + 10, T0 + 20]
        assert later == T0 + 30
        due, later = await store.waking(T0 + 100)
        assert ([r.session_id for r in due], later) == (["b", "d", "c", "a"], None)
        await store.set_status("b", "running")
        assert [r.session_id for r in (await store.waking(T0 + 100))[0]] == ["d", "c", "a"]


async def test_a_post_to_a_waiting_session_brings_its_wake_forward(
    make: Callable[[], AnyStore], kind: Kind
) -> None:
    # The session keeps the kinds it parked accepting: a new message of one of them
    # wakes it by its due time (a sender that dies between posting and waking it
    # loses nothing); a message of another kind leaves it parked.
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.post("s", message("t", T0 + 50), capacity=5)
        assert await store.park("s", None, status="waiting", waiting=None, accepts=["Ask"], now=T0)
        await store.post("s", message("later", T0 + 90), capacity=5)
        assert (await store.record("s")).wake_at == T0 + 50
        await store.post("s", message("other", T0 + 1, kind="Other"), capacity=5)
        assert (await store.record("s")).wake_at == T0 + 50
        await store.post("s", message("now", T0 + 1), capacity=5)
        assert (await store.record("s")).wake_at == T0 + 1
        assert [r.session_id for r in (await store.waking(T0 + 1))[0]] == ["s"]
        # Parking again computes it from the accepted kinds alone.
        assert await store.park(
            "s", None, status="waiting", waiting=None, accepts=["Other"], now=T0
        )
        assert (await store.record("s")).wake_at == T0 + 1
        # Not waiting (paused, running): no wake.
        await store.create_session("p", machine="m", snapshot={}, status="paused")
        await store.post("p", message("m"), capacity=5)
        assert (await store.record("p")).wake_at is None


async def test_applying_a_message_marks_it_in_the_same_write_and_only_once(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.post("s", message("a"), capacity=5)
        await store.post("s", message("b"), capacity=5)
        await store.append("s", [event("s", 1), event("s", 2)], applied=2)
        (first, second) = await store.messages("s")
        assert (first.applied_seq, second.applied_seq) == (None, 2)
        assert ids(await store.pending("s")) == ["a"]
        # Applying it again refuses the whole append: no event, no mark.
        with pytest.raises(StoreError, match="applied already") as caught:
            await store.append("s", [event("s", 3)], applied=2, posts=[message("t")])
        assert not isinstance(caught.value, DuplicateEvent)
        with pytest.raises(StoreError, match="#9"):  # never posted
            await store.append("s", [event("s", 3)], applied=9)
        assert (await store.record("s")).last_seq == 2
        assert len(await store.history("s")) == 2
        assert ids(await store.messages("s")) == ["a", "b"]
        # A wrong event number refuses the mark as well.
        with pytest.raises(DuplicateEvent):
            await store.append("s", [event("s", 2)], applied=1)
        assert ids(await store.pending("s")) == ["a"]
        await store.append("s", [event("s", 3)], applied=1)
        assert await store.pending("s") == ()
        assert [m.applied_seq for m in await store.messages("s")] == [3, 2]


async def test_an_append_posts_its_timers_after_what_it_applied(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.post("s", message("ask"), capacity=1)
        timers = [message("remind", T0 + 3600, kind="Remind"), message("ask", T0 + 1)]
        await store.append("s", [event("s", 1)], applied=1, posts=timers)
        stored = await store.messages("s")
        # "ask" was in the inbox already: skipped.
        assert [(m.message_id, m.position, m.applied_seq) for m in stored] == [
            ("ask", 1, 1),
            ("remind", 2, None),
        ]
        assert stored[1].payload == {"text": "remind"}
        assert stored[1].due_at == T0 + 3600
        # Posted twice by a step (ids repeat): once.
        await store.append("s", [event("s", 2)], posts=[message("x"), message("x")])
        assert ids(await store.pending("s")) == ["x", "remind"]


async def test_the_inbox_survives_reopening_the_file(
    make: Callable[[], AnyStore], kind: Kind
) -> None:
    if not kind.sqlite:
        pytest.skip("a memory store keeps nothing")
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.post("s", message("a", T0 + 7), capacity=5)
        await store.post("s", message("b"), capacity=5)
        await store.append("s", [event("s", 1)], applied=2, posts=[message("t", T0 + 9)])
        await store.acquire("s", "x", ttl=60)  # a park names the lease it gives up
        assert await store.park("s", "x", status="waiting", waiting=[1], accepts=["Ask"], now=T0)
        before = (await store.messages("s"), await store.pending("s"), await store.record("s"))
    async with make() as store:
        after = (await store.messages("s"), await store.pending("s"), await store.record("s"))
        assert after == before
        assert ids(after[1]) == ["a", "t"]
        assert after[2].wake_at == T0 + 7
        stored, new = await store.post("s", message("c"), capacity=5)
        assert (stored.position, new) == (4, True)


async def test_concurrent_posts_to_many_sessions_all_land_in_order(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        for i in range(20):
            await store.create_session(f"s{i}", machine="m", snapshot={})

        async def send(i: int) -> None:
            for j in range(10):
                await store.post(f"s{i}", message(f"m{j}", kind="Ask", n=j), capacity=100)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(send, i)
        for i in range(20):
            stored = await store.pending(f"s{i}")
            assert [(m.message_id, m.position) for m in stored] == [
                (f"m{j}", j + 1) for j in range(10)
            ]


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
