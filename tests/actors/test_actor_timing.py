"""Time-dependent behaviour, on trio's virtual clock (no real waiting)."""

from __future__ import annotations

import anyio
import pytest
import trio
import trio.testing

from arkhon_rheo.actors import ActorSystem, Termination, TerminationKind
from arkhon_rheo.errors import AskTimeout
from tests.support.helpers import Gate


@pytest.mark.trio
async def test_ask_timeout_withdraws_the_request_and_drops_the_late_reply(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: gate, name="slow")
        ref.tell_nowait("block")
        await entered.wait()
        start = trio.current_time()
        with pytest.raises(AskTimeout) as info:
            await ref.ask("queued", timeout=2.5)
        assert trio.current_time() - start == pytest.approx(2.5)
        assert info.value.timeout == 2.5
        assert info.value.actor == "slow"
        release.set()
        assert await ref.ask("fresh") == "FRESH"
    # The timed-out request was withdrawn before the actor reached it.
    assert gate.handled == ["block", "fresh"]


@pytest.mark.trio
async def test_timed_out_ask_in_progress_gets_no_reply_and_actor_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered, release = anyio.Event(), anyio.Event()
    gate = Gate(entered, release)
    async with ActorSystem(ask_timeout=1.0) as system:
        ref = await system.spawn(lambda: gate)
        with pytest.raises(AskTimeout):
            await ref.ask("block")  # the system default timeout applies
        release.set()
        assert await ref.ask("after") == "AFTER"
    assert gate.handled == ["block", "after"]


@pytest.mark.trio
async def test_graceful_shutdown_waits_up_to_the_deadline_then_cancels(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered, release = anyio.Event(), anyio.Event()
    endings: list[TerminationKind] = []

    class Stuck(Gate):
        async def on_stop(self, termination: Termination) -> None:
            endings.append(termination.kind)

    start = trio.current_time()
    async with ActorSystem(shutdown_timeout=7.0) as system:
        ref = await system.spawn(Stuck, entered, release)
        quick = await system.spawn(Stuck, anyio.Event(), anyio.Event())
        ref.tell_nowait("block")
        quick.tell_nowait("done at once")
        await entered.wait()
    assert trio.current_time() - start == pytest.approx(7.0)
    assert sorted(kind.value for kind in endings) == ["cancelled", "normal"]


@pytest.mark.trio
async def test_graceful_shutdown_finishes_early_when_actors_drain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def release_later() -> None:
        await trio.sleep(3)
        release.set()

    start = trio.current_time()
    async with trio.open_nursery() as nursery, ActorSystem(shutdown_timeout=60.0) as system:
        ref = await system.spawn(Gate, entered, release)
        ref.tell_nowait("block")
        await entered.wait()
        nursery.start_soon(release_later)
    assert trio.current_time() - start == pytest.approx(3.0)
    assert ref.termination is not None
    assert ref.termination.kind is TerminationKind.NORMAL
