"""The ReAct engine: a think → act loop over a model client and tools, as an ordinary `Machine`.

`react_agent` checks its arguments into a frozen `ReactConfig`, binds the
engine's three stages (`StartStage`, `ThinkStage`, `ActStage`, in
``_stages``) to it, and builds the machine. The stages declare honest read
and write sets, so permissions, invariants, gates, durability, resume, fork
and replay apply to an agent exactly as to any machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocols import Condition, Lifecycle, Machine
from ..tools import Toolbox
from ._checks import CheckedThinkStage
from ._config import DEFAULT_SYSTEM_PROMPT, ReactConfig
from ._groups import Calls, Checks, Limits, Memory, grouped
from ._guard import arguments_fit, held_gate
from ._listen import ListenStage
from ._memory import CheckedMemoryThinkStage, MemoryThinkStage
from ._stages import ActStage, StartStage, ThinkStage
from ._state import ReactState, StopReason

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping, Sequence

    from ..protocols import Gate, ModelClient, Stage, ToolRunner

__all__ = ["DEFAULT_SYSTEM_PROMPT", "react_agent", "react_machine"]

L = Lifecycle


def react_agent(
    model: ModelClient,
    tools: ToolRunner | Sequence[Any] = (),
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    answer_type: Any = None,
    conversational: bool = False,
    limits: Limits | None = None,
    checks: Checks | None = None,
    calls: Calls | None = None,
    memory: Memory | None = None,
    resources: Mapping[str, object] | None = None,
    state_type: type[ReactState] = ReactState,
    name: str = "react-agent",
    **deprecated: Any,
) -> Machine[ReactState]:
    """Build a ReAct agent: an ordinary `Machine` over a model client and tools.

    Run it like any machine: ``await system.run(agent, ReactState(task="..."))``.
    Its options come in groups by purpose, each with the engine's defaults:
    ``react_agent(model, tools, limits=Limits(max_steps=10), checks=Checks(stuck="soft"))``.

    Args:
        model: The model client, shared by every session (and rate-governed: see ``governing``).
        tools: A `ToolRunner` (a ``Toolbox``), or the ``@tool`` functions themselves.
        system_prompt: The first message of every conversation; None for none.
        answer_type: A type (any pydantic validates) the final answer must be JSON of,
            as a format retry; implies ``json_mode``. Kept as data in ``state.output``,
            read typed with ``state.output_as(answer_type)``.
        conversational: After each answer, wait (parked, ``Lifecycle.OBSERVING``) for the
            next `UserInput` (``system.ask``, a `Conversation`; `Close` ends it). Limits
            bound each turn; with no task it waits for its first message. Needs a store.
        limits: How far a session may go: its `Budget` (or round budget), the cap on
            model turns, format retries and per-state deadlines (`Limits`).
        checks: What each step passes: stuck detection, rules over each `Proposal`
            and human-in-the-loop gates (`Checks`).
        calls: How the model and tools are called: JSON mode, streaming, a prompt
            cache, prices, parallel tool calls and tool failures (`Calls`).
        memory: What of a long conversation the model is sent: trimmed past a token
            estimate, or its oldest turns summarised (`Memory`).
        resources: More resources by name, for its tools (see `ToolContext`); the
            agent declares ``"model"`` and ``"tools"`` (a runner that is an async context
            manager). The `AgentSystem` opens each async context manager not open yet.
        state_type: `ReactState` or your subclass of it.
        name: The machine's name.
        **deprecated: The flat keywords of earlier releases (``max_steps=``,
            ``stuck=``, ``json_mode=``, ``max_context_tokens=``...), each moved into
            its group with a `DeprecationWarning`; they go in the next release.

    Returns:
        The machine.

    Raises:
        ConfigurationError: An argument is out of range or of no type taken,
            ``state_type`` is no `ReactState`, or ``resources`` names its own.
        TypeError: A keyword argument ``react_agent`` does not take.
    """
    groups = {"limits": limits, "checks": checks, "calls": calls, "memory": memory}
    options = grouped(groups, deprecated)
    return react_machine(
        ReactConfig(
            model,
            tools,
            system_prompt=system_prompt,
            answer_type=answer_type,
            conversational=conversational,
            resources=resources,
            state_type=state_type,
            name=name,
            **options,
        )
    )


def react_machine(config: ReactConfig) -> Machine[ReactState]:
    """The ReAct machine of ``config``: its stages bound to it, and their lifecycle.

    A conversational agent has a fourth state, ``OBSERVING``, between an answer
    and the user's next message (its stage, `ListenStage`, receives them). An
    agent whose toolbox may hold a call for a human (a tool whose run policy is
    ``approve``, or whose effect is ``ask``) may go from ``ACTING`` to
    ``ACTING``, pausing at its ``"tool call"`` gate (first of its gates) between.
    """
    transitions: dict[enum.Enum, set[enum.Enum]] = {
        L.INITIALIZED: {L.THINKING, L.FAILED},
        L.THINKING: {L.ACTING, L.FINISHED, L.FAILED},
        L.ACTING: {L.THINKING, L.FAILED},
    }
    stages: dict[enum.Enum, type[Stage[Any]]] = {
        L.INITIALIZED: StartStage.bind(config),
        L.THINKING: ThinkStage.bind(config),
        L.ACTING: ActStage.bind(config),
    }
    if config.conversational:
        transitions[L.THINKING] = {L.ACTING, L.OBSERVING, L.FAILED}
        transitions[L.OBSERVING] = {L.THINKING, L.FINISHED, L.FAILED}
        transitions[L.INITIALIZED] = {L.THINKING, L.OBSERVING, L.FAILED}  # opened, no task
        stages[L.OBSERVING] = ListenStage.bind(config)
    if config.checks is not None:  # each proposal is checked; one sent back is thought again
        transitions[L.THINKING] |= {L.THINKING}
        stages[L.THINKING] = CheckedThinkStage.bind(config)
    if config.memory is not None:  # a step may fold the oldest turns into a summary instead
        transitions[L.THINKING] |= {L.THINKING}
        memory = MemoryThinkStage if config.checks is None else CheckedMemoryThinkStage
        stages[L.THINKING] = memory.bind(config)
    acting: list[Condition[Any]] = [Condition("acting needs pending tool calls", _has_pending)]
    gates: Sequence[Gate] = config.gates
    runner = config.runner
    if isinstance(runner, Toolbox) and runner.may_hold:
        transitions[L.ACTING] = {L.THINKING, L.ACTING, L.FAILED}
        gates = (held_gate(runner), *gates)
        acting.append(arguments_fit(runner))
    return Machine(
        name=config.name,
        state_type=config.state_type,
        initial=L.INITIALIZED,
        transitions=transitions,
        stages=stages,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        invariants={
            L.FINISHED: [
                Condition("a finished agent says why it finished", _says_why),
                Condition("an answered agent has an answer", _answered_has_answer),
            ],
            L.ACTING: acting,
        },
        gates=gates,
        deadlines=config.deadlines,
        resources=config.declared,
        reply=answer_of,
    )


def answer_of(state: ReactState) -> Any:
    """What a ReAct agent answers: its typed output (with ``answer_type``), else its text."""
    return state.output if state.output is not None else state.answer


def _says_why(state: ReactState) -> bool:
    return state.exit is not None


def _answered_has_answer(state: ReactState) -> bool:
    return state.exit is not StopReason.ANSWERED or bool(state.answer)


def _has_pending(state: ReactState) -> bool:
    return bool(state.pending)
