"""`FaultPlan`: a seeded, reproducible schedule of faults injected through the library's seams.

A plan holds rules per target: a named stage (``plan.stage("think")``), a tool
(``plan.tool("search")``), the model client (``plan.model()``) or the store
(``plan.store()``). Each rule is a fault kind and when it fires: at a rate, on
the Nth calls, or when a predicate over the call holds (all given conditions
must hold; none given: every call). Installed (``with plan.installed():`` or
``AgentSystem(fault_plan=plan)``), the plan is consulted by the library's own
seams: a stage just before it runs, a `Toolbox` call before the tool runs, the
ReAct engine's model call, a store's write. Nothing of the user's code is
patched.

Reproducible on both backends: a call's index counts the calls of that target
*in that session* (1, 2, ...), and whether a rate rule fires is a hash of
(seed, target, session, index, rule), never a draw from a shared RNG consumed
in scheduling order. The same seed gives the same faults in the same places
on asyncio and trio, however the sessions interleave.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import Counter
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from .._hooks import install, uninstall
from ._fault_rules import ONLY, FaultCall, FaultKind, FaultRule, InjectedFault, act

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping


class FaultSchedule:
    """The rules of one target; each method adds one and returns the schedule, to chain.

    Every method takes the same conditions, keyword-only: ``rate`` (a share of
    calls, 0 to 1), ``nth`` (a call index from 1 or several, counted per
    session) and ``when`` (a predicate over the `FaultCall`). A rule fires when
    all the conditions it was given hold; given none, on every call. The first
    rule that fires decides the call's fault (one fault per call).

    Get one from `FaultPlan.stage`, `FaultPlan.tool`, `FaultPlan.model` or
    `FaultPlan.store`.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.rules: list[FaultRule] = []

    def __repr__(self) -> str:
        return f"FaultSchedule({self.target!r}, {[rule.kind.value for rule in self.rules]})"

    @property
    def _family(self) -> str:
        return self.target.split(":", 1)[0]

    def _add(
        self,
        kind: FaultKind,
        rate: float | None,
        nth: int | Iterable[int] | None,
        when: Callable[[FaultCall], bool] | None,
        **options: Any,
    ) -> FaultSchedule:
        family = ONLY.get(kind)
        if family is not None and family != self._family:
            raise ConfigurationError(
                f"a {kind.value} fault applies to the {family} target, not to {self.target!r}; "
                f"add it with plan.{family}(...)"
            )
        if rate is not None and not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
            raise ConfigurationError(f"rate must be a number from 0 to 1, got {rate!r}")
        indices: frozenset[int] | None = None
        if nth is not None:
            indices = frozenset((nth,) if isinstance(nth, int) else nth)
            if not indices or any(not isinstance(i, int) or i < 1 for i in indices):
                raise ConfigurationError(
                    f"nth must be a call index from 1, or several, got {nth!r}"
                )
        if when is not None and not callable(when):
            raise ConfigurationError(f"when must be a predicate over a FaultCall, got {when!r}")
        self.rules.append(FaultRule(kind, rate, indices, when, **options))
        return self

    def transient(
        self,
        message: str = "injected transient fault",
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Raise `Transient` (retried under the backoff policy)."""
        return self._add(FaultKind.TRANSIENT, rate, nth, when, message=message)

    def recoverable(
        self,
        message: str = "injected recoverable fault",
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Raise `Recoverable` (the stage restarts, the session goes on)."""
        return self._add(FaultKind.RECOVERABLE, rate, nth, when, message=message)

    def fatal(
        self,
        message: str = "injected fatal fault",
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Raise `Fatal` (the session fails)."""
        return self._add(FaultKind.FATAL, rate, nth, when, message=message)

    def raises(
        self,
        error: Callable[[], BaseException],
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Raise ``error()``, an exception of your own (a fresh one per call).

        Raises:
            ConfigurationError: If ``error`` is not callable (pass the class or a lambda).
        """
        if not callable(error):
            raise ConfigurationError(
                f"raises() takes what builds the exception (a class or a lambda), got {error!r}"
            )
        return self._add(FaultKind.ERROR, rate, nth, when, error=error)

    def latency(
        self,
        seconds: float,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Wait ``seconds`` before the call goes on.

        Raises:
            ConfigurationError: If ``seconds`` is negative.
        """
        if not (isinstance(seconds, int | float) and seconds >= 0):
            raise ConfigurationError(f"latency must be seconds >= 0, got {seconds!r}")
        return self._add(FaultKind.LATENCY, rate, nth, when, seconds=float(seconds))

    def hang(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Never return: only a deadline, a timeout or cancellation ends the call."""
        return self._add(FaultKind.HANG, rate, nth, when)

    def rate_limited(
        self,
        retry_after: float = 1.0,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """Answer 429: `Transient` with ``retry_after`` (the backoff waits at least that)."""
        return self._add(
            FaultKind.RATE_LIMITED,
            rate,
            nth,
            when,
            message="429 Too Many Requests (injected)",
            seconds=float(retry_after),
        )

    def malformed_reply(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """The model's reply becomes a tool call whose arguments are not JSON (model only)."""
        return self._add(FaultKind.MALFORMED_REPLY, rate, nth, when)

    def truncated_reply(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """The model's reply is cut in half, as at a token limit (model only)."""
        return self._add(FaultKind.TRUNCATED_REPLY, rate, nth, when)

    def tool_timeout(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """The tool runs past its timeout: `ToolTimeout`, at once (tools only)."""
        return self._add(FaultKind.TOOL_TIMEOUT, rate, nth, when)

    def disk_full(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """The store's write fails with ``StoreError("disk full")`` (store only)."""
        return self._add(
            FaultKind.DISK_FULL, rate, nth, when, message="database or disk is full (injected)"
        )

    def database_locked(
        self,
        *,
        rate: float | None = None,
        nth: int | Iterable[int] | None = None,
        when: Callable[[FaultCall], bool] | None = None,
    ) -> FaultSchedule:
        """The store's write fails with ``StoreError("database is locked")`` (store only)."""
        return self._add(
            FaultKind.DATABASE_LOCKED, rate, nth, when, message="database is locked (injected)"
        )


class FaultPlan:
    """A seeded schedule of faults per target, injected through the library's seams.

    ::

        plan = FaultPlan(seed=7)
        plan.stage("think").transient(rate=0.1).fatal(nth=5)
        plan.tool("search").tool_timeout(nth=1).latency(2.0, rate=0.5)
        plan.model().rate_limited(retry_after=3, nth=2).malformed_reply(rate=0.05)
        plan.store().disk_full(when=lambda call: call.session_id == "s3")

        with plan.installed():          # sessions started in the block see it
            result = await system.run(machine, state)
        print(plan.faults())             # what was injected, where

    ``plan.stage()`` and ``plan.tool()`` without a name apply to every stage or
    tool; rules of the named target come first. Calls are counted per session
    and target (`FaultCall.index`), so ``nth=1`` is each session's first call.

    Args:
        seed: Decides every rate rule, by hash: the same seed, the same faults.

    Attributes:
        seed: The seed.
        injected: Every fault injected, in the order it happened.
    """

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        self.injected: list[InjectedFault] = []
        self._schedules: dict[str, FaultSchedule] = {}
        self._calls: Counter[tuple[str | None, str]] = Counter()

    def __repr__(self) -> str:
        return (
            f"FaultPlan(seed={self.seed}, targets={sorted(self._schedules)}, "
            f"{len(self.injected)} injected)"
        )

    # -- building ----------------------------------------------------------------

    def on(self, target: str) -> FaultSchedule:
        """The schedule of a target named as the seams name it.

        ``"stage:<name>"``, ``"tool:<name>"``, ``"model"`` or ``"store"``;
        ``"stage:*"`` and ``"tool:*"`` apply to every stage or tool.

        Raises:
            ConfigurationError: If the target is none of these.
        """
        family, _, name = target.partition(":")
        if not ((family in ("stage", "tool") and name) or (target in ("model", "store"))):
            raise ConfigurationError(
                f"unknown fault target {target!r}; use 'stage:<name>', 'tool:<name>', "
                "'model' or 'store' (or plan.stage(), plan.tool(), plan.model(), plan.store())"
            )
        schedule = self._schedules.get(target)
        if schedule is None:
            schedule = self._schedules[target] = FaultSchedule(target)
        return schedule

    def stage(self, name: str = "*") -> FaultSchedule:
        """The schedule of the stage ``name`` (every stage without one)."""
        return self.on(f"stage:{name}")

    def tool(self, name: str = "*") -> FaultSchedule:
        """The schedule of the tool ``name`` (every tool without one)."""
        return self.on(f"tool:{name}")

    def model(self) -> FaultSchedule:
        """The schedule of the model client (calls the ReAct engine makes)."""
        return self.on("model")

    def store(self) -> FaultSchedule:
        """The schedule of the store's writes."""
        return self.on("store")

    # -- installing --------------------------------------------------------------

    @contextlib.contextmanager
    def installed(self) -> Iterator[FaultPlan]:
        """Install the plan for the code in the block (a context variable).

        Sessions started (or resumed) inside the block, and the tasks they
        start, see it; sessions started before it do not. Leaving the block
        uninstalls it. Outside any plan the seams cost one ``is None`` check.
        """
        token = install(self)
        try:
            yield self
        finally:
            uninstall(token)

    # -- the seam's side ---------------------------------------------------------

    def _rules(self, target: str) -> list[FaultRule]:
        exact = self._schedules.get(target)
        family = target.split(":", 1)[0]
        anyone = self._schedules.get(f"{family}:*") if family in ("stage", "tool") else None
        rules = [] if exact is None else list(exact.rules)
        if anyone is not None and anyone is not exact:
            rules.extend(anyone.rules)
        return rules

    def decide(self, call: FaultCall) -> FaultRule | None:
        """The rule that fires on ``call``, if any (pure: the same call, the same answer)."""
        for number, rule in enumerate(self._rules(call.target)):
            if rule.matches(call, functools.partial(self._draw, call, number)):
                return rule
        return None

    def _draw(self, call: FaultCall, rule: int) -> float:
        key = f"{self.seed}\x00{call.target}\x00{call.session_id}\x00{call.index}\x00{rule}"
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64

    async def inject(
        self, target: str, session_id: str | None, detail: Mapping[str, Any]
    ) -> Callable[[Any], Any] | None:
        """Act out the fault planned for this call (the `FaultInjector` the seams call).

        Returns:
            For a model reply fault, the function that alters the reply; else ``None``.

        Raises:
            Exception: The injected error, for an error fault.
        """
        counter = (session_id, target)
        self._calls[counter] += 1
        call = FaultCall(target, session_id, self._calls[counter], detail)
        rule = self.decide(call)
        if rule is None:
            return None
        self.injected.append(InjectedFault(target, session_id, call.index, rule.kind))
        return await act(rule, call)

    # -- reading -----------------------------------------------------------------

    def faults(self) -> tuple[InjectedFault, ...]:
        """What was injected, sorted by session, target and call index (stable across runs)."""
        return tuple(sorted(self.injected, key=lambda f: (f.session_id or "", f.target, f.index)))

    def counts(self) -> dict[str, dict[str, int]]:
        """How many faults of each kind were injected, per target."""
        counts: dict[str, dict[str, int]] = {}
        for fault in self.injected:
            per = counts.setdefault(fault.target, {})
            per[fault.kind.value] = per.get(fault.kind.value, 0) + 1
        return counts

    def calls(self, target: str, session_id: str | None = None) -> int:
        """How many calls of ``target`` the seams made in ``session_id``."""
        return self._calls[(session_id, target)]

    def reset(self) -> None:
        """Forget the calls counted and the faults injected (the rules stay)."""
        self.injected.clear()
        self._calls.clear()
