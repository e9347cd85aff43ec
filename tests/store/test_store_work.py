"""The store as a work queue, on every store, durability mode and backend.

`claim` leases the sessions that have something to do (new or orphaned
running sessions, waiting sessions whose wake time has come) to one owner in
one transaction; `wait_for_work` returns as soon as this process writes
something that may be work, or after its timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import ConfigurationError, SessionLocked
from arkhon_rheo.protocols import NewMessage, WorkQueue
from arkhon_rheo.store import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.store.conftest import AnyStore, Kind

pytestmark = pytest.mark.anyio

T0 = 1000.0


@pytest.fixture
def clock() -> list[float]:
    """The stores' clock: ``clock[0]``, moved by the test."""
    return [T0]


@pytest.fixture
def make(
    make_store: Callable[..., AnyStore], clock: list[float], kind: Kind
) -> Callable[[], AnyStore]:
    if kind.postgres:
        # These tests move the store's clock and count on this process's writes
        # waking a wait at once; PostgreSQL's leases run on the database's clock and
        # its wake-ups come by LISTEN/NOTIFY. Its work queue is checked by the
        # conformance suite (QueueConformance) and tests/store/test_postgres.py.
        pytest.skip("PostgresStore's work queue: see QueueConformance and test_postgres.py")
    return lambda: make_store(clock=lambda: clock[0])


def ids(records: tuple[object, ...]) -> list[str]:
    return [record.session_id for record in records]  # type: ignore[attr-defined]


async def test_a_claim_leases_what_has_something_to_do_oldest_first(
    make: Callable[[], AnyStore], clock: list[float]
) -> None:
    async with make() as store:
        assert isinstance(store, WorkQueue)
        for sid in ("new", "other", "leased", "done", "parked", "due", "later"):
            machine = "other" if sid == "other" else "m"
            await store.create_session(sid, machine=machine, snapshot={})
        await store.acquire("leased", "someone", ttl=10)
        await store.set_status("done", "finished")
        await store.park("parked", None, status="waiting", waiting=None, accepts=["A"], now=T0)
        await store.post("due", NewMessage("x", "A", {}, T0), capacity=5)
        await store.post("later", NewMessage("x", "A", {}, T0 + 60), capacity=5)
        for sid in ("due", "later"):
            await store.park(sid, None, status="waiting", waiting=None, accepts=["A"], now=T0 - 1)
        claimed = await store.claim("w1", machines=["m"], limit=10, ttl=5, now=T0)
        assert ids(claimed) == ["new", "due"]
        assert [r.status for r in claimed] == ["running", "waiting"]
        # Leased to w1 now: nobody else gets them, nor can take the lease.
        assert ids(await store.claim("w2", machines=["m", "other"], limit=10, ttl=5, now=T0)) == [
            "other"
        ]
        with pytest.raises(SessionLocked):
            await store.acquire("new", "w2", ttl=5)
        # A lease that ran out (its owner died) is claimed again; so is a timer come due.
        clock[0] = T0 + 11
        again = await store.claim("w2", machines=["m"], limit=10, ttl=5, now=T0 + 60)
        assert ids(again) == ["new", "leased", "due", "later"]
        assert {lease.owner for lease in await store.leases()} == {"w2"}


async def test_a_claim_takes_no_more_than_its_limit(make: Callable[[], AnyStore]) -> None:
    async with make() as store:
        for n in range(5):
            await store.create_session(f"s{n}", machine="m", snapshot={})
        first = await store.claim("w1", machines={"m"}, limit=2, ttl=5, now=T0)
        second = await store.claim("w2", machines={"m"}, limit=10, ttl=5, now=T0)
        assert (ids(first), ids(second)) == (["s0", "s1"], ["s2", "s3", "s4"])
        assert await store.claim("w3", machines={"m"}, limit=0, ttl=5, now=T0) == ()
        assert await store.claim("w3", machines=(), limit=5, ttl=5, now=T0) == ()


@pytest.mark.parametrize(
    ("owner", "machines", "limit", "ttl", "now", "match"),
    [
        ("", ["m"], 1, 5.0, T0, "owner"),
        ("w", "m", 1, 5.0, T0, "machines"),
        ("w", ["m"], -1, 5.0, T0, "limit"),
        ("w", ["m"], 1, 0.0, T0, "ttl"),
        ("w", ["m"], 1, 5.0, float("nan"), "now"),
    ],
)
async def test_a_malformed_claim_is_refused(
    make: Callable[[], AnyStore],
    owner: str,
    machines: object,
    limit: int,
    ttl: float,
    now: float,
    match: str,
) -> None:
    async with make() as store:
        with pytest.raises(ConfigurationError, match=match):
            await store.claim(owner, machines=machines, limit=limit, ttl=ttl, now=now)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="timeout"):
            await store.wait_for_work(-1)


async def test_wait_for_work_wakes_on_this_process_writes(make: Callable[[], AnyStore]) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.wait_for_work(3600)  # the create, remembered: returns at once
        woke = anyio.Event()

        async def waiter() -> None:
            await store.wait_for_work(3600)
            woke.set()

        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert not woke.is_set()
            await store.post("s", NewMessage("m", "A", {}, T0), capacity=5)
            await woke.wait()
        # Nothing written since: the timeout is the poll.
        with anyio.move_on_after(3600) as scope:
            await store.wait_for_work(0.01)
        assert not scope.cancelled_caught


async def test_a_post_of_an_accepted_kind_makes_a_parked_session_claimable(
    make: Callable[[], AnyStore],
) -> None:
    async with make() as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.park("s", None, status="waiting", waiting=None, accepts=["A"], now=T0)
        assert await store.claim("w", machines=["m"], limit=5, ttl=5, now=T0) == ()
        await store.post("s", NewMessage("b", "B", {}, T0), capacity=5)
        assert await store.claim("w", machines=["m"], limit=5, ttl=5, now=T0) == ()
        await store.post("s", NewMessage("a", "A", {}, T0), capacity=5)
        assert ids(await store.claim("w", machines=["m"], limit=5, ttl=5, now=T0)) == ["s"]


async def test_two_files_never_claim_one_session(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with SQLiteStore(path) as one, SQLiteStore(path) as two:
        for n in range(40):
            await one.create_session(f"s{n}", machine="m", snapshot={})
        got: dict[str, list[str]] = {"one": [], "two": []}

        async def take(name: str, store: SQLiteStore) -> None:
            while claimed := await store.claim(name, machines=["m"], limit=3, ttl=60, now=T0):
                got[name].extend(ids(claimed))

        async with anyio.create_task_group() as group:
            group.start_soon(take, "one", one)
            group.start_soon(take, "two", two)
        assert sorted(got["one"] + got["two"]) == sorted(f"s{n}" for n in range(40))
        assert not set(got["one"]) & set(got["two"])
