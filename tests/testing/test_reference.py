"""reference_machine: the public reference loop machine the tests and benches share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Gate,
    Lifecycle,
    Transient,
    emit,
)
from arkhon_rheo.protocols import EventKind, Partial
from arkhon_rheo.testing import EventCapture, ReferenceState, ReferenceStep, reference_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

L = Lifecycle
CYCLE = [L.ACTING, L.OBSERVING, L.THINKING]


async def test_a_session_runs_its_cycles_and_finishes() -> None:
    capture = EventCapture()
    async with AgentSystem(path=None, listeners=[capture]) as system:
        result = await system.run(reference_machine(), ReferenceState(cycles=3), session_id="r")
    assert result.exit_reason is ExitReason.FINISHED
    assert result.steps == 9  # three commits a cycle
    assert capture.states("r") == [*CYCLE, *CYCLE, L.ACTING, L.OBSERVING, L.FINISHED]
    assert [event.stage for event in capture.events("r")[:3]] == ["think", "act", "observe"]
    state = result.state
    assert list(state.steps) == [ReferenceStep(cycle, "calc", "42") for cycle in range(3)]
    assert (state.thought, state.observation, state.iteration) == ("use the calculator", "42", 2)


async def test_it_is_deterministic_and_its_stored_log_replays(tmp_path: Path) -> None:
    machine = reference_machine(name="twice")
    async with AgentSystem(path=tmp_path / "r.db") as system:
        first = await system.run(machine, ReferenceState(cycles=4), session_id="a")
        second = await system.run(machine, ReferenceState(cycles=4), session_id="b")
        histories = [await system.stored(machine, sid).history() for sid in ("a", "b")]
        report = await system.stored(machine, "a").replay()
    assert first.state.model_copy(update={"session_id": "b"}) == second.state
    a, b = ([(e.kind, e.stage, e.to_state, e.patch) for e in h] for h in histories)
    assert a == b
    assert report.ok
    assert report.state == first.state


async def test_hooks_run_inside_their_stage_with_the_cycle() -> None:
    calls: list[tuple[str, int]] = []
    subscribed = anyio.Event()

    def hook(name: str) -> Any:
        async def before(cycle: int) -> None:
            await subscribed.wait()
            calls.append((name, cycle))
            emit(f"{name} {cycle}")

        return before

    machine = reference_machine(before={name: hook(name) for name in ("think", "act", "observe")})
    async with AgentSystem(path=None) as system:
        handle = await system.start(machine, ReferenceState(cycles=2), session_id="h")
        with handle.stream() as stream:
            subscribed.set()
            items = [item async for item in stream]
    expected = [(name, cycle) for cycle in (0, 1) for name in ("think", "act", "observe")]
    assert calls == expected
    # Each partial comes from its own stage, just before that stage's event.
    labels = [
        f"{item.stage}: {item.data}" if isinstance(item, Partial) else f"#{item.seq}"
        for item in items
    ]
    assert labels == [
        line
        for seq, (name, cycle) in enumerate(expected, 1)
        for line in (f"{name}: {name} {cycle}", f"#{seq}")
    ]


async def test_a_hook_that_raises_fails_its_stage_as_any_stage_error_does() -> None:
    raised = False

    async def flaky(cycle: int) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Transient("blip")

    async with AgentSystem(path=None) as system:
        result = await system.run(reference_machine(before={"act": flaky}), ReferenceState())
    assert result.exit_reason is ExitReason.FINISHED
    assert result.retries == 1
    assert len(result.state.steps) == 3


async def test_a_hook_can_hold_a_session_at_a_cycle() -> None:
    parked, release = anyio.Event(), anyio.Event()

    async def hold(cycle: int) -> None:
        if cycle == 2:
            parked.set()
            await release.wait()

    async with AgentSystem(path=None) as system:
        handle = await system.start(reference_machine(before={"think": hold}), ReferenceState())
        await parked.wait()
        assert handle.state.lifecycle is L.THINKING
        assert len(handle.state.steps) == 2  # two cycles done, the third held
        release.set()
        assert (await handle.result()).ok


async def test_gates_pause_it() -> None:
    machine = reference_machine(gates=[Gate.before("observe")])
    async with AgentSystem(path=None) as system:
        paused = await system.run(machine, ReferenceState(cycles=1), session_id="g")
        assert paused.exit_reason is ExitReason.PAUSED
        handle = await system.stored(machine, "g").approve()
        assert handle is not None
        result = await handle.result()
        kinds = [event.kind for event in await handle.history()]
    assert result.ok
    assert kinds.count(EventKind.PAUSE) == 1


def test_each_call_builds_a_new_machine_with_its_own_name() -> None:
    first, second = reference_machine(), reference_machine(name="other")
    assert first is not second
    assert (first.name, second.name) == ("reference", "other")
    assert first.stages[L.THINKING] is not second.stages[L.THINKING]
    assert first.initial is L.THINKING
    assert first.state_type is ReferenceState


def test_a_state_runs_at_least_one_cycle() -> None:
    with pytest.raises(ValueError, match="cycles"):
        ReferenceState(cycles=0)


@pytest.mark.parametrize(
    ("before", "message"),
    [
        ({"plan": None}, "no stage 'plan'; hooks go on think, act, observe"),
        ({"act": "soon"}, "hook before 'act' must be an async function of the cycle"),
    ],
)
def test_bad_hooks_are_refused(before: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        reference_machine(before=before)
