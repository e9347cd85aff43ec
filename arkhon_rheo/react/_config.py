"""`ReactConfig`: everything `react_agent`'s arguments decide, checked once and frozen.

The engine's stages read their settings from one `ReactConfig` (bound to
them when the machine is built), never from a closure: the arguments as
given, and what follows from them (the tool runner, the budget, the prices,
the answer's validator, the names of the model-call spans).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic.errors import PydanticUserError

from .._errors import ConfigurationError
from ..models import ModelPrice, Pricing
from ..protocols import NamedModelClient, ResponseSchema, StreamingModelClient
from ..protocols._seams import is_async_context_manager, takes_schema
from ._budget import Budget
from ._calls import tool_runner
from ._context import Summarize
from ._options import CheckOptions, check_options
from ._state import ReactState, answer_adapter

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping, Sequence

    from pydantic import TypeAdapter

    from ..protocols import Gate, ModelClient, ToolRunner
    from ..rules import Rule, RuleSet
    from ..tools import OnExhausted
    from ._context import PromptCache
    from ._options import GlobalBudget
    from ._rounds import DecisionBudget, RoundBudget
    from ._stuck import StuckDetector, StuckPolicy

__all__ = ["DEFAULT_SYSTEM_PROMPT", "DEFAULT_TYPED_PROMPT", "ReactConfig"]

#: The first message of every conversation unless ``react_agent(system_prompt=...)`` says otherwise.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful agent. Use the tools when they help; when you know the answer, "
    "reply with it in plain text and call no tool."
)
#: `DEFAULT_SYSTEM_PROMPT` for an agent with an ``answer_type``.
DEFAULT_TYPED_PROMPT = (
    "You are a helpful agent. Use the tools when they help; when you know the answer, "
    "give it as JSON that fits the answer's JSON schema."
)


@dataclass(frozen=True, slots=True, eq=False)
class ReactConfig:
    """The settings of one ReAct machine, validated when made.

    The fields given are `react_agent`'s arguments, its option groups' fields
    spread out (``Memory``'s ``max_tokens`` and ``summarize`` as
    ``max_context_tokens`` and ``memory``), with their defaults; the ones after
    them are derived from those (not given).

    Attributes:
        runner: The tools, as a `ToolRunner`.
        limits: The budget (no limit when none was given).
        pricing: The prices as a `Pricing`, or None.
        answer_adapter: The validator of the final answer, or None.
        answer_schema: The final answer's JSON schema, or None (no
            ``answer_type``, or one pydantic makes no JSON schema of).
        model_options: The keywords each model call adds: ``schema`` (the
            answer's), for a client that takes it.
        ask_json: Whether the model is asked for JSON.
        timed: Whether the budget limits time (the clock is then read and recorded).
        limited: Whether the budget sets any limit (without one, a turn skips
            the budget's line, check and priority: 1.0, nothing to show).
        trace_system: ``gen_ai.system`` of the model-call spans.
        trace_model: ``gen_ai.request.model`` of the model-call spans.
        declared: The machine's resources: ``"model"``, ``"tools"`` (a tool
            runner that is an async context manager) and the ones given.
        checks: What each model turn's proposal is checked by (``stuck``,
            ``rules``, a global ``budget``); None when none is given.

    Raises:
        ConfigurationError: If an argument is out of range, ``state_type`` is not
            a `ReactState`, ``answer_type`` is no type pydantic validates,
            ``tool_failures`` is neither ``"observe"`` nor ``"escalate"``,
            ``memory`` is no `Summarize`, or ``stream`` is asked of a client that cannot.
    """

    model: ModelClient
    tools: ToolRunner | Sequence[Any] = ()
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    budget: Budget | GlobalBudget | RoundBudget | DecisionBudget | None = None
    max_steps: int = 50
    max_format_retries: int = 2
    max_parallel_tools: int = 8
    json_mode: bool = False
    answer_type: Any = None
    cache: PromptCache | None = None
    max_context_tokens: int | None = None
    prices: Pricing | Mapping[str, ModelPrice | tuple[float, float]] | None = None
    stream: bool = False
    state_type: type[ReactState] = ReactState
    name: str = "react-agent"
    gates: Sequence[Gate] = ()
    deadlines: Mapping[enum.Enum, float] | None = None
    conversational: bool = False
    resources: Mapping[str, object] | None = None
    tool_failures: OnExhausted = "observe"
    stuck: StuckDetector | StuckPolicy | str | None = None
    rules: RuleSet[Any] | Sequence[Rule[Any]] | None = None
    memory: Summarize | None = None
    runner: ToolRunner = field(init=False)
    limits: Budget = field(init=False)
    pricing: Pricing | None = field(init=False)
    answer_adapter: TypeAdapter[Any] | None = field(init=False)
    answer_schema: ResponseSchema | None = field(init=False)
    model_options: Mapping[str, Any] = field(init=False)
    ask_json: bool = field(init=False)
    timed: bool = field(init=False)
    limited: bool = field(init=False)
    trace_system: str = field(init=False)
    trace_model: str = field(init=False)
    declared: Mapping[str, object] = field(init=False)
    checks: CheckOptions | None = field(init=False)

    def __post_init__(self) -> None:
        state_type = self.state_type
        if not (isinstance(state_type, type) and issubclass(state_type, ReactState)):
            raise ConfigurationError(
                f"react_agent: state_type must be ReactState or a subclass, got {state_type!r}"
            )
        for label, value in (
            ("max_steps", self.max_steps),
            ("max_parallel_tools", self.max_parallel_tools),
            ("max_format_retries", self.max_format_retries + 1),
        ):
            if value < 1:
                raise ConfigurationError(f"react_agent: {label} must be at least 1, got {value}")
        if self.memory is not None and not isinstance(self.memory, Summarize):
            raise ConfigurationError(
                f"react_agent: Memory(summarize=...) must be a Summarize(...) or None, "
                f"got {self.memory!r}"
            )
        self._derive("runner", tool_runner(self.tools))
        checks = check_options(self.stuck, self.rules, self.budget)
        self._derive("checks", checks)
        self._derive("limits", self.budget if isinstance(self.budget, Budget) else Budget())
        prices = self.prices
        pricing = prices if isinstance(prices, Pricing) or prices is None else Pricing(prices)
        self._derive("pricing", pricing)
        if self.stream and not isinstance(self.model, StreamingModelClient):
            raise ConfigurationError(
                f"react_agent(stream=True) needs a model client with stream(); "
                f"{self.model!r} has none"
            )
        answer_type = self.answer_type
        adapter = None if answer_type is None else answer_adapter(answer_type, "react_agent")
        self._derive("answer_adapter", adapter)
        schema = None if adapter is None else _answer_schema(adapter, answer_type, self.runner)
        self._derive("answer_schema", schema)
        takes = schema is not None and takes_schema(self.model)
        self._derive("model_options", {"schema": schema} if takes else {})
        if adapter is not None and self.system_prompt == DEFAULT_SYSTEM_PROMPT:
            self._derive("system_prompt", _typed_prompt(None if takes else schema))
        if self.tool_failures not in ("observe", "escalate"):
            raise ConfigurationError(
                f"react_agent: tool_failures must be 'observe' or 'escalate', "
                f"got {self.tool_failures!r}"
            )
        self._derive("ask_json", self.json_mode or adapter is not None)
        self._derive("timed", self.limits.max_seconds is not None)
        self._derive("limited", self.limits != Budget())
        system, model = _span_names(self.model)
        self._derive("trace_system", system)
        self._derive("trace_model", model)
        self._derive("declared", _declared(self.model, self.runner, self.resources))

    def _derive(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


def _answer_schema(
    adapter: TypeAdapter[Any], answer_type: Any, runner: ToolRunner
) -> ResponseSchema | None:
    """The answer's schema, named after its type (and unlike any tool)."""
    try:
        schema = adapter.json_schema()
    except PydanticUserError:  # no JSON schema for it (a callable...): validation alone
        return None
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(getattr(answer_type, "__name__", "")))[:48]
    name = name or "answer"
    if name in {spec.name for spec in runner.specs}:
        name += "_answer"
    return ResponseSchema(name=name, json_schema=schema)


def _typed_prompt(schema: ResponseSchema | None) -> str:
    """`DEFAULT_TYPED_PROMPT`, with the schema when no client sends it."""
    if schema is None:
        return DEFAULT_TYPED_PROMPT
    text = json.dumps(schema.json_schema, sort_keys=True, separators=(",", ":"))
    return f"{DEFAULT_TYPED_PROMPT} The answer's JSON schema: {text}"


def _declared(
    model: ModelClient, runner: ToolRunner, given: Mapping[str, object] | None
) -> dict[str, object]:
    """The agent's resources: its model, its tool runner if it needs opening, and ``given``."""
    declared: dict[str, object] = {"model": model}
    if is_async_context_manager(runner):
        declared["tools"] = runner
    if given is not None and (taken := sorted(declared.keys() & given.keys())):
        raise ConfigurationError(
            f"react_agent: resources names {taken}, which the agent declares itself "
            "(its model client and tool runner); pick other names"
        )
    return {**declared, **(given or {})}


def _span_names(model: ModelClient) -> tuple[str, str]:
    """``gen_ai.system`` and ``gen_ai.request.model`` of a client's model-call spans."""
    if isinstance(model, NamedModelClient):
        return str(model.system or type(model).__name__), str(model.model or "")
    return type(model).__name__, ""
