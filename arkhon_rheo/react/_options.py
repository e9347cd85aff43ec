"""The checks of `react_agent`'s turns as options: what the rules see, the global round budget.

- `Proposal` is what ``react_agent(rules=...)`` validates: the model's
  thought and its tool calls, or its answer, before they are committed.
- `GlobalBudget` is the global round budget for ``react_agent(budget=...)``:
  the seven round counters of a `RoundBudget` (a decision round per model
  turn, the tool calls, a round of a strategy per turn that calls tools of it),
  the hard gate (no decision round or no tool call left), the exploit overdraft
  past it and the one wrap-up turn after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .._errors import ConfigurationError
from ..protocols import FrozenMap, ToolCall, ToolSpec
from ..rules import RuleSet
from ._budget import Budget
from ._rounds import STRATEGIES, DecisionBudget, RoundBudget, Strategy, format_budget_for_llm
from ._stuck import Phase, StuckDetector, StuckPolicy

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..protocols import StateView
    from ._state import ReactState

__all__ = [
    "CONTROLS",
    "STUCK_PHASES",
    "CheckOptions",
    "GlobalBudget",
    "Proposal",
    "check_options",
    "checked_turn",
    "rounds_exhausted",
]

#: The one pending slot a ReAct agent works toward (its answer), for the overdraft rule.
_SLOTS = ("answer",)


class Proposal(BaseModel):
    """What the model proposed this turn, as the rules of ``react_agent(rules=...)`` see it.

    Attributes:
        thought: The text of the model's reply ("" for none).
        tool_calls: The tool calls it asks for (none when it answers).
        answer: Its final answer, when it gave one (None while it calls tools).
        phase: The agent's phase before the move, with stuck detection (else None).
        retries: Proposals the rules sent back in a row before this one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thought: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    phase: str | None = None
    retries: int = 0


@dataclass(frozen=True, slots=True)
class GlobalBudget:
    """A global round budget, as ``react_agent(budget=GlobalBudget(...))``.

    Each model turn is a decision round; each tool call counts against
    ``max_tool_calls``; a turn that calls tools spends one round of each
    strategy its tools have (``strategies``; a tool not named there explores).
    At the hard gate (no decision round or no tool call left) the agent gets
    exploit-only rounds while exploit rounds remain (the exploit overdraft;
    a non-exploit call then is blocked, ``exploit_overdraft_blocked``), then one
    wrap-up turn without tools whose reply is the answer
    (`StopReason.BUDGET_EXHAUSTED`). The model sees the ``BUDGET_STATE``
    line every turn.

    Attributes:
        rounds: The limits (a `RoundBudget`), or a `DecisionBudget` to start from.
        strategies: The strategy of each tool, by name (``"explore"``,
            ``"exploit"`` or ``"render"``).

    Raises:
        ConfigurationError: ``rounds`` is neither, or a strategy is unknown.
    """

    rounds: RoundBudget | DecisionBudget
    strategies: Mapping[str, Strategy] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        if not isinstance(self.rounds, RoundBudget | DecisionBudget):
            raise ConfigurationError(
                f"GlobalBudget(rounds={self.rounds!r}): give a RoundBudget (or a DecisionBudget)"
            )
        for tool_name, strategy in self.strategies.items():
            if strategy not in STRATEGIES:
                raise ConfigurationError(
                    f"GlobalBudget: tool {tool_name!r} has strategy {strategy!r}; "
                    f"use one of {', '.join(STRATEGIES)}"
                )
        object.__setattr__(self, "strategies", FrozenMap(self.strategies))

    @property
    def start(self) -> DecisionBudget:
        """The budget before the first turn."""
        rounds = self.rounds
        return rounds if isinstance(rounds, DecisionBudget) else DecisionBudget(rounds)

    def strategy(self, tool_name: str) -> Strategy:
        """The strategy of ``tool_name`` (``"explore"`` unless ``strategies`` says otherwise)."""
        return self.strategies.get(tool_name, "explore")

    def spend(self, spent: DecisionBudget, names: Iterable[str]) -> tuple[DecisionBudget, bool]:
        """The budget after one decision round calling ``names``, and whether it was blocked.

        A round at the hard gate is an overdraft round: it may call exploit
        tools only (else it is blocked: nothing but the decision is counted).
        """
        overdraft = spent.must_finish
        called = list(names)
        kinds = sorted({self.strategy(name) for name in called})
        if overdraft and called and kinds != ["exploit"]:
            return spent_round(spent), True
        if overdraft and called:
            spent = spent.take_overdraft_round()
        spent = spent_round(spent, calls=len(called))
        for kind in kinds:
            spent = spent.spend_round(kind)
        return spent, False


def spent_round(spent: DecisionBudget, *, calls: int = 0) -> DecisionBudget:
    """``spent`` with one more decision round used, and ``calls`` more tool calls."""
    used = spent.global_budget.spend(decision_rounds=1, tool_calls=calls)
    return dataclasses.replace(spent, global_budget=used)


def overdraft_open(spent: DecisionBudget) -> bool:
    """Whether the next round is an exploit overdraft round (at the gate, exploit rounds left)."""
    return spent.must_finish and spent.exploit_overdraft_available(_SLOTS)


def rounds_line(spent: DecisionBudget | None, wrapup: bool) -> str:
    """The ``BUDGET_STATE`` line for the model ("" without a global budget)."""
    if spent is None:
        return ""
    overdraft = not wrapup and overdraft_open(spent)
    if overdraft and not spent.exploit_overdraft_limit:  # granted now: the rounds it may take
        left = spent.global_budget.remaining_rounds("exploit")
        spent = dataclasses.replace(spent, exploit_overdraft_limit=left)
    return format_budget_for_llm(spent, wrapup=wrapup, overdraft=overdraft)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What each proposal is checked by: `react_agent`'s ``stuck``, ``rules`` and global budget.

    Attributes:
        detector: Stuck detection and its policy, or None.
        rules: The rules every proposal must pass, or None.
        rounds: The global round budget, or None.
        max_rule_retries: Proposals the rules may send back in a row before the
            agent ends (`StopReason.VIOLATION`).
        controls: The control actions offered to the model with stuck detection
            (``analyze`` and ``decide``: they run nothing and only move the phase).
    """

    detector: StuckDetector | None = None
    rules: RuleSet[Any] | None = None
    rounds: GlobalBudget | None = None
    max_rule_retries: int = 3
    controls: tuple[ToolSpec, ...] = ()


def _control(name: str, argument: str, description: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {argument: {"type": "string"}},
            "required": [argument],
        },
    )


#: The control actions of stuck detection, by name: their argument is the model's note.
CONTROLS: Mapping[str, ToolSpec] = FrozenMap(
    {
        "analyze": _control(
            "analyze", "notes", "Write down what the results so far say (moves to ANALYZING)."
        ),
        "decide": _control("decide", "decision", "Commit to a decision (moves to DECIDING)."),
    }
)


def check_options(
    stuck: StuckDetector | StuckPolicy | str | None,
    rules: RuleSet[Any] | Sequence[Any] | None,
    budget: object,
) -> CheckOptions | None:
    """`react_agent`'s ``stuck``, ``rules`` and ``budget`` checked into `CheckOptions` (None: none).

    Raises:
        ConfigurationError: One of them is of no type the engine takes.
    """
    detector = _detector(stuck)
    ruleset = _ruleset(rules)
    if isinstance(budget, RoundBudget | DecisionBudget):
        budget = GlobalBudget(budget)
    rounds = budget if isinstance(budget, GlobalBudget) else None
    if budget is not None and rounds is None and not isinstance(budget, Budget):
        raise ConfigurationError(
            f"react_agent(budget={budget!r}): give a Budget, or a GlobalBudget of rounds "
            "(or its RoundBudget)"
        )
    if detector is None and ruleset is None and rounds is None:
        return None
    controls = tuple(CONTROLS.values()) if detector is not None else ()
    return CheckOptions(detector, ruleset, rounds, controls=controls)


def _detector(stuck: StuckDetector | StuckPolicy | str | None) -> StuckDetector | None:
    if stuck is None or isinstance(stuck, StuckDetector):
        return stuck
    if isinstance(stuck, StuckPolicy):
        return StuckDetector(policy=stuck)
    names = ", ".join(repr(p.value) for p in StuckPolicy)
    if isinstance(stuck, str):
        try:
            return StuckDetector(policy=StuckPolicy(stuck))
        except ValueError:
            pass
    raise ConfigurationError(
        f"react_agent(stuck={stuck!r}): give a StuckDetector, a StuckPolicy or one of {names}"
    )


def _ruleset(rules: RuleSet[Any] | Sequence[Any] | None) -> RuleSet[Any] | None:
    if rules is None or isinstance(rules, RuleSet):
        return rules
    if isinstance(rules, str) or not isinstance(rules, Sequence):
        raise ConfigurationError(
            f"react_agent(rules={rules!r}): give a RuleSet, or a list of rules "
            "(@rule functions) over a Proposal"
        )
    return RuleSet(*rules)


#: The phases in which the model may only answer: no tool is offered.
STUCK_PHASES = frozenset({Phase.STUCK_SEARCH, Phase.STUCK_ANALYZE, Phase.STUCK_DECIDE})


def checked_turn(
    checks: CheckOptions | None,
    specs: Sequence[ToolSpec],
    view: StateView[ReactState],
    wrapup: bool,
) -> tuple[Sequence[ToolSpec], tuple[str, ...]]:
    """The tools offered this turn (of ``specs``), and the lines the checks add to the prompt.

    No tool in the wrap-up turn or a STUCK_* phase; the control actions with
    stuck detection; the round budget's ``BUDGET_STATE`` and stuck detection's ``agent_state``.
    """
    if checks is None:
        return (() if wrapup else specs), ()
    stuck = checks.detector is not None and view.track.phase in STUCK_PHASES
    offered = () if wrapup or stuck else (*specs, *checks.controls)
    spent = view.decisions or (checks.rounds.start if checks.rounds is not None else None)
    return offered, tuple(x for x in (rounds_line(spent, wrapup), view.agent_state) if x)


def rounds_exhausted(checks: CheckOptions | None, view: StateView[ReactState]) -> str | None:
    """Why the next turn must be the round budget's wrap-up turn (``max_iterations``), or None."""
    if checks is None or checks.rounds is None:
        return None
    spent = view.decisions or checks.rounds.start
    if not spent.must_finish or overdraft_open(spent):
        return None
    return "max_iterations: " + spent.global_budget.describe()
