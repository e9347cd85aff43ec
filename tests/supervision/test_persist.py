"""Persistence.write, then accept: a session's digest moves on only once the store has the event."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import Patch, TransitionEvent
from arkhon_rheo.errors import DuplicateEvent
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.session._compiled import compiled
from arkhon_rheo.session._persist import Persistence
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.store._done import running_library
from arkhon_rheo.testing import ReferenceState, ReferenceStep, reference_machine

if TYPE_CHECKING:
    from pathlib import Path


def test_accept_without_a_write_before_it_is_refused_and_moves_nothing() -> None:
    machine = compiled(reference_machine())
    state = ReferenceState()
    persistence = Persistence(MemoryStore(), machine.codec, "s", digest=machine.hasher.start(state))
    before = persistence.digest.value
    with pytest.raises(RuntimeError, match=r"accept\(\) without a write\(\)"):
        persistence.accept()
    assert persistence.digest.value == before == machine.hasher.of(state)


def _step_event(machine: Any, state: ReferenceState, seq: int) -> TransitionEvent:
    patch = Patch().append("steps", ReferenceStep(cycle=seq, tool="calc", output="42"))
    return TransitionEvent(
        session_id="s",
        seq=seq,
        kind=EventKind.STEP,
        stage="act",
        from_state=state.lifecycle,
        to_state=state.lifecycle,
        reads=frozenset(),
        writes=patch.fields,
        patch=patch,
        attempt=1,
        started_at=0.0,
        finished_at=0.0,
    )


async def _opened(store: SQLiteStore, machine: Any, state: ReferenceState) -> Persistence:
    await store.create_session("s", machine="reference", snapshot=state.model_dump(mode="json"))
    return Persistence(store, machine.codec, "s", digest=machine.hasher.start(state))


@pytest.mark.anyio
async def test_a_queued_write_is_awaited_without_the_stores_coroutine(tmp_path: Path) -> None:
    # The SQLite store queues the write itself (its ``queue_append``); `accept` reads its outcome.
    machine = compiled(reference_machine())
    state = ReferenceState()
    async with SQLiteStore(tmp_path / "s.db") as store:
        persistence = await _opened(store, machine, state)
        wait = persistence.write(_step_event(machine, state, 1), state)
        assert not inspect.iscoroutine(wait) or running_library() == "trio"
        await wait
        persistence.accept()
        assert (await store.record("s")).last_seq == 1
        assert persistence.digest.value != machine.hasher.of(state)


@pytest.mark.anyio
async def test_a_queued_write_refused_is_raised_by_accept_and_moves_nothing(
    tmp_path: Path,
) -> None:
    machine = compiled(reference_machine())
    state = ReferenceState()
    async with SQLiteStore(tmp_path / "s.db") as store:
        persistence = await _opened(store, machine, state)
        await store.append("s", [machine.codec.encode_event(_step_event(machine, state, 1))])
        before = persistence.digest.value
        await persistence.write(_step_event(machine, state, 1), state)  # number 1 is taken
        with pytest.raises(DuplicateEvent):
            persistence.accept()
        assert persistence.digest.value == before
        assert (await store.record("s")).last_seq == 1


@pytest.mark.anyio
async def test_a_queued_write_whose_wait_is_cancelled_is_committed_all_the_same(
    tmp_path: Path,
) -> None:
    machine = compiled(reference_machine())
    state = ReferenceState()
    async with SQLiteStore(tmp_path / "s.db") as store:
        persistence = await _opened(store, machine, state)
        with anyio.CancelScope() as scope:
            wait = persistence.write(_step_event(machine, state, 1), state)
            written = persistence._written
            assert written is not None
            scope.cancel()
            try:
                await wait
            except BaseException:
                persistence.abandon()  # what the supervisor's step does
                raise
        assert scope.cancelled_caught
        assert written is not None
        assert written.abandoned  # a refusal would be logged: nobody reads it now
        assert persistence._written is None
        await store.record("s")  # reads queue behind the write
        assert (await store.record("s")).last_seq == 1  # the store committed it, once
