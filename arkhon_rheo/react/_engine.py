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
from ._guard import arguments_fit, held_gate
from ._listen import ListenStage
from ._memory import CheckedMemoryThinkStage, MemoryThinkStage
from ._stages import ActStage, StartStage, ThinkStage
from ._state import ReactState, StopReason

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping, Sequence

    from ..models import ModelPrice, Pricing
    from ..protocols import Gate, ModelClient, Stage, ToolRunner
    from ..rules import Rule, RuleSet
    from ..tools import OnExhausted
    from ._budget import Budget
    from ._context import PromptCache, Summarize
    from ._options import GlobalBudget
    from ._rounds import DecisionBudget, RoundBudget
    from ._stuck import StuckDetector, StuckPolicy

__all__ = ["DEFAULT_SYSTEM_PROMPT", "react_agent", "react_machine"]

L = Lifecycle


def react_agent(
    model: ModelClient,
    tools: ToolRunner | Sequence[Any] = (),
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    budget: Budget | GlobalBudget | RoundBudget | DecisionBudget | None = None,
    max_steps: int = 50,
    max_format_retries: int = 2,
    max_parallel_tools: int = 8,
    json_mode: bool = False,
    answer_type: Any = None,
    cache: PromptCache | None = None,
    max_context_tokens: int | None = None,
    prices: Pricing | Mapping[str, ModelPrice | tuple[float, float]] | None = None,
    stream: bool = False,
    state_type: type[ReactState] = ReactState,
    name: str = "react-agent",
    gates: Sequence[Gate] = (),
    deadlines: Mapping[enum.Enum, float] | None = None,
    conversational: bool = False,
    resources: Mapping[str, object] | None = None,
    tool_failures: OnExhausted = "observe",
    stuck: StuckDetector | StuckPolicy | str | None = None,
    rules: RuleSet[Any] | Sequence[Rule[Any]] | None = None,
    memory: Summarize | None = None,
) -> Machine[ReactState]:
    """Build a ReAct agent: an ordinary `Machine` over a model client and tools.

    Run it like any machine: ``await system.run(agent, ReactState(task="..."))``.

    Args:
        model: The model client, shared by every session (and rate-governed: see ``governing``).
        tools: A `ToolRunner` (a ``Toolbox``), or the ``@tool`` functions themselves.
        system_prompt: The first message of every conversation; None for none.
        budget: Limits on turns, tool calls, tokens, cost and time, or seed 001's
            `GlobalBudget` (rounds, overdraft); past one, a wrap-up turn without tools.
        max_steps: The hard cap on model turns: past it the agent ends with
            `StopReason.MAX_STEPS` and no answer (a warning is logged).
        max_format_retries: How many times a reply the engine cannot use is sent
            back to the model with what was wrong, before `MalformedModelOutput`.
        max_parallel_tools: How many tool calls of one turn run at once.
        json_mode: Ask the model for JSON replies.
        answer_type: A type (any pydantic validates) the final answer must be JSON of,
            as a format retry; implies ``json_mode``. Kept as data in ``state.output``,
            read typed with ``state.output_as(answer_type)``.
        cache: A `PromptCache` answering repeated prompts without the model.
        max_context_tokens: Trim the oldest turns past this token estimate
            (the system prompt and the latest turn always stay).
        prices: Input and output price per million tokens by model name, for
            ``state.cost`` (a dated name gets its family's); a `Pricing` or a mapping.
        stream: Stream each reply (the model must be a `StreamingModelClient`), its
            text pieces emitted (`SessionHandle.stream`) and recorded; no prompt cache.
        state_type: `ReactState` or your subclass of it.
        name: The machine's name.
        gates: Human-in-the-loop gates (``Gate.before("act")``); a tool to approve or ask
            about (``@tool(run="approve")``, ``effect="ask"``) adds a ``"tool call"`` gate.
        deadlines: Per-state deadlines in seconds (``{Lifecycle.ACTING: 30}``).
        conversational: After each answer, wait (parked, ``Lifecycle.OBSERVING``) for the
            next `UserInput` (``system.ask``, a `Conversation`; `Close` ends it). Limits
            bound each turn; with no task it waits for its first message. Needs a store.
        resources: More resources by name, for its tools (see `ToolContext`); the
            agent declares ``"model"`` and ``"tools"`` (a runner that is an async context
            manager). The `AgentSystem` opens each async context manager not open yet.
        tool_failures: A call failing transiently past its retries (tools that do not
            say otherwise): ``"observe"`` tells the model; ``"escalate"`` fails the step.
        stuck: Seed 003's phases and stuck detection: a `StuckDetector`, or its policy
            (``"soft"``, ``"hard"``, ``"auto_finish"``), checked after each model turn.
        rules: Seeds 000/002's Validate: a `RuleSet` (or rules) over each `Proposal`;
            a violation goes back to the model, at most 3 times in a row.
        memory: `Summarize` folds the oldest turns into a summary past a token estimate.

    Returns:
        The machine.

    Raises:
        ConfigurationError: An argument is out of range or of no type taken,
            ``state_type`` is no `ReactState`, or ``resources`` names its own.
    """
    # Every argument as given, checked and frozen (the parameters are ReactConfig's fields).
    return react_machine(ReactConfig(**locals()))


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
