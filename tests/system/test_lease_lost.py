"""A session whose lease another owner took stops at once (`LEASE_LOST`), writing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
