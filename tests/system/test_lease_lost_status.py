"""A status write by a process paused past its lease never lands over its successor's.

Two systems on one store (a SQLite file, a PostgreSQL database), as two worker
processes are: the first is held just before its status write (as a SIGSTOP, a
long GC or swap would hold it) until its lease ran out and the second took the
session on; released, its write is refused with `LeaseLost` and the session
keeps the second's status. The wake's own write is tested in `test_lease_lost`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
import structlog

from arkhon_rheo import AgentSystem
from arkhon_rheo.errors import LeaseLost
from arkhon_rheo.store import PostgresStore, SQLiteStore
from tests.support.work_machine import COUNTER, Counting, Poke, arm, stall_after_load

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

#: The systems' lease: short, so that the held one's runs out soon.
TTL = 0.5


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Opens one more store on the same storage (a second process's)."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "s.db")
    url = request.getfixturevalue("postgres_url")
    return lambda: PostgresStore(url)


async def _status(store: Any, status: str) -> None:
    with anyio.fail_after(10):
        while (await store.record("s")).status != status:  # noqa: ASYNC110 (polls a store)
            await anyio.sleep(0.01)


async def test_a_run_that_ended_past_its_lease_never_stores_its_status_over_the_successors(
    open_store: Any,
) -> None:
    # The first system's run is cancelled mid-step and is held just before it stores
    # "cancelled"; its lease runs out; the second resumes the session and runs it to
    # its end ("finished"). Unfenced, the first one's "cancelled" landed over
    # "finished": a finished session that said it was cancelled, for good.
    stalled, release = anyio.Event(), anyio.Event()
    async with (
        open_store() as first,
        open_store() as second,
        AgentSystem(store=first, lease_ttl=TTL) as stale,
        AgentSystem(store=second, lease_ttl=TTL) as other,
    ):
        set_status = first.set_status

        async def held(session_id: str, status: str, **owner: Any) -> None:
            stalled.set()
            await release.wait()
            await set_status(session_id, status, **owner)

        first.set_status = held
        inside, go_on = arm()
        handle = await stale.start(COUNTER, Counting(target=2), session_id="s")
        await inside.wait()  # mid-step (its second), holding the lease
        handle.cancel()
        with anyio.fail_after(10):
            await stalled.wait()  # its status write is next
        await anyio.sleep(TTL + 0.3)  # past its lease
        go_on.set()
        resumed = await other.stored(COUNTER, "s").resume()  # the lease ran out: taken
        assert (await resumed.result()).state.n == 2
        await _status(second, "finished")
        with structlog.testing.capture_logs() as logs:
            release.set()  # the held one goes on: refused, it writes nothing
            await handle.result()
        assert (await second.record("s")).status == "finished"
        assert not await second.leases()
        lost = [entry for entry in logs if entry["event"] == "session_lease_lost"]
        assert [(entry["stage"], entry["holder"]) for entry in lost] == [("status", None)]


async def test_a_repair_that_stalled_past_its_lease_never_stores_over_the_successors_status(
    open_store: Any,
) -> None:
    # Resuming a session whose state has ended but whose record a crash left
    # "running" repairs the record ("finished"). The first system is held after its
    # load; meanwhile the second rolls the session back to its wait and resumes it,
    # so it waits for a message ("waiting"). Unfenced, the first one's repair stored
    # "finished" over "waiting": a message sent to the session never woke it.
    stalled, release = anyio.Event(), anyio.Event()
    async with (
        open_store() as first,
        open_store() as second,
        AgentSystem(store=first, lease_ttl=TTL) as stale,
        AgentSystem(store=second, lease_ttl=TTL) as other,
    ):
        await other.start(COUNTER, Counting(target=1, wait_for=1), session_id="s")
        await _status(second, "waiting")
        waiting_at = (await second.record("s")).last_seq
        await other.send(COUNTER, "s", Poke(text="poke"))
        await _status(second, "finished")
        await second.set_status("s", "running")  # what a crash left behind
        stall_after_load(first, stalled, release)  # the record read, then the "pause"
        outcome: list[BaseException] = []

        async def resume_stale() -> None:
            try:
                await stale.stored(COUNTER, "s").resume()
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(resume_stale)
            await stalled.wait()  # leased and loaded: ended, recorded "running"
            await anyio.sleep(TTL + 0.3)  # past its lease
            await other.stored(COUNTER, "s").rollback(waiting_at)
            await other.stored(COUNTER, "s").resume()
            await _status(second, "waiting")
            release.set()
        assert (await second.record("s")).status == "waiting"
        (error,) = outcome
        assert isinstance(error, LeaseLost), repr(error)
        assert error.session_id == "s"
        await other.send(COUNTER, "s", Poke(text="again"))  # it still wakes and ends
        await _status(second, "finished")
