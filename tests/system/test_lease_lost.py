"""A session whose lease another owner took stops at once (`LEASE_LOST`), writing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
import structlog

from arkhon_rheo import AgentSystem, ExitReason
from arkhon_rheo.store import MemoryStore, PostgresStore, SQLiteStore
from arkhon_rheo.testing import ReferenceState
from tests.system.test_durable import Gated, notes_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "s.db")
    return PostgresStore(request.getfixturevalue("postgres_url"))


async def test_a_session_whose_lease_was_taken_stops_and_writes_nothing_more(store: Any) -> None:
    control = Gated()
    async with store, AgentSystem(store=store) as system:
        handle = await system.start(notes_machine(control), ReferenceState(), session_id="s")
        await control.blocked.wait()  # mid-step: its first commit is still to come
        (lease,) = await store.leases()
        # Another process takes the session over (this one looked dead to it).
        await store.acquire("s", "successor", ttl=60, replacing=lease.owner)
        before = (await store.record("s"), await store.history("s"))
        with structlog.testing.capture_logs() as logs:
            control.release.set()
            result = await handle.result()
        assert result.exit_reason is ExitReason.LEASE_LOST
        assert result.failure is not None
        assert result.failure.error_type == "LeaseLost"
        assert "'successor' holds it now" in result.failure.message
        # Nothing more written: no event, no status, and the successor keeps its lease.
        assert (await store.record("s"), await store.history("s")) == before
        assert [(x.session_id, x.owner) for x in await store.leases()] == [("s", "successor")]
        assert any(entry["event"] == "session_lease_lost" for entry in logs)


async def test_a_renewal_never_takes_back_a_lease_another_owner_took_and_gave_up(
    store: Any,
) -> None:
    # Issue 31: a worker paused past its lease woke, and its renewal took back the lease
    # another worker had taken, driven the session on with and given up; its stale run
    # then wrote over the session (it parked a finished one). The renewal refuses now.
    control = Gated()
    async with store, AgentSystem(store=store, lease_ttl=1.0) as system:
        handle = await system.start(notes_machine(control), ReferenceState(), session_id="s")
        await control.blocked.wait()  # mid-step: its first commit is still to come
        (lease,) = await store.leases()
        before = (await store.record("s"), await store.history("s"))
        with structlog.testing.capture_logs() as logs:
            await store.acquire("s", "successor", ttl=60, replacing=lease.owner)
            await store.release("s", "successor")  # it drove the session on, and gave it up
            with anyio.fail_after(60):  # taken back, it would run on (the step waits)
                result = await handle.result()  # the next renewal finds the lease gone
        control.release.set()
        assert result.exit_reason is ExitReason.LEASE_LOST
        # Nothing more written, and the lease stays free for whoever claims the session.
        assert (await store.record("s"), await store.history("s")) == before
        assert await store.leases() == ()
        lost = [entry for entry in logs if entry["event"] == "session_lease_lost"]
        assert [(entry["stage"], entry["holder"]) for entry in lost] == [("renewal", None)]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_wake_that_stalled_past_its_lease_never_stores_running_over_finished(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The workers' chaos (1 slow run in 5): a worker waking a parked session for its
    # message was paused (SIGSTOP) between loading the record ("waiting") and storing
    # "running"; another worker took the lease, ran the session to its end and gave the
    # lease up; woken, the first stored "running" over "finished" (unfenced) and the
    # session stayed "running" for good. Two systems on one store, no signals needed.
    from tests.support.work_machine import COUNTER, Counting, Poke, stall_after_load

    def open_store() -> Any:
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "s.db")
        return PostgresStore(request.getfixturevalue("postgres_url"))

    stalled, release = anyio.Event(), anyio.Event()
    async with (
        open_store() as first,
        open_store() as second,
        AgentSystem(store=first, lease_ttl=0.5) as stale,
        AgentSystem(store=second, lease_ttl=0.5) as other,
    ):
        await other.start(COUNTER, Counting(target=1, wait_for=1), session_id="s")
        with anyio.fail_after(10):
            while (await second.record("s")).status != "waiting":  # noqa: ASYNC110 - the store
                await anyio.sleep(0.01)
        stall_after_load(first, stalled, release)  # the record read, then the "pause"
        async with anyio.create_task_group() as group:
            group.start_soon(stale.send, COUNTER, "s", Poke(text="poke"))
            await stalled.wait()  # leased and loaded: "waiting"
            await anyio.sleep(0.8)  # past its lease
            await other.send(COUNTER, "s", Poke(text="again"))  # wakes it there: it ends
            with anyio.fail_after(10):
                while (await second.record("s")).status != "finished":  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            release.set()  # the stale one goes on: refused, it lets the session be
        await anyio.sleep(0.3)
        assert (await second.record("s")).status == "finished"
        assert not await second.leases()
