"""Sessions recorded in a store: write-ahead commits, resume after a crash, history."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Lifecycle,
    Machine,
    Patch,
    SessionError,
    SessionNotFound,
    StateView,
    stage,
)
from arkhon_rheo.core import fold
from arkhon_rheo.core._codec import EventCodec
from arkhon_rheo.protocols import Durability, EventKind, TransitionEvent
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.testing import ReferenceState, reference_machine
from tests.support.helpers import on_virtual_clock

pytestmark = pytest.mark.anyio

L = Lifecycle


@pytest.fixture(params=["memory", "sqlite-sync", "sqlite-batched"])
def make_store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """A factory of stores that share one place, so a second one sees the first's data."""
    path = tmp_path / "sessions.db"

    def make() -> Any:
        if request.param == "memory":
            return shared
        mode = Durability.SYNC if request.param == "sqlite-sync" else Durability.BATCHED
        return SQLiteStore(path, durability=mode)

    shared = _Reentrant(MemoryStore())
    return make


class _Reentrant:
    """Lets one MemoryStore be entered twice, standing in for reopening a file."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.entered = False

    async def __aenter__(self) -> Any:
        if not self.entered:
            await self.store.__aenter__()
            self.entered = True
        return self.store

    async def __aexit__(self, *exc: Any) -> None:
        pass  # kept open: its data must outlive the first "process"


class Control:
    """Hooks for `reference_machine`: block forever in a given call of ``act``."""

    def __init__(self, *, block_at: int | None = None) -> None:
        self.block_at = block_at
        self.acts = 0
        self.blocked = anyio.Event()

    async def act(self, cycle: int) -> None:
        self.acts += 1
        if self.acts == self.block_at:
            self.blocked.set()
            await anyio.sleep_forever()


def notes_machine(control: Control) -> Machine[ReferenceState]:
    return reference_machine(name="notes", before={"act": control.act})


class Blob(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    #: Bytes that are not UTF-8 cannot be stored as JSON: the unserializable value.
    blob: bytes | None = None


@stage(reads=(), writes={"blob"}, next=L.FINISHED)
async def garbage(view: StateView[Blob]) -> Patch:
    return Patch(blob=b"\xff")


GARBAGE = Machine(
    name="garbage",
    state_type=Blob,
    initial=L.INITIALIZED,
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
    transitions={L.INITIALIZED: {L.FINISHED}},
    stages={L.INITIALIZED: garbage},
)


async def test_every_commit_is_in_the_store(make_store: Any) -> None:
    machine = notes_machine(Control())
    async with make_store() as store, AgentSystem(store=store, snapshot_every=4) as system:
        handle = await system.start(machine, ReferenceState(), session_id="n1")
        result = await handle.result()
        history = await system.stored(machine, "n1").history()
        records = await store.sessions()
        # The store is the log: the handle reads it (while the store is open).
        assert history == list(await handle.history())
    assert result.ok
    assert [r.status for r in records] == ["finished"]
    assert records[0].last_seq == len(history) == result.steps


async def test_a_session_resumes_from_its_last_commit_after_a_crash(make_store: Any) -> None:
    first = Control(block_at=2)
    machine = notes_machine(first)
    async with make_store() as store, AgentSystem(store=store, snapshot_every=3) as system:
        await system.start(machine, ReferenceState(), session_id="n2")
        await first.blocked.wait()
        # Leaving the blocks cancels the session mid-stage and closes the store.
    async with make_store() as store:
        committed = await store.history("n2")
        assert committed  # what was committed before the "crash" is there

        second = Control()
        machine2 = notes_machine(second)
        async with AgentSystem(store=store, snapshot_every=3) as system:
            handle = await system.resume(machine2, "n2")
            result = await handle.result()
            history = await system.stored(machine2, "n2").history()
    assert result.ok
    assert second.acts >= 1  # the stage that was running ran again
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    assert history[: len(committed)] == [EventCodec(machine2).decode_event(e) for e in committed]
    assert fold(machine2, ReferenceState(session_id="n2"), history) == result.state
    assert len(result.state.steps) == 3


class Gated(Control):
    """Hooks for `reference_machine`: the first ``act`` waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()

    async def act(self, cycle: int) -> None:
        await super().act(cycle)
        if self.acts == 1:
            self.blocked.set()
            await self.release.wait()


async def test_a_resumed_handle_gives_the_whole_history_from_the_first_event(
    make_store: Any,
) -> None:
    first = Control(block_at=2)
    async with make_store() as store, AgentSystem(store=store) as system:
        await system.start(notes_machine(first), ReferenceState(), session_id="w1")
        await first.blocked.wait()
    second = Gated()
    machine = notes_machine(second)
    async with make_store() as store, AgentSystem(store=store) as system:
        handle = await system.resume(machine, "w1")
        await second.blocked.wait()
        # Subscribed while the resumed run is live: the catch-up starts from event 1.
        stream = handle.stream()
        events = handle.events()
        with anyio.fail_after(5):  # event 1 is stored: no need to wait for the run
            head = await anext(events)  # subscribed now, live
        earlier = await handle.history()
        resume = next(e for e in earlier if e.kind is EventKind.RESUME)
        assert resume.seq > 1  # the first run's events come before it
        assert [e.seq for e in earlier] == list(range(1, resume.seq + 1))
        second.release.set()
        result = await handle.result()
        streamed = [item async for item in stream if isinstance(item, TransitionEvent)]
        followed = [head, *[event async for event in events]]
        history = await handle.history()
        stored = await system.stored(machine, "w1").history()
    assert result.ok
    assert list(history) == stored == streamed == followed
    assert history[: len(earlier)] == earlier


async def test_an_unserializable_patch_is_refused_before_commit(make_store: Any) -> None:
    async with make_store() as store, AgentSystem(store=store) as system:
        result = await system.run(GARBAGE, Blob(), session_id="n3")
        stored = await store.history("n3")
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "UnserializablePatch"
    assert result.state.blob is None
    assert [event.kind for event in stored] == ["failure"]


async def test_resume_refuses_what_it_cannot_do(make_store: Any) -> None:
    machine = notes_machine(Control())
    async with AgentSystem(path=None) as memory_only:
        with pytest.raises(ConfigurationError, match="without a store"):
            await memory_only.resume(machine, "x")
    async with make_store() as store, AgentSystem(store=store) as system:
        with pytest.raises(SessionNotFound):
            await system.resume(machine, "nobody")
        await system.run(machine, ReferenceState(), session_id="done")
        with pytest.raises(SessionError, match="has ended"):
            await system.resume(machine, "done")
        with pytest.raises(ConfigurationError, match="runs machine 'notes'"):
            await system.resume(reference_machine(name="other"), "done")


async def test_rollback_is_an_appended_event_and_the_session_goes_on(make_store: Any) -> None:
    machine = notes_machine(Control())
    async with make_store() as store, AgentSystem(store=store) as system:
        done = await system.run(machine, ReferenceState(), session_id="r1")
        before = await system.stored(machine, "r1").history()
        event = await system.stored(machine, "r1").rollback(3)
        after = await system.stored(machine, "r1").history()
        assert after[:-1] == before  # append-only: nothing rewritten
        assert after[-1] == event
        assert event.kind is EventKind.ROLLBACK
        assert event.info == {"rolled_back_from": len(before), "rolled_back_to": 3}
        rolled = fold(machine, ReferenceState(session_id="r1"), after)
        assert rolled == fold(machine, ReferenceState(session_id="r1"), before[:3])
        assert rolled.lifecycle is L.THINKING
        handle = await system.resume(machine, "r1")
        again = await handle.result()
        with pytest.raises(ConfigurationError, match="between 0"):
            await system.stored(machine, "r1").rollback(10_000)
    assert done.ok
    assert again.ok
    assert list(again.state.steps) == list(done.state.steps)


async def test_fork_starts_a_child_from_any_point(make_store: Any) -> None:
    machine = notes_machine(Control())
    async with make_store() as store, AgentSystem(store=store) as system:
        await system.run(machine, ReferenceState(), session_id="parent")
        child = await system.stored(machine, "parent").fork(at_seq=5, new_id="child")
        records = {r.session_id: r for r in await store.sessions()}
        handle = await child.resume()
        result = await handle.result()
        parent_history = await system.stored(machine, "parent").history()
        with pytest.raises(SessionError):
            await system.stored(machine, "parent").fork(new_id="child")
    assert records["child"].parent == "parent"
    assert result.ok
    assert result.state.session_id == "child"
    # The fork began with the parent's first five commits and went its own way.
    at_five = fold(machine, ReferenceState(session_id="parent"), parent_history[:5])
    assert isinstance(at_five, ReferenceState)
    assert list(result.state.steps)[:2] == list(at_five.steps)
    assert len(parent_history) == 9  # three cycles of think/act/observe


async def test_a_session_has_one_owner_at_a_time(make_store: Any) -> None:
    from arkhon_rheo import SessionLocked

    control = Control(block_at=1)
    machine = notes_machine(control)
    async with make_store() as store:
        async with AgentSystem(store=store) as first, AgentSystem(store=store) as second:
            await first.start(machine, ReferenceState(), session_id="owned")
            await control.blocked.wait()
            with pytest.raises(SessionLocked, match="'owned'"):
                await second.resume(machine, "owned")
            with pytest.raises(SessionLocked):
                await second.stored(machine, "owned").rollback(1)
        # The first system ended the session cleanly and let go of it.
        async with AgentSystem(store=store) as third:
            handle = await third.resume(notes_machine(Control()), "owned")
            assert (await handle.result()).ok


@on_virtual_clock
async def test_a_running_sessions_lease_is_renewed(autojump_clock: Any) -> None:
    import trio

    from arkhon_rheo import SessionLocked

    control = Control(block_at=1)
    machine = notes_machine(control)
    store = MemoryStore(clock=trio.current_time)
    async with store, AgentSystem(store=store, lease_ttl=3.0) as first:
        await first.start(machine, ReferenceState(), session_id="kept")
        await control.blocked.wait()
        await trio.sleep(30)  # ten lease lifetimes
        async with AgentSystem(store=store) as second:
            with pytest.raises(SessionLocked):
                await second.resume(machine, "kept")
