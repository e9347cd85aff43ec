"""Rules over a proposed step, their verdicts, and the ordered, cached `RuleSet`.

A rule is a plain typed callable with a name: it looks at what a stage
proposes (a thought, a tool call) and answers `PASS`, `Retryable(reason)` (the
step goes back to be thought again) or `Terminal(reason)` (the run ends). A
`RuleSet` evaluates its rules in order and stops at the first violation; its
results are cached per rule and input, in a bounded least-recently-used cache
keyed by the rule's name and a stable hash of the input's JSON form.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, overload

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticSerializationError

from .._errors import ConfigurationError, Fatal
from .._log import get_logger
from .._lru import LRU
from ..protocols._seams import json_data

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = [
    "PASS",
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
]

T = TypeVar("T")
_log = get_logger("arkhon_rheo.rules")


@dataclass(frozen=True, slots=True)
class Pass:
    """The rule has nothing against the step. Use the `PASS` constant."""


@dataclass(frozen=True, slots=True)
class Retryable:
    """A violation the thinking stage can fix: the step goes back to it with ``reason``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Terminal:
    """A violation that ends the run (logged, with the rule's name and ``reason``)."""

    reason: str


#: What a rule returns when it has nothing against the step.
PASS = Pass()
#: What a rule returns: `PASS`, a `Retryable` or a `Terminal`.
Verdict: TypeAlias = Pass | Retryable | Terminal
Outcome: TypeAlias = Literal["pass", "retryable", "terminal"]


class Rule(Generic[T]):
    """A named check of a proposed step.

    Args:
        name: The rule's name, in results, logs and the cache key.
        check: Takes the step and returns a `Verdict` (or an awaitable of one).
        cache: Whether its results may be cached per input. Turn it off for a
            rule that depends on anything but its input (a clock, a counter).

    Raises:
        ConfigurationError: If ``name`` is empty or ``check`` is not callable.
    """

    __slots__ = ("cache", "check", "name")

    def __init__(
        self,
        name: str,
        check: Callable[[T], Verdict | Awaitable[Verdict]],
        *,
        cache: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a rule needs a non-empty name, got {name!r}")
        if not callable(check):
            raise ConfigurationError(f"rule {name!r}: check must be callable, got {check!r}")
        self.name = name
        self.check = check
        self.cache = cache

    async def __call__(self, subject: T) -> Verdict:
        """Run the check on ``subject``.

        Raises:
            Fatal: If the check returns something other than a verdict.
        """
        verdict: Any = self.check(subject)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, Pass | Retryable | Terminal):
            raise Fatal(
                f"rule {self.name!r} returned {verdict!r}; a rule must return PASS, "
                "Retryable(reason) or Terminal(reason)"
            )
        return verdict

    def __repr__(self) -> str:
        return f"Rule({self.name!r})"


@overload
def rule(fn: Callable[[T], Verdict | Awaitable[Verdict]], /) -> Rule[T]: ...
@overload
def rule(
    *, name: str | None = None, cache: bool = True
) -> Callable[[Callable[[T], Verdict | Awaitable[Verdict]]], Rule[T]]: ...
def rule(
    fn: Callable[[T], Verdict | Awaitable[Verdict]] | None = None,
    /,
    *,
    name: str | None = None,
    cache: bool = True,
) -> Rule[T] | Callable[[Callable[[T], Verdict | Awaitable[Verdict]]], Rule[T]]:
    """Make a `Rule` of a function, named after it unless ``name`` is given.

    ::

        @rule
        def no_empty_thought(step: Step) -> Verdict:
            return Retryable("the thought is empty") if not step.thought else PASS
    """

    def make(check: Callable[[T], Verdict | Awaitable[Verdict]]) -> Rule[T]:
        return Rule(name or str(getattr(check, "__name__", "")), check, cache=cache)

    return make(fn) if fn is not None else make


class RuleResult(BaseModel):
    """What one rule said about a step.

    Attributes:
        rule: The rule's name.
        outcome: ``"pass"``, ``"retryable"`` or ``"terminal"``.
        reason: The violation's reason ("" for a pass).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    outcome: Outcome
    reason: str = ""


class Evaluation(BaseModel):
    """The results of a `RuleSet` on one step, in rule order, up to the first violation.

    Attributes:
        results: One result per rule evaluated.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    results: tuple[RuleResult, ...] = ()

    @property
    def violation(self) -> RuleResult | None:
        """The result that stopped the evaluation, if a rule objected."""
        last = self.results[-1] if self.results else None
        return last if last is not None and last.outcome != "pass" else None

    @property
    def outcome(self) -> Outcome:
        """``"pass"`` if every rule passed, else the violation's outcome."""
        violation = self.violation
        return "pass" if violation is None else violation.outcome


@dataclass(frozen=True, slots=True)
class RuleSetStatistics:
    """Counters of a `RuleSet`.

    Attributes:
        evaluations: Steps evaluated.
        checks: Rule checks run (cache misses and uncached rules).
        cache_hits: Results answered from the cache.
        cached: Results the cache holds now.
        cache_size: The most it holds.
    """

    evaluations: int
    checks: int
    cache_hits: int
    cached: int
    cache_size: int


def _digest(subject: Any) -> str | None:
    """A stable hash of ``subject``'s JSON form (sets sorted, keys sorted); None if it has none."""
    try:
        data = json_data(subject)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, PydanticSerializationError):
        return None
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class RuleSet(Generic[T]):
    """Rules evaluated in order over a proposed step, with their results cached.

    Args:
        *rules: The rules, in evaluation order (`Rule` objects, or functions
            turned into rules named after them).
        cache_size: How many results the cache keeps (least recently used
            first out); 0 turns caching off.

    Raises:
        ConfigurationError: If two rules share a name, or ``cache_size`` is negative.
    """

    def __init__(
        self, *rules: Rule[T] | Callable[[T], Verdict | Awaitable[Verdict]], cache_size: int = 1024
    ) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ConfigurationError(
                f"RuleSet: cache_size must be a non-negative integer, got {cache_size!r}"
            )
        made = tuple(r if isinstance(r, Rule) else rule(r) for r in rules)
        seen: set[str] = set()
        for item in made:
            if item.name in seen:
                raise ConfigurationError(
                    f"RuleSet: two rules are named {item.name!r}; results and the cache "
                    "are keyed by name, so give each a unique one"
                )
            seen.add(item.name)
        self.rules: tuple[Rule[T], ...] = made
        self._cache: LRU[tuple[str, str], Verdict] | None = LRU(cache_size) if cache_size else None
        self._cache_size = cache_size
        self._evaluations = 0
        self._checks = 0
        self._hits = 0

    @property
    def names(self) -> tuple[str, ...]:
        """The rules' names, in order."""
        return tuple(r.name for r in self.rules)

    async def evaluate(self, subject: T) -> Evaluation:
        """Run the rules on ``subject`` in order, stopping at the first violation.

        A terminal violation is logged (``terminal_violation``, error level),
        a retryable one too (``rule_retryable``, info).

        Raises:
            Fatal: If a rule returns something other than a verdict.
        """
        self._evaluations += 1
        digest = _digest(subject) if self._cache_size else None
        results: list[RuleResult] = []
        for item in self.rules:
            verdict = await self._verdict(item, subject, digest)
            if isinstance(verdict, Pass):
                results.append(RuleResult(rule=item.name, outcome="pass"))
                continue
            outcome: Outcome = "retryable" if isinstance(verdict, Retryable) else "terminal"
            results.append(RuleResult(rule=item.name, outcome=outcome, reason=verdict.reason))
            if outcome == "terminal":
                _log.error("terminal_violation", rule=item.name, reason=verdict.reason)
            else:
                _log.info("rule_retryable", rule=item.name, reason=verdict.reason)
            break
        return Evaluation(results=tuple(results))

    async def _verdict(self, item: Rule[T], subject: T, digest: str | None) -> Verdict:
        cache = self._cache
        key = (
            (item.name, digest) if cache is not None and digest is not None and item.cache else None
        )
        if key is not None and cache is not None and (hit := cache.get(key)) is not None:
            self._hits += 1
            return hit
        self._checks += 1
        verdict = await item(subject)
        if key is not None and cache is not None:
            cache.put(key, verdict)
        return verdict

    def clear_cache(self) -> None:
        """Forget every cached result (after a rule's outside data changed)."""
        if self._cache is not None:
            self._cache.clear()

    def statistics(self) -> RuleSetStatistics:
        """The set's counters."""
        return RuleSetStatistics(
            evaluations=self._evaluations,
            checks=self._checks,
            cache_hits=self._hits,
            cached=len(self._cache) if self._cache is not None else 0,
            cache_size=self._cache_size,
        )

    def __repr__(self) -> str:
        return f"RuleSet({', '.join(self.names)})"
