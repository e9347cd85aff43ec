"""The state of a ReAct agent, and why it ended."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..protocols import AgentState, History, Lifecycle, Message, ToolCall, Usage
from ..protocols._seams import Metadata
from ..rules import RuleResult
from ._rounds import DecisionBudget
from ._stuck import PhaseTrack, StuckReason

__all__ = ["HeldCall", "ReactState", "StopReason"]


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
        answer: The final answer.
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
        agent_state: Seed 003's ``agent_state`` line the model sees next turn.
        checks: What each rule said of the latest proposal (``react_agent(rules=...)``).
        rule_retries: Proposals the rules sent back in a row.
        violation: The violation that ended the agent (`StopReason.VIOLATION`).
        decisions: Seed 001's global budget spent so far (``budget=GlobalBudget(...)``);
            None until the first check.
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
