"""Round budgets: global and per-slot round counters, the must-finish gate, the line.

These count a decision loop's rounds (decisions, tool calls, explore/exploit/
render rounds, context reads); they are not the engine's `Budget`, which limits
one ReAct agent's turns, tool calls, tokens, cost and time.

A decision agent that works toward a contract of slots keeps a `DecisionBudget`
in its state: one `RoundBudget` (seven limit / used pairs) and an advisory
`SlotBudget` per contract slot. Every value is a frozen dataclass, so it can
be a field of an `AgentState`; spending returns a new value. Nothing reads a
clock: a budget survives resume and replay exactly.

The model sees the budget as one snapshot, `format_budget_for_llm`::

    BUDGET_STATE: global(decisions left 2/5, tools left 7/8, explore left 2/3, exploit left 2/2, render left 1/1, decision_reruns left 2/2, context_reads left 4/4)
            stage[answer](explore left 1/2, exploit left 1/1, render left 1/1, context_reads left 2/2)

with ``, wrapup active`` and ``, exploit_overdraft u/t`` after ``global(...)``
when those are on.
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .._errors import ConfigurationError
from ..protocols import FrozenMap

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "STRATEGIES",
    "DecisionBudget",
    "RoundBudget",
    "SlotBudget",
    "Strategy",
    "format_budget_for_llm",
]

Strategy = Literal["explore", "exploit", "render"]
"""What a tool-calling round is for: gathering, using what was gathered, or producing output."""

#: The strategies a tool-calling decision may name, in the order the budget line shows them.
STRATEGIES: tuple[Strategy, ...] = ("explore", "exploit", "render")

#: The indentation of the stage part of the budget line.
_STAGE_INDENT = "\n        "


def _check_counts(owner: object) -> None:
    for item in dataclasses.fields(owner):  # type: ignore[arg-type]
        value = getattr(owner, item.name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(
                f"{type(owner).__name__}({item.name}={value!r}): a budget count must be an "
                "int of zero or more"
            )


def _left(limit: int, used: int) -> str:
    return f"{max(0, limit - used)}/{limit}"


@dataclass(frozen=True, slots=True)
class RoundBudget:
    """The seven global round counters: a limit and what is used of each.

    The names are those of the budget line (the limit of context reads is ``ctx_reads``).
    Used counts may pass their limit (an exploit overdraft does); what is left
    is shown as zero then.

    Raises:
        ConfigurationError: A count is negative or not an int.
    """

    max_decision_rounds: int
    max_tool_calls: int
    max_explore_rounds: int
    max_exploit_rounds: int
    max_render_rounds: int
    max_decision_reruns: int
    ctx_reads: int
    decision_rounds_used: int = 0
    tool_calls_used: int = 0
    explore_rounds_used: int = 0
    exploit_rounds_used: int = 0
    render_rounds_used: int = 0
    decision_reruns_used: int = 0
    context_reads_used: int = 0

    def __post_init__(self) -> None:
        _check_counts(self)

    @property
    def remaining_decision_rounds(self) -> int:
        """Decision rounds left (negative once overdrawn)."""
        return self.max_decision_rounds - self.decision_rounds_used

    @property
    def remaining_tool_calls(self) -> int:
        """Tool calls left (negative once overdrawn)."""
        return self.max_tool_calls - self.tool_calls_used

    @property
    def remaining_decision_reruns(self) -> int:
        """Decision reruns left."""
        return self.max_decision_reruns - self.decision_reruns_used

    @property
    def remaining_context_reads(self) -> int:
        """Context reads left."""
        return self.ctx_reads - self.context_reads_used

    def remaining_rounds(self, strategy: Strategy) -> int:
        """Rounds of ``strategy`` left."""
        limit, used = {
            "explore": (self.max_explore_rounds, self.explore_rounds_used),
            "exploit": (self.max_exploit_rounds, self.exploit_rounds_used),
            "render": (self.max_render_rounds, self.render_rounds_used),
        }[strategy]
        return limit - used

    @property
    def must_finish(self) -> bool:
        """The hard gate: no decision round or no tool call left."""
        return self.remaining_decision_rounds <= 0 or self.remaining_tool_calls <= 0

    def spend(
        self,
        *,
        decision_rounds: int = 0,
        tool_calls: int = 0,
        explore: int = 0,
        exploit: int = 0,
        render: int = 0,
        decision_reruns: int = 0,
        context_reads: int = 0,
    ) -> RoundBudget:
        """A copy with the given amounts added to the used counters.

        Raises:
            ConfigurationError: An amount would make a counter negative.
        """
        return dataclasses.replace(
            self,
            decision_rounds_used=self.decision_rounds_used + decision_rounds,
            tool_calls_used=self.tool_calls_used + tool_calls,
            explore_rounds_used=self.explore_rounds_used + explore,
            exploit_rounds_used=self.exploit_rounds_used + exploit,
            render_rounds_used=self.render_rounds_used + render,
            decision_reruns_used=self.decision_reruns_used + decision_reruns,
            context_reads_used=self.context_reads_used + context_reads,
        )

    def describe(self) -> str:
        """``global(decisions left D/T, ..., context_reads left c/C)``."""
        return (
            f"global(decisions left {_left(self.max_decision_rounds, self.decision_rounds_used)}, "
            f"tools left {_left(self.max_tool_calls, self.tool_calls_used)}, "
            f"explore left {_left(self.max_explore_rounds, self.explore_rounds_used)}, "
            f"exploit left {_left(self.max_exploit_rounds, self.exploit_rounds_used)}, "
            f"render left {_left(self.max_render_rounds, self.render_rounds_used)}, "
            f"decision_reruns left {_left(self.max_decision_reruns, self.decision_reruns_used)}, "
            f"context_reads left {_left(self.ctx_reads, self.context_reads_used)})"
        )


@dataclass(frozen=True, slots=True)
class SlotBudget:
    """The advisory budget of one contract slot (its per-stage budget).

    It guides the model (it appears in the budget line) and decides exploit
    overdraft eligibility; it never stops a round by itself.

    Raises:
        ConfigurationError: A count is negative or not an int.
    """

    max_explore: int
    max_exploit: int
    render: int
    ctx_reads: int
    explore_used: int = 0
    exploit_used: int = 0
    render_used: int = 0
    context_reads_used: int = 0

    def __post_init__(self) -> None:
        _check_counts(self)

    @property
    def remaining_exploit(self) -> int:
        """Exploit rounds left in this slot."""
        return self.max_exploit - self.exploit_used

    def spend(
        self, *, explore: int = 0, exploit: int = 0, render: int = 0, context_reads: int = 0
    ) -> SlotBudget:
        """A copy with the given amounts added to the used counters."""
        return dataclasses.replace(
            self,
            explore_used=self.explore_used + explore,
            exploit_used=self.exploit_used + exploit,
            render_used=self.render_used + render,
            context_reads_used=self.context_reads_used + context_reads,
        )

    def describe(self, slot_id: str) -> str:
        """``stage[slot_id](explore left e/E, exploit left x/X, render left r/R, ...)``."""
        return (
            f"stage[{slot_id}](explore left {_left(self.max_explore, self.explore_used)}, "
            f"exploit left {_left(self.max_exploit, self.exploit_used)}, "
            f"render left {_left(self.render, self.render_used)}, "
            f"context_reads left {_left(self.ctx_reads, self.context_reads_used)})"
        )


@dataclass(frozen=True, slots=True)
class DecisionBudget:
    """What a decision agent tracks of its budgets: global, per slot, and the exploit overdraft.

    Attributes:
        global_budget: The global counters.
        stages: The advisory budget of each contract slot, by slot id.
        exploit_overdraft_used: Overdraft rounds taken (``u`` of ``exploit_overdraft u/t``).
        exploit_overdraft_limit: Overdraft rounds granted when the overdraft
            began: the global exploit rounds left then (``t``); 0 before.

    Raises:
        ConfigurationError: An overdraft count is negative, or a stage is not a `SlotBudget`.
    """

    global_budget: RoundBudget
    stages: FrozenMap[str, SlotBudget] = field(default_factory=FrozenMap)
    exploit_overdraft_used: int = 0
    exploit_overdraft_limit: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.stages, FrozenMap):
            object.__setattr__(self, "stages", FrozenMap(self.stages))
        for slot_id, budget in self.stages.items():
            if not isinstance(budget, SlotBudget):
                raise ConfigurationError(
                    f"DecisionBudget.stages[{slot_id!r}] is {budget!r}; give a SlotBudget"
                )
        for name in ("exploit_overdraft_used", "exploit_overdraft_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"DecisionBudget({name}={value!r}): must be an int of zero or more"
                )

    @property
    def must_finish(self) -> bool:
        """The hard gate of the global budget (`RoundBudget.must_finish`)."""
        return self.global_budget.must_finish

    def spend_round(self, strategy: Strategy, slot_id: str | None = None) -> DecisionBudget:
        """Count one tool-calling round of ``strategy`` globally and in ``slot_id``'s stage.

        Raises:
            ConfigurationError: ``strategy`` is not one of `STRATEGIES`.
        """
        if strategy not in STRATEGIES:
            raise ConfigurationError(
                f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}"
            )
        one = {strategy: 1}
        stages = self.stages
        if slot_id is not None and slot_id in stages:
            stages = FrozenMap({**stages, slot_id: stages[slot_id].spend(**one)})
        spent = self.global_budget.spend(**one)
        return dataclasses.replace(self, global_budget=spent, stages=stages)

    def spend_context_reads(self, count: int, slot_id: str | None = None) -> DecisionBudget:
        """Count ``count`` context reads globally and in ``slot_id``'s stage."""
        stages = self.stages
        if slot_id is not None and slot_id in stages:
            stages = FrozenMap({**stages, slot_id: stages[slot_id].spend(context_reads=count)})
        return dataclasses.replace(
            self, global_budget=self.global_budget.spend(context_reads=count), stages=stages
        )

    def exploit_overdraft_available(self, pending_slots: Iterable[str]) -> bool:
        """Whether one more exploit-only round may be granted past the hard gate.

        Exploit rounds must remain globally, and in the stage budget of at
        least one pending slot (a slot without a stage budget counts as having
        some); once the overdraft began, fewer than its limit may have been used.
        """
        if self.global_budget.remaining_rounds("exploit") <= 0:
            return False
        if self.exploit_overdraft_limit and (
            self.exploit_overdraft_used >= self.exploit_overdraft_limit
        ):
            return False
        return any(
            slot not in self.stages or self.stages[slot].remaining_exploit > 0
            for slot in pending_slots
        )

    def take_overdraft_round(self) -> DecisionBudget:
        """Count one exploit overdraft round (granting the overdraft on the first)."""
        limit = self.exploit_overdraft_limit or self.global_budget.remaining_rounds("exploit")
        used = self.exploit_overdraft_used + 1
        return dataclasses.replace(self, exploit_overdraft_used=used, exploit_overdraft_limit=limit)


def format_budget_for_llm(
    budget: DecisionBudget,
    slot_id: str | None = None,
    *,
    wrapup: bool = False,
    overdraft: bool = False,
) -> str:
    """The ``BUDGET_STATE`` snapshot the decision model sees.

    ``BUDGET_STATE: global(...)``, then ``, wrapup active`` in the wrap-up
    round and ``, exploit_overdraft u/t`` while the overdraft is on, then (when
    ``slot_id`` has a stage budget) a newline, eight spaces and
    ``stage[slot_id](...)``.

    Args:
        budget: The budgets.
        slot_id: The slot whose stage budget to show, if any.
        wrapup: The current round is the wrap-up round.
        overdraft: The exploit overdraft is active this round.

    Returns:
        The snapshot text.
    """
    line = "BUDGET_STATE: " + budget.global_budget.describe()
    if wrapup:
        line += ", wrapup active"
    if overdraft:
        used, limit = budget.exploit_overdraft_used, budget.exploit_overdraft_limit
        line += f", exploit_overdraft {used}/{limit}"
    if slot_id is not None and slot_id in budget.stages:
        line += _STAGE_INDENT + budget.stages[slot_id].describe(slot_id)
    return line


# The facade gives these classes its own ``__module__``, where ``FrozenMap`` and the
# others are not defined: resolve the annotations here, once, for pydantic and
# `Machine`'s immutability check, which read them later.
for _cls in (RoundBudget, SlotBudget, DecisionBudget):
    _hints = typing.get_type_hints(_cls)
    _cls.__annotations__.update(_hints)
    for _field in dataclasses.fields(_cls):
        _field.type = _hints[_field.name]
del _cls, _hints, _field
