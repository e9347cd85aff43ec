"""`reference_machine`: the small think -> act -> observe loop the project's tests and benches run.

A session of it runs ``cycles`` cycles of three stages, each a commit, and
then finishes; the state grows by one step a cycle. It does no I/O and draws
nothing at random, so every run of a session commits the same events::

    THINKING --think--> ACTING --act--> OBSERVING --observe--> THINKING ... --> FINISHED

    stage    reads                               writes       does
    think    user_input, iteration, observation  thought      "use the calculator"
    act      iteration, thought                  steps        + ReferenceStep(cycle, "calc", "42")
    observe  steps                               observation  the last step's output

``observe`` moves to FINISHED once ``iteration + 1 >= cycles``, else back to
THINKING (the loop state, so ``iteration`` counts the cycles done). After ``n``
commits, ``n // 3`` cycles are complete. The bench scripts time this machine,
so its work per commit is the one their figures describe.

Hooks (``before={"act": ...}``) are awaited inside a stage before its work, with
the cycle number: to hold a session at a given point, emit partial output, pause
for a random time, or fail the stage by raising.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import Field

from .._errors import ConfigurationError
from ..protocols import AgentState, History, Lifecycle, Machine, Patch, StateView, stage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping
    from enum import Enum

    from ..protocols import Gate, Stage

    #: A hook before a stage: awaited with the cycle number.
    Hook = Callable[[int], Awaitable[None]]

__all__ = ["ReferenceState", "ReferenceStep", "reference_machine"]

L = Lifecycle

#: The reference machine's stages, in the order of a cycle.
STAGES = ("think", "act", "observe")


class ReferenceStep(NamedTuple):
    """One cycle's tool call, as ``act`` appends it to `ReferenceState.steps` (stored as a list).

    Attributes:
        cycle: The cycle that made it, from 0.
        tool: The tool called (``"calc"``).
        output: What it returned (``"42"``).
    """

    cycle: int
    tool: str
    output: str


class ReferenceState(AgentState):
    """The state of `reference_machine`: a task, a cycle budget, and what each cycle left.

    Attributes:
        lifecycle: Starts at THINKING.
        user_input: The task (read by ``think``; an invariant wants it set).
        cycles: How many think -> act -> observe cycles a session runs, at least 1.
        thought: What ``think`` wrote last.
        observation: What ``observe`` wrote last (set once a cycle ended).
        steps: One `ReferenceStep` per ``act``: the part of the state that grows.
    """

    lifecycle: Lifecycle = L.THINKING
    user_input: str = "what is 6 times 7?"
    cycles: int = Field(default=3, ge=1)
    thought: str | None = None
    observation: str | None = None
    steps: History[ReferenceStep] = History()


def reference_machine(
    *,
    name: str = "reference",
    before: Mapping[str, Hook] | None = None,
    gates: Iterable[Gate] = (),
) -> Machine[ReferenceState]:
    """The reference loop machine over `ReferenceState` (see the module's diagram).

    Each call builds a new machine (and new stage classes), as a per-request
    factory would; share one across sessions where that is what you mean.

    ::

        async def hold(cycle: int) -> None:
            if cycle == 2:
                await release.wait()

        machine = reference_machine(before={"think": hold})
        result = await system.run(machine, ReferenceState(cycles=4))
        assert len(result.state.steps) == 4

    Args:
        name: The machine's name (stored with its sessions).
        before: Hooks by stage name (``"think"``, ``"act"``, ``"observe"``), each
            awaited inside its stage, before the stage's work, with the cycle
            number from 0. What a hook emits is the stage's partial output; what
            it raises is the stage's error (classified as any stage error is).
        gates: Human-approval gates (`Gate`) the machine pauses at.

    Returns:
        The machine: THINKING -> ACTING -> OBSERVING, ``cycles`` times, -> FINISHED.

    Raises:
        ConfigurationError: If ``before`` names a stage the machine does not have,
            or a hook that is not callable.
    """
    stages = _stages(*_hooks(before))
    return Machine(
        name=name,
        state_type=ReferenceState,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages=stages,
        invariants={
            None: [_has_task],
            L.ACTING: [_has_thought],
            L.OBSERVING: [_has_steps],
            L.FINISHED: [_has_observation],
        },
        gates=gates,
    )


def _hooks(before: Mapping[str, Hook] | None) -> tuple[Hook | None, Hook | None, Hook | None]:
    """The hooks before ``think``, ``act`` and ``observe``; refuses an unknown stage's."""
    hooks = dict(before or {})
    for stage_name, hook in hooks.items():
        if stage_name not in STAGES:
            raise ConfigurationError(
                f"reference_machine has no stage {stage_name!r}; hooks go on {', '.join(STAGES)}"
            )
        if not callable(hook):
            raise ConfigurationError(
                f"the hook before {stage_name!r} must be an async function of the cycle, "
                f"got {hook!r}"
            )
    on_think, on_act, on_observe = (hooks.get(stage_name) for stage_name in STAGES)
    return on_think, on_act, on_observe


def _stages(
    on_think: Hook | None, on_act: Hook | None, on_observe: Hook | None
) -> dict[Enum, type[Stage[Any]]]:
    """New stage classes for one machine, awaiting the hooks given before their work."""

    @stage(reads={"user_input", "iteration", "observation"}, writes={"thought"}, next=L.ACTING)
    async def think(view: StateView[ReferenceState]) -> Patch:
        if on_think is not None:
            await on_think(view.iteration)
        return Patch(thought="use the calculator")

    @stage(reads={"iteration", "thought"}, writes={"steps"}, next=L.OBSERVING)
    async def act(view: StateView[ReferenceState]) -> Patch:
        if on_act is not None:
            await on_act(view.iteration)
        step = ReferenceStep(cycle=view.iteration, tool="calc", output="42")
        return Patch().append("steps", step)

    @stage(reads={"steps"}, writes={"observation"}, next=_after_observe)
    async def observe(view: StateView[ReferenceState]) -> Patch:
        last = view.steps[-1]
        if on_observe is not None:
            await on_observe(last.cycle)
        return Patch(observation=last.output)

    return {L.THINKING: think, L.ACTING: act, L.OBSERVING: observe}


def _after_observe(state: ReferenceState) -> Lifecycle:
    return L.FINISHED if state.iteration + 1 >= state.cycles else L.THINKING


def _has_task(state: ReferenceState) -> bool:
    return state.user_input is not None


def _has_thought(state: ReferenceState) -> bool:
    return state.thought is not None


def _has_steps(state: ReferenceState) -> bool:
    return len(state.steps) > 0


def _has_observation(state: ReferenceState) -> bool:
    return state.observation is not None
