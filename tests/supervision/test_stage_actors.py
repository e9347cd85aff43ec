"""Every stage of a session is an actor of its own, asked in its supervisor's task while idle.

One way to run a stage: each stage has its actor (a cell, a mailbox, a name),
which the supervisor asks for its patch with an inline activation. These
tests pin that the actors exist (each spawned when its stage first runs: a
session parked in its first stage holds no actor for the others) and end with
their session, that restarts replace them by the OTP strategy, that a cancel
or a ``BaseException`` in a stage ends them all, and that ``stage_mode=`` is
deprecated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
import structlog

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    History,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    Stage,
    StateView,
)
from arkhon_rheo.supervision import RestartStrategy, StageMode

if TYPE_CHECKING:
    from collections.abc import Callable

L = Lifecycle
pytestmark = pytest.mark.anyio


class Loop(AgentState):
    lifecycle: Lifecycle = L.THINKING
    steps: History[str] = History()


class Script:
    """What each stage does at each call, and what the stages saw."""

    def __init__(self, **actions: list[Any]) -> None:
        self.actions = actions
        self.instances: dict[str, int] = {}
        self.tasks: set[int] = set()
        self.bound: set[object] = set()
        self.actors: list[int] = []
        self.system: AgentSystem | None = None

    def next(self, name: str) -> Any:
        script = self.actions.get(name)
        return script.pop(0) if script else "ok"


def machine(script: Script, rounds: int = 2) -> Machine[Loop]:
    """THINKING -> ACTING -> OBSERVING -> (THINKING | FINISHED), ``rounds`` times."""

    def make(name: str, target: Lifecycle | Callable[[Loop], Lifecycle]) -> type[Stage[Loop]]:
        class Scripted(Stage[Loop], name=name, reads={"steps"}, writes={"steps"}):
            def __init__(self) -> None:
                script.instances[name] = script.instances.get(name, 0) + 1

            async def execute(self, view: StateView[Loop]) -> Patch:
                script.tasks.add(anyio.get_current_task().id)
                script.bound.add(structlog.contextvars.get_contextvars().get("stage"))
                if script.system is not None:
                    script.actors.append(script.system.statistics().actors)
                action = script.next(name)
                if isinstance(action, BaseException):
                    raise action
                if isinstance(action, anyio.Event):
                    action.set()
                    await anyio.sleep_forever()
                return Patch().append("steps", name)

            def next(self, state: Loop) -> Lifecycle:
                return target if isinstance(target, Lifecycle) else target(state)

        return Scripted

    def after_observe(state: Loop) -> Lifecycle:
        return L.FINISHED if state.steps.count("observe") >= rounds else L.THINKING

    return Machine(
        name="stage-actors",
        state_type=Loop,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={
            L.THINKING: make("think", L.ACTING),
            L.ACTING: make("act", L.OBSERVING),
            L.OBSERVING: make("observe", after_observe),
        },
    )


async def test_each_stage_is_an_actor_asked_in_the_supervisors_task() -> None:
    script = Script()
    async with AgentSystem(path=None) as system:
        script.system = system
        result = await system.run(machine(script), Loop())
        assert result.ok, result.failure
        await anyio.wait_all_tasks_blocked()
        assert system.statistics().actors == 0  # the stages' actors ended with the session
    # The supervisor and the actors of the stages run so far: each is spawned at its
    # stage's first run, then kept (three at most).
    assert script.actors == [2, 3, 4, 4, 4, 4]
    assert len(script.tasks) == 1  # every stage ran in one task: its supervisor's
    assert anyio.get_current_task().id not in script.tasks
    assert script.bound == {"think", "act", "observe"}  # each bound its name to log with
    assert script.instances == {"think": 1, "act": 1, "observe": 1}


@pytest.mark.parametrize(
    ("strategy", "restarted", "spawned"),
    [
        (RestartStrategy.ONE_FOR_ONE, {"think": 1, "act": 2, "observe": 1}, 4),
        # ``observe`` had not run when ``act`` failed: its first instance had no actor yet.
        (RestartStrategy.ONE_FOR_ALL, {"think": 2, "act": 2, "observe": 2}, 5),
        (RestartStrategy.REST_FOR_ONE, {"think": 1, "act": 2, "observe": 2}, 4),
    ],
)
async def test_a_failed_stage_restarts_its_actors_by_the_strategy(
    strategy: RestartStrategy, restarted: dict[str, int], spawned: int
) -> None:
    script = Script(act=[Recoverable("once")])
    async with AgentSystem(path=None, restart_strategy=strategy) as system:
        script.system = system
        before = system._actors.statistics().spawned
        result = await system.run(machine(script), Loop())
        assert result.ok, result.failure
        assert result.restarts == 1
        # One supervisor, and an actor for each stage instance that ran.
        assert system._actors.statistics().spawned - before == 1 + spawned
        await anyio.wait_all_tasks_blocked()
        assert system.statistics().actors == 0
    assert script.instances == restarted
    assert max(script.actors) == 4  # the replaced actors ended: never more alive
    assert len(script.tasks) == 1


async def test_cancelling_a_session_in_the_middle_of_a_stage_ends_its_stage_actors() -> None:
    entered = anyio.Event()
    script = Script(act=[entered])
    with anyio.fail_after(10):
        async with AgentSystem(path=None) as system:
            handle = await system.start(machine(script), Loop())
            await entered.wait()
            assert system.statistics().actors == 3  # its supervisor, think's and act's
            handle.cancel()
            result = await handle.result()
            assert result.exit_reason is ExitReason.CANCELLED
            await anyio.wait_all_tasks_blocked()
            assert system.statistics().actors == 0


async def test_leaving_the_block_in_the_middle_of_a_stage_ends_its_stage_actors() -> None:
    entered = anyio.Event()
    script = Script(think=[entered])
    with anyio.fail_after(10):
        async with AgentSystem(path=None) as system:
            handle = await system.start(machine(script), Loop())
            await entered.wait()
    assert (await handle.result()).exit_reason is ExitReason.CANCELLED
    assert system.statistics().actors == 0


class Abort(BaseException):
    pass


async def test_a_base_exception_from_a_stage_is_raised_not_classified() -> None:
    script = Script(observe=[Abort("stop")])
    with anyio.fail_after(10), pytest.RaisesGroup(Abort):
        async with AgentSystem(path=None) as system:
            handle = await system.start(machine(script), Loop())
            result = await handle.result()
            assert result.exit_reason is ExitReason.CRASHED
            await anyio.sleep_forever()
    assert script.instances == {"think": 1, "act": 1, "observe": 1}  # never restarted
    assert system.statistics().actors == 0


def test_stage_mode_is_deprecated_and_ignored() -> None:
    for mode in StageMode:
        with pytest.warns(DeprecationWarning, match="stage_mode"):
            AgentSystem(path=None, stage_mode=mode)
    with pytest.raises(ConfigurationError, match="StageMode"):
        AgentSystem(path=None, stage_mode="task")  # type: ignore[arg-type]
