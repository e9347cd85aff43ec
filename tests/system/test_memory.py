"""The store is the log: what a session, and the system, keep in memory.

With a store a session keeps no event log: `SessionHandle.history`, `events()`
and `stream()` read the earlier events from the store and are fed the later
ones as they commit; an ended session is released once it ends (its record
stays in the store). Without a store the log is the session's only record and
the system keeps the newest ``keep_ended`` ended sessions.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    Gate,
    Lifecycle,
    Machine,
    SessionNotFound,
    emit,
)
from arkhon_rheo.protocols import EventKind, Partial, TransitionEvent
from arkhon_rheo.testing import ReferenceState, reference_machine
from tests.support.helpers import run_bench_quick

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Hold:
    """Hooks for `reference_machine`: park a session once ``at`` events are committed.

    Each stage first emits ``"step <n>"``, ``n`` the event it will commit; the
    step after event ``at`` then waits for ``release``.
    """

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.parked = anyio.Event()
        self.release = anyio.Event()

    def machine(self, gates: tuple[Gate, ...] = ()) -> Machine[ReferenceState]:
        def hook(index: int) -> Callable[[int], Awaitable[None]]:
            async def before(cycle: int) -> None:
                done = 3 * cycle + index  # commits before this step: three a cycle
                emit(f"step {done + 1}")
                if done == self.at:
                    self.parked.set()
                    await self.release.wait()

            return before

        hooks = {"think": hook(0), "act": hook(1), "observe": hook(2)}
        return reference_machine(name="count", before=hooks, gates=gates)


def looping(hold: Hold | None = None, gates: tuple[Gate, ...] = ()) -> Machine[ReferenceState]:
    return (hold or Hold()).machine(gates)


def seqs(events: tuple[TransitionEvent, ...] | list[TransitionEvent]) -> list[int]:
    return [event.seq for event in events]


async def test_with_a_store_a_live_session_keeps_no_log_and_history_reads_the_store(
    tmp_path: Path,
) -> None:
    hold = Hold(at=30)
    async with AgentSystem(path=tmp_path / "s.db", max_steps=100) as system:
        machine = looping(hold)
        handle = await system.start(machine, ReferenceState(cycles=14), session_id="s1")
        await hold.parked.wait()
        assert len(handle._session.log) == 0  # flat: 30 commits, none kept in memory
        assert seqs(await handle.history()) == list(range(1, 31))
        assert await handle.history() == tuple(await system.stored(machine, "s1").history())
        hold.release.set()
        result = await handle.result()
        assert result.ok
        assert len(handle._session.log) == 0
        assert seqs(await handle.history()) == list(range(1, 43))


async def test_without_a_store_the_log_stays_in_memory() -> None:
    async with AgentSystem(path=None) as system:
        handle = await system.start(looping(), ReferenceState(cycles=2), session_id="m1")
        await handle.result()
        history = await handle.history()
    assert seqs(history) == [1, 2, 3, 4, 5, 6]
    assert list(handle._session.log) == list(history)


@pytest.mark.parametrize("stored", [True, False], ids=["sqlite", "memory"])
async def test_events_joined_mid_run_catch_up_then_follow_live_without_gaps_or_repeats(
    tmp_path: Path, stored: bool
) -> None:
    hold = Hold(at=3)
    path = tmp_path / "s.db" if stored else None
    async with AgentSystem(path=path) as system:
        handle = await system.start(looping(hold), ReferenceState(cycles=3), session_id="e1")
        await hold.parked.wait()  # three events committed before anyone listens
        seen: list[TransitionEvent] = []

        async def follow() -> None:
            async for event in handle.events():
                seen.append(event)
                if event.seq == 3:
                    hold.release.set()  # the rest commit while it follows

        await follow()
        late = [event async for event in handle.events()]  # after the end: all, from the store
    assert seqs(seen) == list(range(1, 10))
    assert seen == late
    assert seen[-1].to_state is L.FINISHED


@pytest.mark.parametrize("stored", [True, False], ids=["sqlite", "memory"])
async def test_stream_with_a_store_puts_each_steps_partials_before_its_event(
    tmp_path: Path, stored: bool
) -> None:
    hold = Hold(at=2)
    path = tmp_path / "s.db" if stored else None
    async with AgentSystem(path=path) as system:
        handle = await system.start(looping(hold), ReferenceState(cycles=2), session_id="p1")
        await hold.parked.wait()  # events 1 and 2 committed; step 3 emitted "step 3"
        with handle.stream() as stream:
            hold.release.set()
            items: list[TransitionEvent | Partial] = [item async for item in stream]
    labels = [f"p{item.seq}" if isinstance(item, Partial) else f"e{item.seq}" for item in items]
    # The partial of step 3 came before the subscription; 4's is delivered, before e4.
    assert labels == ["e1", "e2", "e3", "p4", "e4", "p5", "e5", "p6", "e6"]
    partials = [item.data for item in items if isinstance(item, Partial)]
    assert partials == ["step 4", "step 5", "step 6"]


async def test_with_a_store_an_ended_session_is_released_and_stays_in_the_store(
    tmp_path: Path,
) -> None:
    machine = looping()
    async with AgentSystem(path=tmp_path / "s.db") as system:
        result = await system.run(machine, ReferenceState(), session_id="r1")
        gc.collect()
        assert system.sessions() == []
        assert system.statistics().sessions == 0
        with pytest.raises(SessionNotFound):
            system.session("r1")
        system.forget("r1")  # released already: nothing to do
        stored = await system.stored(machine, "r1").history()
        assert [record.status for record in await system.store.sessions()] == ["finished"]  # type: ignore[union-attr]
    assert result.ok
    assert seqs(stored) == list(range(1, 10))


async def test_a_released_session_is_found_while_its_handle_is_held(tmp_path: Path) -> None:
    async with AgentSystem(path=tmp_path / "s.db") as system:
        handle = await system.start(looping(), ReferenceState(), session_id="h1")
        await handle.result()
        assert system.sessions() == []  # released...
        assert system.session("h1") is handle  # ...but found while held
        del handle
        gc.collect()
        with pytest.raises(SessionNotFound):
            system.session("h1")


async def test_without_a_store_the_newest_keep_ended_sessions_are_kept() -> None:
    async with AgentSystem(path=None, keep_ended=2) as system:
        for n in range(5):
            await system.run(looping(), ReferenceState(), session_id=f"k{n}")
        assert system.sessions() == ["k3", "k4"]
        assert (await system.session("k4").result()).ok
        with pytest.raises(SessionNotFound):
            system.session("k0")


async def test_without_a_store_the_default_keeps_a_thousand_ended_sessions() -> None:
    async with AgentSystem(path=None) as system:
        assert system._registry.keep == 1000
    async with AgentSystem(path=None, keep_ended=0) as system:
        await system.run(looping(), ReferenceState(), session_id="z")
        assert system.sessions() == []


async def test_a_paused_session_without_a_store_is_kept_until_decided() -> None:
    gated = looping(gates=(Gate.when(lambda s: len(s.steps) == 1 and not s.observation),))
    async with AgentSystem(path=None, keep_ended=0) as system:
        await system.run(gated, ReferenceState(), session_id="g1")
        assert system.sessions() == ["g1"]  # paused: nothing else records it
        handle = await system.stored(gated, "g1").approve()
        assert handle is not None
        result = await handle.result()
        assert result.ok
        history = await handle.history()
        assert system.sessions() == []  # ended now: released
    assert [event.kind for event in history].count(EventKind.PAUSE) == 1


async def test_keep_ended_must_be_a_non_negative_integer() -> None:
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigurationError, match="keep_ended"):
            AgentSystem(path=None, keep_ended=bad)  # type: ignore[arg-type]


def test_memory_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    # Sizes smaller than --quick's: the figures' code, not their size, is under test.
    sizes = "Sizes(live=2, long=50, ended=20, mark=100, total=200)"
    backends = run_bench_quick("memory.py", timeout=300, smaller={"QUICK": sizes})
    for backend, section in backends.items():
        for label in (
            "(1) live session",
            "sqlite store  after 10 steps:",
            "memory only   after 10 steps:",
            "(2) ended session, handle dropped",
            "retained per ended session:",
            "(3) RSS, short sessions",
            "ratio",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
