"""The ReAct engine: a tool-using agent loop over a model client, as an ordinary `Machine`.

Build one with `react_agent`; run it with ``AgentSystem.run(agent,
ReactState(task=...))``. Everything a machine gets (permissions, invariants,
gates, durability, resume, fork, replay) an agent gets too.
"""

from __future__ import annotations

from .._exports import publish
from ._budget import Budget as Budget
from ._budget import Used as Used
from ._context import PromptCache as PromptCache
from ._context import estimate_tokens as estimate_tokens
from ._context import trim_messages as trim_messages
from ._engine import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT
from ._engine import MalformedModelOutput as MalformedModelOutput
from ._engine import react_agent as react_agent
from ._global_budget import STRATEGIES as STRATEGIES
from ._global_budget import BudgetState as BudgetState
from ._global_budget import GlobalBudget as GlobalBudget
from ._global_budget import StageBudget as StageBudget
from ._global_budget import Strategy as Strategy
from ._global_budget import format_budget_for_llm as format_budget_for_llm
from ._state import AgentExit as AgentExit
from ._state import ReactState as ReactState

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "STRATEGIES",
    "AgentExit",
    "Budget",
    "BudgetState",
    "GlobalBudget",
    "MalformedModelOutput",
    "PromptCache",
    "ReactState",
    "StageBudget",
    "Strategy",
    "Used",
    "estimate_tokens",
    "format_budget_for_llm",
    "react_agent",
    "trim_messages",
]

publish(__name__, __all__, globals())
del publish
