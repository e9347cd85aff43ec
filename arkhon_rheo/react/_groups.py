"""`react_agent`'s options by purpose: `Limits`, `Checks`, `Calls` and `Memory`.

Each group is a small frozen value with the defaults of the engine, so an
agent names only what it changes (``limits=Limits(max_steps=10)``) and its
signature reads at a glance. `react_agent` checks them all when it builds the
machine (``ReactConfig``), so a group holds what it was given, unchecked.

The flat keywords they replace (``react_agent(max_steps=10, stuck="soft")``)
still work for one release, with a `DeprecationWarning` naming the group.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ._context import Summarize

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping, Sequence

    from ..models import ModelPrice, Pricing
    from ..protocols import Gate
    from ..rules import Rule, RuleSet
    from ..tools import OnExhausted
    from ._budget import Budget
    from ._context import PromptCache
    from ._options import GlobalBudget
    from ._rounds import DecisionBudget, RoundBudget
    from ._stuck import StuckDetector, StuckPolicy

__all__ = ["Calls", "Checks", "Limits", "Memory", "grouped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """How far one session of the agent may go: ``react_agent(limits=Limits(...))``.

    Attributes:
        budget: Limits on turns, tool calls, tokens, cost and time (a `Budget`), or a
            global round budget (`GlobalBudget`: rounds, overdraft); past one, a
            wrap-up turn without tools. None: no limit.
        max_steps: The hard cap on model turns: past it the agent ends with
            `StopReason.MAX_STEPS` and no answer (a warning is logged).
        max_format_retries: How many times a reply the engine cannot use is sent
            back to the model with what was wrong, before `MalformedModelOutput`.
        deadlines: Per-state deadlines in seconds (``{Lifecycle.ACTING: 30}``).
    """

    budget: Budget | GlobalBudget | RoundBudget | DecisionBudget | None = None
    max_steps: int = 50
    max_format_retries: int = 2
    deadlines: Mapping[enum.Enum, float] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checks:
    """What each step passes before it is committed or run: ``react_agent(checks=Checks(...))``.

    Attributes:
        stuck: Phases and stuck detection: a `StuckDetector`, or its policy
            (``"soft"``, ``"hard"``, ``"auto_finish"``), checked after each model turn.
        rules: A `RuleSet` (or a list of ``@rule`` functions) over each `Proposal`;
            a violation goes back to the model, at most 3 times in a row.
        gates: Human-in-the-loop gates (``Gate.before("act")``); a tool to approve or
            ask about (``@tool(run="approve")``, ``effect="ask"``) adds a
            ``"tool call"`` gate.
    """

    stuck: StuckDetector | StuckPolicy | str | None = None
    rules: RuleSet[Any] | Sequence[Rule[Any]] | None = None
    gates: Sequence[Gate] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Calls:
    """How the model and the tools are called: ``react_agent(calls=Calls(...))``.

    Attributes:
        json_mode: Ask the model for JSON replies.
        stream: Stream each reply (the model must be a `StreamingModelClient`), its
            text pieces emitted (`SessionHandle.stream`) and recorded; no prompt cache.
        cache: A `PromptCache` answering repeated prompts without the model.
        prices: Input and output price per million tokens by model name, for
            ``state.cost`` (a dated name gets its family's); a `Pricing` or a mapping.
        max_parallel_tools: How many tool calls of one turn run at once.
        tool_failures: A call failing transiently past its retries (tools that do not
            say otherwise): ``"observe"`` tells the model; ``"escalate"`` fails the step.
    """

    json_mode: bool = False
    stream: bool = False
    cache: PromptCache | None = None
    prices: Pricing | Mapping[str, ModelPrice | tuple[float, float]] | None = None
    max_parallel_tools: int = 8
    tool_failures: OnExhausted = "observe"


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """What of a long conversation the model is sent: ``react_agent(memory=Memory(...))``.

    Attributes:
        max_tokens: Trim the oldest turns past this token estimate (the system
            prompt and the latest turn always stay); None keeps every turn.
        summarize: A `Summarize` folding the oldest turns into a summary past its
            token estimate, instead of dropping them.
    """

    max_tokens: int | None = None
    summarize: Summarize | None = None


#: Each flat keyword of earlier releases: the group parameter and the field it is now.
_MOVED: dict[str, tuple[str, str]] = {
    "budget": ("limits", "budget"),
    "max_steps": ("limits", "max_steps"),
    "max_format_retries": ("limits", "max_format_retries"),
    "deadlines": ("limits", "deadlines"),
    "stuck": ("checks", "stuck"),
    "rules": ("checks", "rules"),
    "gates": ("checks", "gates"),
    "json_mode": ("calls", "json_mode"),
    "stream": ("calls", "stream"),
    "cache": ("calls", "cache"),
    "prices": ("calls", "prices"),
    "max_parallel_tools": ("calls", "max_parallel_tools"),
    "tool_failures": ("calls", "tool_failures"),
    "max_context_tokens": ("memory", "max_tokens"),
}
_TYPES: dict[str, type[Any]] = {
    "limits": Limits,
    "checks": Checks,
    "calls": Calls,
    "memory": Memory,
}


def grouped(
    groups: dict[str, Any], flat: Mapping[str, Any], *, stacklevel: int = 3
) -> dict[str, Any]:
    """`ReactConfig`'s keywords from ``react_agent``'s groups (None: the defaults) and old keywords.

    A flat keyword of earlier releases is moved into its group with a
    `DeprecationWarning`; ``memory=Summarize(...)`` (as it was) becomes
    ``Memory(summarize=...)`` the same way.

    Raises:
        TypeError: A keyword ``react_agent`` never took.
        ConfigurationError: A group of the wrong type, or a flat keyword given
            with the group that now holds it.
    """
    unknown = sorted(flat.keys() - _MOVED.keys())
    if unknown:
        raise TypeError(f"react_agent() got an unexpected keyword argument {unknown[0]!r}")
    given = dict(groups)
    old: list[str] = []
    memory = given.get("memory")
    if memory is not None and isinstance(memory, Summarize):
        given["memory"] = Memory(summarize=memory)
        old.append("memory=Summarize(...): give memory=Memory(summarize=...)")
    for label, kind in _TYPES.items():
        value = given.get(label)
        if value is not None and not isinstance(value, kind):
            raise ConfigurationError(
                f"react_agent: {label} must be a {kind.__name__}(...) or None, got {value!r}"
            )
    for keyword, value in flat.items():
        label, name = _MOVED[keyword]
        if isinstance(groups.get(label), _TYPES[label]):  # (memory=Summarize(...) is old too)
            raise ConfigurationError(
                f"react_agent: {keyword}= and {label}= both given; "
                f"give {label}={_TYPES[label].__name__}({name}=...) alone"
            )
        given[label] = replace(given.get(label) or _TYPES[label](), **{name: value})
        old.append(f"{keyword}=...: give {label}={_TYPES[label].__name__}({name}=...)")
    if old:
        warnings.warn(
            "react_agent's flat keywords are deprecated and go in the next release: "
            + "; ".join(old),
            DeprecationWarning,
            stacklevel=stacklevel,
        )
    return _flat(given)


def _flat(given: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of each group, by `ReactConfig`'s names."""
    out: dict[str, Any] = {}
    for label, kind in _TYPES.items():
        group = given.get(label) or kind()
        for item in fields(group):
            out[item.name] = getattr(group, item.name)
    memory = out.pop("max_tokens"), out.pop("summarize")
    out["max_context_tokens"], out["memory"] = memory
    return out
