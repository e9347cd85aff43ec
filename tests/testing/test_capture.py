"""EventCapture: the public listener that keeps committed events and wakes waiters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, Lifecycle
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.testing import EventCapture, ReferenceState, reference_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle


class Hold:
    """A hook that parks a session's ``think`` at cycle ``at`` until released."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.release = anyio.Event()

    async def __call__(self, cycle: int) -> None:
        if cycle == self.at:
            await self.release.wait()


@pytest.mark.parametrize("stored", [True, False], ids=["sqlite", "memory"])
async def test_it_keeps_every_sessions_events_as_the_store_has_them(
    tmp_path: Path, stored: bool
) -> None:
    capture = EventCapture()
    machine = reference_machine()
    path = tmp_path / "c.db" if stored else None
    async with AgentSystem(path=path, listeners=[capture]) as system:
        histories = {}
        for sid, cycles in (("a", 1), ("b", 2)):
            handle = await system.start(machine, ReferenceState(cycles=cycles), session_id=sid)
            await handle.result()
            histories[sid] = await handle.history()
    assert capture.sessions() == ["a", "b"]
    assert capture.events("a") == list(histories["a"])
    assert capture.events("b") == list(histories["b"])
    assert capture.events() == [*histories["a"], *histories["b"]]
    assert capture.kinds("b") == [EventKind.STEP] * 6
    assert capture.states("a") == [L.ACTING, L.OBSERVING, L.FINISHED]
    assert capture.events("nobody") == []
    assert repr(capture) == "EventCapture(9 events of 2 sessions)"
    capture.clear()
    assert capture.events() == []
    assert capture.sessions() == []


async def test_wait_for_a_count_or_a_predicate_is_woken_by_the_commit() -> None:
    capture = EventCapture()
    hold = Hold(at=1)
    async with AgentSystem(path=None, listeners=[capture]) as system:
        handle = await system.start(
            reference_machine(before={"think": hold}), ReferenceState(cycles=2), session_id="w"
        )
        third = await capture.wait_for(3, session_id="w")
        assert third.seq == 3
        assert third.to_state is L.THINKING
        assert len(capture.events("w")) == 3  # held in the next think: nothing more came
        got: list[Any] = []

        async def wait_end() -> None:
            got.append(await capture.wait_for(lambda e: e.to_state is L.FINISHED))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_end)
            await anyio.lowlevel.checkpoint()
            assert got == []
            hold.release.set()
        assert got[0].seq == 6
        await handle.result()


async def test_a_wait_already_satisfied_returns_the_event_it_names() -> None:
    capture = EventCapture()
    async with AgentSystem(path=None, listeners=[capture]) as system:
        await system.run(reference_machine(), ReferenceState(cycles=1), session_id="d")
    assert (await capture.wait_for(2)).seq == 2
    assert (await capture.wait_for(lambda e: e.stage == "observe", session_id="d")).seq == 3


async def test_other_sessions_events_do_not_count_for_a_sessions_wait() -> None:
    capture = EventCapture()
    hold = Hold(at=0)
    machine = reference_machine(before={"think": hold})
    async with AgentSystem(path=None, listeners=[capture]) as system:
        await system.start(machine, ReferenceState(cycles=1), session_id="held")
        got: list[Any] = []

        async def wait_held() -> None:
            got.append(await capture.wait_for(1, session_id="held"))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_held)
            await system.run(reference_machine(), ReferenceState(cycles=1), session_id="free")
            assert got == []  # three events of "free" came, none of "held"
            hold.release.set()
        assert got[0].session_id == "held"


async def test_a_cancelled_wait_stops_waiting() -> None:
    capture = EventCapture()
    with anyio.move_on_after(0) as scope:
        await capture.wait_for(1)
    assert scope.cancelled_caught
    assert capture._waiters == []
    capture(_event("x"))  # nobody to wake
    assert capture.sessions() == ["x"]


async def test_bad_waits_are_refused() -> None:
    capture = EventCapture()
    for bad in (0, -1, True, "3"):
        with pytest.raises(ConfigurationError, match="wait_for"):
            await capture.wait_for(bad)  # type: ignore[arg-type]


def _event(session_id: str) -> Any:
    from arkhon_rheo.protocols import Patch, TransitionEvent

    return TransitionEvent(
        session_id=session_id,
        seq=1,
        kind=EventKind.STEP,
        stage="think",
        from_state=L.THINKING,
        to_state=L.ACTING,
        reads=frozenset(),
        writes=frozenset(),
        patch=Patch(),
        attempt=1,
        started_at=0.0,
        finished_at=0.0,
    )


async def test_a_predicate_that_raises_wakes_its_waiter_with_the_error() -> None:
    capture = EventCapture()
    hold = Hold(at=0)
    machine = reference_machine(before={"think": hold})

    def broken(event: Any) -> bool:
        raise KeyError(f"no such field on event {event.seq}")

    async with AgentSystem(path=None, listeners=[capture]) as system:
        handle = await system.start(machine, ReferenceState(cycles=1), session_id="p")
        errors: list[BaseException] = []

        async def wait() -> None:
            try:
                await capture.wait_for(broken)
            except KeyError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.lowlevel.checkpoint()
            hold.release.set()
        result = await handle.result()
    assert [str(error) for error in errors] == ["'no such field on event 1'"]
    assert result.ok  # the session that committed the event went on undisturbed
    assert len(capture.events("p")) == 3
