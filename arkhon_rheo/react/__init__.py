"""The ReAct engine: a tool-using agent loop over a model client, as an ordinary `Machine`.

Build one with `react_agent`, its options grouped by purpose (`Limits`,
`Checks`, `Calls`, `Memory`); run it with ``AgentSystem.run(agent,
ReactState(task=...))``. Everything a machine gets (permissions, invariants,
gates, durability, resume, fork, replay) an agent gets too. With
``answer_type=T`` its answer is validated as ``T`` and kept as data:
``result.state.output_as(T)`` gives it typed.

Phases and stuck detection (`Phase`, `StuckDetector`, `infer_state_from_tool`)
tell an agent what phase it is in and when it is going nowhere. The checks
of each step are one field each: stuck detection (``checks=Checks(stuck=...)``),
rules over each `Proposal` (``Checks(rules=...)``) and round budgets
(``limits=Limits(budget=GlobalBudget(...))``). A long conversation is trimmed
(``memory=Memory(max_tokens=...)``) or its oldest turns summarised
(``Memory(summarize=Summarize(...))``).
"""

from __future__ import annotations

from .._errors import AnswerUnavailable as AnswerUnavailable
from .._errors import MalformedModelOutput as MalformedModelOutput
from .._exports import publish
from ._budget import Budget as Budget
from ._budget import Used as Used
from ._config import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT
from ._config import DEFAULT_TYPED_PROMPT as DEFAULT_TYPED_PROMPT
from ._context import DEFAULT_SUMMARY_PROMPT as DEFAULT_SUMMARY_PROMPT
from ._context import PromptCache as PromptCache
from ._context import Summarize as Summarize
from ._context import estimate_tokens as estimate_tokens
from ._context import trim_messages as trim_messages
from ._conversation import Conversation as Conversation
from ._conversation import Said as Said
from ._engine import react_agent as react_agent
from ._groups import Calls as Calls
from ._groups import Checks as Checks
from ._groups import Limits as Limits
from ._groups import Memory as Memory
from ._listen import Close as Close
from ._listen import UserInput as UserInput
from ._options import GlobalBudget as GlobalBudget
from ._options import Proposal as Proposal
from ._rounds import STRATEGIES as STRATEGIES
from ._rounds import DecisionBudget as DecisionBudget
from ._rounds import RoundBudget as RoundBudget
from ._rounds import SlotBudget as SlotBudget
from ._rounds import Strategy as Strategy
from ._rounds import format_budget_for_llm as format_budget_for_llm
from ._state import ReactState as ReactState
from ._state import StopReason as StopReason
from ._stuck import PHASE_ACTIONS as PHASE_ACTIONS
from ._stuck import PHASE_TIMEOUTS as PHASE_TIMEOUTS
from ._stuck import PHASE_TRANSITIONS as PHASE_TRANSITIONS
from ._stuck import Phase as Phase
from ._stuck import PhaseStep as PhaseStep
from ._stuck import PhaseTrack as PhaseTrack
from ._stuck import StuckDetector as StuckDetector
from ._stuck import StuckPolicy as StuckPolicy
from ._stuck import StuckReason as StuckReason
from ._stuck import action_allowed as action_allowed
from ._stuck import exit_suggestion as exit_suggestion
from ._stuck import infer_state_from_tool as infer_state_from_tool
from ._stuck import offered_actions as offered_actions

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TYPED_PROMPT",
    "PHASE_ACTIONS",
    "PHASE_TIMEOUTS",
    "PHASE_TRANSITIONS",
    "STRATEGIES",
    "AnswerUnavailable",
    "Budget",
    "Calls",
    "Checks",
    "Close",
    "Conversation",
    "DecisionBudget",
    "GlobalBudget",
    "Limits",
    "MalformedModelOutput",
    "Memory",
    "Phase",
    "PhaseStep",
    "PhaseTrack",
    "PromptCache",
    "Proposal",
    "ReactState",
    "RoundBudget",
    "Said",
    "SlotBudget",
    "StopReason",
    "Strategy",
    "StuckDetector",
    "StuckPolicy",
    "StuckReason",
    "Summarize",
    "Used",
    "UserInput",
    "action_allowed",
    "estimate_tokens",
    "exit_suggestion",
    "format_budget_for_llm",
    "infer_state_from_tool",
    "offered_actions",
    "react_agent",
    "trim_messages",
]

publish(__name__, __all__, globals())
del publish
