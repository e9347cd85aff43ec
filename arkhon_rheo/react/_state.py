"""The state of a ReAct agent, and why it ended."""

from __future__ import annotations

import enum
import json
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError

from .._errors import AnswerUnavailable, ConfigurationError
from .._lru import LRU
from ..protocols import AgentState, History, Lifecycle, Message, ToolCall, Usage
from ..protocols._seams import FrozenJson, Metadata
from ..rules import RuleResult
from ._rounds import DecisionBudget
from ._stuck import PhaseTrack, StuckReason

__all__ = ["HeldCall", "ReactState", "StopReason", "answer_adapter"]

T = TypeVar("T")

#: The validators of the answer types asked for, by type (built once each: a
#: `TypeAdapter` costs about a millisecond to make).
_ADAPTERS: LRU[Any, TypeAdapter[Any]] = LRU(64)


def answer_adapter(kind: Any, where: str) -> TypeAdapter[Any]:
    """The `TypeAdapter` of answer type ``kind`` (kept for the next call when it is hashable).

    Raises:
        ConfigurationError: Pydantic cannot validate ``kind`` (``where`` names the caller).
    """
    try:
        adapter, hashable = _ADAPTERS.get(kind), True
    except TypeError:  # an unhashable type form (say, Annotated with a list in it)
        adapter, hashable = None, False
    if adapter is None:
        try:
            adapter = TypeAdapter(kind)
        except (PydanticUserError, TypeError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigurationError(
                f"{where}: answer_type {kind!r} is not a type pydantic can validate ({why}); "
                "give a model, a dataclass, a TypedDict or a type such as list[int]"
            ) from exc
        if hashable:
            _ADAPTERS.put(kind, adapter)
    return adapter


class StopReason(enum.Enum):
    """Why a ReAct agent finished (``state.exit``); the session itself ends ``finished``."""

    #: The model gave a final answer (a reply without tool calls).
    ANSWERED = "answered"
    #: The ``stop`` flag was set (by a human edit at a gate, or a stage of yours).
    STOPPED = "stopped"
    #: A budget limit was reached; the model's wrap-up turn gave the answer.
    BUDGET_EXHAUSTED = "budget_exhausted"
    #: The engine's ``max_steps`` model turns were used up without an answer (logged as a
    #: warning); ``answer`` is empty.
    MAX_STEPS = "max_steps"
    #: A conversational agent's conversation was closed (a `Close` message);
    #: ``answer`` is the last reply.
    CLOSED = "closed"
    #: Stuck detection (``react_agent(stuck=...)``) ended the agent: stuck or a
    #: forbidden phase move under `StuckPolicy.AUTO_FINISH`, or a stuck phase past
    #: its way out; ``answer`` is the best answer so far.
    STUCK = "stuck"
    #: The rules (``react_agent(rules=...)``) refused the proposal for good: a
    #: terminal violation, or retryable ones past their retries (``violation``).
    VIOLATION = "violation"


class HeldCall(BaseModel):
    """A tool call waiting for a human at the agent's ``"tool call"`` gate.

    Attributes:
        call: The call, as the model made it (or as a human last approved it).
        arguments: The arguments it runs with if approved as shown.
        reason: ``"approval"``: its tool's run policy asks a human to approve
            each call; ``"ambiguous"``: it started and never finished (a crash,
            a timeout), so its side effect may or may not have happened, and its
            tool's effect is ``"ask"``.
        attempts: How many times an ambiguous call had been begun when it was
            held: an approval lets it run again once, not after another crash.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    call: ToolCall
    arguments: Metadata
    reason: Literal["approval", "ambiguous"]
    attempts: int = Field(default=0, ge=0)


class ReactState(AgentState):
    """What a ReAct agent keeps: its conversation, counters and outcome.

    Subclass it to add your own fields (immutable types); the engine's stages
    read and write only the fields named here.

    Attributes:
        task: The user's request; the first user message.
        messages: The conversation so far (system prompt, user, assistant, tool results).
        pending: The tool calls of the last model turn, waiting for the act stage.
        turns: Model turns taken (format retries included).
        tool_calls: Tool calls made.
        usage: Tokens used by all model calls.
        cost: Their cost, by the prices given to the engine (0 without prices).
        started_at: When the first turn began (seconds since the epoch, recorded
            so that replay sees the same value); kept only when the budget
            limits time (``Budget(max_seconds=...)``), None otherwise.
        elapsed: Seconds from ``started_at`` to the latest turn (0 unless the
            budget limits time).
        wrapup: A budget limit was reached: the next turn is the wrap-up turn.
        stop: Set it (for example by an ``edit`` decision at a gate) to end the
            agent before its next turn.
        answer: The final answer, as the model wrote it.
        output: With ``react_agent(answer_type=...)``: the answer validated as
            that type, kept as its JSON data (``None`` until an answer): read it
            typed with `output_as`.
        exit: Why the agent finished.
        pending_step: The number of the step that asked for the ``pending`` calls:
            their idempotency keys are made from it (a resume runs the act step
            again under a new number, never this one).
        held: The call waiting for a human at the ``"tool call"`` gate, if any.
        approval: The human's answer there: the arguments to run the held call
            with, ``None`` to run it as shown; ``False`` until a human answers.
        approved: The ids of this turn's calls a human approved.
        track: The phase counters of stuck detection (``react_agent(stuck=...)``).
        stuck_reason: Why the agent was last found stuck, if it was.
        agent_state: The ``agent_state`` line of stuck detection the model sees next turn.
        checks: What each rule said of the latest proposal (``react_agent(rules=...)``).
        rule_retries: Proposals the rules sent back in a row.
        violation: The violation that ended the agent (`StopReason.VIOLATION`).
        decisions: The round budget spent so far (``budget=GlobalBudget(...)``);
            None until the first check.
        summary: The latest summary of the oldest turns (``react_agent(memory=Summarize(...))``),
            also in ``messages`` as a `SystemMessage`; None until the first.
        summaries: How many times the oldest turns were summarised.
    """

    lifecycle: Lifecycle = Lifecycle.INITIALIZED
    task: str = ""
    messages: History[Message] = History()
    pending: tuple[ToolCall, ...] = ()
    turns: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    usage: Usage = Usage()
    cost: float = Field(default=0.0, ge=0)
    started_at: float | None = None
    elapsed: float = Field(default=0.0, ge=0)
    wrapup: bool = False
    stop: bool = False
    answer: str | None = None
    output: FrozenJson | None = None
    exit: StopReason | None = None
    pending_step: int | None = None
    held: HeldCall | None = None
    approval: Metadata | Literal[False] | None = False
    approved: tuple[str, ...] = ()
    track: PhaseTrack = PhaseTrack()
    stuck_reason: StuckReason | None = None
    agent_state: str = ""
    checks: tuple[RuleResult, ...] = ()
    rule_retries: int = Field(default=0, ge=0)
    violation: RuleResult | None = None
    decisions: DecisionBudget | None = None
    summary: str | None = None
    summaries: int = Field(default=0, ge=0)

    @overload
    def output_as(self, answer_type: type[T]) -> T: ...

    @overload
    def output_as(self, answer_type: Any) -> Any: ...

    def output_as(self, answer_type: Any) -> Any:
        """The typed answer: ``output`` validated as ``answer_type`` (the agent's ``answer_type``).

        ::

            agent = react_agent(model, tools, answer_type=City)
            result = await system.run(agent, ReactState(task="..."))
            city = result.state.output_as(City)  # a City, typed

        Any type pydantic validates works (a model, a dataclass, a
        ``TypedDict``, ``list[int]``...). The object is rebuilt from the stored
        data at each call, through JSON as the model's answer was: the same
        object after a restart, a resume or a replay. Without ``output`` (a
        session stored before typed answers were kept, or an agent built
        without ``answer_type``) the answer's text is validated instead.

        Raises:
            AnswerUnavailable: There is no answer (the agent has not answered, or
                ended without: stopped, out of steps), or it does not validate
                as ``answer_type``.
            ConfigurationError: ``answer_type`` is no type pydantic validates.
        """
        name = getattr(answer_type, "__name__", repr(answer_type))
        if self.output is not None:
            text = json.dumps(_plain(self.output))
        elif self.answer is not None:
            text = self.answer
        else:
            why = f"it ended without one ({self.exit.value})" if self.exit else "not yet"
            raise AnswerUnavailable(f"output_as({name}): the agent has no answer: {why}")
        try:
            return answer_adapter(answer_type, f"output_as({name})").validate_json(text)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "answer"
            raise AnswerUnavailable(
                f"output_as({name}): the agent's answer is not a {name} ({where}: "
                f"{first['msg']}); ask for the type the agent was built with (its answer_type)"
            ) from None


def _plain(value: Any) -> Any:
    """Frozen JSON data (mappings and tuples) as plain JSON data."""
    return _FROZEN_JSON.dump_python(value, mode="json")


_FROZEN_JSON: TypeAdapter[Any] = TypeAdapter(FrozenJson)
