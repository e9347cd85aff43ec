"""Budgets of a ReAct agent: limits, what is used, and the one line the model sees.

Everything here is a pure function of counters kept in the agent's state, so a
budget survives resume and replay exactly: nothing reads a clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import ConfigurationError

__all__ = ["Budget", "Used"]


@dataclass(frozen=True, slots=True)
class Used:
    """What an agent has used so far, as its state counts it."""

    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on one ReAct agent session (``react_agent(budget=...)``); ``None``: no limit.

    A decision loop counts rounds instead, with `RoundBudget`.

    When a limit is reached the agent gets one wrap-up turn: the model is told
    so, is offered no tools, and its reply is the final answer (the session
    ends with `StopReason.BUDGET_EXHAUSTED`).

    Attributes:
        max_turns: Model turns (one call to the model, format retries included).
        max_tool_calls: Tool calls, over all turns.
        max_tokens: Prompt and completion tokens together.
        max_cost: Cost in the currency of the prices given to the engine.
        max_seconds: Wall time since the first turn, as the engine recorded it.
    """

    max_turns: int | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tool_calls", "max_tokens", "max_cost", "max_seconds"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(
                    f"Budget({name}={value!r}): a limit must be zero or more, or None for none"
                )

    def _rows(self, used: Used) -> list[tuple[str, float, float | None]]:
        return [
            ("turns", used.turns, self.max_turns),
            ("tool_calls", used.tool_calls, self.max_tool_calls),
            ("tokens", used.tokens, self.max_tokens),
            ("cost", used.cost, self.max_cost),
            ("seconds", used.seconds, self.max_seconds),
        ]

    def exhausted(self, used: Used) -> str | None:
        """The first limit ``used`` has reached (``"tool_calls 20/20"``), or None."""
        for name, value, limit in self._rows(used):
            if limit is not None and value >= limit:
                return f"{name} {_number(value)}/{_number(limit)}"
        return None

    def left(self, used: Used) -> float:
        """The fraction of the budget left: the least over the limits set (1.0 with none).

        The engine's model calls wait with it as their priority on a rate
        governor: sessions with the most budget left are served first.
        """
        fractions = [
            max(0.0, 1.0 - value / limit) if limit else 0.0
            for _, value, limit in self._rows(used)
            if limit is not None
        ]
        return min(fractions, default=1.0)

    def render(self, used: Used, *, wrapup: bool = False) -> str:
        """The remaining budget in one compact line for the model's prompt.

        ``BUDGET turns 3/10 | tool_calls 5/20 | cost 0.0123/1 | wrap-up: answer now``;
        only limits that are set appear. Empty when there is no limit at all.
        """
        parts = [
            f"{name} {_number(value)}/{_number(limit)}"
            for name, value, limit in self._rows(used)
            if limit is not None
        ]
        if not parts:
            return ""
        if wrapup:
            parts.append("wrap-up: answer now, no tools")
        return "BUDGET " + " | ".join(parts)


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"
