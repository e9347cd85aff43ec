"""The rules engine: named checks of a proposed step, evaluated in order, cached per input.

A `Rule` answers `PASS`, `Retryable(reason)` or `Terminal(reason)`; a
`RuleSet` runs its rules in order up to the first violation; `validate_stage`
turns a rule set into a Validate stage (pass → act, retryable →
back to thinking with ``retry_reason``, terminal → end, ``terminal_violation``).
"""

from __future__ import annotations

from .._exports import publish
from ._rule import PASS as PASS
from ._rule import Evaluation as Evaluation
from ._rule import Pass as Pass
from ._rule import Retryable as Retryable
from ._rule import Rule as Rule
from ._rule import RuleResult as RuleResult
from ._rule import RuleSet as RuleSet
from ._rule import RuleSetStatistics as RuleSetStatistics
from ._rule import Terminal as Terminal
from ._rule import Verdict as Verdict
from ._rule import rule as rule
from ._stage import RETRY_COUNT as RETRY_COUNT
from ._stage import RETRY_REASON as RETRY_REASON
from ._stage import TERMINAL_VIOLATION as TERMINAL_VIOLATION
from ._stage import validate_stage as validate_stage

__all__ = [
    "PASS",
    "RETRY_COUNT",
    "RETRY_REASON",
    "TERMINAL_VIOLATION",
    "Evaluation",
    "Pass",
    "Retryable",
    "Rule",
    "RuleResult",
    "RuleSet",
    "RuleSetStatistics",
    "Terminal",
    "Verdict",
    "rule",
    "validate_stage",
]

publish(__name__, __all__, globals())
del publish
