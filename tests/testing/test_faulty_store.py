"""FaultyStore: a store double that fails the calls a test names, on both stores.

What the system does when each store operation fails: a refused write leaves
nothing half-committed (the log, the digests and the record stay those of the
commits before it), the session reports the `StoreError`, and what was stored
can be resumed once the store works again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    ExitReason,
    SessionError,
    StoreError,
)
from arkhon_rheo.protocols import EventKind, NewMessage, StoredEvent
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.testing import FaultyStore, ReferenceState, StoreCall, reference_machine

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

MACHINE = reference_machine()


@pytest.fixture(params=["memory", "sqlite"])
def faulty(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], FaultyStore]:
    """Makes a FaultyStore over a fresh MemoryStore, or a SQLiteStore on its own file."""

    def make() -> FaultyStore:
        if request.param == "memory":
            return FaultyStore(MemoryStore())
        return FaultyStore(SQLiteStore(tmp_path / "f.db"))

    return make


def kinds_and_seqs(events: Any) -> list[tuple[int, str]]:
    return [(event.seq, event.kind.value) for event in events]


async def test_a_refused_commit_is_reported_and_leaves_nothing_half_committed(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("append", nth=5)  # the 5th commit: act of the second cycle
    async with store, AgentSystem(store=store) as system:
        result = await system.run(MACHINE, ReferenceState(), session_id="s")
        stored = system.stored(MACHINE, "s")
        history = await stored.history()
        report = await stored.replay()
        record = await store.inner.record("s")
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "StoreError"
    assert "append call 5 of session 's' failed (injected by FaultyStore)" in result.failure.message
    assert result.failure.stage == "act"
    assert len(result.state.steps) == 1  # the refused act never became authoritative
    assert kinds_and_seqs(history) == [*((seq, "step") for seq in range(1, 5)), (5, "failure")]
    assert report.ok  # every digest chains over what was stored, not over the refused step
    assert report.state == result.state
    assert (record.status, record.last_seq) == ("failed", 5)
    assert store.failed == [StoreCall("append", 5, "s")]


async def test_when_every_write_fails_the_record_stays_at_the_last_commit_and_resumes(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("append", when=lambda call: call.index >= 4)
    async with store, AgentSystem(store=store) as system:
        result = await system.run(MACHINE, ReferenceState(cycles=2), session_id="s")
        assert result.exit_reason is ExitReason.FAILED  # known in memory only
        record = await store.inner.record("s")
        assert (record.status, record.last_seq) == ("running", 3)  # the failure was not stored
        store.heal()
        handle = await system.resume(MACHINE, "s")
        resumed = await handle.result()
        history = await system.stored(MACHINE, "s").history()
        report = await system.stored(MACHINE, "s").replay()
    assert resumed.ok
    assert len(resumed.state.steps) == 2
    assert [event.kind for event in history].count(EventKind.RESUME) == 1
    assert [event.seq for event in history] == list(range(1, 8))
    assert report.ok
    assert [call.index for call in store.failed] == [4, 5]  # the step, then its failure record


async def test_a_failed_status_or_release_at_the_end_loses_nothing(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("set_status").fail("release")
    async with store, AgentSystem(store=store) as system:
        result = await system.run(MACHINE, ReferenceState(cycles=1), session_id="s")
        record = await store.inner.record("s")
    assert result.ok
    assert record.status == "finished"  # it went with the final commit
    assert [call.operation for call in store.failed] == ["release"]


async def test_a_failed_load_fails_the_resume_and_leaves_the_session_as_it_was(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty()
    parked = anyio.Event()

    async def park(cycle: int) -> None:
        parked.set()
        await anyio.sleep_forever()

    async with store:
        async with AgentSystem(store=store) as system:
            await system.start(
                reference_machine(before={"act": park}), ReferenceState(), session_id="s"
            )
            await parked.wait()
        # Leaving the block cancelled it in its act: stored as "cancelled", resumable.
        store.fail("load")
        async with AgentSystem(store=store) as system:
            with pytest.raises(StoreError, match="load call 1 of session 's'"):
                await system.resume(MACHINE, "s")
            assert await store.inner.leases() == ()  # the resume's lease was given up
            store.heal()
            result = await (await system.resume(MACHINE, "s")).result()
    assert result.ok
    assert len(result.state.steps) == 3


async def test_a_failed_history_read_raises_to_the_reader(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("history", nth=1)
    async with store, AgentSystem(store=store) as system:
        handle = await system.start(MACHINE, ReferenceState(cycles=1), session_id="s")
        assert (await handle.result()).ok
        with pytest.raises(StoreError, match="history call 1"):
            await handle.history()
        assert len(await handle.history()) == 3


async def test_a_failed_create_leaves_nothing_and_the_id_free(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("create_session", nth=1)
    async with store, AgentSystem(store=store) as system:
        with pytest.raises(StoreError, match="create_session call 1"):
            await system.start(MACHINE, ReferenceState(), session_id="s")
        assert await store.inner.sessions() == ()
        assert await store.inner.leases() == ()
        result = await system.run(MACHINE, ReferenceState(), session_id="s")
    assert result.ok


async def test_a_failed_lease_leaves_an_orphan_that_recover_picks_up(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty().fail("acquire", nth=1)
    async with store, AgentSystem(store=store) as system:
        with pytest.raises(StoreError, match="acquire call 1"):
            await system.start(MACHINE, ReferenceState(), session_id="s")
        # Created, then the lease refused: stored, running and driven by nobody.
        with pytest.raises(SessionError, match="exists already"):
            await system.start(MACHINE, ReferenceState(), session_id="s")
        assert [record.session_id for record in await system.orphans(MACHINE)] == ["s"]
        (handle,) = await system.recover(MACHINE)
        result = await handle.result()
    assert result.ok


async def test_rules_by_call_number_predicate_and_error() -> None:
    store = FaultyStore(MemoryStore())
    store.fail("record", nth=[2, 3]).fail("record", when=lambda call: call.session_id == "b")
    store.fail("sessions", error=lambda: OSError("gone"))
    async with store:
        for sid in ("a", "b"):
            await store.create_session(sid, machine="m", snapshot={})
        await store.record("a")
        for index in (2, 3):
            with pytest.raises(StoreError, match=f"record call {index} of session 'a'"):
                await store.record("a")
        await store.record("a")
        with pytest.raises(StoreError, match="record call 5 of session 'b'"):
            await store.record("b")
        with pytest.raises(OSError, match="gone"):
            await store.sessions()
        assert len(await store.inner.sessions()) == 2  # failed calls never reached it
        assert store.statistics() == store.inner.statistics()
    assert store.calls == {"create_session": 2, "record": 5, "sessions": 1}
    assert [(call.operation, call.index) for call in store.failed] == [
        ("record", 2),
        ("record", 3),
        ("record", 5),
        ("sessions", 1),
    ]
    assert repr(store).endswith("failing ['record', 'record', 'sessions'], 4 failed)")


async def test_inbox_calls_fail_before_they_reach_the_store(
    faulty: Callable[[], FaultyStore],
) -> None:
    store = faulty()
    for operation in ("post", "pending", "messages", "park", "waking"):
        store.fail(operation, nth=1)
    ask = NewMessage("m1", "Ask", {"text": "hi"}, 0.0)
    step = StoredEvent("s", 1, "step", "receive", "A", "B", (), (), {}, 1, 0.0, 0.0)
    async with store:
        await store.create_session("s", machine="m", snapshot={})
        with pytest.raises(StoreError, match="post call 1 of session 's'"):
            await store.post("s", ask, capacity=5)
        assert await store.inner.messages("s") == ()  # nothing of it was stored
        assert (await store.post("s", ask, capacity=5))[1]
        for read in (store.pending, store.messages):
            with pytest.raises(StoreError, match="call 1 of session 's'"):
                await read("s")
            assert len(await read("s")) == 1
        with pytest.raises(StoreError, match="park call 1"):
            await store.park("s", None, status="waiting", waiting=None, accepts=(), now=0.0)
        assert (await store.record("s")).status == "running"
        assert await store.park("s", None, status="waiting", waiting=None, accepts=(), now=0.0)
        with pytest.raises(StoreError, match="waking call 1 failed"):
            await store.waking(10.0)
        assert await store.waking(10.0) == ((), None)
        await store.append("s", [step], status="running", applied=1, posts=[ask])
        assert [m.applied_seq for m in await store.messages("s")] == [1]
    assert store.calls["post"] == store.calls["park"] == 2
    assert [call.operation for call in store.failed] == [
        "post",
        "pending",
        "messages",
        "park",
        "waking",
    ]


async def test_a_failing_call_is_still_a_checkpoint() -> None:
    store = FaultyStore(MemoryStore()).fail("leases")
    async with store:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.leases()  # cancelled at its checkpoint, before it fails
        assert scope.cancelled_caught
    assert store.failed == [StoreCall("leases", 1, None)]


def test_bad_rules_and_inner_stores_are_refused() -> None:
    store = FaultyStore(MemoryStore())
    with pytest.raises(ConfigurationError, match="no operation 'write'; fail one of create_"):
        store.fail("write")
    for nth in (0, [], [1, -2], True):
        with pytest.raises(ConfigurationError, match="nth must be a call index from 1"):
            store.fail("append", nth=nth)
    with pytest.raises(ConfigurationError, match="when must be a predicate"):
        store.fail("append", when=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a class or a lambda"):
        store.fail("append", error=StoreError("once"))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="FaultyStore wraps a Store"):
        FaultyStore(object())  # type: ignore[arg-type]


def test_a_faulty_store_takes_encoded_patches_as_its_inner_store_does() -> None:
    # Sessions write through a FaultyStore on the same path as on the store it wraps.
    assert FaultyStore(MemoryStore()).takes_encoded is MemoryStore.takes_encoded
    assert FaultyStore(SQLiteStore(":memory:")).takes_encoded is True
